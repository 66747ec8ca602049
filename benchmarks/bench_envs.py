"""Environment throughput on this machine: raw MiniGrid vs LoreEnv (symbolic, pixels), Crafter.

Usage: ``python benchmarks/bench_envs.py [--steps 5000] [--crafter-steps 2000] [--env MiniGrid-DoorKey-5x5-v0]``

Random actions, auto-reset; prints a small table (steps/s, and seconds per Crafter reset).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import minigrid  # noqa: F401  (registers the ids)
import numpy as np

from lore.envs import make_env


def steps_per_second(reset, step, num_actions: int, steps: int, seed: int = 0) -> float:
    """Random-action steps/s including the resets at episode ends."""
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, num_actions, size=steps)
    reset()
    start = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = step(int(a))
        if terminated or truncated:
            reset()
    return steps / (time.perf_counter() - start)


def bench_raw_minigrid(name: str, steps: int) -> float:
    env = gym.make(name, disable_env_checker=True).unwrapped
    return steps_per_second(lambda: env.reset(seed=0), env.step, int(env.action_space.n), steps)


def bench_lore(name: str, steps: int, **kwargs) -> float:
    env = make_env(name, 0, **kwargs)
    return steps_per_second(env.reset, env.step, env.action_space.n, steps)


def bench_crafter_reset(repeats: int) -> float:
    env = make_env("crafter", 0)
    env.reset()  # the first reset also JIT-compiles opensimplex under numba
    start = time.perf_counter()
    for _ in range(repeats):
        env.reset()
    return (time.perf_counter() - start) / repeats


def numba_in_use() -> bool:
    """Whether crafter's world generation (opensimplex) runs numba-compiled code."""
    from opensimplex import internals

    return hasattr(internals._noise2, "py_func")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="MiniGrid-DoorKey-5x5-v0")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--crafter-steps", type=int, default=2000)
    parser.add_argument("--crafter-resets", type=int, default=5)
    args = parser.parse_args()

    rows = [
        (f"{args.env} raw (unwrapped)", bench_raw_minigrid(args.env, args.steps)),
        (f"{args.env} LoreEnv symbolic egocentric", bench_lore(args.env, args.steps)),
        (f"{args.env} LoreEnv symbolic full", bench_lore(args.env, args.steps, view="full")),
        (f"{args.env} LoreEnv both (pixels) egocentric", bench_lore(args.env, args.steps // 2, obs="both")),
        (f"{args.env} LoreEnv both (pixels) full", bench_lore(args.env, args.steps // 2, obs="both", view="full")),
        ("crafter LoreEnv symbolic", bench_lore("crafter", args.crafter_steps)),
        ("crafter LoreEnv both (pixels)", bench_lore("crafter", args.crafter_steps, obs="both")),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'environment':<{width}}  steps/s")
    for label, value in rows:
        print(f"{label:<{width}}  {value:8.0f}")
    print(f"{'crafter reset (s, mean of ' + str(args.crafter_resets) + ')':<{width}}  "
          f"{bench_crafter_reset(args.crafter_resets):8.3f}")
    print(f"numba used by crafter world generation: {numba_in_use()}")


if __name__ == "__main__":
    main()
