"""Advice trust: an online, per-source estimate of whether following the advice helps.

Three pieces of evidence are added up and ``trust = sigmoid(trust_gain * evidence)`` (0.5 without any):

- the *value z-score* (weighted by ``prior.trust_value_weight``): on replayed states where advice applied,
  the world model imagines one step for every action and the critic scores the result,
  ``Q(s, a) = r(s') + gamma * c(s') * V(s')``, and

      z(s) = (sum_a rho(a) Q(s, a) - mean_a Q(s, a)) / (std_a Q(s, a) + min_gap)

  is how many standard deviations better than an average action the advised distribution is. ``min_gap``
  makes states where the model cannot tell the actions apart contribute ~0. The batch mean of ``z`` is
  folded into a bias-corrected EMA per source.
- the *episode t*: the prior layer runs a share of episodes as *control episodes* without the prior, and
  :class:`EpisodeComparison` keeps decayed sums of the returns of advised and control episodes. Their
  Student t-statistic with the pooled within-group variance counts beyond a dead zone of ``trust_dead_zone``
  standard errors, ``sign(t) max(|t| - t0, 0)``, for every source (advised episodes mix them all). Pooling
  keeps a small group with identical returns from claiming zero variance, and the dead zone keeps the
  statistic, read after every episode, from trusting advice on a chance excursion.
- *step failures*, harm only: :class:`StepFailures` compares how often the
  steps where the advice changed the action end the episode without reward with the agent's own steps
  (two-proportion z beyond the dead zone). It needs no reward to have been seen.

Sources (``ADVICE_SOURCES``) are the LLM's own answers (fresh or cached), the plan the LLM
wrote (followed step by step), and PriorNet's answers given in the LLM's stead: each can be
right or wrong independently, so each has its own estimate.
"""

from __future__ import annotations

import math

import torch

ADVICE_SOURCES = ("llm", "plan", "surrogate")
"""Source codes stored in replay as ``llm_source``: 0 = no advice, ``i + 1`` = ``ADVICE_SOURCES[i]``."""


def source_code(source: str | None) -> int:
    """Replay code of a controller source name (``cache`` answers are the LLM's own)."""
    if source is None:
        return 0
    name = "llm" if source == "cache" else source
    if name not in ADVICE_SOURCES:
        raise ValueError(f"unknown advice source {source!r} (valid: {', '.join(ADVICE_SOURCES)}, cache)")
    return ADVICE_SOURCES.index(name) + 1


def advice_value_z(q_values: torch.Tensor, prior_logits: torch.Tensor, min_gap: float) -> torch.Tensor:
    """Value z-score of the advised distribution per state: ``[N, A], [N, A] -> [N]``.

    ``q_values`` are in return-scale units (divided by the return normaliser's scale);
    ``min_gap > 0`` floors the denominator so indistinguishable actions give ~0, not noise / noise.
    """
    if q_values.shape != prior_logits.shape or q_values.dim() != 2:
        raise ValueError(f"q_values {tuple(q_values.shape)} and prior_logits {tuple(prior_logits.shape)} "
                         f"must both be [N, A]")
    if not min_gap > 0:
        raise ValueError(f"min_gap must be > 0, got {min_gap}")
    rho = torch.softmax(prior_logits.double(), -1)
    q = q_values.double()
    advised = (rho * q).sum(-1)
    mean = q.mean(-1)
    std = q.std(-1, unbiased=False)
    return ((advised - mean) / (std + min_gap)).to(q_values.dtype)


