"""DreamerV3 maths as small pure functions (plus the one stateful return normaliser).

Shape conventions in comments: ``B`` batch, ``T`` time, ``K`` two-hot bins, ``S`` categorical
latents, ``C`` classes per latent, ``A`` actions, ``...`` any leading dims.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

Tensor = torch.Tensor

# --------------------------------------------------------------------------- symlog / two-hot


def symlog(x: Tensor) -> Tensor:
    """sign(x) * ln(1 + |x|): compresses large magnitudes, identity-like near 0."""
    return torch.sign(x) * torch.log1p(torch.abs(x))


def symexp(x: Tensor) -> Tensor:
    """Inverse of :func:`symlog`."""
    return torch.sign(x) * torch.expm1(torch.abs(x))


def make_bins(num_bins: int = 255, limit: float = 20.0, device: torch.device | str | None = None) -> Tensor:
    """Two-hot support in symlog space: ``num_bins`` points from -limit to +limit  -> [K].

    Built from one half mirrored, so the bins are exactly symmetric and the middle bin is exactly
    0; :func:`twohot_decode` relies on that for an untrained (zero-logit) head to predict 0.
    """
    if num_bins < 3 or num_bins % 2 == 0:
        raise ValueError(f"model.bins must be an odd number >= 3 (so that 0 is a bin), got {num_bins}")
    half = torch.linspace(0.0, limit, (num_bins + 1) // 2, device=device)
    return torch.cat([-half.flip(0)[:-1], half])


def twohot_encode(x: Tensor, bins: Tensor) -> Tensor:
    """Raw values [...] -> two-hot targets [..., K] over ``bins`` (which live in symlog space).

    The value is symlog-transformed, clipped to the support and split between its two
    neighbouring bins in proportion to the distance, so ``sum(target * bins) == symlog(x)``.
    """
    y = symlog(x).clamp(bins[0], bins[-1])
    num = bins.shape[0]
    below = (torch.searchsorted(bins, y.contiguous(), right=True) - 1).clamp(0, num - 2)  # [...]
    above = below + 1
    lo, hi = bins[below], bins[above]
    w_above = ((y - lo) / (hi - lo)).clamp(0.0, 1.0)  # [...]
    target = torch.zeros(*y.shape, num, device=y.device, dtype=y.dtype)
    target.scatter_(-1, below.unsqueeze(-1), (1.0 - w_above).unsqueeze(-1))
    target.scatter_add_(-1, above.unsqueeze(-1), w_above.unsqueeze(-1))
    return target


def twohot_mean_symlog(probs: Tensor, bins: Tensor) -> Tensor:
    """Expected bin value [...] of probs [..., K] over symmetric bins from :func:`make_bins`.

    Computed as Σ_j (p_right_j − p_left_mirror_j)·b_j over the positive half (the middle bin is 0),
    so a uniform distribution gives exactly 0.0 rather than rounding noise, as in the official
    implementation's mirrored summation.
    """
    m = (bins.shape[0] - 1) // 2
    right = probs[..., m + 1:]
    left = probs[..., :m].flip(-1)
    return (right - left) @ bins[m + 1:]


def twohot_decode(logits: Tensor, bins: Tensor) -> Tensor:
    """Logits [..., K] -> raw value [...]: expectation in symlog space, then symexp."""
    return symexp(twohot_mean_symlog(torch.softmax(logits, -1), bins))


def twohot_log_prob(log_probs: Tensor, target: Tensor, bins: Tensor) -> Tensor:
    """log-likelihood [...] of raw targets [...] under two-hot log-probs [..., K] (broadcasts).

    Equal to ``(twohot_encode(target) * log_probs).sum(-1)`` but gathers the two neighbouring
    bins instead of building the dense [..., K] target (the critic loss runs on ~10^7 entries).
    """
    y = symlog(target).clamp(bins[0], bins[-1])
    num = bins.shape[0]
    below = (torch.searchsorted(bins, y.contiguous(), right=True) - 1).clamp(0, num - 2)
    w_above = ((y - bins[below]) / (bins[below + 1] - bins[below])).clamp(0.0, 1.0)
    shape = torch.broadcast_shapes(log_probs.shape[:-1], y.shape)
    log_probs = log_probs.expand(*shape, num)
    below = below.expand(shape).unsqueeze(-1)
    lp_below = log_probs.gather(-1, below).squeeze(-1)
    lp_above = log_probs.gather(-1, below + 1).squeeze(-1)
    return (1.0 - w_above) * lp_below + w_above * lp_above


def twohot_loss(logits: Tensor, target: Tensor, bins: Tensor) -> Tensor:
    """Cross-entropy [...] of logits [..., K] against the two-hot encoding of raw targets [...]."""
    return -twohot_log_prob(torch.log_softmax(logits, -1), target, bins)


# --------------------------------------------------------------------------- categoricals


def unimix_probs(logits: Tensor, mix: float = 0.01) -> Tensor:
    """Softmax over the last dim mixed with ``mix`` of uniform: every class gets >= mix / C."""
    probs = torch.softmax(logits, -1)
    if mix <= 0.0:
        return probs
    return (1.0 - mix) * probs + mix / logits.shape[-1]


def unimix_logits(logits: Tensor, mix: float = 0.01) -> Tensor:
    """Log of :func:`unimix_probs` (normalised log-probabilities, finite everywhere)."""
    if mix <= 0.0:
        return torch.log_softmax(logits, -1)
    return torch.log(unimix_probs(logits, mix))


def kl_categorical(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """KL(p || q) for [..., S, C] logits, summed over the S latents and C classes -> [...]."""
    p_log = torch.log_softmax(p_logits, -1)
    q_log = torch.log_softmax(q_logits, -1)
    return (p_log.exp() * (p_log - q_log)).sum((-2, -1))


def categorical_entropy(logits: Tensor) -> Tensor:
    """Entropy [...] of a categorical given logits [..., A]."""
    log_p = torch.log_softmax(logits, -1)
    return -(log_p.exp() * log_p).sum(-1)


def kl_balance(post_logits: Tensor, prior_logits: Tensor) -> tuple[Tensor, Tensor]:
    """DreamerV3's two KL terms for [B, T, S, C] logits -> (dyn [B, T], rep [B, T]).

    dyn = KL(sg(post) || prior) trains only the prior (dynamics predictor);
    rep = KL(post || sg(prior)) trains only the posterior (representation).
    """
    dyn = kl_categorical(post_logits.detach(), prior_logits)
    rep = kl_categorical(post_logits, prior_logits.detach())
    return dyn, rep


def free_bits_kl(dyn_kl_sum: Tensor, rep_kl_sum: Tensor, free: float = 1.0) -> tuple[Tensor, Tensor]:
    """Free bits on KLs already summed over latents [B, T]: max(free, kl) per (B, T) element.

    Below ``free`` nats the loss is constant, so its gradient is exactly zero there.
    """
    return dyn_kl_sum.clamp(min=free), rep_kl_sum.clamp(min=free)


def one_hot_float(index: Tensor, classes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Indices [...] in [0, classes) -> one-hot rows [..., classes] of ``dtype``: the values of
    ``F.one_hot(index, classes).to(dtype)`` written by one scatter, without an int64 copy and its range scan."""
    out = torch.zeros(*index.shape, classes, dtype=dtype, device=index.device)
    return out.scatter_(-1, index.unsqueeze(-1), 1.0)


