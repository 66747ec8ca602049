"""Advice trust: an online, per-source estimate of whether following the advice helps.

Evidence comes from the agent's own value estimates. On replayed states where advice applied,
the world model imagines one step for every action and the critic scores the result,
``Q(s, a) = r(s') + gamma * c(s') * V(s')``. The advice's *value z-score* at a state is

    z(s) = (sum_a rho(a) Q(s, a) - mean_a Q(s, a)) / (std_a Q(s, a) + min_gap * scale)

i.e. how many standard deviations better than an average action the advised distribution is.
``min_gap`` (a fraction of the return scale) makes states where the model cannot tell the
actions apart contribute ~0: before any reward has been seen every ``Q`` is ~0 and trust stays
at its uninformed value 0.5. The batch mean of ``z`` is folded into a bias-corrected EMA ``m``
per source and ``trust = sigmoid(gain * m)``: advice that the critic rates better than average
earns trust (-> 1), advice it rates worse loses it (-> 0).

A second, model-free piece of evidence comes from realised returns: the prior layer runs a share of
episodes as *control episodes* without the prior, and :class:`EpisodeComparison` keeps decayed sums of
the returns of advised and control episodes. Their Student t-statistic with the *pooled* within-group
variance, ``t = (mean_adv - mean_ctrl) / sqrt(s2_pooled (1/n_adv + 1/n_ctrl))``, enters the evidence of
every source (advised episodes mix them all) through a dead zone of one standard error:
``trust = sigmoid(gain * (m + soft(t, t0)))`` with ``soft(t, t0) = sign(t) max(|t| - t0, 0)``.

Both choices answer a measured failure. Welch's per-group variance is 0 for a control group of three
failed episodes, so one lucky advised success among 14 gave t = 1.05 and trust 0.96, and the agent
distilled an adversarial advisor (DoorKey, seed 1 of the previous grid). The statistic is checked after
every episode, so under the null some window crosses any fixed level: in a simulation of 40 episodes at
equal success rates (5% and 20%), the absorption weight ``2 trust - 1`` exceeded 0.5 at some point in
61-67% of runs with Welch's t and no dead zone, and in 1-17% with the pooled t and ``t0 = 1``, while
advice that lifts the success rate from 5% to 60% is absorbed (weight > 0.8) after a median of 16
episodes (15 with Welch's t; ``benchmarks/trust_null_benchmark.py``, docs/benchmark/trust_null.md). Measured on DoorKey at 8k steps, the
critic barely ranks single actions (one-step Q spread across actions 0.001 against 0.004 of sampling
noise; the good advisor's action ranked best on 29% of states), while whole episodes differ clearly.
Over a whole run the width is still crossed: the decayed statistic forgets in ~50 episodes, so a run holds
several nearly independent windows. ``prior.trust_familywise`` widens the benefit side to the Bonferroni width
over the windows read so far (:func:`familywise_width`); replaying real runs' returns with random control labels,
it cut the runs whose absorption weight ever passed 0.5 from 38% to 19% on Crafter and from 54% to 8% on
LavaGapS5 (docs/benchmark/trust_null.md).

A third piece, on by default (``prior.trust_step_failures``), needs no reward: :class:`StepFailures` compares how
often the steps where the advice changed the action end the episode without reward with the agent's own steps,
and adds the two-proportion z as harm only. On LavaGapS5 it caught the adversarial advisor at 1-2.5k env steps
(1k-10k, or never, before), and good advice, which never walks into the lava, ran identically
(docs/benchmark/trust_step_failures/comparison.md).

Sources (``ADVICE_SOURCES``) are the LLM's own answers (fresh or cached), the plan the LLM
wrote (followed step by step), and PriorNet's answers given in the LLM's stead: each can be
right or wrong independently, so each has its own estimate.
"""

from __future__ import annotations

import math
from statistics import NormalDist

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


