"""Shared timing helpers for the benchmark scripts (run as scripts: this folder is on sys.path)."""

from __future__ import annotations

import json
import subprocess
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


def take_turns(workers: dict[str, subprocess.Popen], rounds: int, key: str) -> dict[str, list[float]]:
    """``rounds`` rounds in which each worker in turn is sent ``go`` and answers one JSON line: ``key`` of each
    answer, per worker. Taking turns makes a load change on a shared machine hit every worker alike. The workers'
    stdin is closed at the end and they are waited for."""
    times: dict[str, list[float]] = {name: [] for name in workers}
    for _ in range(rounds):
        for name, proc in workers.items():
            proc.stdin.write("go\n")
            proc.stdin.flush()
            times[name].append(json.loads(proc.stdout.readline())[key])
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()
    return times


def set_flags(sets: list[str]) -> list[str]:
    """``--set KEY=VALUE`` arguments of a benchmark's worker process, one pair per override."""
    return [x for s in sets for x in ("--set", s)]
