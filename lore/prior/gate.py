"""The uncertainty gate: how much of the LLM prior to mix in at a state.

``beta(s) = beta_max(t) * sigmoid(kappa * (u(s) - tau))`` where ``u`` is a weighted mean of three
EMA-normalised uncertainty signals (policy entropy, critic-ensemble variance, world-model
ensemble disagreement). A per-env hysteresis picks ``tau``: the gate opens when ``u > tau_high``
and closes only when ``u < tau_low``; while open ``tau = tau_low`` (beta stays high on a plateau of
uncertainty), while closed ``tau = tau_high``. ``beta_max(t)`` ramps up linearly over the warm-up
(counted in ENV STEPS) and can then be annealed to 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

UNCERTAINTY_KEYS = ("entropy", "value_var", "disagreement")


def gate_beta(u: torch.Tensor, beta_max: float | torch.Tensor, kappa: float,
              tau: float | torch.Tensor) -> torch.Tensor:
    """``beta_max * sigmoid(kappa * (u [B] - tau))`` -> ``[B]`` (tau may be per env ``[B]``)."""
    return beta_max * torch.sigmoid(kappa * (u - tau))


class EMANormalizer:
    """Running mean and variance with exponential decay, for z-scoring a signal.

    Bias-corrected like Adam's moments (the first update is not shrunk towards 0). ``update``
    takes a batch ``[B]`` and folds its mean and mean square in with weight ``1 - decay``.
    """

    def __init__(self, decay: float, eps: float = 1e-8, z_clip: float = 5.0):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
        self.eps = float(eps)
        self.z_clip = float(z_clip)
        self._mean = 0.0
        self._sq = 0.0
        self.count = 0

    def update(self, x: torch.Tensor) -> None:
        x = x.detach().double().flatten()
        x = x[torch.isfinite(x)]
        if x.numel() == 0:
            return
        self._mean = self.decay * self._mean + (1 - self.decay) * x.mean().item()
        self._sq = self.decay * self._sq + (1 - self.decay) * (x * x).mean().item()
        self.count += 1

    @property
    def mean(self) -> float:
        if self.count == 0:
            return 0.0
        return self._mean / (1.0 - self.decay ** self.count)

    @property
    def var(self) -> float:
        if self.count == 0:
            return 1.0
        sq = self._sq / (1.0 - self.decay ** self.count)
        return max(sq - self.mean ** 2, 0.0)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / sqrt(var + eps)``, clipped to ``±z_clip`` (few samples give wild z-scores)."""
        z = (x - self.mean) / math.sqrt(self.var + self.eps)
        return z.clamp(-self.z_clip, self.z_clip)

    def state_dict(self) -> dict:
        return {"mean": self._mean, "sq": self._sq, "count": self.count, "decay": self.decay}

    def load_state_dict(self, state: dict) -> None:
        self._mean = float(state["mean"])
        self._sq = float(state["sq"])
        self.count = int(state["count"])
        self.decay = float(state.get("decay", self.decay))


def combine_uncertainty(u_entropy: torch.Tensor, u_value_var: torch.Tensor, u_disagreement: torch.Tensor,
                        weights: Sequence[float],
                        normalisers: Sequence[EMANormalizer] | None = None) -> torch.Tensor:
    """Weighted MEAN of the (z-scored) signals ``[B]`` -> ``u [B]``.

    Each signal is z-scored by its own normaliser (``None`` uses it raw), then
    ``u = sum_i w_i z_i / sum_i w_i``: dividing by the weight sum keeps ``u`` (and so ``tau``) in
    z-score units however many signals are switched on. A weight of 0 drops a signal.
    """
    signals = (u_entropy, u_value_var, u_disagreement)
    if len(weights) != 3:
        raise ValueError(f"weights must have 3 entries (entropy, value_var, disagreement), got {len(weights)}")
    if any(w < 0 for w in weights):
        raise ValueError(f"uncertainty weights must be >= 0, got {list(weights)}")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("at least one uncertainty weight (prior.w_entropy, w_value, w_disagreement) must be > 0")
    if normalisers is not None and len(normalisers) != 3:
        raise ValueError(f"normalisers must have 3 entries, got {len(normalisers)}")
    shape = signals[0].shape
    out = torch.zeros(shape, dtype=torch.float32, device=signals[0].device)
    for i, (signal, weight) in enumerate(zip(signals, weights, strict=True)):
        if signal.shape != shape:
            raise ValueError(f"uncertainty signal {UNCERTAINTY_KEYS[i]} has shape {tuple(signal.shape)}, "
                             f"expected {tuple(shape)}")
        if weight == 0:
            continue
        z = normalisers[i].normalize(signal.float()) if normalisers is not None else signal.float()
        out = out + weight * torch.nan_to_num(z, nan=0.0)
    return out / total


def hysteresis_update(is_open: torch.Tensor, u: torch.Tensor, tau_low: float, tau_high: float) -> torch.Tensor:
    """New per-env gate state ``[B] bool``: opens when ``u > tau_high``, closes when ``u < tau_low``."""
    if tau_low > tau_high:
        raise ValueError(f"tau_low ({tau_low}) must be <= tau_high ({tau_high})")
    return (is_open | (u > tau_high)) & ~(u < tau_low)


def hysteresis_beta(u: torch.Tensor, is_open: torch.Tensor, beta_max: float, kappa: float,
                    tau_low: float, tau_high: float) -> torch.Tensor:
    """β for gate states ``is_open [B]``: threshold ``tau_low`` while open, ``tau_high`` while closed."""
    tau = torch.where(is_open, torch.as_tensor(tau_low, dtype=u.dtype, device=u.device),
                      torch.as_tensor(tau_high, dtype=u.dtype, device=u.device))
    return gate_beta(u, beta_max, kappa, tau)


def warmup_factor(env_step: int, warmup_steps: int) -> float:
    """Linear ramp 0 -> 1 over ``warmup_steps`` env steps (1 when there is no warm-up)."""
    if warmup_steps <= 0:
        return 1.0
    return min(max(env_step, 0) / warmup_steps, 1.0)


def anneal_factor(env_step: int, mode: str, start: int, end: int) -> float:
    """Multiplier on beta_max: 1 until ``start``, then to 0 at ``end`` (``linear`` or ``cosine``)."""
    if mode == "none":
        return 1.0
    if mode not in ("linear", "cosine"):
        raise ValueError(f"anneal must be one of none|linear|cosine, got {mode!r}")
    if end <= start:
        raise ValueError(f"anneal end ({end}) must be after its start ({start}, the end of the warm-up)")
    progress = min(max((env_step - start) / (end - start), 0.0), 1.0)
    if mode == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def beta_max_schedule(env_step: int, beta_max: float, warmup_steps: int, anneal: str, anneal_end: int) -> float:
    """``beta_max`` at an env step: linear warm-up over ``warmup_steps``, then annealing to 0 at
    ``anneal_end`` (annealing starts when the warm-up ends)."""
    return beta_max * warmup_factor(env_step, warmup_steps) * anneal_factor(
        env_step, anneal, warmup_steps, anneal_end)


def beta_dropout_keep(batch: int, rate: float, generator: torch.Generator | None = None,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """``[B] bool``: False with probability ``rate`` (that env's β is forced to 0 at this step)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"beta dropout rate must be in [0, 1), got {rate}")
    gen_device = generator.device if generator is not None else torch.device(device or "cpu")
    keep = torch.rand(batch, generator=generator, device=gen_device) >= rate
    return keep.to(device) if device is not None else keep
