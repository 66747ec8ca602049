"""What an update's CPU time scales with at the benchmark config: batch rows (the most that training several
seeds as one batched model could save) and the settings that change the maths (bins, imagination starts).

    .venv/bin/python benchmarks/bench_update_scaling.py                       # debug preset, 16x16, one thread
    .venv/bin/python benchmarks/bench_update_scaling.py --repeats 25 --json out.json
    .venv/bin/python benchmarks/bench_update_scaling.py --set model.bins=63 --set dreamer.imag_last=8 --no-options

Part 1, seed batching. K seeds trained as one batched model do at least the arithmetic of one model on a batch
of K x 16 rows, and pay the per-op overhead once. So ``train_step`` on a [16K, 16] batch, divided by K, is a lower
bound on the per-seed update cost of a K-seed group (the batched weights add work, not remove it); ``--set``
measures it at other settings (the lean update's, say). A fit of
``ms = fixed + per_row x rows`` over the batch sizes splits the update into a fixed part (per-op overhead, the
sequential loops) and a part that grows with the batch (the arithmetic).

Part 2, settings that change the maths: the update at 16x16 with ``model.bins``, ``dreamer.imag_last`` and
``model.value_heads`` changed, as a ratio to the base config.

All agents are timed round-robin (``interleaved``), so that load from the rest of the machine hits them alike;
wall-clock medians. It is a benchmark, not a test: CI never runs it.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from bench_update import doorkey_spaces, interleaved, random_batch

from lore.config import build_config
from lore.dreamer.agent import DreamerAgent

BATCH, LENGTH = 16, 16
GROUPS = (1, 2, 4, 8)
FIT = 3  # the fit reads K <= 4: at more rows the working set outgrows the cache and a row costs more
OPTIONS = ([], ["model.bins=63"], ["dreamer.imag_last=8"], ["model.value_heads=1"],
           ["model.bins=63", "dreamer.imag_last=8"])


def update_fn(overrides: list[str], rows: int):
    """A closure running one ``train_step`` of a fresh debug-preset agent on a [rows, LENGTH] random batch."""
    space, actions, _ = doorkey_spaces()
    agent = DreamerAgent(space, actions, build_config(overrides=["model.preset=debug", *overrides]))
    batch = random_batch(space, actions, rows, LENGTH)
    return lambda: agent.train_step(batch)


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys on xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of part 1's agents (repeatable); part 2 always starts from the base config")
    parser.add_argument("--no-options", action="store_true", help="skip part 2")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()[0]

    group_ms = interleaved([update_fn(args.set, BATCH * k) for k in GROUPS], args.repeats, args.warmup)
    fixed, per_row = linear_fit([BATCH * k for k in GROUPS[:FIT]], group_ms[:FIT])
    settings = " ".join(args.set) or "base settings"
    print(f"debug preset, {settings}, batch {BATCH}x{LENGTH}, one thread, load {load:.1f}; wall ms per update "
          "(median)\n")
    print("| seeds in one batch (K) | rows | ms per update | ms per seed | per seed / K=1 |\n|---:|---:|---:|---:|---:|")
    for k, ms in zip(GROUPS, group_ms, strict=True):
        print(f"| {k} | {BATCH * k} | {ms:.1f} | {ms / k:.1f} | {ms / k / group_ms[0]:.3f} |")
    print(f"\nfit over K <= {GROUPS[FIT - 1]}: {fixed:.1f} ms fixed + {per_row:.2f} ms per batch row "
          f"(fixed = {fixed / group_ms[0]:.0%} of a {BATCH}-row update)\n")

    option_ms = [] if args.no_options else interleaved([update_fn(o, BATCH) for o in OPTIONS], args.repeats,
                                                        args.warmup)
    if option_ms:
        print("| settings | ms per update | / base |\n|---|---:|---:|")
        for option, ms in zip(OPTIONS, option_ms, strict=True):
            print(f"| {' '.join(option) or 'base'} | {ms:.1f} | {ms / option_ms[0]:.3f} |")
    if args.json:
        options = {" ".join(o) or "base": ms for o, ms in zip(OPTIONS, option_ms, strict=False)}
        rows = {"load": load, "settings": args.set, "groups": dict(zip(map(str, GROUPS), group_ms, strict=True)),
                "fixed_ms": fixed, "per_row_ms": per_row, "options": options}
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
