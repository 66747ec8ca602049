"""Shared timing helper for the benchmark scripts (run as scripts: this folder is on sys.path)."""

from __future__ import annotations

import time
from collections.abc import Callable


def time_calls_ms(fn: Callable[[], object], repeats: int, warmup: int = 3) -> list[float]:
    """Wall time in ms of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return times
