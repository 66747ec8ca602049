"""DreamerV3 building blocks: LayerNorm+SiLU MLPs, encoders/decoders, heads, ensembles.

All hidden layers are ``Linear(no bias) -> LayerNorm(eps=1e-3) -> SiLU`` as in DreamerV3;
weights use its truncated-normal fan-average initialisation; the reward and value output layers
start at exactly zero so an untrained head predicts 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium
import torch
import torch.nn.functional as F
from torch import nn

from lore.dreamer.math import symlog

Tensor = torch.Tensor
LN_EPS = 1e-3


def init_trunc_normal_(weight: Tensor, fan_in: int, fan_out: int, scale: float = 1.0) -> None:
    """DreamerV3 ``winit='normal', fan='avg'``: truncated normal with variance scale / fan_avg."""
    if scale == 0.0:
        nn.init.zeros_(weight)
        return
    std = math.sqrt(scale / ((fan_in + fan_out) / 2.0)) / 0.87962566103423978
    nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std)


def linear(in_dim: int, out_dim: int, bias: bool = True, scale: float = 1.0) -> nn.Linear:
    layer = nn.Linear(in_dim, out_dim, bias=bias)
    init_trunc_normal_(layer.weight, in_dim, out_dim, scale)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class NormLinear(nn.Sequential):
    """Linear (no bias) -> LayerNorm -> SiLU."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__(linear(in_dim, out_dim, bias=False), nn.LayerNorm(out_dim, eps=LN_EPS), nn.SiLU())

    def forward(self, x: Tensor | OneHotFeatures) -> Tensor:
        lin, norm, act = self
        return act(norm(project(x, lin.weight)))


# --------------------------------------------------------------------------- one-hot inputs


@dataclass(frozen=True)
class OneHotFeatures:
    """Features ``[dense, one-hot block]`` kept as the dense part and the hot column of each group.

    An imagined latent is ``[deter (D), stoch (S groups of C, each exactly one-hot)]``: a first layer
    that multiplies the stoch block by its weight spends S*C of every D + S*C multiply-adds on zeros.
    :func:`project` instead adds the S weight rows the ones select (an embedding-bag sum), which gives
    the same numbers up to float rounding. ``hot`` holds the absolute column (within the block) of the
    single 1 of every group; groups may differ in size (the stoch groups, then an action group).
    """

    dense: Tensor  # [..., D]
    hot: Tensor    # [..., G] int64, each in [0, width)
    width: int     # total width of the one-hot block (sum of the group sizes)

    @property
    def shape(self) -> torch.Size:
        return torch.Size([*self.dense.shape[:-1], self.dense.shape[-1] + self.width])

    @property
    def device(self) -> torch.device:
        return self.dense.device

    @property
    def dtype(self) -> torch.dtype:
        return self.dense.dtype

    def __getitem__(self, index) -> OneHotFeatures:
        """Index the leading dims only (``feat[1:]``, ``feat[:, :-1]``), as on the dense tensor."""
        index = index if isinstance(index, tuple) else (index,)
        if any(i is Ellipsis for i in index) or len(index) >= self.dense.dim():
            raise IndexError("OneHotFeatures can only be indexed in its leading dims")
        return OneHotFeatures(self.dense[index], self.hot[index], self.width)

    def detach(self) -> OneHotFeatures:
        return OneHotFeatures(self.dense.detach(), self.hot, self.width)

    def to_dense(self) -> Tensor:
        """The plain ``[..., D + width]`` features."""
        block = torch.zeros(*self.hot.shape[:-1], self.width, device=self.dense.device, dtype=self.dense.dtype)
        block.scatter_(-1, self.hot, 1.0)
        return torch.cat([self.dense, block], -1)


def one_hot_columns(groups: Tensor, tol: float = 1e-5) -> Tensor | None:
    """[..., G, C] groups -> hot column per group [..., G] (offset g*C), or None unless every group is one-hot.

    The tolerance admits the straight-through samples (``one_hot + p - p`` rounds the 1 by an ulp);
    anything else (probabilities, a mode mixed with noise) keeps the dense path.
    """
    if groups.dim() < 2 or groups.shape[-1] == 0:
        return None
    idx = groups.argmax(-1)  # [..., G]
    top = groups.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    # no negative entry, the largest within tol of 1 and the rest summing to within tol of 0: one-hot up to
    # rounding (three reductions, no copy of the block)
    if (bool(groups.amin() < -tol) or not bool(((top - 1.0).abs() <= tol).all())
            or not bool(((groups.sum(-1) - top).abs() <= tol).all())):
        return None
    return idx + torch.arange(groups.shape[-2], device=groups.device) * groups.shape[-1]