def replicated_best_action(q_draws: torch.Tensor, min_gap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(argmax_a mean Q [N], replicated [N] bool)`` for independent value draws ``Q [N, D, A]``.

    A state labels its best action only when every draw (imagined latent sample x bootstrapped critic
    head) ranks the same action first and the mean margin over the runner-up exceeds ``min_gap``:
    near-ties, decided by noise, are the states where the draws disagree, and as labels they would
    call good advice wrong.
    """
    if q_draws.dim() != 3 or q_draws.shape[2] < 2 or q_draws.shape[1] < 1:
        raise ValueError(f"q_draws must be [N, D, A] with D >= 1 and A >= 2, got {tuple(q_draws.shape)}")
    mean = q_draws.mean(1)
    best = mean.argmax(-1)
    top2 = mean.topk(2, dim=-1).values
    unanimous = (q_draws.argmax(-1) == best[:, None]).all(1)
    return best, unanimous & (top2[:, 0] - top2[:, 1] > min_gap)


def trust_from_evidence(mean_z: float, gain: float) -> float:
    """``sigmoid(gain * mean_z)``: 0.5 without evidence."""
    x = max(min(gain * mean_z, 60.0), -60.0)  # exp overflows beyond ~709; sigmoid is flat long before
    return 1.0 / (1.0 + math.exp(-x))


def act_scale(trust: torch.Tensor) -> torch.Tensor:
    """How strongly advice acts, ``min(1, 2 trust)``: ``[B] -> [B]``, full strength from the uninformed 0.5 up."""
    return (2.0 * trust).clamp(max=1.0)


def dead_zone(t: float, width: float) -> float:
    """``sign(t) * max(|t| - width, 0)``: differences within ``width`` standard errors are no evidence."""
    return math.copysign(max(abs(t) - width, 0.0), t)


def harm_only(z: float, width: float) -> float:
    """``min(0, dead_zone(z, width))``: evidence that can only lower trust, beyond ``width`` standard errors."""
    return min(dead_zone(z, width), 0.0)


def is_failure(terminated: bool, last_reward: float) -> bool:
    """An episode ended in failure: the env ended it (not a time limit) on a step without positive reward."""
    return bool(terminated) and float(last_reward) <= 0.0


def failure_z(failed_adv: float, n_adv: float, failed_ctrl: float, n_ctrl: float) -> float:
    """Two-proportion z of the failure rates, control minus advised (< 0: advised episodes fail more).

    The pooled rate carries one pseudo-failure in two pseudo-episodes, so groups that never fail (DoorKey
    cannot end in failure) give z = 0 rather than 0 / 0.
    """
    if min(n_adv, n_ctrl) <= 0:
        return 0.0
    pooled = (failed_adv + failed_ctrl + 1.0) / (n_adv + n_ctrl + 2.0)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n_adv + 1.0 / n_ctrl))
    return (failed_ctrl / n_ctrl - failed_adv / n_adv) / se


class EpisodeComparison:
    """Advised vs control episodes: decayed sums of their returns and the pooled-variance t of the difference."""

    def __init__(self, decay: float = 0.98, min_episodes: int = 3, min_gap: float = 1e-3):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"episode decay must be in [0, 1), got {decay}")
        self.decay, self.min_episodes, self.min_gap = float(decay), int(min_episodes), float(min_gap)
        # count, sum of returns, sum of squared returns
        self.stats = {"advised": [0.0, 0.0, 0.0], "control": [0.0, 0.0, 0.0]}

    def observe(self, episode_return: float, control: bool) -> None:
        """One episode of its group: both groups forget by ``decay``, then its group adds the return."""
        if not math.isfinite(episode_return):
            return
        for st in self.stats.values():
            st[:] = [v * self.decay for v in st]
        st = self.stats["control" if control else "advised"]
        st[0] += 1.0
        st[1] += episode_return
        st[2] += episode_return * episode_return

    def t_statistic(self) -> float:
        """Student t of (advised - control) mean return with the pooled within-group variance.

        0 until both groups have ``min_episodes`` (effective).
        """
        (wa, sa, qa), (wc, sc, qc) = self.stats["advised"], self.stats["control"]
        if min(wa, wc) < self.min_episodes - 1e-6:
            return 0.0
        ma, mc = sa / wa, sc / wc
        within = max(qa - wa * ma * ma, 0.0) + max(qc - wc * mc * mc, 0.0)
        pooled = within / (wa + wc)
        se = math.sqrt(pooled * (1.0 / wa + 1.0 / wc) + self.min_gap ** 2)
        return (ma - mc) / se

    def state_dict(self) -> dict:
        return {k: list(v) for k, v in self.stats.items()}

    def load_state_dict(self, state: dict) -> None:
        # older checkpoints also hold a failure count (a fourth sum) and an episode count: not read
        self.stats = {k: [float(x) for x in state[k][:3]] for k in ("advised", "control")}


class StepFailures:
    """Immediate failures of the steps advice decided vs the agent's own steps: decayed counts, per source.

    A step is the advice's when the advice changed the action (``a_mix != a_wm`` under the same noise) and
    the agent's own otherwise; it failed when the env ended the episode on it without positive reward
    (:func:`is_failure`). Advice that never ends an episode gives z >= 0 and, through :func:`harm_only`, no
    evidence. Each group forgets per step of its own (``decay``, ~200 steps), so the evidence against advice
    that stopped acting stays instead of being worn away by the steps it sits out.
    """

    def __init__(self, decay: float = 0.995, min_steps: int = 3):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"step decay must be in [0, 1), got {decay}")
        self.decay, self.min_steps = float(decay), int(min_steps)
        # [steps, failures]: the agent's own, and each source's
        self.own = [0.0, 0.0]
        self.advised = {name: [0.0, 0.0] for name in ADVICE_SOURCES}

    def observe(self, changed: torch.Tensor, codes: torch.Tensor, failed: torch.Tensor) -> None:
        """One act step of every env: ``changed [B]`` (advice changed the action), ``codes [B]``, ``failed [B]``."""
        if not changed.shape == codes.shape == failed.shape:
            raise ValueError(f"changed {tuple(changed.shape)}, codes {tuple(codes.shape)} and failed "
                             f"{tuple(failed.shape)} must match")
        changed, codes, failed = changed.bool().cpu(), codes.long().cpu(), failed.bool().cpu()
        own = ~changed | (codes == 0)
        groups = [(self.own, own)] + [(self.advised[name], changed & (codes == i + 1))
                                      for i, name in enumerate(ADVICE_SOURCES)]
        for st, rows in groups:
            n = int(rows.sum())
            if n:
                keep = self.decay ** n
                st[0] = st[0] * keep + n
                st[1] = st[1] * keep + float((rows & failed).sum())

    def z(self, name: str) -> float:
        """:func:`failure_z` of ``name``'s steps vs the agent's own (< 0: its steps fail more); 0 until both
        have ``min_steps``."""
        (n_adv, f_adv), (n_own, f_own) = self.advised[name], self.own
        if min(n_adv, n_own) < self.min_steps - 1e-6:
            return 0.0
        return failure_z(f_adv, n_adv, f_own, n_own)

    def state_dict(self) -> dict:
        return {"own": list(self.own), "advised": {k: list(v) for k, v in self.advised.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.own = [float(x) for x in state["own"]]
        self.advised = {n: [float(x) for x in state["advised"][n]] for n in ADVICE_SOURCES}


class AdviceTrust:
    """Per advice source: the value z-score EMA, plus the episode t and the step failures (see the module)."""

    def __init__(self, decay: float, gain: float, episode_dead_zone: float = 1.0, value_weight: float = 1.0):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"prior.trust_decay must be in [0, 1), got {decay}")
        if not gain > 0:
            raise ValueError(f"prior.trust_gain must be > 0, got {gain}")
        if not 0.0 <= episode_dead_zone < math.inf:
            raise ValueError(f"prior.trust_dead_zone must be finite and >= 0, got {episode_dead_zone}")
        if not 0.0 <= value_weight < math.inf:
            raise ValueError(f"prior.trust_value_weight must be finite and >= 0, got {value_weight}")
        self.decay = float(decay)
        self.gain = float(gain)
        self.episode_dead_zone = float(episode_dead_zone)
        self.value_weight = float(value_weight)
        self.steps = StepFailures()
        self.episodes = EpisodeComparison()
        self._ema = {name: 0.0 for name in ADVICE_SOURCES}
        self._count = {name: 0 for name in ADVICE_SOURCES}
        self._last_z = {name: math.nan for name in ADVICE_SOURCES}

    def observe(self, z: torch.Tensor, codes: torch.Tensor) -> None:
        """Fold in per-state z-scores ``[N]`` of states whose advice came from source ``codes [N]``."""
        if z.shape != codes.shape:
            raise ValueError(f"z {tuple(z.shape)} and codes {tuple(codes.shape)} must match")
        for i, name in enumerate(ADVICE_SOURCES):
            rows = (codes.long() == i + 1) & torch.isfinite(z)
            if bool(rows.any()):
                batch_mean = float(z[rows].double().mean())
                self._ema[name] = self.decay * self._ema[name] + (1.0 - self.decay) * batch_mean
                self._count[name] += 1
                self._last_z[name] = batch_mean

    def mean_z(self, name: str) -> float:
        """Bias-corrected EMA of ``name``'s batch-mean value z-score (0 before any observation)."""
        return 0.0 if self._count[name] == 0 else self._ema[name] / (1.0 - self.decay ** self._count[name])

    def step_failure_harm(self, name: str) -> float:
        """Harm evidence from the immediate failures of the steps ``name``'s advice decided:
        :func:`harm_only` of :meth:`StepFailures.z`."""
        return harm_only(self.steps.z(name), self.episode_dead_zone)

    def evidence(self, name: str) -> float:
        """``value_weight`` x value z-score EMA + the episode t beyond its dead zone + the step-failure harm."""
        return (self.value_weight * self.mean_z(name) + dead_zone(self.episodes.t_statistic(), self.episode_dead_zone)
                + self.step_failure_harm(name))

    def value(self, name: str) -> float:
        """Trust in ``[0, 1]`` of one source (0.5 before any evidence)."""
        return trust_from_evidence(self.evidence(name), self.gain)

    def values_for(self, codes: torch.Tensor) -> torch.Tensor:
        """Trust per row for source codes ``[B]`` (rows without advice, code 0, get 1: nothing to scale)."""
        table = torch.tensor([1.0] + [self.value(n) for n in ADVICE_SOURCES], dtype=torch.float32)
        return table[codes.long().clamp(0, len(ADVICE_SOURCES)).cpu()].to(codes.device)

    def metrics(self) -> dict[str, float]:
        out = {}
        for name in ADVICE_SOURCES:
            out[f"trust_{name}"] = self.value(name)
            out[f"trust_z_{name}"] = self._last_z[name]
            out[f"trust_step_z_{name}"] = self.steps.z(name)
        out["trust_episode_t"] = self.episodes.t_statistic()
        return out

    def state_dict(self) -> dict:
        return {"ema": dict(self._ema), "count": dict(self._count), "last_z": dict(self._last_z),
                "steps": self.steps.state_dict(), "episodes": self.episodes.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._ema = {n: float(state["ema"][n]) for n in ADVICE_SOURCES}
        self._count = {n: int(state["count"][n]) for n in ADVICE_SOURCES}
        self._last_z = {n: float(state["last_z"][n]) for n in ADVICE_SOURCES}
        self.steps = StepFailures()
        if "steps" in state:  # absent in checkpoints written before step failures were counted
            self.steps.load_state_dict(state["steps"])
        self.episodes.load_state_dict(state["episodes"])
