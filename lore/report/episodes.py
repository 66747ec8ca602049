"""How a run trained, read from its logs: how training episodes ended, by phase of the run (success, failure
(the env ended the episode without reward: lava, a collision) or time-out, from ``episodes.csv``), and how
much weight the advice kept (β, from ``metrics.csv``), and how much it acted early in a run and was still
pulled toward by KL control later (:func:`advice_exposure`), which tells harm done before the advice was
found out from harm done after.

A run stuck in its time-out phase (it neither reaches the goal nor fails: a policy that avoids harm and finds
nothing) looks like a run that learns nothing in its eval success rate alone; these shares tell them apart.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

OUTCOMES = ("success", "failure", "timeout")
STUCK_TIMEOUT_SHARE = 0.8
"""A run is stuck in its time-out phase when at least this share of its last phase's episodes time out."""
PHASES = 3
"""Equal phases a run's env steps are split into for these reports."""
SETTLED_BETA = 0.1
"""The advice has settled out of a run once its logged mean β stays below this to the run's end."""


def phase_bounds(total_steps: int, phases: int) -> list[tuple[int, int]]:
    """``phases`` equal spans ``(start, end]`` of env steps covering ``(0, total_steps]``."""
    if total_steps < 1 or phases < 1:
        raise ValueError(f"total_steps and phases must be >= 1, got {total_steps}, {phases}")
    edges = [round(total_steps * k / phases) for k in range(phases + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def outcome_shares(episodes: pd.DataFrame, total_steps: int, phases: int = PHASES,
                   time_limit: int | None = None) -> pd.DataFrame:
    """One row per phase: ``phase`` (1-based), ``start``, ``end``, ``episodes`` and the share of each of
    :data:`OUTCOMES`; ``failure`` and ``timeout`` are NaN for a run that did not record ``failed``, unless
    ``time_limit`` (the env's episode step limit, :func:`time_limit`) is given: then an episode of such a run
    failed when it ended without success before the limit (its ``length``), which is what ``failed`` records.

    ``episodes``: a run's ``episodes.csv`` (``env_step`` at each episode's end, ``success``, ``failed``,
    ``length``)."""
    rows = []
    if "failed" not in episodes.columns and time_limit and "length" in episodes.columns and len(episodes):
        episodes = episodes.assign(failed=((episodes["success"] <= 0) & (episodes["length"] < time_limit)).astype(float))
    recorded = "failed" in episodes.columns
    for k, (start, end) in enumerate(phase_bounds(total_steps, phases), 1):
        part = episodes[(episodes["env_step"] > start) & (episodes["env_step"] <= end)] if len(episodes) else episodes
        n = len(part)
        won = part["success"] > 0 if n else None
        lost = (part["failed"] > 0) & ~won if n and recorded else None
        rows.append({"phase": k, "start": start, "end": end, "episodes": n,
                     "success": float(won.mean()) if n else math.nan,
                     "failure": float(lost.mean()) if lost is not None else math.nan,
                     "timeout": float((~won & ~lost).mean()) if lost is not None else math.nan})
    return pd.DataFrame(rows)


def with_lengths(episodes: pd.DataFrame, num_envs: int) -> pd.DataFrame:
    """``episodes`` with a ``length`` column: as recorded, or, for a run that predates it and trained one env,
    the env steps since the previous episode ended (each episode's steps; the first one's since step 0)."""
    if "length" in episodes.columns or num_envs != 1 or not len(episodes):
        return episodes
    steps = episodes["env_step"].astype(float)
    return episodes.assign(length=steps.diff().fillna(steps))


@functools.lru_cache(maxsize=64)
def time_limit(env_name: str, max_episode_steps: int | None = None) -> int | None:
    """The step count at which an episode of ``env_name`` times out (``max_episode_steps``: the run's
    ``env.max_episode_steps``); None when the env cannot be built here."""
    from lore.envs.factory import make_env

    try:
        env = make_env(env_name, 0, max_episode_steps=max_episode_steps)
    except (ValueError, ImportError, OSError):
        return None
    try:
        return int(env.max_steps)
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()


def stuck(shares: pd.DataFrame) -> float:
    """1.0 when the last phase's time-out share is at least :data:`STUCK_TIMEOUT_SHARE`, 0.0 when below, NaN
    when not recorded."""
    last = shares["timeout"].iloc[-1] if len(shares) else math.nan
    return float(last >= STUCK_TIMEOUT_SHARE) if math.isfinite(last) else math.nan


def mixes_a_prior(config: dict) -> bool:
    """Whether a run's resolved config (``config.yaml``) mixed a prior into its policy (``prior.enabled``); a
    run that recorded no config counts as one without."""
    prior = config.get("prior") if isinstance(config, dict) else None
    return isinstance(prior, dict) and prior.get("enabled") is True


def advice_weight(metrics: pd.DataFrame | None) -> dict[str, float]:
    """``beta_mean``: the mean of the logged ``beta_mean`` (0.0 for a run that logged none, as a run without a
    prior does); ``settled_at``: the first logged ``env_step`` from which every later logged β is below
    :data:`SETTLED_BETA` (NaN when the last one is not)."""
    if metrics is None or "beta_mean" not in metrics.columns:
        return {"beta_mean": 0.0, "settled_at": math.nan}
    rows = metrics[["env_step", "beta_mean"]].dropna()
    if not len(rows):
        return {"beta_mean": 0.0, "settled_at": math.nan}
    beta = rows["beta_mean"].to_numpy()
    above = [i for i, b in enumerate(beta) if b >= SETTLED_BETA]
    last_above = above[-1] if above else -1
    settled = float(rows["env_step"].iloc[last_above + 1]) if last_above + 1 < len(rows) else math.nan
    return {"beta_mean": float(beta.mean()), "settled_at": settled}


def advice_exposure(metrics: pd.DataFrame | None, until_step: int) -> dict[str, float]:
    """How much the advice acted up to ``until_step`` and how hard KL control pulled toward it afterwards.

    ``beta_steps``: the sum over the logged rows up to ``until_step`` of each row's ``beta_mean`` times the env
    steps since the previous logged row (the first row's since step 0): the advice's weight summed over act
    steps (0.0 for a run that logged no β). ``kl_term_after``: the mean of the logged ``prior_loss`` (the
    KL-control term of the actor loss, which pulls the policy toward the advised mix) over the rows after
    ``until_step`` (NaN when there are none or it was not logged)."""
    out = {"beta_steps": 0.0, "kl_term_after": math.nan}
    if metrics is None or "env_step" not in metrics.columns or not len(metrics):
        return out
    steps = metrics["env_step"].to_numpy(float)
    if "beta_mean" in metrics.columns:
        width = np.diff(steps, prepend=0.0)  # [rows] env steps each logged mean covers
        beta = metrics["beta_mean"].to_numpy(float)
        early = (steps <= until_step) & np.isfinite(beta)
        out["beta_steps"] = float((beta[early] * width[early]).sum())
    if "prior_loss" in metrics.columns:
        later = metrics.loc[steps > until_step, "prior_loss"].dropna()
        out["kl_term_after"] = float(later.mean()) if len(later) else math.nan
    return out