def sample_one_hot(logits: Tensor, gumbel: Tensor) -> Tensor:
    """One-hot sample [..., C] via Gumbel-max with the given noise [..., C] (no gradient)."""
    index = (logits + gumbel).argmax(-1)
    return one_hot_float(index, logits.shape[-1], logits.dtype)


def straight_through(one_hot: Tensor, probs: Tensor) -> Tensor:
    """Forward value = the one-hot sample; backward = gradient of ``probs``."""
    return one_hot + probs - probs.detach()


def gumbel_noise(shape: Iterable[int], generator: torch.Generator | None, device, dtype=torch.float32) -> Tensor:
    """Standard Gumbel noise -log(-log U) drawn from ``generator``."""
    u = torch.rand(tuple(shape), generator=generator, device=device, dtype=dtype)
    tiny = torch.finfo(dtype).tiny
    return -torch.log(-torch.log(u.clamp(tiny, 1.0 - 1e-7)))


# --------------------------------------------------------------------------- returns


def lambda_returns(rewards: Tensor, values: Tensor, continues: Tensor, gamma: float, lam: float) -> Tensor:
    """TD(λ) returns, time-major, DreamerV3 pairing -> R [T, B].

    Inputs are aligned by *transition* t -> t+1 of a trajectory of states s_0 .. s_T:
      rewards[t]   = r_{t+1}  reward predicted at the state reached, s_{t+1}     [T, B]
      continues[t] = c_{t+1}  continue flag (1 - terminal) predicted at s_{t+1}  [T, B]
      values[t]    = v_t      critic value at s_t, for t = 0 .. T               [T+1, B]
    and the recursion is (bootstrapping from the last value, R_T := v_T)
      R_t = r_{t+1} + γ c_{t+1} ((1 − λ) v_{t+1} + λ R_{t+1}).
    A continue of 0 cuts both the bootstrap and the tail, so nothing after a termination
    leaks into the return.
    """
    if rewards.shape != continues.shape:
        raise ValueError(f"lambda_returns: rewards {tuple(rewards.shape)} and continues "
                         f"{tuple(continues.shape)} must have the same shape [T, B]")
    if values.shape[0] != rewards.shape[0] + 1 or values.shape[1:] != rewards.shape[1:]:
        raise ValueError(f"lambda_returns: values must be [T+1, B] = {(rewards.shape[0] + 1, *rewards.shape[1:])}, "
                         f"got {tuple(values.shape)}")
    disc = gamma * continues
    interm = rewards + disc * (1.0 - lam) * values[1:]  # [T, B]
    out = []
    last = values[-1]
    for t in reversed(range(rewards.shape[0])):
        last = interm[t] + disc[t] * lam * last
        out.append(last)
    return torch.stack(out[::-1])


