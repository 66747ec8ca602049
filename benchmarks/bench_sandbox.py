"""Feature-sandbox cost: cold start, warm per-call latency, run_batch throughput.

    .venv/bin/python benchmarks/bench_sandbox.py [--batch 1000] [--calls 500] [--repeats 5] [--out FILE.json]

Uses a simple MiniGrid feature function (key distance, walls, direction, carrying) on hand-built
6x6 MiniGrid-like snapshots, and times the same function called in-process for reference.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

from lore.sandbox import FeatureSandbox

FEATURE_CODE = """
import numpy as np

def compute_features(obs):
    grid = obs["grid"]
    keys = np.argwhere(grid[:, :, 0] == 5)
    ax, ay = obs["agent_pos"]
    distance = float(abs(keys[0][0] - ax) + abs(keys[0][1] - ay)) if len(keys) else -1.0
    return [distance, float((grid[:, :, 0] == 2).sum()), float(obs["agent_dir"]), float(obs["carrying"][0] == 5)]
"""
N_FEATURES = 4


def snapshots(n: int, seed: int = 0, size: int = 6) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        grid = np.ones((size, size, 3), np.uint8)
        grid[:, :, 1:] = 0
        grid[0, :, 0] = grid[-1, :, 0] = grid[:, 0, 0] = grid[:, -1, 0] = 2
        kx, ky = rng.integers(1, size - 1, 2)
        grid[kx, ky] = (5, 4, 0)
        out.append({"grid": grid, "agent_pos": rng.integers(1, size - 1, 2).astype(np.int64),
                    "agent_dir": np.array(rng.integers(0, 4), np.int64), "carrying": np.zeros(2, np.int64)})
    return out


def in_process_rate(obs_list: list[dict]) -> float:
    namespace: dict = {}
    exec(FEATURE_CODE, namespace)
    fn = namespace["compute_features"]
    start = time.perf_counter()
    for obs in obs_list:
        fn(obs)
    return len(obs_list) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1000, help="observations per run_batch")
    parser.add_argument("--calls", type=int, default=500, help="warm run() calls timed")
    parser.add_argument("--repeats", type=int, default=5, help="cold starts and batches timed")
    parser.add_argument("--out", help="also write the figures to this JSON file")
    args = parser.parse_args()
    obs_list = snapshots(args.batch)

    cold = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        with FeatureSandbox(N_FEATURES) as sb:
            result = sb.run(FEATURE_CODE, obs_list[0])
            cold.append(time.perf_counter() - start)
        assert result.ok, result.error

    figures: dict = {"cold_start_ms_median": 1e3 * statistics.median(cold), "cold_start_ms_min": 1e3 * min(cold)}
    with FeatureSandbox(N_FEATURES) as sb:
        for obs in obs_list[:20]:
            sb.run(FEATURE_CODE, obs)  # warm-up
        latencies = []
        for i in range(args.calls):
            start = time.perf_counter()
            sb.run(FEATURE_CODE, obs_list[i % len(obs_list)])
            latencies.append(time.perf_counter() - start)
        latencies.sort()
        figures["warm_run_ms_median"] = 1e3 * statistics.median(latencies)
        figures["warm_run_ms_p95"] = 1e3 * latencies[int(0.95 * (len(latencies) - 1))]
        for workers in (1, 2):
            with FeatureSandbox(N_FEATURES, workers=workers) as pool:
                pool.run_batch(FEATURE_CODE, obs_list[:10])
                rates = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    results = pool.run_batch(FEATURE_CODE, obs_list)
                    rates.append(len(obs_list) / (time.perf_counter() - start))
                assert all(r.ok for r in results)
                figures[f"batch_obs_per_s_workers{workers}"] = statistics.median(rates)
    figures["in_process_obs_per_s"] = in_process_rate(obs_list)
    figures.update(batch=args.batch, calls=args.calls, repeats=args.repeats, python=platform.python_version(),
                   cpus=__import__("os").cpu_count())

    for key, value in figures.items():
        print(f"{key:32s} {value:,.3f}" if isinstance(value, float) else f"{key:32s} {value}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
