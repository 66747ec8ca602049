"""Statistics over seeds: IQM, stratified bootstrap CIs, probability of improvement and
curve summaries (the Crafter score is Crafter's: :func:`lore.envs.crafter.crafter_score`).

Everything here is a small pure function over numpy arrays. The conventions follow
Agarwal et al. (2021), "Deep RL at the Edge of the Statistical Precipice": the IQM is
the 25% trimmed mean over runs; confidence intervals are percentile bootstrap intervals
where runs are resampled with replacement *within* each stratum (environment); the
probability of improvement P(X > Y) is averaged over environments. rliable itself is
archived and breaks on pandas 3, so this is a reimplementation on top of scipy.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as sps

# --------------------------------------------------------------------------- point estimates


def iqm(values: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Interquartile mean: mean of the middle 50% (scipy's 25% trimmed mean).

    With fewer than 4 values nothing is trimmed (``int(0.25 * n) == 0``), so the IQM
    equals the mean; this is scipy's and rliable's convention.
    """
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("iqm: no values")
    return sps.trim_mean(values, 0.25, axis=axis)


def mean(values: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("mean: no values")
    return np.mean(values, axis=axis)


STATISTICS: dict[str, Callable[..., np.ndarray | float]] = {"mean": mean, "iqm": iqm, "median": np.median}


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    estimate: float
    low: float
    high: float
    mc_error: float = 0.0
    """Monte-Carlo standard error of the bounds (0 where they are computed exactly)."""


def _as_strata(strata: Sequence[np.ndarray] | np.ndarray) -> list[np.ndarray]:
    if isinstance(strata, np.ndarray) and strata.ndim == 1:
        strata = [strata]
    out = [np.asarray(s, dtype=float).ravel() for s in strata]
    if not out or any(s.size == 0 for s in out):
        raise ValueError("bootstrap: every stratum needs at least one value")
    if any(not np.all(np.isfinite(s)) for s in out):
        raise ValueError("bootstrap: values must be finite (drop NaN runs first)")
    return out


def stratified_bootstrap_ci(
    strata: Sequence[np.ndarray] | np.ndarray,
    statistic: str | Callable[..., np.ndarray] = "iqm",
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap CI of ``statistic`` over the pooled runs of all strata.

    ``strata``: one 1-D array of per-run scores per stratum (e.g. per environment);
    runs are resampled with replacement within each stratum, the strata are pooled,
    and the statistic (``"mean"``, ``"iqm"``, ``"median"`` or a function with an
    ``axis`` argument) is computed on each resample. A single-run stratum cannot vary,
    so with one run in total the interval collapses to the estimate.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    fn = STATISTICS[statistic] if isinstance(statistic, str) else statistic
    samples = _as_strata(strata)
    pooled = np.concatenate(samples)
    estimate = float(fn(pooled, axis=None))
    rng = np.random.default_rng(seed)
    # [resamples, n_total]: each stratum contributes its own resampled block.
    blocks = [s[rng.integers(0, s.size, size=(resamples, s.size))] for s in samples]
    boot = np.asarray(fn(np.concatenate(blocks, axis=1), axis=1), dtype=float)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return Interval(estimate, float(low), float(high))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) + 0.5 P(X = Y) over all pairs of runs (the Mann-Whitney U statistic / (n m))."""
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.size == 0 or y.size == 0:
        raise ValueError("probability_of_improvement: both groups need at least one run")
    diff = x[:, None] - y[None, :]  # [n, m]
    return float(np.mean((diff > 0) + 0.5 * (diff == 0)))


def _poi_batched(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x: [R, n], y: [R, m] -> [R] probability of improvement per resample."""
    diff = x[:, :, None] - y[:, None, :]  # [R, n, m]
    return np.mean((diff > 0) + 0.5 * (diff == 0), axis=(1, 2))


def probability_of_improvement_ci(
    x_strata: Sequence[np.ndarray],
    y_strata: Sequence[np.ndarray],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Average over strata (environments) of P(X_env > Y_env), with a stratified bootstrap CI.

    ``x_strata[k]`` and ``y_strata[k]`` are the per-run scores of the two algorithms in
    stratum ``k``; each group is resampled independently within each stratum.
    """
    xs, ys = _as_strata(x_strata), _as_strata(y_strata)
    if len(xs) != len(ys):
        raise ValueError(f"probability_of_improvement_ci: {len(xs)} strata for X but {len(ys)} for Y")
    estimate = float(np.mean([probability_of_improvement(x, y) for x, y in zip(xs, ys, strict=True)]))
    rng = np.random.default_rng(seed)
    per_stratum = []
    for x, y in zip(xs, ys, strict=True):
        xb = x[rng.integers(0, x.size, size=(resamples, x.size))]
        yb = y[rng.integers(0, y.size, size=(resamples, y.size))]
        per_stratum.append(_poi_batched(xb, yb))
    boot = np.mean(per_stratum, axis=0)  # [R]
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return Interval(estimate, float(low), float(high))


@dataclass(frozen=True)
class Comparison:
    """X against Y on one per-run metric: the difference of means with its bootstrap CI and the
    probability of improvement P(X > Y) with its CI; ``n_x``/``n_y`` runs."""

    n_x: int
    n_y: int
    mean_x: float
    mean_y: float
    difference: Interval
    p_improve: Interval

    @property
    def verdict(self) -> str:
        """``"better"``, ``"worse"`` or ``"unclear"``: better (worse) only where both intervals
        exclude "no difference" (a difference of 0 and P(X > Y) = 0.5) on the same side."""
        d, p = self.difference, self.p_improve
        if d.low > 0 and p.low > 0.5:
            return "better"
        if d.high < 0 and p.high < 0.5:
            return "worse"
        return "unclear"


def compare(x: np.ndarray, y: np.ndarray, *, confidence: float = 0.95, resamples: int = 2000,
            seed: int = 0) -> Comparison:
    """Compare the per-run scores ``x`` and ``y`` of two independent groups (one environment).

    Both groups are resampled independently; the difference-of-means interval is the percentile
    bootstrap interval of mean(X*) - mean(Y*).
    """
    x, y = _as_strata([x])[0], _as_strata([y])[0]
    rng = np.random.default_rng(seed)
    xb = x[rng.integers(0, x.size, size=(resamples, x.size))]
    yb = y[rng.integers(0, y.size, size=(resamples, y.size))]
    alpha = (1.0 - confidence) / 2.0
    diff = xb.mean(axis=1) - yb.mean(axis=1)
    low, high = np.quantile(diff, [alpha, 1.0 - alpha])
    p_boot = _poi_batched(xb, yb)
    p_low, p_high = np.quantile(p_boot, [alpha, 1.0 - alpha])
    return Comparison(
        n_x=int(x.size), n_y=int(y.size), mean_x=float(x.mean()), mean_y=float(y.mean()),
        difference=Interval(float(x.mean() - y.mean()), float(low), float(high)),
        p_improve=Interval(probability_of_improvement(x, y), float(p_low), float(p_high)),
    )


EXACT_MAX_PAIRS = 10
"""Up to this many pairs the paired bootstrap is exact (every resample enumerated, :func:`exact_paired_interval`):
C(2n-1, n) distinct resamples, 92,378 at n = 10."""
MC_RESAMPLES = 200_000
"""Resamples of the Monte-Carlo paired bootstrap beyond :data:`EXACT_MAX_PAIRS` (each bound's Monte-Carlo
error is reported; at this count it stays near 0.001 of the spread of the per-pair differences)."""
MC_BATCHES = 20


@functools.lru_cache(maxsize=EXACT_MAX_PAIRS + 1)
def resample_counts(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every distinct bootstrap resample of ``n`` items as counts ``[K, n]`` (K = C(2n-1, n)) with its
    probability ``[K]`` under resampling with replacement (multinomial: n! / prod(c_i!) / n^n)."""
    if not 1 <= n <= EXACT_MAX_PAIRS:
        raise ValueError(f"resample_counts: n {n} outside 1..{EXACT_MAX_PAIRS}")
    combos = np.array(list(itertools.combinations_with_replacement(range(n), n)), dtype=np.int64)  # [K, n]
    counts = np.zeros((len(combos), n), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(len(combos)), n), combos.ravel()), 1)
    log_w = math.lgamma(n + 1) - special.gammaln(counts + 1).sum(axis=1) - n * math.log(n)
    weights = np.exp(log_w)
    return counts, weights / weights.sum()


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> list[float]:
    """The inverted-CDF quantiles of a discrete distribution: for each q the smallest value v with
    P(X <= v) >= q (the limit of the percentile bootstrap as resamples grow)."""
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(weights[order])
    cum /= cum[-1]
    return [float(v[min(int(np.searchsorted(cum, q - 1e-12, side="left")), v.size - 1)]) for q in qs]


