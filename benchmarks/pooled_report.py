"""The benchmark's tables and issue-9 targets over the runs of several reports pooled: more seeds, extra arms.

    .venv/bin/python benchmarks/pooled_report.py --reports docs/benchmark docs/benchmark/lavagap_seeds \
        docs/benchmark/kl_adversarial --configfile config/benchmark.yaml --out docs/benchmark/pooled

``--replacing`` names reports of a newer default: each (env, arm) they hold replaces every run of that (env, arm) in
``--reports`` (arms that the change does not touch keep their runs; the README lists what was replaced).

Each report folder is one the workflow wrote (``benchmark_report.out``) with its per-run table
``tables/runs.csv``. Their rows are concatenated, per (env, arm, seed) once: a run in two reports is an error,
as is an (env, arm) whose runs differ in any recorded setting (``cfg_*`` columns), so only runs of one
configuration are ever pooled. The statistics are the workflow's own (``lore.analysis.aggregate.stats_table``,
with the ``analysis:`` settings of ``--configfile``) and so are the arm table and the targets
(``lore.analysis.benchmark_report``). Writes ``README.md`` (which report each arm's seeds come from, then per
environment the arm table and the targets) and ``tables/runs.csv`` / ``tables/stats.csv`` of the pooled runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import yaml

from lore.analysis.aggregate import stats_table
from lore.analysis.benchmark_report import arm_table, episodes_per_point, summary_table, targets_block
from lore.analysis.latex import FEW_SEEDS
from lore.analysis.settings import AnalysisSettings
from lore.utils.io import atomic_write_text

KEY = ["env", "ablation", "seed"]


class PoolError(ValueError):
    """Runs that cannot be pooled; the message names them."""


def pooled_runs(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Rows of every table with a ``source`` column; raises :class:`PoolError` on a run twice or mixed settings."""
    frames = [t.assign(source=name) for name, t in tables.items()]
    runs = pd.concat(frames, ignore_index=True, sort=False)
    twice = runs[runs.duplicated(KEY, keep=False)]
    if len(twice):
        first = twice.sort_values(KEY).iloc[0]
        where = ", ".join(twice[(twice[KEY] == first[KEY]).all(axis=1)]["source"])
        raise PoolError(f"{first['env']} {first['ablation']} seed {first['seed']} is in more than one report ({where})")
    settings = [c for c in runs.columns if c.startswith("cfg_")]
    for (env, arm), group in runs.groupby(["env", "ablation"], sort=True):
        for column in settings:
            values = group[[column, "source"]].dropna(subset=[column]).astype({column: str})
            if values[column].nunique() > 1:
                shown = "; ".join(f"{v} ({', '.join(sorted(set(g['source'])))})" for v, g in values.groupby(column))
                raise PoolError(f"{env} {arm}: {column} differs between the runs: {shown}")
    return runs


def replaced_arms(tables: dict[str, pd.DataFrame], newer: dict[str, pd.DataFrame]
                  ) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """``tables`` without the rows of any (env, arm) that a table of ``newer`` holds, and one line per drop."""
    arms = {arm: name for name, t in newer.items() for arm in t[["env", "ablation"]].itertuples(index=False, name=None)}
    kept, lines = {}, []
    for name, t in tables.items():
        hit = pd.Series([arm in arms for arm in t[["env", "ablation"]].itertuples(index=False, name=None)],
                        index=t.index, dtype=bool)
        for (env, arm), g in t[hit].groupby(["env", "ablation"], sort=True):
            lines.append(f"| {env} | {arm} | {len(g)} ({name}) | {arms[(env, arm)]} |")
        kept[name] = t[~hit]
    return kept, lines


def sources_lines(runs: pd.DataFrame) -> list[str]:
    lines = ["| env | arm | n | seeds (report) |", "|---|---|---|---|"]
    for (env, arm), group in runs.groupby(["env", "ablation"], sort=True):
        parts = [f"{', '.join(str(int(s)) for s in sorted(g['seed']))} ({source})"
                 for source, g in group.groupby("source", sort=False)]
        lines.append(f"| {env} | {arm} | {len(group)} | {'; '.join(parts)} |")
    return lines


def markdown(runs: pd.DataFrame, stats: pd.DataFrame, settings: AnalysisSettings, title: str,
             replaced: list[str] | None = None, note: str | None = None) -> str:
    summary = summary_table(stats, runs, settings)
    lines = [f"# {title}", "",
             "Written by `benchmarks/pooled_report.py` from the `tables/runs.csv` of the reports listed below; "
             f"do not edit. Eval success rate without the prior ({episodes_per_point(runs)}), mean and "
             f"{settings.confidence:.0%} bootstrap CI over seeds († fewer than {FEW_SEEDS}); AUC = mean eval SR "
             "over the run. Every pooled arm ran one configuration (its recorded settings are checked equal).", "",
             "Where each arm's seeds come from:", ""] + sources_lines(runs) + [""]
    if note:
        lines += [note, ""]
    if replaced:
        lines += ["Runs left out, replaced by every run of the same arm in a newer report (`--replacing`):", "",
                  "| env | arm | runs left out (report) | replaced by |", "|---|---|---|---|"] + replaced + [""]
    for env in sorted(runs["env"].unique()):
        budgets = settings.budgets_for(env)
        lines += [f"## {env}", ""] + arm_table(summary, env, budgets) + [""]
        lines += targets_block(stats, runs, env, budgets[-1], settings, "Targets (issue 9) on the pooled runs:")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reports", type=Path, nargs="+", required=True, help="report folders holding tables/runs.csv")
    p.add_argument("--replacing", type=Path, nargs="+", default=[],
                   help="newer reports: each (env, arm) they hold replaces that arm's runs in --reports")
    p.add_argument("--configfile", type=Path, default=Path("config/benchmark.yaml"),
                   help="workflow config whose analysis: section sets budgets and bootstrap")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--title", default="LLM-prior benchmark, pooled runs")
    p.add_argument("--note", default=None, help="a paragraph below the sources (e.g. which arms predate a default)")
    args = p.parse_args(argv)
    for flag, reports in (("--reports", args.reports), ("--replacing", args.replacing)):
        missing = [str(r / "tables" / "runs.csv") for r in reports if not (r / "tables" / "runs.csv").is_file()]
        if missing:
            p.error(f"{flag}: no runs table: {', '.join(missing)}")
    both = sorted(set(map(str, args.reports)) & set(map(str, args.replacing)))
    if both:
        p.error(f"--replacing: also in --reports: {', '.join(both)}")
    if not args.configfile.is_file():
        p.error(f"--configfile: no such file: {args.configfile}")
    config = yaml.safe_load(args.configfile.read_text()) or {}
    try:
        settings = AnalysisSettings.from_mapping(config.get("analysis"))
        newer = {str(r): pd.read_csv(r / "tables" / "runs.csv") for r in args.replacing}
        older, replaced = replaced_arms({str(r): pd.read_csv(r / "tables" / "runs.csv") for r in args.reports}, newer)
        runs = pooled_runs({**older, **newer})
    except (PoolError, ValueError) as exc:
        print(f"pooled_report: error: {exc}", file=sys.stderr)
        return 2
    stats = stats_table(runs.drop(columns="source"), settings)
    (args.out / "tables").mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "tables" / "runs.csv", runs.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(args.out / "tables" / "stats.csv", stats.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(args.out / "README.md", markdown(runs, stats, settings, args.title, replaced, args.note))
    print(f"pooled_report: {len(runs)} runs -> {args.out / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
