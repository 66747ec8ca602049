"""CPU cost of a short benchmark-config run at two code trees, side by side: run seconds and update ms, with ratios.

    .venv/bin/python benchmarks/bench_versions.py BASE_TREE NEW_TREE                     # full, rl_only; 2k steps
    .venv/bin/python benchmarks/bench_versions.py /tmp/base . --steps 10000 --env MiniGrid-LavaGapS5-v0

Each (tree, ablation) run trains ``--steps`` env steps with the settings of ``config/benchmark.yaml`` (debug
preset, batch 16x16, train ratio 64, one thread) in a fresh process that imports ``lore`` from its tree
(``PYTHONPATH=<tree>``), and reports the CPU seconds of the run (``time.process_time`` around ``Trainer.run``) and
of its updates (the same clock around each ``train_step``). The runs take turns (base then new, per ablation and
repeat), so that a load change on a shared machine hits both versions alike; the table gives the median over
``--repeats`` of each and the ratios new / base, full / rl_only within each tree, and whether the two trees' runs
wrote the same ``eval.csv`` and ``metrics.csv`` (without its timing columns). Both trees train the same
seed, so where the maths agree the two runs do the same work.

``--rounds R`` measures updates only: one worker per tree trains ``--steps`` env steps, samples 8 replay batches
(the same in both trees where the maths agree) and then times ``--updates`` updates per round, the trees taking
turns for R rounds; the table gives the median round's CPU ms per update. It is a benchmark, not a test: CI never
runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import set_flags, take_turns

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run_worker(ablation: str, env: str, steps: int, seed: int, extra: list[str]) -> None:
    """Train one run in this process (``lore`` from ``PYTHONPATH``) and print its CPU seconds as JSON."""
    import torch

    import lore
    from lore.config import build_config, load_yaml
    from lore.train.trainer import Trainer

    torch.set_num_threads(1)
    overrides = [f"{k}={v}" for k, v in load_yaml(ROOT / "config" / "benchmark.yaml")["run"].items()]
    overrides += [f"env.name={env}", f"train.steps={steps}", f"seed={seed}", "train.progress=false", *extra]
    cfg = build_config(overrides=overrides, ablation=ablation)
    with tempfile.TemporaryDirectory(prefix=f"bench_{ablation}_") as run_dir:
        trainer = Trainer(cfg, run_dir, show_progress=False)
        step = trainer.agent.train_step
        spent = [0.0]

        def timed_step(batch):
            start = time.process_time()
            try:
                return step(batch)
            finally:
                spent[0] += time.process_time() - start

        trainer.agent.train_step = timed_step
        start = time.process_time()
        trainer.run()
        run_s = time.process_time() - start
        evals = (Path(run_dir) / "eval.csv").read_text()
        metrics = untimed_csv(Path(run_dir) / "metrics.csv")
    print(json.dumps({"tree": str(Path(lore.__file__).resolve().parent.parent), "run_s": run_s,
                      "update_ms": 1000.0 * spent[0] / max(trainer.updates, 1), "updates": trainer.updates,
                      "eval_csv": evals, "metrics_csv": metrics}))


TIMING_COLUMNS = ("steps_per_s", "update_ms", "update_time_frac", "llm_latency_ms")
"""The columns of ``metrics.csv`` that record time, not what the run learned (a name that starts with one of
these: ``llm_latency_ms_total``, ...)."""


def untimed_csv(path: Path) -> str:
    """The text of a CSV file without its :data:`TIMING_COLUMNS`."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(path.read_text())))
    keep = [i for i, name in enumerate(rows[0]) if not name.startswith(TIMING_COLUMNS)] if rows else []
    return "\n".join(",".join(row[i] for i in keep) for row in rows)


def update_worker(ablation: str, env: str, steps: int, seed: int, extra: list[str], updates: int) -> None:
    """Serve rounds over stdin/stdout: each input line times ``updates`` updates and prints their CPU ms each."""
    import torch

    sys.path.insert(0, str(HERE))
    from profile_families import warm_agent

    agent, batches = warm_agent(ablation, env, steps, seed, 8, extra)
    torch.set_num_threads(1)
    for i in range(3):
        agent.train_step(batches[i])
    print(json.dumps({"ready": True}), flush=True)
    done = 0
    for _ in sys.stdin:
        start = time.process_time()
        for _ in range(updates):
            agent.train_step(batches[done % len(batches)])
            done += 1
        print(json.dumps({"ms": 1000.0 * (time.process_time() - start) / updates}), flush=True)


def set_args(args, name: str) -> list[str]:
    """The ``--set`` arguments of tree ``name``'s workers: ``--set`` for both trees, ``--new-set`` for "new" only."""
    return set_flags([*args.extra, *(args.new_extra if name == "new" else [])])


