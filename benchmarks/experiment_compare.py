"""An experiment overlay's runs against the benchmark's own, arm by arm: is anything different?

    .venv/bin/python benchmarks/experiment_compare.py --experiment docs/benchmark/gate_entropy \
        --title "gate on policy entropy alone (config/gate_entropy.yaml)"

Reads the per-run table ``tables/runs.csv`` that the workflow's report copied into the experiment's report
folder and the benchmark's (``--baseline``, default ``docs/benchmark``), and for every (env, arm) present in
both writes, per metric, the experiment's mean minus the benchmark's with its bootstrap CI (the two groups
of seeds resampled independently, ``lore.analysis.stats.compare``), n on both sides and P(experiment >
benchmark), to ``<experiment>/comparison.md``. The reading follows the interval: "higher" / "lower" when it
excludes 0, "no evidence of a difference" otherwise. Nothing is typed by hand.

Below the table, the same differences paired by seed (AUC and final SR, seeds run on both sides): a seed's
runs share their evaluation layouts and env seeds in every arm, so its difficulty cancels in the pair.
Then, where both sides ran advice trust, in how many runs and how soon the advice was caught (act-time trust < 0.1).

``--against ARM`` compares every arm of the experiment with the baseline's ``ARM`` instead of its namesake
(e.g. a diagnosis arm against ``rl_only``: is the regret still there?), into ``comparison_vs_<ARM>.md``.
``--out FILE`` names the markdown instead (a second baseline beside the first, e.g. a diagnosis overlay).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from crafter_report import FINAL_TABLE, WITH_PRIOR, distinct_achievements  # noqa: E402

from lore.analysis import stats as st  # noqa: E402
from lore.analysis.aggregate import TRUST_LOW  # noqa: E402
from lore.analysis.benchmark_report import interval_word  # noqa: E402
from lore.analysis.latex import FEW_SEEDS  # noqa: E402

FINAL_COLUMNS = {"final_eval_score": "Crafter score, final eval", "final_eval_distinct": "distinct achievements, final eval",
                 "final_eval_prior_score": "Crafter score, final eval + prior"}
"""Columns joined from a report's ``tables/final_eval.csv`` (``crafter_report.py``) where it has one -> label."""
METRICS = {"auc": "AUC", "sr@2500": "SR @2.5k", "sr@5000": "SR @5k", "final_sr": "final SR",
           "crafter_score": "Crafter score, last periodic eval",
           "distinct_last": "distinct achievements, last periodic eval",
           "beta_disagree_avg": "β advised, disagree", "beta_agree_avg": "β advised, agree",
           "trust_low_frac": f"share of log points with act-time trust < {TRUST_LOW:g}", "llm_calls": "API calls",
           **FINAL_COLUMNS}
"""Columns of runs.csv compared (those absent from either table are skipped) -> their label."""


def read_runs(folder: Path) -> pd.DataFrame:
    """A report's ``tables/runs.csv``, with each run's final evaluation joined by (arm, seed) where the report
    wrote ``tables/final_eval.csv``: the only per-run record of it once the raw runs are gone."""
    runs = with_last_distinct(pd.read_csv(folder / "tables" / "runs.csv"), folder / "tables" / "eval_points.csv")
    path = folder / "tables" / FINAL_TABLE
    if not path.is_file():
        return runs
    final = pd.read_csv(path)
    alone = final.rename(columns={"crafter_score": "final_eval_score", "distinct": "final_eval_distinct"})
    prior = final[final["ablation"].str.endswith(WITH_PRIOR)].rename(columns={"crafter_score": "final_eval_prior_score"})
    prior = prior.assign(ablation=prior["ablation"].str.removesuffix(WITH_PRIOR))
    for part, columns in ((alone, ["final_eval_score", "final_eval_distinct"]), (prior, ["final_eval_prior_score"])):
        runs = runs.merge(part[["ablation", "seed", *columns]], on=["ablation", "seed"], how="left")
    return runs


def with_last_distinct(runs: pd.DataFrame, eval_points: Path) -> pd.DataFrame:
    """``runs`` with ``distinct_last``: how many achievements a Crafter run's last periodic evaluation unlocked
    (issue 10's second measure of ``full`` against ``rl_only``), where ``eval_points`` has achievement columns."""
    points = pd.read_csv(eval_points) if eval_points.is_file() else pd.DataFrame()
    if not any(c.startswith("ach_") for c in points.columns):
        return runs
    last = points.loc[points.groupby(["env", "ablation", "seed"])["env_step"].idxmax()]
    last = last.assign(distinct_last=distinct_achievements(last))[["env", "ablation", "seed", "distinct_last"]]
    return runs.merge(last, on=["env", "ablation", "seed"], how="left")


