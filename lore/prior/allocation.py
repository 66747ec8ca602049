"""Advice that earns its strength: a two-armed bandit over episodes, following the advice or the agent's own
policy, that starts sceptical and does not forget harm.

Anchors: following an untrusted teacher as policy selection between the teacher and the learner (RLPA,
Laroche & Féraud 2018; CORRAL, Agarwal et al. 2017), with Thompson sampling as the allocation rule (Agrawal &
Goyal 2012). Each episode is scored by :func:`episode_outcome` in [0, 1]; each arm keeps a Beta posterior of
its mean outcome, updated with fractional pseudo-counts and never decayed, so harm once seen stays evidence.
The advice arm starts from a sceptical prior (``scepticism`` pseudo-episodes of outcome 0), so unproven
advice steers only a minority of episodes. At each episode start :meth:`EpisodeBandit.draw_advised` draws one
mean per arm (a Gaussian with the Beta posterior's mean and variance) and the episode is advised when the
advice arm's draw is the larger; advised episodes act with the prior, the others are the agent's own.
"""

from __future__ import annotations

import math

import torch

SCEPTICISM = 3.0
"""Pseudo-episodes of outcome 0 the advice arm starts with: unproven advice steers about a quarter of the
episodes (P(advice better) = 1/4 against the agent's uninformed Beta(1, 1))."""
TIMEOUT_OUTCOME = 0.5
"""The outcome of an episode that ended without reward and without failure (a time-out)."""


def episode_outcome(episode_return: float, failed: bool, best_return: float) -> float:
    """One episode's outcome in [0, 1]: 0 when it ended in failure (:func:`lore.prior.trust.is_failure`), else
    ``1/2 + 1/2 * clip(return / best_return, 0, 1)``: a time-out without reward 1/2, the best return seen 1."""
    if failed or not math.isfinite(episode_return):
        return 0.0
    if best_return <= 0.0:
        return TIMEOUT_OUTCOME
    return TIMEOUT_OUTCOME + (1.0 - TIMEOUT_OUTCOME) * min(max(episode_return / best_return, 0.0), 1.0)


def beta_moments(alpha: float, beta: float) -> tuple[float, float]:
    """(mean, variance) of Beta(alpha, beta)."""
    total = alpha + beta
    return alpha / total, alpha * beta / (total * total * (total + 1.0))


def p_greater(a: tuple[float, float], b: tuple[float, float]) -> float:
    """P(X > Y) for independent X, Y with (mean, variance) ``a`` and ``b``, in the Gaussian approximation."""
    spread = math.sqrt(a[1] + b[1])
    return 0.5 * (1.0 + math.erf((a[0] - b[0]) / (spread * math.sqrt(2.0)))) if spread > 0 else float(a[0] > b[0])


class EpisodeBandit:
    """Thompson allocation of episodes between the advice and the agent's own policy (see the module)."""

    def __init__(self, scepticism: float = SCEPTICISM):
        if not 0.0 <= scepticism < math.inf:
            raise ValueError(f"scepticism must be finite and >= 0, got {scepticism}")
        self.advice = [1.0, 1.0 + float(scepticism)]  # Beta pseudo-counts (alpha, beta)
        self.own = [1.0, 1.0]
        self.best_return = 0.0
        self.episodes = {"advice": 0, "own": 0}

    def observe(self, episode_return: float, failed: bool, advised: bool) -> float:
        """One finished episode of the advice arm (``advised``) or the agent's own; returns its outcome."""
        if math.isfinite(episode_return):
            self.best_return = max(self.best_return, float(episode_return))
        outcome = episode_outcome(episode_return, failed, self.best_return)
        arm = self.advice if advised else self.own
        arm[0] += outcome
        arm[1] += 1.0 - outcome
        self.episodes["advice" if advised else "own"] += 1
        return outcome

    def p_advice_better(self) -> float:
        """Posterior probability that advised episodes end better than the agent's own."""
        return p_greater(beta_moments(*self.advice), beta_moments(*self.own))

    def draw_advised(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``[n]`` bool: for each of ``n`` episode starts, whether a Thompson draw gives it to the advice."""
        (ma, va), (mo, vo) = beta_moments(*self.advice), beta_moments(*self.own)
        noise = torch.randn(2, n, generator=generator, device=generator.device).cpu().double()  # [2, n]
        return (ma + math.sqrt(va) * noise[0]) > (mo + math.sqrt(vo) * noise[1])

    def metrics(self) -> dict[str, float]:
        return {"advice_p_better": self.p_advice_better(), "advice_outcome_mean": beta_moments(*self.advice)[0],
                "own_outcome_mean": beta_moments(*self.own)[0]}

    def state_dict(self) -> dict:
        return {"advice": list(self.advice), "own": list(self.own), "best_return": self.best_return,
                "episodes": dict(self.episodes)}

    def load_state_dict(self, state: dict) -> None:
        self.advice = [float(x) for x in state["advice"]]
        self.own = [float(x) for x in state["own"]]
        self.best_return = float(state["best_return"])
        self.episodes = {k: int(state["episodes"][k]) for k in ("advice", "own")}