def exact_paired_interval(d: np.ndarray, confidence: float = 0.95) -> Interval:
    """Mean of the per-pair differences ``d [n]`` with the exact percentile bootstrap interval: every one of the
    n^n resamples counted once (through the distinct ones, :func:`resample_counts`), so no resampling seed."""
    d = np.asarray(d, dtype=float)
    counts, weights = resample_counts(d.size)
    means = counts @ d / d.size  # [K]
    alpha = (1.0 - confidence) / 2.0
    low, high = weighted_quantiles(means, weights, (alpha, 1.0 - alpha))
    return Interval(float(d.mean()), low, high)


def monte_carlo_paired_interval(d: np.ndarray, confidence: float = 0.95, resamples: int = MC_RESAMPLES,
                                seed: int = 0) -> Interval:
    """:func:`paired_difference`'s interval by ``resamples`` Monte-Carlo resamples, with ``mc_error``: the
    larger standard error of the two bounds, from :data:`MC_BATCHES` independent batches."""
    d = np.asarray(d, dtype=float)
    rng = np.random.default_rng(seed)
    alpha = (1.0 - confidence) / 2.0
    per = max(1, resamples // MC_BATCHES)
    boot = np.concatenate([d[rng.integers(0, d.size, size=(per, d.size))].mean(axis=1) for _ in range(MC_BATCHES)])
    batches = boot.reshape(MC_BATCHES, per)  # [B, per]
    bounds = np.quantile(batches, [alpha, 1.0 - alpha], axis=1)  # [2, B]
    error = float(np.max(bounds.std(axis=1, ddof=1)) / math.sqrt(MC_BATCHES))
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return Interval(float(d.mean()), float(low), float(high), mc_error=error)


def paired_interval(x: np.ndarray, y: np.ndarray, *, confidence: float = 0.95, seed: int = 0) -> Interval:
    """Mean of ``x_i - y_i`` over pairs with the percentile bootstrap interval that does not depend on a
    resampling seed: exact up to :data:`EXACT_MAX_PAIRS` pairs, else Monte-Carlo with its error reported."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired_interval: x {x.shape} and y {y.shape} must be equal non-empty 1-D shapes")
    d = x - y
    if d.size <= EXACT_MAX_PAIRS:
        return exact_paired_interval(d, confidence)
    return monte_carlo_paired_interval(d, confidence, seed=seed)


def paired_difference(x: np.ndarray, y: np.ndarray, *, confidence: float = 0.95, resamples: int = 2000,
                      seed: int = 0) -> Interval:
    """Mean of ``x_i - y_i`` over pairs (the same seed in two arms) with its percentile bootstrap interval.

    Runs of one seed share their evaluation layouts and environment seeds, so a seed's difficulty is common
    to its runs in every arm; resampling the pairs removes it from the interval (on LavaGapS5 the per-seed
    AUCs of rl_only and full_adversarial correlate at 0.57, of rl_only and a silenced advisor at 0.67).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired_difference: x {x.shape} and y {y.shape} must be equal non-empty 1-D shapes")
    d = x - y
    rng = np.random.default_rng(seed)
    boot = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return Interval(float(d.mean()), float(low), float(high))


# --------------------------------------------------------------------------- curve summaries


def _check_curve(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    steps = np.asarray(steps, dtype=float)
    values = np.asarray(values, dtype=float)
    if steps.shape != values.shape or steps.ndim != 1:
        raise ValueError(f"curve: steps {steps.shape} and values {values.shape} must be equal 1-D shapes")
    if steps.size == 0:
        raise ValueError("curve: no points")
    if np.any(np.diff(steps) < 0):
        raise ValueError("curve: steps must be sorted ascending")
    return steps, values


def value_at_budget(steps: np.ndarray, values: np.ndarray, budget: float) -> float:
    """The last evaluation at or before ``budget`` env steps; NaN if the run has none.

    Reading the last point (not an interpolation) means the number is one the run really
    measured with at most ``budget`` steps of experience.
    """
    steps, values = _check_curve(steps, values)
    idx = np.searchsorted(steps, budget, side="right") - 1
    return float(values[idx]) if idx >= 0 else float("nan")


def area_under_curve(steps: np.ndarray, values: np.ndarray, until: float | None = None) -> float:
    """Normalised area under the curve: trapezoid integral / step range (= the curve's mean level).

    With ``until`` the curve is cut (linearly interpolated) at that step, so runs of different
    lengths are compared over the same range. A single point returns its value.
    """
    steps, values = _check_curve(steps, values)
    if until is not None:
        if until <= steps[0]:
            return float(values[0])
        if until < steps[-1]:
            cut = float(np.interp(until, steps, values))
            keep = steps < until
            steps, values = np.append(steps[keep], until), np.append(values[keep], cut)
    if steps.size == 1 or steps[-1] == steps[0]:
        return float(values[-1])
    return float(np.trapezoid(values, steps) / (steps[-1] - steps[0]))


def steps_to_threshold(steps: np.ndarray, values: np.ndarray, threshold: float) -> float:
    """First evaluation step at which the value reaches ``threshold``; NaN if it never does."""
    steps, values = _check_curve(steps, values)
    hit = np.flatnonzero(values >= threshold)
    return float(steps[hit[0]]) if hit.size else float("nan")


def training_success_tail(episode_end_steps: np.ndarray, successes: np.ndarray, fraction: float,
                          last: float | None = None) -> float:
    """Mean success of the episodes that end in the last ``fraction`` of the run's steps
    (``last``: the run's last step, default the last episode end); NaN if none ends there."""
    steps = np.asarray(episode_end_steps, dtype=float)
    success = np.asarray(successes, dtype=float)
    if steps.shape != success.shape or steps.ndim != 1:
        raise ValueError("training_success_tail: steps and successes must be equal 1-D shapes")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"training_success_tail: fraction must be in (0, 1], got {fraction}")
    keep = np.isfinite(steps) & np.isfinite(success)
    steps, success = steps[keep], success[keep]
    if not steps.size:
        return float("nan")
    end = float(last) if last is not None and np.isfinite(last) else float(steps.max())
    inside = steps > end * (1.0 - fraction)
    return float(success[inside].mean()) if inside.any() else float("nan")


def cumulative_success_window(
    episode_end_steps: np.ndarray, successes: np.ndarray, center: float, half_width: float
) -> float:
    """The original prototype's metric: median of the *cumulative training* success rate
    (successes so far / episodes so far, updated at each episode end) over the episodes that
    end within ``center ± half_width`` env steps. NaN if no episode ends in the window.
    """
    steps = np.asarray(episode_end_steps, dtype=float)
    success = np.asarray(successes, dtype=float)
    if steps.shape != success.shape or steps.ndim != 1:
        raise ValueError("cumulative_success_window: steps and successes must be equal 1-D shapes")
    if half_width < 0:
        raise ValueError(f"cumulative_success_window: half_width must be >= 0, got {half_width}")
    order = np.argsort(steps, kind="stable")
    steps, success = steps[order], success[order]
    cumulative = np.cumsum(success) / np.arange(1, success.size + 1)
    inside = (steps >= center - half_width) & (steps <= center + half_width)
    return float(np.median(cumulative[inside])) if inside.any() else float("nan")


# --------------------------------------------------------------------------- Crafter