def update_rounds(trees: dict[str, str], ablation: str, args) -> dict[str, list[float]]:
    """CPU ms per update of each tree's ``ablation``, one entry per round, the trees taking turns."""
    procs = {}
    for name, tree in trees.items():
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, __file__, tree, tree, "--worker", ablation, "--env", args.env, "--steps",
               str(args.steps), "--seed", str(args.seed), "--rounds", str(args.rounds), "--updates",
               str(args.updates), *set_args(args, name)]
        procs[name] = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
    for proc in procs.values():
        json.loads(proc.stdout.readline())
    return take_turns(procs, args.rounds, "ms")


def one_run(name: str, tree: str, ablation: str, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, tree, tree, "--worker", ablation, "--env", args.env, "--steps", str(args.steps),
           "--seed", str(args.seed), *set_args(args, name)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"run of {ablation} at {tree} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(result["tree"]) != Path(tree).resolve():
        raise SystemExit(f"the worker imported lore from {result['tree']}, not from {tree}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--ablations", nargs="+", default=["full", "rl_only"])
    parser.add_argument("--env", default="MiniGrid-LavaGapS5-v0")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--set", dest="extra", action="append", default=[], help="extra config override")
    parser.add_argument("--new-set", dest="new_extra", action="append", default=[],
                        help="config override of the new tree's runs only (a maths change measured against the base)")
    parser.add_argument("--rounds", type=int, default=0, help="time updates only, in this many rounds")
    parser.add_argument("--updates", type=int, default=10, help="updates per round (with --rounds)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker and args.rounds:
        update_worker(args.worker, args.env, args.steps, args.seed, args.extra, args.updates)
        return 0
    if args.worker:
        run_worker(args.worker, args.env, args.steps, args.seed, args.extra)
        return 0
    trees = {"base": args.base, "new": args.new}
    if args.rounds:
        print(f"{args.env}, benchmark config after {args.steps} env steps, {args.rounds} rounds of {args.updates} "
              f"updates, load {os.getloadavg()[0]:.1f}; CPU ms per update (median round)\n")
        print("| ablation | base | new | new/base | base rounds | new rounds |\n|---|---:|---:|---:|---|---|")
        for ablation in args.ablations:
            t = update_rounds(trees, ablation, args)
            b, n = statistics.median(t["base"]), statistics.median(t["new"])
            print(f"| {ablation} | {b:.1f} | {n:.1f} | {n / b:.3f} | {' '.join(f'{x:.0f}' for x in t['base'])} | "
                  f"{' '.join(f'{x:.0f}' for x in t['new'])} |", flush=True)
        return 0
    results: dict[tuple[str, str], list[dict]] = {}
    load = os.getloadavg()[0]
    for _ in range(args.repeats):
        for ablation in args.ablations:
            for name, tree in trees.items():
                r = one_run(name, tree, ablation, args)
                results.setdefault((name, ablation), []).append(r)
                print(f"{name:>4} {ablation:>8}: {r['run_s']:7.1f} s CPU, {r['update_ms']:6.1f} ms CPU per update "
                      f"({r['updates']} updates)", file=sys.stderr, flush=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("run_s", "update_ms")} for k, v in results.items()}
    if args.new_extra:
        print(f"\nnew tree with {' '.join(args.new_extra)}", end="")
    print(f"\n{args.env}, benchmark config, {args.steps} env steps, seed {args.seed}, {args.repeats} repeat(s), "
          f"load {load:.1f} at the start, {time.strftime('%Y-%m-%d %H:%M')}; medians\n")
    print("| ablation | base run s | new run s | new/base | base update ms | new update ms | new/base | "
          "eval.csv, metrics.csv (untimed) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for ablation in args.ablations:
        b, n = med[("base", ablation)], med[("new", ablation)]
        same = all(x[key] == y[key] for x, y in zip(results[("base", ablation)], results[("new", ablation)],
                                                     strict=True) for key in ("eval_csv", "metrics_csv"))
        print(f"| {ablation} | {b['run_s']:.1f} | {n['run_s']:.1f} | {n['run_s'] / b['run_s']:.3f} | "
              f"{b['update_ms']:.1f} | {n['update_ms']:.1f} | {n['update_ms'] / b['update_ms']:.3f} | "
              f"{'identical' if same else 'DIFFERS'} |")
    if "full" in args.ablations and "rl_only" in args.ablations:
        for name in trees:
            ratio = med[(name, "full")]["run_s"] / med[(name, "rl_only")]["run_s"]
            print(f"\n{name}: full / rl_only run CPU = {ratio:.3f}", end="")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
