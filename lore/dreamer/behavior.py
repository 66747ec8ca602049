"""Actor-critic in imagination (DreamerV3, discrete actions): networks and pure loss functions.

Trajectory layout (time-major): states s_0 .. s_H with features ``feat`` [H+1, N, F]; a_k is taken
at s_k (``action`` [H, N, A] one-hot); reward and continue of the transition k -> k+1 are read at
s_{k+1}. Values come from the *current* critic; the slow critic only regularises it.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from lore.dreamer.math import categorical_entropy, symlog, twohot_decode, twohot_log_prob, unimix_logits
from lore.dreamer.networks import MLP, EnsembleMLP

Tensor = torch.Tensor


class Actor(nn.Module):
    """feat [..., F] -> unimixed action log-probs [..., A] (1% uniform keeps every action alive)."""

    def __init__(self, feat_dim: int, num_actions: int, units: int, layers: int, unimix: float = 0.01):
        super().__init__()
        self.net = MLP(feat_dim, units, layers, out_dim=num_actions)
        self.unimix = unimix

    def forward(self, feat: Tensor) -> Tensor:
        return unimix_logits(self.net(feat), self.unimix)


class Critic(nn.Module):
    """K distributional value heads (255-bin two-hot, zero-initialised outputs)."""

    def __init__(self, feat_dim: int, heads: int, units: int, layers: int, bins: Tensor):
        super().__init__()
        self.net = EnsembleMLP(heads, feat_dim, units, layers, bins.shape[0], out_scale=0.0)
        self.register_buffer("bins", bins.clone(), persistent=False)

    def forward(self, feat: Tensor, heads: slice = slice(None)) -> Tensor:  # [..., F] -> logits [k, ..., bins]
        return self.net(feat, heads)

    def values(self, feat: Tensor, heads: slice = slice(None)) -> Tensor:  # [..., F] -> raw values per head [k, ...]
        return twohot_decode(self.net(feat, heads), self.bins)


def make_slow_copy(module: nn.Module) -> nn.Module:
    slow = copy.deepcopy(module)
    for p in slow.parameters():
        p.requires_grad_(False)
    return slow


@torch.no_grad()
def ema_update_(slow: nn.Module, fast: nn.Module, fraction: float) -> None:
    """slow ← (1 − fraction)·slow + fraction·fast, parameter by parameter (one multi-tensor lerp)."""
    slow_params, fast_params = list(slow.parameters()), list(fast.parameters())
    if len(slow_params) != len(fast_params):
        raise ValueError(f"ema_update_: {len(slow_params)} slow parameters, {len(fast_params)} fast ones")
    torch._foreach_lerp_(slow_params, fast_params, fraction)


def imagination_weights(first_continue: Tensor, continues: Tensor, gamma: float) -> Tensor:
    """Per-state loss weights [H+1, N]: w_k = Π_{j<=k} (γ c_j) / γ with c_0 = 1 − terminal(s_0).

    first_continue [N], continues [H, N] (c_{k+1} read at s_{k+1}). A state after a predicted
    termination gets weight 0, as does everything imagined from a terminal start state.
    """
    conts = torch.cat([first_continue[None], continues], 0)
    return torch.cumprod(gamma * conts, 0) / gamma


def reinforce_loss(logits: Tensor, actions: Tensor, advantage: Tensor, weight: Tensor,
                   entropy_scale: float) -> tuple[Tensor, Tensor]:
    """−sg(adv)·log π(a) − η·H(π), weighted and averaged -> (loss, mean entropy).

    logits [H, N, A] (with gradient), actions [H, N, A] one-hot, advantage and weight [H, N].
    """
    log_probs = torch.log_softmax(logits, -1)
    log_pi = (log_probs * actions).sum(-1)
    entropy = categorical_entropy(logits)
    loss = -log_pi * advantage.detach() - entropy_scale * entropy
    return (loss * weight.detach()).mean(), entropy.detach().mean()


def bootstrap_head_mask(heads: int, n: int, keep: float, generator: torch.Generator | None = None,
                        device: torch.device | str | None = None) -> Tensor:
    """``[K, N]`` loss weights: each head trains on a Bernoulli(``keep``) subset of the N start states.

    Bootstrapped DQN (Osband et al. 2016): heads that see different data disagree where data are
    scarce, so their spread is a value-uncertainty signal (with shared targets and zero-initialised
    outputs the heads stay identical up to ~1e-5). Weights are ``mask / keep`` so each head's loss
    keeps its expected scale; ``keep = 1`` trains every head on every state.
    """
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"dreamer.value_bootstrap must be in (0, 1], got {keep}")
    if keep == 1.0:
        return torch.ones(heads, n, device=device)
    gen_device = generator.device if generator is not None else torch.device(device or "cpu")
    mask = head_mask_from_uniform(torch.rand(heads, n, generator=generator, device=gen_device), keep)
    return mask.to(device) if device is not None else mask


def head_mask_from_uniform(uniform: Tensor, keep: float) -> Tensor:
    """:func:`bootstrap_head_mask` from its uniform draws [K, N] in [0, 1) -> weights [K, N] (0 or 1 / keep)."""
    return (uniform < keep).float() / keep


def critic_losses(value_logits: Tensor, returns: Tensor, slow_values: Tensor, weight: Tensor,
                  bins: Tensor, head_weight: Tensor | None = None, fused: bool = False) -> tuple[Tensor, Tensor]:
    """Two-hot CE of every head toward the λ-returns and toward its slow copy's mean value.

    value_logits [K, H, N, bins] (states s_0 .. s_{H-1}), returns [H, N], slow_values [K, H, N],
    weight [H, N], head_weight [K, N] (bootstrap weights per head and start state, None = all 1).
    Each head's loss is averaged over (H, N) and the heads are summed, so every head is trained
    exactly as a single DreamerV3 critic would be (on its own bootstrap sample).
    ``fused`` computes the same two losses (up to float rounding) with :class:`_TwoHotCrossEntropy`;
    this function's plain form stays the reference the fused one is tested against.
    Returns (critic loss, slow regulariser).
    """
    w = weight.detach()[None]  # [1, H, N]
    if head_weight is not None:
        if head_weight.shape != (value_logits.shape[0], value_logits.shape[2]):
            raise ValueError(f"head_weight must be [K, N]={(value_logits.shape[0], value_logits.shape[2])}, "
                             f"got {tuple(head_weight.shape)}")
        w = w * head_weight.detach()[:, None, :]  # [K, H, N]
    if fused:
        # every head on every row: the rows form with M = N (returns [1, H, N], shared by the heads)
        return critic_losses_on_rows(value_logits, returns[None], slow_values, w.expand(value_logits.shape[:-1]),
                                     bins, returns.numel())
    log_probs = torch.log_softmax(value_logits, -1)  # shared by both terms
    ce = -twohot_log_prob(log_probs, returns.detach()[None], bins)  # [K, H, N]
    reg = -twohot_log_prob(log_probs, slow_values.detach(), bins)
    return (ce * w).mean((1, 2)).sum(), (reg * w).mean((1, 2)).sum()


def own_rows(head_weight: Tensor) -> tuple[Tensor, Tensor]:
    """Bootstrap weights [K, N] -> (rows [K, M], their weights [K, M]): each head's rows with a weight > 0,
    padded to the largest count M with row 0 at weight 0."""
    kept = head_weight > 0
    m = max(int(kept.sum(1).max()), 1)
    # a stable sort puts each head's kept rows first, in row order
    order = torch.sort((~kept).to(torch.int8), dim=1, stable=True).indices[:, :m]  # [K, M]
    valid = kept.gather(1, order)
    rows = torch.where(valid, order, torch.zeros_like(order))
    return rows, torch.where(valid, head_weight.gather(1, order), torch.zeros_like(head_weight[:, :m]))


def critic_losses_on_rows(value_logits: Tensor, returns: Tensor, slow_values: Tensor, weight: Tensor,
                          bins: Tensor, total: int) -> tuple[Tensor, Tensor]:
    """:func:`critic_losses` with each head on its own rows: value_logits [K, H, M, bins]; returns,
    slow_values and weight (bootstrap weight included, 0 on padding) [K, H, M] (returns may be [1, H, M]); ``total`` = H * N of the
    whole batch, which each head's summed loss is divided by, as the dense form's mean over (H, N) does."""
    k, h, m = weight.shape
    ret_below, ret_above = twohot_position(returns.detach(), bins)
    slow_below, slow_above = twohot_position(slow_values.detach(), bins)
    w = (weight.detach() * (h * m / total)).contiguous()
    # float32 under bf16 autocast too: the 255-bin softmax and its scattered gradient need the mantissa
    if torch.compiler.is_compiling():  # a compiled graph fuses the dense form into vector code without scatters
        logits = value_logits.float()
        per_head = lambda x: (x * w).mean((1, 2))  # noqa: E731  [K]: as critic_losses, heads summed
        return (per_head(twohot_cross_entropy(logits, ret_below, ret_above)).sum(),
                per_head(twohot_cross_entropy(logits, slow_below, slow_above)).sum())
    return _TwoHotCrossEntropy.apply(value_logits.float(), ret_below, ret_above, slow_below, slow_above, w)


def twohot_cross_entropy(logits: Tensor, below: Tensor, above: Tensor) -> Tensor:
    """−log p of two-hot targets: logits [..., B], bin below [...] and weight of the bin above [...] -> [...].

    Written with comparisons instead of gathers, so that its gradient (softmax − two-hot) is elementwise.
    """
    bins = torch.arange(logits.shape[-1], device=logits.device)
    below, above = below.unsqueeze(-1), above.unsqueeze(-1)
    target = torch.where(bins == below, 1.0 - above, 0.0) + torch.where(bins == below + 1, above, 0.0)
    return torch.logsumexp(logits, -1) - (logits * target).sum(-1)


def twohot_position(target: Tensor, bins: Tensor) -> tuple[Tensor, Tensor]:
    """Raw targets [...] -> (index of the bin below [...], weight of the bin above [...]) of their two-hot
    encoding over symmetric symlog ``bins`` [B] (the positions :func:`twohot_log_prob` gathers)."""
    y = symlog(target).clamp(bins[0], bins[-1])
    below = (torch.searchsorted(bins, y.contiguous(), right=True) - 1).clamp(0, bins.shape[0] - 2)
    above = ((y - bins[below]) / (bins[below + 1] - bins[below])).clamp(0.0, 1.0)
    return below, above


class _TwoHotCrossEntropy(torch.autograd.Function):
    """Both critic terms of :func:`critic_losses` in one pass over the [K, H, N, bins] logits.

    With two-hot weights (1 − a, a) on bins (b, b + 1), −log p = lse(z) − (1 − a)·z_b − a·z_{b+1}, and
    its gradient is softmax(z) − two-hot. Autograd through log_softmax and four gathers writes five
    dense [K, H, N, bins] gradients (a third of a critic update's memory traffic with three heads);
    this forward reads the logits once (logsumexp) and the backward writes one gradient.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, ret_below: Tensor, ret_above: Tensor, slow_below: Tensor,
                slow_above: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        # logits [K, H, N, B]; ret_* [1, H, N] (returns, shared by the heads); slow_* and w [K, H, N]
        lse = torch.logsumexp(logits, -1)  # [K, H, N]

        def target_logit(below: Tensor, above: Tensor) -> Tensor:  # (1 − a)·z_b + a·z_{b+1}  [K, H, N]
            index = below.expand(lse.shape).unsqueeze(-1)
            lo = logits.gather(-1, index).squeeze(-1)
            hi = logits.gather(-1, index + 1).squeeze(-1)
            return (1.0 - above) * lo + above * hi

        ce = lse - target_logit(ret_below, ret_above)
        reg = lse - target_logit(slow_below, slow_above)
        ctx.save_for_backward(logits, lse, ret_below, ret_above, slow_below, slow_above, w)
        per_head = lambda x: (x * w).mean((1, 2))  # noqa: E731  [K]: as critic_losses, heads summed
        return per_head(ce).sum(), per_head(reg).sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_ce: Tensor, grad_reg: Tensor):
        logits, lse, ret_below, ret_above, slow_below, slow_above, w = ctx.saved_tensors
        k, h, n, _ = logits.shape
        c_ce = grad_ce * w / (h * n)  # [K, H, N]: d(loss)/d(−log p) of each element
        c_reg = grad_reg * w / (h * n)
        grad = torch.exp(logits - lse.unsqueeze(-1))  # softmax [K, H, N, B]
        grad.mul_((c_ce + c_reg).unsqueeze(-1))
        for below, above, c in ((ret_below, ret_above, c_ce), (slow_below, slow_above, c_reg)):
            index = below.expand(k, h, n).unsqueeze(-1)
            grad.scatter_add_(-1, index, (-(1.0 - above) * c).unsqueeze(-1))
            grad.scatter_add_(-1, index + 1, (-above * c).unsqueeze(-1))
        return grad, None, None, None, None, None