def arm_pairs(baseline: pd.DataFrame, experiment: pd.DataFrame, against: str | None = None):
    """``(env, label, experiment runs, baseline runs)`` per (env, arm) of the experiment whose baseline arm ran.

    ``against``: the baseline arm every experiment arm is compared with (default: the arm of the same name),
    named in the label as ``"<arm> vs <against>"``.
    """
    for (env, arm), group in experiment.groupby(["env", "ablation"], sort=True):
        base = baseline[(baseline["env"] == env) & (baseline["ablation"] == (against or arm))]
        if len(base):
            yield env, (arm if against is None else f"{arm} vs {against}"), group, base


def comparison_rows(baseline: pd.DataFrame, experiment: pd.DataFrame, seed: int = 0,
                    against: str | None = None) -> list[dict]:
    """One row per (env, arm, metric) present on both sides: means, n, difference CI, P(improvement).

    ``against``: the baseline arm every experiment arm is compared with (default: the arm of the same name).
    """
    rows = []
    for env, arm, group, base in arm_pairs(baseline, experiment, against):
        for metric, label in METRICS.items():
            if metric not in group or metric not in base:
                continue
            x, y = group[metric].dropna().to_numpy(float), base[metric].dropna().to_numpy(float)
            if not (x.size and y.size):
                continue
            c = st.compare(x, y, seed=seed)
            rows.append({"env": env, "arm": arm, "metric": label, "n_experiment": c.n_x, "n_benchmark": c.n_y,
                         "experiment": c.mean_x, "benchmark": c.mean_y, "difference": c.difference.estimate,
                         "low": c.difference.low, "high": c.difference.high, "p_higher": c.p_improve.estimate,
                         "reading": interval_word(c.difference.low, c.difference.high)})
    return rows


PAIRED_METRICS = {"auc": "AUC", "final_sr": "final SR", "crafter_score": METRICS["crafter_score"],
                  "distinct_last": METRICS["distinct_last"], **FINAL_COLUMNS}


def paired_rows(baseline: pd.DataFrame, experiment: pd.DataFrame, seed: int = 0,
                against: str | None = None) -> list[dict]:
    """One row per (env, arm, metric) with seeds run on both sides: the mean per-seed difference and its CI."""
    rows = []
    for env, arm, group, base in arm_pairs(baseline, experiment, against):
        for metric, label in PAIRED_METRICS.items():
            if metric not in group or metric not in base:
                continue
            both = (group.set_index("seed")[metric].rename("x").to_frame()
                    .join(base.set_index("seed")[metric].rename("y"), how="inner").dropna())
            if len(both) < 2:
                continue
            d = st.paired_difference(both["x"].to_numpy(), both["y"].to_numpy(), seed=seed)
            rows.append({"env": env, "arm": arm, "metric": label, "n": len(both), "difference": d.estimate, "low": d.low, "high": d.high,
                         "reading": interval_word(d.low, d.high)})
    return rows


def caught_rows(baseline: pd.DataFrame, experiment: pd.DataFrame, against: str | None = None) -> list[dict]:
    """Per (env, arm) with advice trust on both sides: in how many runs the act-time trust fell below TRUST_LOW
    (``trust_low_step``) and the median and range of the first env step it did, for either side."""
    rows = []
    for env, arm, group, base in arm_pairs(baseline, experiment, against):
        if ("trust_low_frac" not in group or "trust_low_frac" not in base or group["trust_low_frac"].isna().all()
                or base["trust_low_frac"].isna().all()):
            continue  # one side ran no advice trust, or predates the column
        row = {"env": env, "arm": arm}
        for side, runs in (("experiment", group), ("benchmark", base)):
            ran = runs[runs["trust_low_frac"].notna()]
            steps = ran["trust_low_step"].dropna() if "trust_low_step" in ran else pd.Series(dtype=float)
            row[side] = (f"{len(steps)} / {len(ran)}" + (f", median {steps.median():.0f} ({steps.min():.0f}–"
                                                          f"{steps.max():.0f})" if len(steps) else ""))
        rows.append(row)
    return rows


