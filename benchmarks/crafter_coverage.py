"""How many training steps of Crafter runs had advice, per LLM-controller setting, read at one env step.

A Crafter state rarely repeats, so the answer cache is seldom reused and the controller's budget and cooldowns
decide how much of training sees the prior at all. This compares run groups (one controller setting each) at a
common env step ``--at``, so that runs still in progress (checkpointed, to be resumed) can be read beside
finished ones: LLM calls, steps that followed a plan, the share of training steps with advice, and the periodic
evaluation's Crafter score at every eval point up to ``--at`` (10 episodes per point: a coarse reading) and,
for finished runs whose final evaluation (50 episodes; with the prior mixed in: ``+ prior``) is not past ``--at``,
its score.

    .venv/bin/python benchmarks/crafter_coverage.py --at 13000 --out docs/benchmark/crafter_coverage.md \\
        "cooldown 100/250=results/bench_crafter_replay/full" "cooldown 40/40=results/bench_crafter_paced/full" \\
        rl_only=results/bench_crafter_replay/rl_only

Each ``LABEL=FOLDER`` names a folder of ``seed*/`` run directories; a run that has not reached ``--at`` is left
out with a message. Values: mean and 95% bootstrap CI over runs (n stated).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from crafter_report import FINAL_EVAL, FINAL_EVAL_PRIOR, ci, fmt, label_folders  # noqa: E402

from lore.utils.io import atomic_write_text  # noqa: E402


def read_run(run: Path, at: int) -> dict | None:
    """One run's figures at env step ``at`` (None when the run has not logged that far)."""
    metrics = pd.read_csv(run / "metrics.csv")
    if not len(metrics) or metrics["env_step"].max() < at:
        return None
    metrics = metrics[metrics["env_step"] <= at]
    last = metrics.iloc[-1]
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    row = {"controller": controller_setting(cfg)}
    if "llm_calls" in metrics:
        row |= {"calls": float(last["llm_calls"]), "plan_steps": float(last["llm_plan_steps"]),
                "advised_pct": 100.0 * float(metrics["prior_mask_frac"].mean())}
    evals = pd.read_csv(run / "eval.csv")
    for r in evals[(evals["env_step"] > 0) & (evals["env_step"] <= at)].itertuples():
        row[f"score@{int(r.env_step)}"] = float(r.crafter_score)
    for name, key in ((FINAL_EVAL, "final"), (FINAL_EVAL_PRIOR, "final + prior")):
        final = pd.read_csv(run / name) if (run / name).is_file() else pd.DataFrame()
        if len(final) and int(final["env_step"].iloc[-1]) <= at:
            row[key] = float(final["crafter_score"].iloc[-1])
    return row


def controller_setting(cfg: dict) -> str:
    if cfg["llm"]["backend"] == "none":
        return "no LLM"
    ctl = cfg["llm"]["controller"]
    return f"budget {ctl['budget']}, cooldown {ctl['cooldown']}/{ctl['cooldown_after_success']}"


def table(groups: dict[str, list[dict]]) -> list[str]:
    scores = sorted({k for rows in groups.values() for r in rows for k in r if k.startswith("score@")},
                    key=lambda k: int(k.split("@")[1]))
    finals = [k for k in ("final", "final + prior") if any(k in r for rows in groups.values() for r in rows)]
    scores += finals
    lines = ["| group | n | controller | LLM calls | plan steps | advised steps (% of train) | "
             + " | ".join(f"score {k.split('@')[1]}" if "@" in k else f"score ({k})" for k in scores) + " |",
             "|---" * (6 + len(scores)) + "|"]
    for label, rows in groups.items():
        frame = pd.DataFrame(rows)
        column = lambda k, d=1, f=frame: fmt(ci(f[k]), d) if k in f else "—"  # noqa: E731
        settings = "; ".join(sorted(frame["controller"].unique())) if len(frame) else "—"
        lines.append(f"| {label} | {len(frame)} | {settings} | {column('calls', 0)} | {column('plan_steps', 0)} | "
                     f"{column('advised_pct', 2)} | " + " | ".join(column(k, 2) for k in scores) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("groups", nargs="+", metavar="LABEL=FOLDER")
    p.add_argument("--at", type=int, required=True, help="env step at which every run is read")
    p.add_argument("--out", type=Path, help="write the markdown here (default: print it)")
    args = p.parse_args(argv)
    folders = label_folders(p, args.groups)
    if args.at <= 0:
        p.error(f"--at must be > 0, got {args.at}")
    groups: dict[str, list[dict]] = {}
    for label, folder in folders.items():
        groups[label] = []
        for run in sorted(folder.glob("seed*/")):
            row = read_run(run, args.at) if (run / "metrics.csv").is_file() else None
            if row is None:
                print(f"{run} has not reached env step {args.at}; left out", file=sys.stderr)
            else:
                groups[label].append(row)
    text = "\n".join([
        "# Advice coverage on Crafter per LLM-controller setting (generated by `benchmarks/crafter_coverage.py`; "
        "do not edit)", "",
        f"Every run read at env step {args.at} (runs in progress included). LLM calls and plan steps: counts "
        "up to that step; advised steps: mean over log points of the share of training env steps with advice "
        "(an answer for that state or the next step of a plan being followed); score: the periodic "
        "evaluation's Crafter score (10 episodes per point, the learned policy without the prior); final: the "
        "final evaluation of a finished run (`crafter_benchmark.py`; `+ prior`: with the prior mixed in at act "
        "time), where it is not past that step. Mean and 95% bootstrap CI over runs (n: runs read).", "", *table(groups), ""])
    if args.out:
        atomic_write_text(args.out, text)
        print(args.out)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