FAILURE_REWARD = 0.05
"""A predicted terminal step whose reward is below this share of the return scale counts as a failure (the
convention of :func:`is_failure`: the env ended the episode on a step without positive reward)."""

FAILURE_GAP = 0.1
"""Floor of the failure-probability spread across actions: differences of a few percent are model noise."""


def predicted_failure(reward: torch.Tensor, continue_prob: torch.Tensor, scale: float) -> torch.Tensor:
    """Probability that a step ends the episode in failure, from the world model's heads: ``[...] -> [...]``.

    ``(1 - c(s')) * [r(s') < FAILURE_REWARD * scale]``: a predicted termination without reward (the lava, a
    death). Steps onto the goal end the episode too, but with reward, and do not count.
    """
    if reward.shape != continue_prob.shape:
        raise ValueError(f"reward {tuple(reward.shape)} and continue_prob {tuple(continue_prob.shape)} must match")
    return (1.0 - continue_prob) * (reward < FAILURE_REWARD * float(scale)).to(continue_prob.dtype)


def advice_failure_z(failure: torch.Tensor, prior_logits: torch.Tensor) -> torch.Tensor:
    """Failure z-score of the advised distribution per state: ``[N, A], [N, A] -> [N]`` (< 0: advice fails more).

    ``(mean_a f - sum_a rho(a) f(a)) / (std_a f + FAILURE_GAP)`` for predicted failure probabilities ``f``.
    Unlike the value z-score it needs no reward to have been seen: the continue head learns what ends an
    episode from the first failures of random play, while every value is still ~0.
    """
    if failure.shape != prior_logits.shape or failure.dim() != 2:
        raise ValueError(f"failure {tuple(failure.shape)} and prior_logits {tuple(prior_logits.shape)} "
                         f"must both be [N, A]")
    rho = torch.softmax(prior_logits.double(), -1)
    f = failure.double()
    return ((f.mean(-1) - (rho * f).sum(-1)) / (f.std(-1, unbiased=False) + FAILURE_GAP)).to(failure.dtype)


