"""DreamerV3 building blocks: LayerNorm+SiLU MLPs, encoders/decoders, heads, ensembles.

All hidden layers are ``Linear(no bias) -> LayerNorm(eps=1e-3) -> SiLU`` as in DreamerV3;
weights use its truncated-normal fan-average initialisation; the reward and value output layers
start at exactly zero so an untrained head predicts 0.
"""

from __future__ import annotations

import math

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

    def forward(self, x: Tensor) -> Tensor:
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

    def forward(self, obs: dict[str, Tensor]) -> Tensor:  # each [..., *shape] -> [..., out_dim]
        missing = [k for k in self.vector_keys + self.image_keys if k not in obs]
        if missing:
            raise KeyError(f"observation key(s) {missing} missing (got {sorted(obs)})")
        parts = []
        if self.mlp is not None:
            vec = torch.cat([obs[k].float() for k in self.vector_keys], -1)
            parts.append(self.mlp(symlog(vec)))
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

    def loss(self, feat: Tensor, obs: dict[str, Tensor]) -> Tensor:
        """feat [B, T, F], obs [B, T, ...] -> summed reconstruction loss [B, T]."""
        total = torch.zeros(feat.shape[:-1], device=feat.device)
        if self.mlp is not None:
            pred = self.mlp(feat)
            target = symlog(torch.cat([obs[k].float() for k in self.vector_keys], -1))
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
            raise ValueError(f"llm_features has {features.shape[-1]} features, features.n_features is {self.n_features}")
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

    def forward(self, x: Tensor) -> Tensor:
        if self.bias is None:
            return torch.bmm(x, self.weight)
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleNorm(nn.Module):
    """Per-member LayerNorm over the last dim of [K, N, D] (affine parameters per member)."""

    def __init__(self, members: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, 1, dim))
        self.bias = nn.Parameter(torch.zeros(members, 1, dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, x.shape[-1:], eps=LN_EPS) * self.weight + self.bias


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

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1])
        h = self.first(x).reshape(x.shape[0], self.members, self.units).transpose(0, 1)  # [K, N, U]
        h = F.silu(self.first_norm(h))
        for lin, norm in self.hidden:
            h = F.silu(norm(lin(h)))
        out = self.out(h)  # [K, N, out]
        return out.reshape(self.members, *lead, out.shape[-1])
