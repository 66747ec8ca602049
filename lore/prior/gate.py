"""The uncertainty gate: how much of the LLM prior to mix in at a state.

``beta(s) = beta_max * min(1, u(s) / gate_full_at)`` with ``u = H(pi_wm) / log A`` in ``[0, 1]``, the
policy's entropy as a fraction of its maximum (1 = uniform policy): advice gets a say where the agent is
unsure what to do. The ``calibrated`` gate reads the entropy against its own running distribution instead
(:func:`calibrated_openness`), so that it closes where the agent is surer than usual. ``trust`` (see :mod:`lore.prior.trust`) then scales beta per advice source.

Two more spreads are logged beside ``u`` as diagnostics, each as ``x / (x + mean(x))`` against its own
running mean (0.5 at a typical state): the critic heads' value variance and the world-model ensemble's
disagreement.
"""

from __future__ import annotations

import math

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


def uncertainty_parts(signals: list[torch.Tensor], num_actions: int, means: list[float]) -> list[torch.Tensor]:
    """``[u_entropy, u_value, u_disagreement]``, each ``[B]`` in ``[0, 1]``, from the raw signals.

    ``signals``: entropy (nats), value variance and disagreement, each ``[B]``; ``means``: the running means
    of the last two (the first entry is ignored: entropy has an absolute scale). The gate reads the first.
    """
    if len(signals) != 3 or len(means) != 3:
        raise ValueError("signals and means must have 3 entries (entropy, value_var, disagreement)")
    shape = signals[0].shape
    for key, signal in zip(UNCERTAINTY_KEYS, signals, strict=True):
        if signal.shape != shape:
            raise ValueError(f"uncertainty signal {key} has shape {tuple(signal.shape)}, expected {tuple(shape)}")
    return [entropy_fraction(torch.nan_to_num(signals[0].float()), num_actions),
            ratio_to_mean(torch.nan_to_num(signals[1].float()), means[1]),
            ratio_to_mean(torch.nan_to_num(signals[2].float()), means[2])]


def calibrated_openness(signal: torch.Tensor, mean: float, var: float, floor: float) -> torch.Tensor:
    """Where a state's uncertainty ``signal [B]`` sits in its own running distribution: ``Phi((x - mean) / sd)``
    in ``[0, 1]``, 1/2 at a typical state, towards 0 where the agent is surer than usual and towards 1 where it
    is less sure; ``sd = sqrt(var) + floor`` (``floor`` > 0 keeps a constant signal from dividing by 0).

    The calibrated gate's anchor: a state's uncertainty matters relative to the agent's usual uncertainty (the
    policy entropy of a learning agent stays near its maximum, so an absolute threshold never closes)."""
    z = (torch.nan_to_num(signal.double(), nan=mean) - mean) / (math.sqrt(max(var, 0.0)) + floor)
    return (0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))).to(signal.dtype)


class EMANormalizer:
    """Running mean and variance with exponential decay (a spread is divided by its running mean).

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


def beta_dropout_keep(batch: int, rate: float, generator: torch.Generator | None = None,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """``[B] bool``: False with probability ``rate`` (that env's β is forced to 0 at this step)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"beta dropout rate must be in [0, 1), got {rate}")
    gen_device = generator.device if generator is not None else torch.device(device or "cpu")
    keep = torch.rand(batch, generator=generator, device=gen_device) >= rate
    return keep.to(device) if device is not None else keep
