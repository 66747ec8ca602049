"""Issue 10's arm targets read across every Crafter setting measured, from their reports' tables: one page.

    .venv/bin/python benchmarks/crafter_targets.py --baseline docs/benchmark/crafter_20k_n5 \
        --out docs/benchmark/crafter_targets.md "defaults=docs/benchmark/crafter_20k_r64" ...

Each ``LABEL=FOLDER`` is a report written by ``crafter_report.py``; ``--baseline`` is the one whose ``rl_only``
runs every arm is paired with by seed (a seed's runs share their evaluation layouts in every arm). Per setting
and arm: the difference from ``rl_only`` in the Crafter score and the distinct achievements of the last periodic
evaluation (paired, and the score unpaired as the issue states it), the 50-episode final evaluation's score
minus rl_only's (paired, where both reports kept it per run in ``tables/final_eval.csv``) and minus the random
policy's on the same layouts, and the target read from those: ``full`` above rl_only in score and distinct
achievements (both paired CIs above 0), ``full_adversarial`` not below rl_only beyond the CI (the paired score CI
reaches 0), on the final evaluation where both sides have it, else on the periodic one. Where the baseline kept
its final evaluation per run, the first target too (rl_only above random). Nothing is typed by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from crafter_report import FINAL_TABLE, RANDOM, above_random, ci, fmt, label_folders, paired, signed  # noqa: E402
from experiment_compare import read_runs  # noqa: E402

from lore.analysis import stats as st  # noqa: E402
from lore.analysis.latex import FEW_SEEDS  # noqa: E402
from lore.utils.io import atomic_write_text  # noqa: E402

BASELINE_ARM = "rl_only"
TARGET_ARMS = ("full", "full_adversarial")


def unpaired(a: pd.Series, b: pd.Series) -> tuple[float, float, float, int]:
    """Mean of ``a`` minus mean of ``b`` with a CI from resampling each group on its own (n = len(a))."""
    c = st.compare(a.to_numpy(float), b.to_numpy(float), seed=0)
    return c.difference.estimate, c.difference.low, c.difference.high, len(a)


def final_minus_random(folder: Path, arm: str) -> tuple[float, float, float, int]:
    """The setting's final evaluation of ``arm`` minus the random policy's, paired by seed (n = 0 without one)."""
    path = folder / "tables" / FINAL_TABLE
    if not path.is_file():
        return ci([])
    final = pd.read_csv(path)
    return paired(final[final["ablation"] == arm], final[final["ablation"] == RANDOM], "crafter_score")


def paired_if(own: pd.DataFrame, base: pd.DataFrame, column: str) -> tuple[float, float, float, int]:
    """``paired`` where both sides have ``column`` (n = 0 otherwise)."""
    return paired(own, base, column) if column in own and column in base else ci([])


def verdict(arm: str, score: tuple, distinct: tuple, read_on: str) -> str:
    """The issue's target for ``arm`` read from the paired differences with rl_only (n < 2: not read)."""
    if score[3] < 2:
        return "—"
    if arm == "full":
        met = score[1] > 0 and distinct[3] >= 2 and distinct[1] > 0
    else:
        met = score[2] >= 0
    few = "" if score[3] >= FEW_SEEDS else f", n < {FEW_SEEDS}"
    return ("met" if met else "**not met**") + f" ({read_on}{few})"


def target_rows(settings: dict[str, Path], baseline: pd.DataFrame) -> list[dict]:
    """One row per (setting, target arm) that ran, against ``baseline``'s rl_only runs. The target is read on
    the 50-episode final evaluation where both sides kept one per run, else on the last periodic evaluation."""
    base = baseline[baseline["ablation"] == BASELINE_ARM]
    rows = []
    for label, folder in settings.items():
        runs = read_runs(folder)
        for arm in TARGET_ARMS:
            own = runs[runs["ablation"] == arm]
            if not len(own):
                continue
            score, distinct = paired(own, base, "crafter_score"), paired_if(own, base, "distinct_last")
            final, final_distinct = (paired_if(own, base, "final_eval_score"),
                                     paired_if(own, base, "final_eval_distinct"))
            on_final = final[3] >= 2
            rows.append({"setting": label, "arm": arm, "n": own["seed"].nunique(), "score": score,
                         "distinct": distinct, "final_rl_only": final, "final_distinct": final_distinct,
                         "score_unpaired": unpaired(own["crafter_score"].dropna(), base["crafter_score"].dropna()),
                         "final_random": final_minus_random(folder, arm),
                         "target": verdict(arm, *((final, final_distinct, "final eval") if on_final
                                                  else (score, distinct, "periodic eval")))})
    return rows