def percentile_range(returns: Tensor, low: float = 5.0, high: float = 95.0) -> tuple[Tensor, Tensor]:
    """The ``low``-th and ``high``-th percentiles (0..100) of all entries of ``returns``."""
    flat = returns.detach().reshape(-1).float()
    q = torch.tensor([low / 100.0, high / 100.0], device=flat.device)
    lo, hi = torch.quantile(flat, q)
    return lo, hi


def percentile_return_scale(returns: Tensor, low: float = 5.0, high: float = 95.0) -> Tensor:
    """max(1, P_high − P_low) of one batch of returns (the un-smoothed DreamerV3 scale)."""
    lo, hi = percentile_range(returns, low, high)
    return torch.clamp(hi - lo, min=1.0)


def ema_percentiles(low: Tensor, high: Tensor, returns: Tensor, decay: float, low_pct: float,
                    high_pct: float) -> tuple[Tensor, Tensor]:
    """One EMA step of the return percentiles (0-dim ``low``, ``high``) with ``returns`` [...]; the moments are
    kept unchanged when any return is not finite. Reads nothing back to the host."""
    lo, hi = percentile_range(returns, low_pct, high_pct)
    finite = torch.isfinite(returns).all()
    return (torch.where(finite, decay * low + (1.0 - decay) * lo, low),
            torch.where(finite, decay * high + (1.0 - decay) * hi, high))


def return_scale(low: Tensor, high: Tensor) -> Tensor:
    """max(1, high − low): the divisor of the advantages (returns are shrunk, never amplified)."""
    return torch.clamp(high - low, min=1.0)


class ReturnNormalizer:
    """EMA of the 5th/95th return percentiles; scale = max(1, P95 − P5) (DreamerV3 2023).

    As in the official ``Moments``, both EMAs start at 0 without bias correction, so the scale
    stays 1 until the returns' spread has been large for a while: small returns are never
    amplified, large ones are shrunk.
    """

    def __init__(self, decay: float = 0.99, low: float = 5.0, high: float = 95.0, device=None):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"dreamer.retnorm_decay must be in [0, 1), got {decay}")
        if not 0.0 <= low < high <= 100.0:
            raise ValueError(f"return percentiles must satisfy 0 <= low < high <= 100, got {low}, {high}")
        self.decay, self.low_pct, self.high_pct = decay, low, high
        self.low = torch.zeros((), device=device)
        self.high = torch.zeros((), device=device)

    def update(self, returns: Tensor) -> None:
        """One EMA step with a batch of returns; a batch with a non-finite return leaves the moments as they are."""
        self.low, self.high = ema_percentiles(self.low, self.high, returns, self.decay, self.low_pct, self.high_pct)

    def scale(self) -> Tensor:
        return return_scale(self.low, self.high)

    def state_dict(self) -> dict:
        return {"low": self.low.clone(), "high": self.high.clone()}

    def load_state_dict(self, state: Mapping) -> None:
        self.low = state["low"].to(self.low.device).clone()
        self.high = state["high"].to(self.high.device).clone()


# --------------------------------------------------------------------------- loss scales


def build_loss_scales(cfg) -> dict[str, float]:
    """LOSS_SCALES: the one table mapping every DreamerV3 loss to its weight (``cfg``: a
    :class:`lore.config.RunConfig`); an extension's loss brings its own entry (:class:`DreamerAgent`)."""
    d = cfg.dreamer
    return {
        "decoder": d.decoder_scale,
        "reward": d.reward_scale,
        "continue": d.continue_scale,
        "dyn": d.kl_dyn,
        "rep": d.kl_rep,
        "actor": 1.0,
        "critic": 1.0,
        "slow_reg": d.slow_critic_reg,
    }


def combine_losses(losses: Mapping[str, Tensor], scales: Mapping[str, float]) -> Tensor:
    """Σ scale[k] · loss[k]; a loss without an entry in ``scales`` is an error (no silent 1.0)."""
    missing = sorted(set(losses) - set(scales))
    if missing:
        raise KeyError(f"loss(es) {missing} have no entry in LOSS_SCALES (known: {sorted(scales)})")
    if not losses:
        raise ValueError("combine_losses: no losses given")
    return sum(scales[k] * v for k, v in losses.items())


def check_scales_used(scales: Mapping[str, float], used: Iterable[str]) -> None:
    """Every LOSS_SCALES entry must belong to a loss that was actually computed."""
    unused = sorted(set(scales) - set(used))
    if unused:
        raise KeyError(f"LOSS_SCALES entries {unused} match no computed loss")
