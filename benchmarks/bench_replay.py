"""What drawing a replay batch costs next to the update it feeds: ms per ``SequenceReplay.sample()`` and per
``DreamerAgent.train_step`` on the same batch shape, and the share of the two.

    .venv/bin/python benchmarks/bench_replay.py                                   # the Crafter CPU config
    .venv/bin/python benchmarks/bench_replay.py --run-config config/crafter_cpu.yaml --lengths 16 64

The buffer is filled with ``--rows`` rows of the run config's observation (one env stream, as the trainer
writes it), then ``sample()`` and ``train_step`` are timed on one thread. A share of a few percent says that
preparing the next batch during the update could win no more than that on this machine.
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
import torch
from _timing import time_calls_ms
from bench_compile import spaces

from lore.dreamer.agent import DreamerAgent
from lore.train.replay import SequenceReplay, space_row_spec


def filled_replay(space, actions: int, n_features: int, rows: int, b: int, t: int) -> SequenceReplay:
    """A replay of ``rows`` zero rows (one env) that samples ``[b, t]`` batches."""
    spec = space_row_spec(space, actions, n_features)
    replay = SequenceReplay(spec, 1, rows, b, t)
    row = {k: np.zeros(shape, dtype=np.uint8 if dtype == torch.uint8 else np.float32)
           for k, (shape, dtype) in spec.items()}
    for _ in range(rows):
        replay.add(0, row)
    return replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-config", default="config/crafter_cpu.yaml")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    space, actions, source, config = spaces(args.run_config)
    print(f"{source}; batch size {args.batch_size}; {args.rows} rows; 1 thread; "
          f"load {os.getloadavg()[0]:.1f}")
    print("| batch | sample ms | update ms | sample / update |")
    print("|---|---|---|---|")
    for t in args.lengths:
        cfg = config([f"train.batch_size={args.batch_size}", f"train.batch_length={t}"])
        replay = filled_replay(space, actions, cfg.features.n_features, args.rows, args.batch_size, t)
        agent = DreamerAgent(space, actions, cfg)
        batch = replay.sample()
        sample_ms = statistics.median(time_calls_ms(replay.sample, args.repeats))
        update_ms = statistics.median(time_calls_ms(lambda a=agent, b=batch: a.train_step(b), max(3, args.repeats // 4), 2))
        print(f"| {args.batch_size}x{t} | {sample_ms:.1f} | {update_ms:.0f} | {sample_ms / update_ms:.1%} |")


if __name__ == "__main__":
    main()
