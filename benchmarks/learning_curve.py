"""Learning-curve benchmark: eval success rate vs env steps for several arms and seeds.

Runs ``lore train`` for every (arm, seed) with ``--jobs`` processes at a time (each with one
torch thread), then prints a table of eval SR (mean and 95% bootstrap CI over seeds) at each
eval point and writes it to ``<out>/summary.md``. Runs resume, so re-running the same command
after an interruption continues where it stopped.

    .venv/bin/python benchmarks/learning_curve.py --out results/bench/doorkey \\
        --arms rl_only full full_adversarial --seeds 0 1 2 --steps 10000 --jobs 2

An arm is an ablation name, optionally with extra overrides: ``full:advisor.accuracy=0.8``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def _cpu_run() -> list[str]:
    """The benchmark's run settings (config/benchmark.yaml, their one declaration) as ``--set`` overrides,
    without the step count (``--steps``) and with no persistent answer cache, as the benchmark runs."""
    import yaml

    run = yaml.safe_load((REPO / "config" / "benchmark.yaml").read_text())["run"]
    return [f"{key}={str(value).lower() if isinstance(value, bool) else value}"
            for key, value in run.items() if key != "train.steps"] + ["llm.cache_path=null"]


CPU_RUN = _cpu_run()


def run_one(out: Path, env: str, arm: str, seed: int, steps: int, extra: list[str]) -> tuple[str, int, float, int]:
    ablation, *arm_overrides = arm.split(":")
    run_dir = out / arm.replace(":", "_").replace("=", "-") / f"seed{seed}"
    sets = [f"env.name={env}", f"train.steps={steps}", *CPU_RUN, *extra, *arm_overrides]
    cmd = [sys.executable, "-m", "lore.cli", "train", "--run-dir", str(run_dir), "--ablation", ablation,
           "--seed", str(seed), "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.time()
    log = run_dir.parent / f"seed{seed}.log"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        rc = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT)
    return arm, seed, time.time() - t0, rc


def bootstrap_ci(values: np.ndarray, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    if len(values) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(resamples, len(values)), replace=True).mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarise(out: Path) -> str:
    rows = []
    for eval_csv in sorted(out.glob("*/seed*/eval.csv")):
        df = pd.read_csv(eval_csv)
        df["arm"] = eval_csv.parent.parent.name
        df["seed"] = eval_csv.parent.name
        rows.append(df)
    if not rows:
        return "no runs found"
    data = pd.concat(rows)
    lines = ["| arm | env_step | seeds | eval SR mean | 95% CI | return mean |", "|---|---|---|---|---|---|"]
    for (arm, step), grp in data.groupby(["arm", "env_step"]):
        sr = grp["success_rate"].to_numpy()
        lo, hi = bootstrap_ci(sr)
        lines.append(f"| {arm} | {int(step)} | {len(sr)} | {sr.mean():.3f} | [{lo:.2f}, {hi:.2f}] | "
                     f"{grp['return_mean'].mean():.3f} |")
    calls = []
    for metrics_csv in sorted(out.glob("*/seed*/metrics.csv")):
        m = pd.read_csv(metrics_csv)
        if "llm_calls" in m.columns and len(m):
            last = m.iloc[-1]
            calls.append(f"{metrics_csv.parent.parent.name}/{metrics_csv.parent.name}: "
                         f"{int(last['llm_calls'])} LLM calls in {int(last['env_step'])} env steps")
    if calls:
        lines += ["", "LLM calls:"] + [f"- {c}" for c in calls]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench/learning_curve"))
    p.add_argument("--env", default="MiniGrid-DoorKey-5x5-v0")
    p.add_argument("--arms", nargs="+", default=["rl_only", "full", "full_adversarial"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--set", action="append", default=[], help="extra override for every run")
    p.add_argument("--summary-only", action="store_true")
    args = p.parse_args(argv)
    if not args.summary_only:
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(run_one, args.out, args.env, arm, seed, args.steps, args.set)
                       for seed in args.seeds for arm in args.arms]
            for fut in futures:
                arm, seed, wall, rc = fut.result()
                print(f"{arm} seed {seed}: {wall:.0f} s, exit {rc}", flush=True)
    text = summarise(args.out)
    (args.out / "summary.md").parent.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