def replicated_best_action(q_draws: torch.Tensor, min_gap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(argmax_a mean Q [N], replicated [N] bool)`` for independent value draws ``Q [N, D, A]``.

    A state labels its best action only when every draw (imagined latent sample x bootstrapped critic
    head) ranks the same action first and the mean margin over the runner-up exceeds ``min_gap``.
    In navigation tasks the one-step action gap is O(1 - gamma) of the value, below the critic's own
    error: measured on DoorKey at 10k steps, the argmax of one draw matched the (optimal) scripted
    advice on 45% of advised states, the unanimous argmax of 2 samples x 3 heads on 72% (28% of states
    labelled) and of 4 x 3 on 83% (11% labelled). Near-ties, decided by noise, are exactly the states
    where the draws disagree, and they would teach the temperature that good advice is wrong.
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


def act_scale(trust: torch.Tensor, floor: float, uninformed: float = 1.0) -> torch.Tensor:
    """How strongly advice acts, ``[B] -> [B]``: piecewise linear in the trust through three points.

    ``(floor, 0)``, ``(0.5, uninformed)`` and ``(1, 1)``; 0 below ``floor``. ``uninformed = 1`` (full strength
    from the uninformed trust 0.5 up) with ``floor = 0`` is ``min(1, 2 trust)``, which lets advice with strong
    evidence of harm keep acting a little (trust 0.1: a fifth of beta) for the rest of the run; ``floor > 0``
    cuts it off entirely once its trust is below ``floor``. ``uninformed < 1`` makes advice earn full strength:
    before any evidence it acts at that share, and only trust above 0.5 lifts it (``uninformed = 0.5``,
    ``floor = 0``: the scale is the trust itself).
    """
    if not 0.0 <= floor < 0.5:
        raise ValueError(f"prior.trust_act_floor must be in [0, 0.5), got {floor}")
    if not 0.0 < uninformed <= 1.0:
        raise ValueError(f"prior.trust_act_uninformed must be in (0, 1], got {uninformed}")
    below = uninformed * ((trust - floor) / (0.5 - floor)).clamp(min=0.0)  # at most 1: used for trust <= 0.5
    above = uninformed + (1.0 - uninformed) * ((trust - 0.5) / 0.5).clamp(0.0, 1.0)
    return torch.where(trust > 0.5, above, below)


def matched_control_share(t: float, floor: float) -> float:
    """Share of episodes run without the prior: ``clip(Phi(-t), floor, 1 - floor)`` for the episode t.

    Probability matching on the advised-vs-control comparison: ``Phi(-t)`` is the probability, under a
    normal approximation of the two mean returns, that the agent's own play is the better one. Without
    evidence (t = 0) half the episodes are the agent's own; advice that does better (t > 0) gets more
    episodes (the control share falls to ``floor``), advice that does worse fewer (it rises to
    ``1 - floor``). Measured with no gain (docs/benchmark/control_matching/comparison.md). As only control
    episodes are then observed, the decayed advised group shrinks below the minimum count, t returns to
    0 and the advice is tried again at one half: the test never stops.
    """
    if not 0.0 < floor <= 0.5:
        raise ValueError(f"control share floor must be in (0, 0.5], got {floor}")
    own_better = 0.5 * math.erfc(t / math.sqrt(2.0))  # Phi(-t)
    return min(max(own_better, floor), 1.0 - floor)


def dead_zone(t: float, width: float) -> float:
    """``sign(t) * max(|t| - width, 0)``: differences within ``width`` standard errors are no evidence."""
    return math.copysign(max(abs(t) - width, 0.0), t)


def familywise_width(width: float, windows: float) -> float:
    """Dead zone that keeps ``width``'s one-sided false-positive rate over ``windows`` independent looks (Bonferroni).

    ``Phi^-1(1 - Phi(-width) / windows)``: ``width`` itself at one window (1 SE: 16%), 1.6 SE at three, 2 SE
    at seven. A decayed comparison forgets in ``1 / (1 - decay)`` episodes, so a run of ``n`` episodes holds about
    ``1 + n (1 - decay)`` windows whose t-statistics are nearly independent; read after every episode, one of them
    crosses any fixed width sooner or later when the advice changes nothing.
    """
    if not windows >= 1.0:
        raise ValueError(f"windows must be >= 1, got {windows}")
    if width <= 0.0:
        return width
    normal = NormalDist()
    return normal.inv_cdf(1.0 - normal.cdf(-width) / windows)


def harm_first(t: float, width: float) -> float:
    """``t`` below 0, ``dead_zone(t, width)`` above: harm counts at face value, benefit needs ``width`` SEs.

    For acting on advice the two errors are not symmetric. Damping advice that is in truth neutral costs
    nothing and damping good advice for a while costs some of its lead, but acting on harmful advice until
    it is significantly worse fills replay with its failures: measured on LavaGapS5, the adversary's episode
    t sat at -0.6 to -1.9 at 1.5k env steps, inside the dead zone in 2 of 3 runs, while it walked the
    agent into the lava.
    """
    return t if t < 0 else dead_zone(t, width)


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
    """Advised vs control episodes: decayed sums of returns (pooled-variance t) and of failures (z).

    A *failure* is an episode the environment ended (terminated, not truncated) on a step without
    positive reward: the lava, a death. Its rate needs no reward to have been seen, which is why it was
    tried (``prior.trust_failures``): the return t needs the rare early successes of the control episodes.
    Measured on LavaGapS5 (one seed, config/trust_failures.yaml) it separates the adversary no sooner:
    control episodes of an untrained agent beside the lava fail often too (z -1.2 at 2.5k env steps).
    """

    def __init__(self, decay: float = 0.98, min_episodes: int = 3, min_gap: float = 1e-3, per_group: bool = False):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"episode decay must be in [0, 1), got {decay}")
        self.decay, self.min_episodes, self.min_gap = float(decay), int(min_episodes), float(min_gap)
        # per_group: each group forgets per episode of its own (prior.trust_episode_acted / _strength), so evidence
        # about advice that has stopped acting is kept instead of being worn away by the control episodes
        self.per_group = bool(per_group)
        # weight, sum of returns, sum of squared returns, failures
        self.stats = {"advised": [0.0, 0.0, 0.0, 0.0], "control": [0.0, 0.0, 0.0, 0.0]}
        self.observed = 0
        """Episodes observed over the run (not decayed): how many windows the statistic has been read in."""

    def windows(self) -> float:
        """Nearly independent windows of the decayed comparison so far: ``1 + observed * (1 - decay)``.

        With ``per_group`` each group forgets per episode of its own, so its windows are longer and this count
        errs on the side of more windows (a wider dead zone)."""
        return 1.0 + self.observed * (1.0 - self.decay)

    def observe(self, episode_return: float, control: bool, failed: bool = False, weight: float = 1.0) -> None:
        """One episode of its group, counted as ``weight`` episodes (in [0, 1]; ``prior.trust_episode_strength``:
        the share of beta its advice acted at). With ``per_group`` its group also forgets ``weight`` episodes' worth
        (``decay ** weight``), so advice damped to nothing neither adds to nor wears away its group's evidence."""
        if not math.isfinite(episode_return):
            return
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"episode weight must be in [0, 1], got {weight}")
        if weight == 0.0:
            return
        self.observed += 1
        own = "control" if control else "advised"
        for name, st in self.stats.items():
            if self.per_group and name != own:
                continue
            keep = self.decay ** weight if self.per_group else self.decay
            st[:] = [v * keep for v in st]
            if name == own:
                st[0] += weight
                st[1] += weight * episode_return
                st[2] += weight * episode_return * episode_return
                st[3] += weight * float(bool(failed))

    def failure_z(self) -> float:
        """:func:`failure_z` of the decayed counts; 0 until both groups have ``min_episodes``."""
        (wa, *_, fa), (wc, *_, fc) = self.stats["advised"], self.stats["control"]
        if min(wa, wc) < self.min_episodes - 1e-6:
            return 0.0
        return failure_z(fa, wa, fc, wc)

    def t_statistic(self) -> float:
        """Student t of (advised - control) mean return with the pooled within-group variance.

        0 until both groups have ``min_episodes`` (effective). Pooling keeps a small group whose
        returns happen to be identical (three failed control episodes) from claiming zero variance.
        """
        (wa, sa, qa, _), (wc, sc, qc, _) = self.stats["advised"], self.stats["control"]
        if min(wa, wc) < self.min_episodes - 1e-6:
            return 0.0
        ma, mc = sa / wa, sc / wc
        within = max(qa - wa * ma * ma, 0.0) + max(qc - wc * mc * mc, 0.0)
        pooled = within / (wa + wc)
        se = math.sqrt(pooled * (1.0 / wa + 1.0 / wc) + self.min_gap ** 2)
        return (ma - mc) / se

    def state_dict(self) -> dict:
        return {**{k: list(v) for k, v in self.stats.items()}, "observed": self.observed}

    def load_state_dict(self, state: dict) -> None:
        # checkpoints written before failures were counted hold three sums: their failure count is 0
        self.stats = {k: ([float(x) for x in state[k]] + [0.0])[:4] for k in ("advised", "control")}
        # and those written before episodes were counted start the count again (one window)
        self.observed = int(state.get("observed", 0))


