"""The uncertainty gate: how much of the LLM prior to mix in at a state.

``beta(s) = beta_max(t) * trust(source) * u(s)`` where ``u in [0, 1]`` is a weighted mean of three
bounded uncertainty signals, each high where the agent is unsure:

- policy entropy as a fraction of its maximum, ``H(pi_wm) / log A`` (1 = uniform policy);
- critic-ensemble variance (bootstrapped heads) and world-model ensemble disagreement, each as
  ``x / (x + mean(x))`` against its own running mean: 0.5 at a typical state, towards 1 where the
  spread is far above typical, towards 0 where it is far below.

No z-scoring: a z-score is centred on 0 and put the gate half-closed on average (beta ~ 0.12 at the
old thresholds, measured), while these signals keep their meaning ("how unsure, on an absolute or
relative scale") from the first step. ``trust`` (see :mod:`lore.prior.trust`) scales the gate
down for advice that the agent's own value estimates rate worse than average. ``beta_max(t)``
ramps up linearly over the warm-up (counted in ENV STEPS) and can then be annealed to 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

UNCERTAINTY_KEYS = ("entropy", "value_var", "disagreement")


def entropy_fraction(entropy: torch.Tensor, num_actions: int) -> torch.Tensor:
    """``H / log A`` clipped to ``[0, 1]``: ``[B] -> [B]``."""
    if num_actions < 2:
        raise ValueError(f"num_actions must be >= 2, got {num_actions}")
    return (entropy / math.log(num_actions)).clamp(0.0, 1.0)


def ratio_to_mean(x: torch.Tensor, mean: float, eps: float = 1e-12) -> torch.Tensor:
    """``x / (x + mean)`` in ``[0, 1]`` for a non-negative spread ``x [B]`` (0.5 when both are 0)."""
    x = x.clamp(min=0.0)
    return (x + eps) / (x + max(mean, 0.0) + 2 * eps)


def bounded_uncertainty(signals: Sequence[torch.Tensor], weights: Sequence[float], num_actions: int,
                        means: Sequence[float]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Weighted mean of the three bounded signals -> ``(u [B], [u_entropy, u_value, u_disagreement])``.

    ``signals``: raw entropy (nats), value variance and disagreement, each ``[B]``; ``means``: the
    running means of the last two (the first entry is ignored: entropy has an absolute scale).
    A weight of 0 drops a signal; dividing by the weight sum keeps ``u`` in ``[0, 1]``.
    """
    if len(signals) != 3 or len(weights) != 3 or len(means) != 3:
        raise ValueError("signals, weights and means must have 3 entries (entropy, value_var, disagreement)")
    if any(w < 0 for w in weights):
        raise ValueError(f"uncertainty weights must be >= 0, got {list(weights)}")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("at least one uncertainty weight (prior.w_entropy, w_value, w_disagreement) must be > 0")
    shape = signals[0].shape
    for key, signal in zip(UNCERTAINTY_KEYS, signals, strict=True):
        if signal.shape != shape:
            raise ValueError(f"uncertainty signal {key} has shape {tuple(signal.shape)}, expected {tuple(shape)}")
    parts = [entropy_fraction(torch.nan_to_num(signals[0].float()), num_actions),
             ratio_to_mean(torch.nan_to_num(signals[1].float()), means[1]),
             ratio_to_mean(torch.nan_to_num(signals[2].float()), means[2])]
    u = sum(w * part for w, part in zip(weights, parts, strict=True)) / total
    return u, parts


class EMANormalizer:
    """Running mean and variance with exponential decay (the gate divides a spread by its running mean).

    Bias-corrected like Adam's moments (the first update is not shrunk towards 0). ``update``
    takes a batch ``[B]`` and folds its mean and mean square in with weight ``1 - decay``.
    """

    def __init__(self, decay: float):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
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

    def state_dict(self) -> dict:
        return {"mean": self._mean, "sq": self._sq, "count": self.count, "decay": self.decay}

    def load_state_dict(self, state: dict) -> None:
        self._mean = float(state["mean"])
        self._sq = float(state["sq"])
        self.count = int(state["count"])
        self.decay = float(state.get("decay", self.decay))


def trust_floored_beta(beta_gate: torch.Tensor, beta_max: float, absorb: torch.Tensor) -> torch.Tensor:
    """``max(beta_gate, beta_max * absorb)``: ``[B], [B] -> [B]``.

    ``absorb = clip(2 trust - 1, 0, 1)`` is 0 for uninformed or harmful advice (the gate decides alone) and rises to
    1 as the evidence for the advice grows, so trusted advice keeps a say where a confident policy closes the gate.
    """
    if beta_gate.shape != absorb.shape:
        raise ValueError(f"beta_gate {tuple(beta_gate.shape)} and absorb {tuple(absorb.shape)} must match")
    return torch.maximum(beta_gate, beta_max * absorb.to(beta_gate.dtype).clamp(0.0, 1.0))


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