def one_hot_features(feat: Tensor, dense_dim: int, classes: int) -> OneHotFeatures | Tensor:
    """[..., D + S*C] features -> :class:`OneHotFeatures` when the part after ``dense_dim`` is S exact
    one-hot groups of ``classes`` and needs no gradient; otherwise ``feat`` itself (the dense path is
    right for anything)."""
    if isinstance(feat, OneHotFeatures):
        return feat
    width = feat.shape[-1] - dense_dim
    # a block that needs a gradient (straight-through samples in the world-model loss) stays dense:
    # the selected-row sum has no gradient for its input
    if width <= 0 or width % classes or feat.requires_grad:
        return feat
    groups = feat[..., dense_dim:].reshape(*feat.shape[:-1], width // classes, classes)
    hot = one_hot_columns(groups)
    if hot is None:
        return feat
    return OneHotFeatures(feat[..., :dense_dim], hot, width)


def sampled_one_hot_features(feat: Tensor, dense_dim: int, classes: int) -> OneHotFeatures:
    """[..., D + S*C] features whose stoch block is S one-hot samples (imagined latents, detached posteriors)
    -> :class:`OneHotFeatures` read by argmax, without the check of :func:`one_hot_features` (no host read)."""
    width = feat.shape[-1] - dense_dim
    groups = feat[..., dense_dim:].reshape(*feat.shape[:-1], width // classes, classes)
    hot = groups.argmax(-1) + strided_range(width // classes, classes, feat.device)
    return OneHotFeatures(feat[..., :dense_dim], hot, width)


_RANGES: dict[tuple[int, int, torch.device], Tensor] = {}


def strided_range(count: int, step: int, device: torch.device) -> Tensor:
    """``torch.arange(0, count * step, step)`` [count] int64, built once per (count, step, device) in eager code;
    callers must not write to it."""
    if torch.compiler.is_compiling():
        return torch.arange(0, count * step, step, device=device)
    key = (count, step, torch.device(device))
    if key not in _RANGES:
        if len(_RANGES) >= 256:  # row counts that vary from call to call must not grow the cache without bound
            _RANGES.clear()
        _RANGES[key] = torch.arange(0, count * step, step, device=device)
    return _RANGES[key]


class _SelectedRowSum(torch.autograd.Function):
    """out[n] = Σ_g table[hot[n, g]]: a multi-hot matrix times ``table``, without the zeros.

    Forward and backward are embedding-bag sums: the weight gradient adds each output gradient row
    to the G table rows it selected, bagged by table row after a stable sort (deterministic order).
    """

    @staticmethod
    def forward(ctx, table: Tensor, hot: Tensor) -> Tensor:  # table [R, O], hot [N, G] -> [N, O]
        n, g = hot.shape
        offsets = strided_range(n, g, hot.device)
        ctx.save_for_backward(hot)
        ctx.rows = table.shape[0]
        return F.embedding_bag(hot.reshape(-1), table, offsets, mode="sum")

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, None]:  # grad [N, O] -> grad_table [R, O]
        if not ctx.needs_input_grad[0]:
            return None, None
        (hot,) = ctx.saved_tensors
        flat = hot.reshape(-1)
        order = torch.argsort(flat, stable=True)  # positions grouped by table row, in sample order
        counts = torch.bincount(flat, minlength=ctx.rows)
        offsets = torch.cumsum(counts, 0) - counts
        sample = torch.div(order, hot.shape[1], rounding_mode="floor")
        return F.embedding_bag(sample, grad.contiguous(), offsets, mode="sum"), None


def project(x: Tensor | OneHotFeatures, weight: Tensor) -> Tensor:
    """``x @ weight.T`` (no bias) for weight [out, in]; one-hot blocks add selected rows instead."""
    if not isinstance(x, OneHotFeatures):
        return F.linear(x, weight)
    d = x.dense.shape[-1]
    if weight.shape[1] != d + x.width:
        raise ValueError(f"layer expects {weight.shape[1]} inputs, features have {d} + {x.width}")
    lead = x.hot.shape[:-1]
    table, hot = weight[:, d:].t().contiguous(), x.hot.reshape(-1, x.hot.shape[-1])  # [R, O], [N, G]
    if torch.compiler.is_compiling():  # fixed-size bags: the compiled graph calls the library kernel (no bincount)
        selected = F.embedding_bag(hot, table, mode="sum")
    else:
        selected = _SelectedRowSum.apply(table, hot)
    return F.linear(x.dense, weight[:, :d]) + selected.reshape(*lead, weight.shape[0])


class MLP(nn.Module):
    """``layers`` hidden NormLinear layers of width ``units``, then an optional output Linear."""

    def __init__(self, in_dim: int, units: int, layers: int, out_dim: int | None = None, out_scale: float = 1.0):
        super().__init__()
        if layers < 1:
            raise ValueError(f"model.layers must be >= 1, got {layers}")
        dims = [in_dim] + [units] * layers
        self.trunk = nn.Sequential(*[NormLinear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)])
        self.out = linear(units, out_dim, scale=out_scale) if out_dim is not None else None
        self.out_dim = out_dim if out_dim is not None else units

    def forward(self, x: Tensor | OneHotFeatures) -> Tensor:
        x = self.trunk(x)
        return self.out(x) if self.out is not None else x


# --------------------------------------------------------------------------- observations


def split_obs_space(obs_space: gymnasium.spaces.Dict) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """Vector keys -> dim and image keys -> (H, W, C); anything else is an error naming the key."""
    if not isinstance(obs_space, gymnasium.spaces.Dict):
        raise TypeError(f"obs_space must be a gymnasium.spaces.Dict, got {type(obs_space).__name__}")
    vectors, images = {}, {}
    for key, space in obs_space.spaces.items():
        shape = tuple(space.shape or ())
        if len(shape) == 1:
            vectors[key] = shape[0]
        elif len(shape) == 3:
            if shape[:2] != (64, 64):
                raise ValueError(f"observation '{key}': the CNN expects 64x64xC images, got {shape}")
            images[key] = shape
        else:
            raise ValueError(f"observation '{key}': unsupported shape {shape} (need [D] or [64, 64, C])")
    if not vectors and not images:
        raise ValueError("obs_space has no observation keys")
    return vectors, images


class ChannelNorm(nn.Module):
    """LayerNorm over the channel dim of an NCHW tensor."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=LN_EPS)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def conv(in_ch: int, out_ch: int, transpose: bool = False, bias: bool = False) -> nn.Module:
    cls = nn.ConvTranspose2d if transpose else nn.Conv2d
    layer = cls(in_ch, out_ch, kernel_size=4, stride=2, padding=1, bias=bias)
    init_trunc_normal_(layer.weight, in_ch * 16, out_ch * 16)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class CNNEncoder(nn.Module):
    """64x64xC uint8 -> 4 stride-2 convs (depth d, 2d, 4d, 8d) with channel LayerNorm + SiLU -> flat."""

    def __init__(self, channels: int, depth: int):
        super().__init__()
        chans = [channels, depth, 2 * depth, 4 * depth, 8 * depth]
        blocks = []
        for a, b in zip(chans[:-1], chans[1:], strict=True):
            blocks += [conv(a, b), ChannelNorm(b), nn.SiLU()]
        self.net = nn.Sequential(*blocks)
        self.out_dim = 8 * depth * 4 * 4

    def forward(self, image: Tensor) -> Tensor:  # [..., 64, 64, C] uint8 -> [..., out_dim]
        lead = image.shape[:-3]
        x = image.reshape(-1, *image.shape[-3:]).permute(0, 3, 1, 2).float() / 255.0 - 0.5
        return self.net(x).reshape(*lead, self.out_dim)


class CNNDecoder(nn.Module):
    """feat -> 8d x 4 x 4 -> 4 stride-2 transposed convs -> [..., 64, 64, C] image in [0, 1] (mean)."""

    def __init__(self, feat_dim: int, channels: int, depth: int):
        super().__init__()
        self.depth = depth
        self.project = linear(feat_dim, 8 * depth * 4 * 4)
        chans = [8 * depth, 4 * depth, 2 * depth, depth]
        blocks = []
        for a, b in zip(chans[:-1], chans[1:], strict=True):
            blocks += [conv(a, b, transpose=True), ChannelNorm(b), nn.SiLU()]
        blocks.append(conv(depth, channels, transpose=True, bias=True))
        self.net = nn.Sequential(*blocks)
        self.channels = channels

    def forward(self, feat: Tensor) -> Tensor:
        lead = feat.shape[:-1]
        x = self.project(feat.reshape(-1, feat.shape[-1])).reshape(-1, 8 * self.depth, 4, 4)
        x = self.net(x) + 0.5
        return x.permute(0, 2, 3, 1).reshape(*lead, 64, 64, self.channels)


class ObsEncoder(nn.Module):
    """All observation keys -> one embedding: symlog vectors through an MLP, images through a CNN."""

    def __init__(self, obs_space: gymnasium.spaces.Dict, units: int, layers: int, cnn_depth: int):
        super().__init__()
        self.vector_dims, self.image_shapes = split_obs_space(obs_space)
        self.vector_keys = sorted(self.vector_dims)
        self.image_keys = sorted(self.image_shapes)
        self.mlp = None
        if self.vector_keys:
            self.mlp = MLP(sum(self.vector_dims.values()), units, layers)
        self.cnns = nn.ModuleDict({k: CNNEncoder(self.image_shapes[k][2], cnn_depth) for k in self.image_keys})
        self.out_dim = (units if self.mlp is not None else 0) + sum(c.out_dim for c in self.cnns.values())

    def vector_input(self, obs: dict[str, Tensor]) -> Tensor | None:
        """The symlogged vector keys, concatenated [..., sum of dims] (the MLP's input), or None without any."""
        if self.mlp is None:
            return None
        return symlog(torch.cat([obs[k].float() for k in self.vector_keys], -1))

    def forward(self, obs: dict[str, Tensor], vector: Tensor | None = None) -> Tensor:
        """Each key [..., *shape] -> [..., out_dim]; ``vector``: :meth:`vector_input` of ``obs`` when already
        computed."""
        missing = [k for k in self.vector_keys + self.image_keys if k not in obs]
        if missing:
            raise KeyError(f"observation key(s) {missing} missing (got {sorted(obs)})")
        parts = []
        if self.mlp is not None:
            parts.append(self.mlp(self.vector_input(obs) if vector is None else vector))
        parts += [self.cnns[k](obs[k]) for k in self.image_keys]
        return torch.cat(parts, -1) if len(parts) > 1 else parts[0]


class ObsDecoder(nn.Module):
    """feat -> reconstruction of every observation key; loss = summed squared error per key.

    Vectors are predicted in symlog space (MSE on symlog targets); images as [0, 1] means.
    """

    def __init__(self, obs_space: gymnasium.spaces.Dict, feat_dim: int, units: int, layers: int, cnn_depth: int):
        super().__init__()
        self.vector_dims, self.image_shapes = split_obs_space(obs_space)
        self.vector_keys = sorted(self.vector_dims)
        self.image_keys = sorted(self.image_shapes)
        self.mlp = None
        if self.vector_keys:
            self.mlp = MLP(feat_dim, units, layers, out_dim=sum(self.vector_dims.values()))
        self.cnns = nn.ModuleDict({k: CNNDecoder(feat_dim, self.image_shapes[k][2], cnn_depth)
                                   for k in self.image_keys})

    def loss(self, feat: Tensor, obs: dict[str, Tensor], vector: Tensor | None = None) -> Tensor:
        """feat [B, T, F], obs [B, T, ...] -> summed reconstruction loss [B, T]; ``vector``: the symlogged vector
        keys concatenated [B, T, sum of dims] (:meth:`ObsEncoder.vector_input`) when already computed."""
        total = torch.zeros(feat.shape[:-1], device=feat.device)
        if self.mlp is not None:
            pred = self.mlp(feat)
            target = symlog(torch.cat([obs[k].float() for k in self.vector_keys], -1)) if vector is None else vector
            total = total + ((pred - target) ** 2).sum(-1)
        for k in self.image_keys:
            pred = self.cnns[k](feat)
            target = obs[k].float() / 255.0
            total = total + ((pred - target) ** 2).sum((-3, -2, -1))
        return total


# --------------------------------------------------------------------------- features and heads


class FeatureEncoder(nn.Module):
    """Late fusion of LLM-written features: symlog -> NormLinear(feature_units); zeroed where masked.

    The output is multiplied by the mask, so a step whose features are absent or invalid
    contributes exactly zeros to the posterior input.
    """

    def __init__(self, n_features: int, feature_units: int):
        super().__init__()
        self.n_features = n_features
        self.net = NormLinear(n_features, feature_units)
        self.out_dim = feature_units

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:  # [..., F], [...] -> [..., U]
        if features.shape[-1] != self.n_features:
            raise ValueError(f"features has {features.shape[-1]} features, features.n_features is {self.n_features}")
        features = torch.nan_to_num(features.float(), nan=0.0, posinf=0.0, neginf=0.0)
        return self.net(symlog(features)) * mask.float().unsqueeze(-1)


class EnsembleLinear(nn.Module):
    """K independent linear layers applied to [K, N, in] -> [K, N, out] with one batched matmul."""

    def __init__(self, members: int, in_dim: int, out_dim: int, bias: bool = True, scale: float = 1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, in_dim, out_dim))
        for k in range(members):
            init_trunc_normal_(self.weight.data[k], in_dim, out_dim, scale)
        self.bias = nn.Parameter(torch.zeros(members, 1, out_dim)) if bias else None

    def forward(self, x: Tensor, members: slice = slice(None)) -> Tensor:  # [k, N, in] -> [k, N, out]
        if self.bias is None:
            return torch.bmm(x, self.weight[members])
        return torch.baddbmm(self.bias[members], x, self.weight[members])


class EnsembleNorm(nn.Module):
    """Per-member LayerNorm over the last dim of [K, N, D] (affine parameters per member)."""

    def __init__(self, members: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, 1, dim))
        self.bias = nn.Parameter(torch.zeros(members, 1, dim))

    def forward(self, x: Tensor, members: slice = slice(None)) -> Tensor:
        return F.layer_norm(x, x.shape[-1:], eps=LN_EPS) * self.weight[members] + self.bias[members]