def markdown(rows: list[dict], title: str, baseline: str = "docs/benchmark", paired: list[dict] | None = None,
             caught: list[dict] | None = None) -> str:
    against = "the benchmark's runs" if baseline == "docs/benchmark" else f"the runs of `{baseline}`"
    lines = [f"# {title}: against {against}", "",
             "Written by `benchmarks/experiment_compare.py` from the two reports' `tables/runs.csv`; do not edit. "
             "Per arm and metric: the experiment's mean, the benchmark's, their difference with its 95% bootstrap "
             f"CI (seeds resampled within each group), n on both sides († fewer than {FEW_SEEDS}) and P(a run of "
             "the experiment scores higher than a run of the benchmark).", "",
             "| env | arm | metric | n (exp / bench) | experiment | benchmark | difference [95% CI] | P(higher) | reading |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        flag = "" if min(r["n_experiment"], r["n_benchmark"]) >= FEW_SEEDS else "†"
        lines.append(f"| {r['env']} | {r['arm']} | {r['metric']} | {r['n_experiment']} / {r['n_benchmark']}{flag} | "
                     f"{r['experiment']:.3f} | {r['benchmark']:.3f} | {r['difference']:+.3f} "
                     f"[{r['low']:+.3f}, {r['high']:+.3f}] | {r['p_higher']:.2f} | {r['reading']} |")
    if paired:
        lines += ["", "## Paired by seed", "",
                  "Seeds run on both sides only: the mean of the per-seed differences (experiment − benchmark) and "
                  "its 95% bootstrap CI over seeds. A seed's runs share their evaluation layouts and env seeds in "
                  "every arm, so its difficulty cancels in the pair.", "",
                  "| env | arm | metric | n seeds | difference [95% CI] | reading |", "|---|---|---|---|---|---|"]
        for r in paired:
            flag = "" if r["n"] >= FEW_SEEDS else "†"
            lines.append(f"| {r['env']} | {r['arm']} | {r['metric']} | {r['n']}{flag} | {r['difference']:+.3f} "
                         f"[{r['low']:+.3f}, {r['high']:+.3f}] | {r['reading']} |")
    if caught:
        lines += ["", "## When the advice was caught", "",
                  f"Runs whose act-time trust in the LLM fell below {TRUST_LOW:g} (advice then acts at most at a fifth "
                  "of beta) "
                  "out of the runs with advice trust, and the first logged env step it did: median (range) over "
                  "those runs.", "", "| env | arm | experiment | benchmark |", "|---|---|---|---|"]
        lines += [f"| {r['env']} | {r['arm']} | {r['experiment']} | {r['benchmark']} |" for r in caught]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--experiment", type=Path, required=True, help="the experiment's report folder")
    p.add_argument("--baseline", type=Path, default=Path("docs/benchmark"), help="the benchmark's report folder")
    p.add_argument("--title", default=None, help="heading (default: the experiment folder's name)")
    p.add_argument("--against", default=None, metavar="ARM",
                   help="compare every arm with this baseline arm (writes comparison_vs_ARM.md)")
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="the markdown to write (default: comparison.md or comparison_vs_ARM.md in the experiment folder)")
    args = p.parse_args(argv)
    if args.out is not None and (args.out.suffix != ".md" or not args.out.parent.is_dir()):
        p.error(f"--out: {args.out} must be a .md file in an existing folder")
    tables = [folder / "tables" / "runs.csv" for folder in (args.baseline, args.experiment)]
    for path in tables:
        if not path.is_file():
            p.error(f"{path} not found: run the workflow's report for that config first")
    baseline, experiment = (read_runs(folder) for folder in (args.baseline, args.experiment))
    if args.against is not None and args.against not in set(baseline["ablation"]):
        p.error(f"--against: no arm {args.against!r} in {tables[0]} (arms: {', '.join(sorted(set(baseline['ablation'])))})")
    rows = comparison_rows(baseline, experiment, against=args.against)
    if not rows:
        print(f"experiment_compare: no (env, arm) of {tables[1]} is in {tables[0]}", file=sys.stderr)
        return 1
    out = args.out or args.experiment / ("comparison.md" if args.against is None else f"comparison_vs_{args.against}.md")
    paired = paired_rows(baseline, experiment, against=args.against)
    text = markdown(rows, args.title or args.experiment.name, str(args.baseline).rstrip("/"), paired,
                    caught_rows(baseline, experiment, against=args.against))
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
