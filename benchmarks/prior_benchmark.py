"""The LLM-prior benchmark (issue: LoRe's parts earn their place): every (env, arm, seed) run of the
CPU learning-curve config, two at a time, most important first; then the statistics and figures.

    .venv/bin/python benchmarks/prior_benchmark.py --out results/bench        # ~2.5 h on 2 cores
    .venv/bin/python benchmarks/prior_report.py --runs-root results/bench     # tables + report

DoorKey-5x5 (the tuning environment): 5 seeds of rl_only, kl, full, full_noisy, full_adversarial and
3 of gate, prior_only; 5 of full_distill (the frugal-calls claim). full_plan is not in this grid (the
session budget did not fit it; run it with learning_curve.py). LavaGapS5 (held out: never run while choosing defaults): 3 seeds
of rl_only, kl, full, full_adversarial. 10k env steps, 20 eval episodes per point, eval without the prior.
Runs resume, so the same command continues an interrupted benchmark.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from learning_curve import run_one  # noqa: E402

DOORKEY, HELD_OUT = "MiniGrid-DoorKey-5x5-v0", "MiniGrid-LavaGapS5-v0"
GRID = [
    (DOORKEY, ("rl_only", "kl", "full", "full_noisy", "full_adversarial", "full_distill"), range(5)),
    (DOORKEY, ("gate", "prior_only"), range(3)),
    (HELD_OUT, ("rl_only", "kl", "full", "full_adversarial"), range(3)),
]


def jobs() -> list[tuple[str, str, int]]:
    """(env, arm, seed): the first three seeds of every block first, then the remaining seeds, so an
    interrupted benchmark has every arm at n >= 3 before any arm gets its 4th seed."""
    first, rest = [], []
    for env, arms, seeds in GRID:
        for seed in seeds:
            (first if seed < 3 else rest).extend((env, arm, seed) for arm in arms)
    return first + rest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--set", action="append", default=[], help="extra override for every run")
    args = p.parse_args(argv)
    env_dirs = {DOORKEY: "doorkey", HELD_OUT: "lavagap"}
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, args.out / env_dirs[env], env, arm, seed, args.steps, args.set)
                   for env, arm, seed in jobs()]
        for fut in futures:
            arm, seed, wall, rc = fut.result()
            print(f"{arm} seed {seed}: {wall:.0f} s, exit {rc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