class EnsembleMLP(nn.Module):
    """K MLPs with the same shape and separate weights: [N, in] -> [K, N, out]."""

    def __init__(self, members: int, in_dim: int, units: int, layers: int, out_dim: int, out_scale: float = 1.0):
        super().__init__()
        if members < 1:
            raise ValueError(f"ensemble needs >= 1 member, got {members}")
        self.members = members
        # the first layer sees the same input for every member: one wide matmul
        self.first = linear(in_dim, members * units, bias=False)
        for k in range(members):
            init_trunc_normal_(self.first.weight.data[k * units:(k + 1) * units], in_dim, units)
        self.first_norm = EnsembleNorm(members, units)
        self.hidden = nn.ModuleList()
        for _ in range(layers - 1):
            self.hidden.append(nn.ModuleList([EnsembleLinear(members, units, units, bias=False),
                                              EnsembleNorm(members, units)]))
        self.out = EnsembleLinear(members, units, out_dim, scale=out_scale)
        self.units = units

    def forward(self, x: Tensor | OneHotFeatures, members: slice = slice(None)) -> Tensor:
        """[..., in] -> [k, ..., out] for the ``members`` slice (k of them; default all K)."""
        lead, picked = x.shape[:-1], range(self.members)[members]
        if picked.step != 1 or len(picked) == 0:
            raise ValueError(f"members must be a non-empty contiguous slice, got {members}")
        k, rows = len(picked), slice(picked.start * self.units, picked.stop * self.units)
        h = project(x, self.first.weight[rows]).reshape(-1, k, self.units).transpose(0, 1)  # [k, N, U]
        h = F.silu(self.first_norm(h, members))
        for lin, norm in self.hidden:
            h = F.silu(norm(lin(h, members), members))
        out = self.out(h, members)  # [k, N, out]
        return out.reshape(k, *lead, out.shape[-1])

    def forward_rows(self, x: Tensor | OneHotFeatures, rows: Tensor) -> Tensor:
        """Each member on its own rows: x [..., N, in], rows [K, M] (indices into N) -> [K, ..., M, out].

        Member k gives the numbers ``forward(x)[k][..., rows[k], :]`` (up to float rounding) at M/N of the
        cost, for members trained on different subsets of the same batch (bootstrapped critic heads).
        """
        if rows.dim() != 2 or rows.shape[0] != self.members:
            raise ValueError(f"rows must be [K={self.members}, M], got {tuple(rows.shape)}")
        lead = x.shape[:-2]
        firsts = []
        for k in range(self.members):
            taken = (OneHotFeatures(x.dense.index_select(-2, rows[k]), x.hot.index_select(-2, rows[k]), x.width)
                     if isinstance(x, OneHotFeatures) else x.index_select(-2, rows[k]))  # [..., M, in]
            firsts.append(project(taken, self.first.weight[k * self.units:(k + 1) * self.units]).reshape(-1, self.units))
        h = F.silu(self.first_norm(torch.stack(firsts)))  # [K, L*M, U]
        for lin, norm in self.hidden:
            h = F.silu(norm(lin(h)))
        out = self.out(h)  # [K, L*M, out]
        return out.reshape(self.members, *lead, rows.shape[1], out.shape[-1])


def compile_in_place(root: nn.Module, types: tuple[type, ...]) -> list[str]:
    """``torch.compile`` every outermost submodule of ``root`` that is one of ``types``, in place
    (``nn.Module.compile``: parameters and state-dict keys are unchanged, so checkpoints load either way).
    Returns the compiled modules' names."""
    done: list[str] = []
    for name, module in root.named_modules():
        if isinstance(module, types) and not any(name.startswith(f"{d}.") or not d for d in done):
            module.compile()
            done.append(name)
    return done
