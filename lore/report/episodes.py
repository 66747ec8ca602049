"""How training episodes ended, by phase of the run: success, failure (the env ended the episode without
reward: lava, a collision) or time-out, from a run's ``episodes.csv``.

A run stuck in its time-out phase (it neither reaches the goal nor fails: a policy that avoids harm and finds
nothing) looks like a run that learns nothing in its eval success rate alone; these shares tell them apart.
"""

from __future__ import annotations

import math

import pandas as pd

OUTCOMES = ("success", "failure", "timeout")
STUCK_TIMEOUT_SHARE = 0.8
"""A run is stuck in its time-out phase when at least this share of its last phase's episodes time out."""


def phase_bounds(total_steps: int, phases: int) -> list[tuple[int, int]]:
    """``phases`` equal spans ``(start, end]`` of env steps covering ``(0, total_steps]``."""
    if total_steps < 1 or phases < 1:
        raise ValueError(f"total_steps and phases must be >= 1, got {total_steps}, {phases}")
    edges = [round(total_steps * k / phases) for k in range(phases + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def outcome_shares(episodes: pd.DataFrame, total_steps: int, phases: int = 3) -> pd.DataFrame:
    """One row per phase: ``phase`` (1-based), ``start``, ``end``, ``episodes`` and the share of each of
    :data:`OUTCOMES`; ``failure`` and ``timeout`` are NaN for a run that did not record ``failed``.

    ``episodes``: a run's ``episodes.csv`` (``env_step`` at each episode's end, ``success``, ``failed``)."""
    rows = []
    recorded = "failed" in episodes.columns
    for k, (start, end) in enumerate(phase_bounds(total_steps, phases), 1):
        part = episodes[(episodes["env_step"] > start) & (episodes["env_step"] <= end)] if len(episodes) else episodes
        n = len(part)
        success = float((part["success"] > 0).mean()) if n else math.nan
        failure = float(((part["failed"] > 0) & ~(part["success"] > 0)).mean()) if n and recorded else math.nan
        rows.append({"phase": k, "start": start, "end": end, "episodes": n, "success": success,
                     "failure": failure, "timeout": 1.0 - success - failure if math.isfinite(failure) else math.nan})
    return pd.DataFrame(rows)


def stuck(shares: pd.DataFrame) -> float:
    """1.0 when the last phase's time-out share is at least :data:`STUCK_TIMEOUT_SHARE`, 0.0 when below, NaN
    when not recorded."""
    last = shares["timeout"].iloc[-1] if len(shares) else math.nan
    return float(last >= STUCK_TIMEOUT_SHARE) if math.isfinite(last) else math.nan
