"""Per-update CPU time of the trainer's agent at two code trees, interleaved in one run.

    .venv/bin/python benchmarks/bench_update_versions.py BASE_TREE NEW_TREE [--ablation full] [--rounds 6]

Each tree runs in its own worker process (``PYTHONPATH=<tree>``) that builds the agent the trainer of that
tree holds (``lore.method.LoReAgent``, or ``lore.dreamer.agent.DreamerAgent`` where there is no
``lore.method``) on DoorKey-5x5 and times its ``train_step`` on one advised replay-shaped batch: CPU seconds
per update (``time.process_time``, one torch thread). The workers take turns, a round of updates each, so
that a load change on a shared machine hits both alike; the ratio is new / base of the median round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _timing import take_turns

HERE = Path(__file__).resolve().parent


def worker(ablation: str, preset: str, updates: int) -> None:
    """Serve rounds over stdin/stdout: each input line runs ``updates`` updates and prints their CPU seconds."""
    import time

    import torch
    from bench_update import doorkey_spaces, random_batch

    from lore.config import build_config

    tree = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0])
    if (tree / "lore" / "method").is_dir():  # an installed lore elsewhere must not stand in for a missing one
        from lore.method import LoReAgent as Agent
    else:
        from lore.dreamer.agent import DreamerAgent as Agent
    torch.set_num_threads(1)
    torch.manual_seed(0)
    space, actions, _ = doorkey_spaces()
    cfg = build_config(overrides=[f"model.preset={preset}", f"ablation={ablation}"])
    agent = Agent(space, actions, cfg)
    b, t = cfg.train.batch_size, cfg.train.batch_length
    g = torch.Generator().manual_seed(1)
    batch = {**random_batch(space, actions, b, t), "llm_prior_logits": torch.randn(b, t, actions, generator=g),
             "llm_mask": (torch.rand(b, t, generator=g) < 0.3).float(), "llm_confidence": torch.full((b, t), 0.8),
             "llm_beta": torch.full((b, t), 0.5), "llm_source": torch.ones(b, t)}
    agent.train_step(batch)  # warm-up
    print(json.dumps({"agent": Agent.__name__}), flush=True)
    for _ in sys.stdin:
        start = time.process_time()
        for _ in range(updates):
            agent.train_step(batch)
        print(json.dumps({"cpu_s": (time.process_time() - start) / updates}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--ablation", default="full")
    parser.add_argument("--preset", default="xs")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--updates", type=int, default=3, help="updates per round")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.ablation, args.preset, args.updates)
        return
    procs = {}
    for name, tree in (("base", args.base), ("new", args.new)):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tree).resolve()), str(HERE)])}
        procs[name] = subprocess.Popen(
            [sys.executable, __file__, "x", "x", "--worker", "--ablation", args.ablation, "--preset", args.preset,
             "--updates", str(args.updates)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        print(f"{name}: {Path(tree).resolve()} ({json.loads(procs[name].stdout.readline())['agent']})")
    times = take_turns(procs, args.rounds, "cpu_s")
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"{args.ablation}, preset {args.preset}, {args.rounds} rounds of {args.updates} updates, load average "
          f"{os.getloadavg()[0]:.2f}")
    for name, v in times.items():
        print(f"{name:>5}: median {1000 * med[name]:.1f} ms CPU per update (rounds: "
              + ", ".join(f"{1000 * x:.0f}" for x in v) + ")")
    print(f"ratio new / base: {med['new'] / med['base']:.3f}")


if __name__ == "__main__":
    main()
