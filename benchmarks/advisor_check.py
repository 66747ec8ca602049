"""What following the scripted advice does in a MiniGrid task, before any learning: a held-out task's profile.

    .venv/bin/python benchmarks/advisor_check.py MiniGrid-DistShift1-v0 MiniGrid-Dynamic-Obstacles-5x5-v0

For every task and policy (the good advisor's top action at every step, the adversarial advisor's, uniform-random
actions) it plays ``--episodes`` episodes from fixed layouts and counts those reaching the goal (positive
return), those the env ended without reward (failures: lava, an obstacle) and the mean length. Which kind of harm
the adversary does in a task (failures, or only time-outs) says which evidence can catch it.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from lore.envs.factory import make_env
from lore.llm.scripted import ScriptedAdvisor
from lore.prior.trust import is_failure

POLICIES = ("good", "adversarial", "random")


def play(env_name: str, policy: str, episodes: int, seed: int = 0) -> dict[str, float]:
    """``{"success", "failure", "length"}`` over ``episodes`` episodes of ``policy`` (counts, mean length)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    env = make_env(env_name, seed=seed)
    advisor = ScriptedAdvisor(mode=policy) if policy != "random" else None
    rng = np.random.default_rng(seed)
    success = failure = 0
    lengths = []
    for episode in range(episodes):
        env.reset(seed=seed * 10_000 + episode)
        done, steps, ret = False, 0, 0.0
        while not done:
            if advisor is None:
                action = int(rng.integers(env.action_space.n))
            else:
                answer = advisor.advise(env.state_snapshot(), "minigrid", list(env.action_names))
                action = int(np.argmax(answer["action_prior"]["logits"]))
            _, reward, terminated, truncated, _ = env.step(action)
            steps, ret, done = steps + 1, ret + reward, terminated or truncated
        success += ret > 0
        failure += is_failure(terminated, reward)
        lengths.append(steps)
    return {"success": success, "failure": failure, "length": float(np.mean(lengths))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("envs", nargs="+", help="MiniGrid-* ids")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    bad = [e for e in args.envs if not e.startswith("MiniGrid-")]
    if bad:
        p.error(f"only MiniGrid tasks have a scripted planner here: {', '.join(bad)}")
    print("| task | policy | reach the goal | end without reward | mean length |\n|---|---|---|---|---|")
    for env_name in args.envs:
        for policy in POLICIES:
            r = play(env_name, policy, args.episodes, args.seed)
            print(f"| {env_name} | {policy} | {r['success']} / {args.episodes} | {r['failure']} / {args.episodes} | "
                  f"{r['length']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