def first_target(folder: Path) -> str:
    """rl_only above random on the baseline's final evaluation: non-overlapping CIs (as the issue states it) and
    paired by seed; empty where the baseline kept no per-run final evaluation."""
    path = folder / "tables" / FINAL_TABLE
    final = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["ablation"])
    own, rnd = final[final["ablation"] == BASELINE_ARM], final[final["ablation"] == RANDOM]
    if len(own) < 2 or len(rnd) < 2:
        return ""
    a, b, met, diff, above = above_random(own, rnd)
    return (f"rl_only above random on this baseline's final evaluation: {fmt(a)} (n = {a[3]}) vs {fmt(b)} "
            f"(n = {b[3]}), CIs {'not ' if met else ''}overlapping: **{'met' if met else 'not met'}**; "
            f"paired by seed {signed(diff)} (n = {diff[3]}), {'above' if above else 'not above'} 0 beyond the CI.")


def markdown(rows: list[dict], baseline: Path, n_baseline: int, settings: dict[str, Path], first: str = "") -> str:
    lines = ["# Crafter: issue 10's arm targets in every setting measured (generated by "
             "`benchmarks/crafter_targets.py`; do not edit)", "",
             f"Each arm against the `{BASELINE_ARM}` runs of `{baseline}` (n = "
             f"{n_baseline}), paired by seed on the seeds "
             "both ran (a seed's runs share their evaluation layouts): the difference in the Crafter score and in the "
             "distinct achievements of the last periodic evaluation (10 episodes), mean [95% bootstrap CI]; the score "
             "difference unpaired as well (the two groups resampled on their own, as the issue states the target); "
             "and the setting's 50-episode final evaluation minus the random policy on the same layouts. Targets: "
             "`full` above rl_only in score and distinct achievements (both paired CIs above 0); `full_adversarial` "
             "not below rl_only beyond the CI (its paired score CI reaches 0); read on the final evaluation where both "
             "sides kept one per run, else on the periodic one (the cell says which). n = the arm's seeds.", "",
             "| setting | arm | n | score − rl_only (paired) | distinct − rl_only (paired) | score − rl_only "
             "(unpaired) | final eval − rl_only (paired) | final distinct − rl_only (paired) | final eval − random "
             "| target |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['arm']} | {r['n']} | {signed(r['score'])} | {signed(r['distinct'], 1)} | "
                     f"{signed(r['score_unpaired'])} | {signed(r['final_rl_only'])} | {signed(r['final_distinct'], 1)} | "
                     f"{signed(r['final_random'])} | "
                     f"{r['target']} |")
    lines += ["", "Reports: " + "; ".join(f"{label}: [{folder.name}]({folder.name}.md)"
                                          for label, folder in settings.items()) + ".",
              first or ("The first target (rl_only above random with non-overlapping CIs) is read in "
                        f"[{baseline.name}.md]({baseline.name}.md), whose final evaluation's per-run rows were not "
                        "kept in its tables."), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("settings", nargs="+", metavar="LABEL=FOLDER", help="a Crafter report folder and its label")
    p.add_argument("--baseline", type=Path, required=True, help=f"the report whose {BASELINE_ARM} runs pair every arm")
    p.add_argument("--out", type=Path, required=True, help="the markdown to write (.md)")
    args = p.parse_args(argv)
    if args.out.suffix != ".md" or not args.out.parent.is_dir():
        p.error(f"--out: {args.out} must be a .md file in an existing folder")
    settings = label_folders(p, args.settings)
    for folder in [args.baseline, *settings.values()]:
        if not (folder / "tables" / "runs.csv").is_file():
            p.error(f"{folder / 'tables' / 'runs.csv'} not found: run crafter_report.py for that folder first")
    baseline = read_runs(args.baseline)
    if BASELINE_ARM not in set(baseline["ablation"]):
        p.error(f"--baseline: no {BASELINE_ARM} runs in {args.baseline / 'tables' / 'runs.csv'}")
    rows = target_rows(settings, baseline)
    if not rows:
        p.error(f"none of the settings ran {' or '.join(TARGET_ARMS)}")
    n_baseline = baseline[baseline["ablation"] == BASELINE_ARM]["seed"].nunique()
    text = markdown(rows, args.baseline, n_baseline, settings, first_target(args.baseline))
    atomic_write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
