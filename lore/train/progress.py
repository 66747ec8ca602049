"""A training run's progress: its rate over the log intervals that train, and the time left."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Sequence

RATE_ALPHA = 0.3
"""Weight of the newest log interval in the exponentially weighted rate."""


def training_rate(points: Sequence[tuple[int, float, int]], alpha: float = RATE_ALPHA, trains: bool = True,
                  prefill: int | None = None) -> float:
    """Env steps per second, exponentially weighted over the log intervals of training.

    ``points`` are ``(env_step, wall_s, updates)`` at successive log steps. Prefill (random actions, no
    training, many times faster) never enters the rate: with ``prefill`` (the run's prefill steps) an interval
    counts once it starts at or after the prefill and ends with updates done, so the rate is known from the
    first log line after training starts; without it, an interval counts once its first point has updates.
    ``trains=False`` (a run that never updates: the random policy) counts every interval.
    """
    rate = math.nan
    for (s0, t0, u0), (s1, t1, u1) in itertools.pairwise(points):
        training = (s0 >= prefill and u1 > 0) if prefill is not None else u0 > 0
        if (trains and not training) or s1 <= s0 or t1 <= t0:
            continue
        current = (s1 - s0) / (t1 - t0)
        rate = current if math.isnan(rate) else alpha * current + (1 - alpha) * rate
    return rate


def eta_seconds(env_step: int, total: int, rate: float) -> float:
    """Seconds left to reach ``total`` at ``rate`` steps/s; NaN when the rate is not known yet."""
    if not (math.isfinite(rate) and rate > 0):
        return math.nan
    return max(total - env_step, 0) / rate


def format_duration(seconds: float, unknown: str = "-") -> str:
    """``HH:MM:SS`` under a day, ``N.N d`` beyond, ``unknown`` for NaN."""
    if not math.isfinite(seconds):
        return unknown
    if seconds < 86400:
        return time.strftime("%H:%M:%S", time.gmtime(max(seconds, 0)))
    return f"{seconds / 86400:.1f} d"


def log_points(rows: Iterable[dict]) -> list[tuple[int, float, int]]:
    """``(env_step, wall_s, updates)`` of metrics rows; the wall time comes from the cumulative ``steps_per_s``."""
    points = []
    for row in rows:
        step, rate, updates = (number_or_nan(row.get(k)) for k in ("env_step", "steps_per_s", "updates"))
        if math.isfinite(step) and math.isfinite(updates) and math.isfinite(rate) and rate > 0:
            points.append((int(step), step / rate, int(updates)))
    return points


def number_or_nan(value: object) -> float:
    """``value`` as a float; NaN when it is not a number."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of thousands of digits
        return math.nan