class StepFailures:
    """Immediate failures of the steps advice decided vs the agent's own steps: decayed counts, per source.

    A step is the advice's when the advice changed the action (``a_mix != a_wm`` under the same noise) and
    the agent's own otherwise; it failed when the env ended the episode on it without positive reward
    (:func:`is_failure`). Advice whose own steps walk into the lava is caught after a handful of them,
    long before any reward is seen (in random play a step fails with probability ~0.03 on LavaGapS5);
    advice that never ends an episode gives z >= 0 and, through :func:`harm_only`, no evidence. Each group
    forgets per step of its own (``decay``, ~200 steps), so the evidence against advice that stopped acting
    stays. Measured on LavaGapS5 (full_adversarial, seed 10): z -5.9 and trust < 1e-6 at 1.25k env steps,
    where the advised-vs-control episode t was still 0.
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
            # each group forgets per step of its own: evidence against advice that no longer acts is kept,
            # not worn away by the steps it sits out (which would re-admit it every ~1/(1 - decay) steps)
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
    """Bias-corrected EMA of the batch-mean value z-score, one per advice source."""

    def __init__(self, decay: float, gain: float, episode_dead_zone: float = 1.0, act_evidence: str = "combined",
                 failures: bool = False, act_pooled: bool = False, model_failures: bool = False,
                 step_failures: bool = False, value_weight: float = 1.0, episode_acted: bool = False,
                 familywise: bool = False):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"prior.trust_decay must be in [0, 1), got {decay}")
        if not gain > 0:
            raise ValueError(f"prior.trust_gain must be > 0, got {gain}")
        self.decay = float(decay)
        self.gain = float(gain)
        if not 0.0 <= episode_dead_zone < math.inf:
            raise ValueError(f"prior.trust_dead_zone must be finite and >= 0, got {episode_dead_zone}")
        self.episode_dead_zone = float(episode_dead_zone)
        if act_evidence not in ("combined", "returns"):
            raise ValueError(f"prior.trust_act_evidence must be combined|returns, got {act_evidence!r}")
        self.act_evidence = act_evidence
        self.failures = bool(failures)
        self.act_pooled = bool(act_pooled)
        self.model_failures = bool(model_failures)
        self.step_failures = bool(step_failures)
        if not 0.0 <= value_weight < math.inf:
            raise ValueError(f"prior.trust_value_weight must be finite and >= 0, got {value_weight}")
        self.value_weight = float(value_weight)
        self.familywise = bool(familywise)
        self.steps = StepFailures()
        self._ema = {name: 0.0 for name in ADVICE_SOURCES}
        self._count = {name: 0 for name in ADVICE_SOURCES}
        self._last_z = {name: math.nan for name in ADVICE_SOURCES}
        # the same EMA of the failure z-score (prior.trust_model_failures)
        self._fail_ema = {name: 0.0 for name in ADVICE_SOURCES}
        self._fail_count = {name: 0 for name in ADVICE_SOURCES}
        self.episodes = EpisodeComparison(per_group=episode_acted)

    def observe(self, z: torch.Tensor, codes: torch.Tensor) -> None:
        """Fold in per-state z-scores ``[N]`` of states whose advice came from source ``codes [N]``."""
        for name, batch_mean in self._batch_means(z, codes):
            self._ema[name] = self.decay * self._ema[name] + (1.0 - self.decay) * batch_mean
            self._count[name] += 1
            self._last_z[name] = batch_mean

    def observe_failures(self, z: torch.Tensor, codes: torch.Tensor) -> None:
        """Fold in per-state failure z-scores ``[N]`` (:func:`advice_failure_z`) of source ``codes [N]``."""
        for name, batch_mean in self._batch_means(z, codes):
            self._fail_ema[name] = self.decay * self._fail_ema[name] + (1.0 - self.decay) * batch_mean
            self._fail_count[name] += 1

    @staticmethod
    def _batch_means(z: torch.Tensor, codes: torch.Tensor) -> list[tuple[str, float]]:
        """``(source, mean of its finite z)`` for every source with rows in this batch."""
        if z.shape != codes.shape:
            raise ValueError(f"z {tuple(z.shape)} and codes {tuple(codes.shape)} must match")
        out = []
        for i, name in enumerate(ADVICE_SOURCES):
            rows = (codes.long() == i + 1) & torch.isfinite(z)
            if bool(rows.any()):
                out.append((name, float(z[rows].double().mean())))
        return out

    def mean_z(self, name: str) -> float:
        return _debiased(self._ema[name], self._count[name], self.decay)

    def model_failure_harm(self, name: str) -> float:
        """Harm evidence from predicted failures (``prior.trust_model_failures``): ``min(0, EMA of failure z)``.

        Harm only: advice that ends episodes less often than an average action is not thereby good (turning
        in place never fails); the value z-score and the returns credit advice that reaches the reward.
        """
        if not self.model_failures:
            return 0.0
        return min(_debiased(self._fail_ema[name], self._fail_count[name], self.decay), 0.0)

    def step_failure_harm(self, name: str) -> float:
        """Harm evidence from the immediate failures of the steps ``name``'s advice decided
        (``prior.trust_step_failures``): :func:`harm_only` of :meth:`StepFailures.z`."""
        return harm_only(self.steps.z(name), self.episode_dead_zone) if self.step_failures else 0.0

    def evidence(self, name: str) -> float:
        """Value z-score EMA (times ``value_weight``) plus the advised-vs-control episode t-statistic beyond its
        dead zone, plus the harm evidence that is switched on.

        The episode evidence counts for every source: an advised episode mixes whatever answered (the LLM,
        its plan, PriorNet in its stead), so the comparison cannot attribute between them, and PriorNet
        answers only while its held-out KL to the LLM is small, i.e. while it says what the LLM would say.
        """
        return (self.value_weight * self.mean_z(name) + self.episode_evidence(symmetric=True)
                + self.failure_harm() + self.model_failure_harm(name) + self.step_failure_harm(name))

    def benefit_width(self) -> float:
        """Dead zone of a *positive* episode t: ``trust_dead_zone``, or with ``prior.trust_familywise`` its
        :func:`familywise_width` over the windows read so far. Harm keeps the plain width: acting on harmful
        advice costs more than waiting for good advice (:func:`harm_first`)."""
        if not self.familywise:
            return self.episode_dead_zone
        return familywise_width(self.episode_dead_zone, self.episodes.windows())

    def episode_evidence(self, symmetric: bool) -> float:
        """The advised-vs-control episode t beyond its dead zone: benefit beyond :meth:`benefit_width`, harm beyond
        ``trust_dead_zone`` (``symmetric``) or at face value (:func:`harm_first`)."""
        t = self.episodes.t_statistic()
        width = self.benefit_width() if t > 0 else self.episode_dead_zone
        return dead_zone(t, width) if symmetric else harm_first(t, width)

    def failure_harm(self) -> float:
        """Harm evidence from failure rates (``prior.trust_failures``): :func:`harm_only` of the failure z.

        Harm only: advice that fails less than the agent's own play is not thereby good (turning in place
        never fails), and the return comparison already credits advice that reaches the reward.
        """
        return harm_only(self.episodes.failure_z(), self.episode_dead_zone) if self.failures else 0.0

    def value(self, name: str) -> float:
        """Trust in ``[0, 1]`` of one source (0.5 before any evidence)."""
        return trust_from_evidence(self.evidence(name), self.gain)

    def act_value(self, name: str) -> float:
        """Trust that scales how strongly (and how often) advice of one source acts.

        ``combined``: :meth:`value`. ``returns``: the realised-return comparison alone through
        :func:`harm_first`. The critic's one-step ranking is left to the absorption: measured on
        LavaGapS5 it rated the *good* advisor below an average action (value z -0.3 to -0.8 after 2k env
        steps in 3 of 3 runs; stepping beside lava looks risky to a young model, turning in place does
        not), while the episode t was positive for it and negative for the adversary in both environments.
        Measured as an overlay (config/trust_act_returns.yaml, n = 5): it detects the adversary on LavaGapS5
        earlier but changes no arm's learning curve beyond noise, so ``combined`` stays the default.

        ``act_pooled`` (``prior.trust_act_pooled``): the plan's and PriorNet's act-time trust is capped by the
        LLM's own, ``min(own, llm)``. Both are the LLM's advice in another form (the plan comes in the same
        answer; PriorNet answers only while it says what the LLM would say), so evidence that the LLM's answers
        hurt is evidence against them too. Without it, a source with little evidence of its own sits at the
        uninformed 0.5 and acts at full strength: measured on LavaGapS5 (full_adversarial, seeds 10-15), the plan's
        trust drifted back to 0.50 while the LLM's stayed at 0.01-0.3, and beta applied rose to 0.2-0.56 late in
        the run. Harm first, as in :func:`harm_first`: the cap only lowers.
        """
        own = self._own_act_value(name)
        if self.act_pooled and name != "llm":
            return min(own, self._own_act_value("llm"))
        return own

    def _own_act_value(self, name: str) -> float:
        """:meth:`act_value` from ``name``'s own evidence (no pooling with the LLM's)."""
        if self.act_evidence == "combined":
            return self.value(name)
        return trust_from_evidence(self.episode_evidence(symmetric=False)
                                   + self.failure_harm() + self.model_failure_harm(name) + self.step_failure_harm(name),
                                   self.gain)

    def values_for(self, codes: torch.Tensor, act: bool = False) -> torch.Tensor:
        """Trust per row for source codes ``[B]`` (rows without advice, code 0, get 1: nothing to scale).

        ``act``: the act-time trust (:meth:`act_value`) instead of the absorption trust (:meth:`value`).
        """
        trust_of = self.act_value if act else self.value
        table = torch.tensor([1.0] + [trust_of(n) for n in ADVICE_SOURCES], dtype=torch.float32)
        return table[codes.long().clamp(0, len(ADVICE_SOURCES)).cpu()].to(codes.device)

    def metrics(self) -> dict[str, float]:
        out = {}
        for name in ADVICE_SOURCES:
            out[f"trust_{name}"] = self.value(name)
            out[f"trust_act_{name}"] = self.act_value(name)
            out[f"trust_z_{name}"] = self._last_z[name]
            out[f"trust_fail_z_{name}"] = _debiased(self._fail_ema[name], self._fail_count[name], self.decay)
            out[f"trust_step_z_{name}"] = self.steps.z(name)
        out["trust_episode_t"] = self.episodes.t_statistic()
        out["trust_failure_z"] = self.episodes.failure_z()
        return out

    def state_dict(self) -> dict:
        return {"ema": dict(self._ema), "count": dict(self._count), "last_z": dict(self._last_z),
                "fail_ema": dict(self._fail_ema), "fail_count": dict(self._fail_count),
                "steps": self.steps.state_dict(), "episodes": self.episodes.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._ema = {n: float(state["ema"][n]) for n in ADVICE_SOURCES}
        self._count = {n: int(state["count"][n]) for n in ADVICE_SOURCES}
        self._last_z = {n: float(state["last_z"][n]) for n in ADVICE_SOURCES}
        # checkpoints written before the failure z was kept have none: no evidence yet
        self._fail_ema = {n: float(state.get("fail_ema", {}).get(n, 0.0)) for n in ADVICE_SOURCES}
        self._fail_count = {n: int(state.get("fail_count", {}).get(n, 0)) for n in ADVICE_SOURCES}
        self.steps = StepFailures()
        if "steps" in state:
            self.steps.load_state_dict(state["steps"])
        self.episodes.load_state_dict(state["episodes"])


def _debiased(ema: float, count: int, decay: float) -> float:
    """Bias-corrected EMA (0 before any observation)."""
    return 0.0 if count == 0 else ema / (1.0 - decay ** count)
