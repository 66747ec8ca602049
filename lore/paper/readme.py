"""The README's headline table, written from the benchmark's ``summary.csv`` between two marker lines.

    python -m lore.paper.readme [--summary docs/benchmark/summary.csv] [--readme README.md] [--check]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

START, END = "<!-- headline:start -->", "<!-- headline:end -->"
ARMS = ("rl_only", "full", "full_adversarial")
"""The arms the headline shows: DreamerV3 alone, the method, the method under attack."""


def _float(row: dict, key: str) -> float:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return math.nan


def _cell(row: dict, metric: str) -> str:
    mean, low, high = (_float(row, f"{metric}_mean{s}") for s in ("", "_low", "_high"))
    if not math.isfinite(mean):
        return "—"
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def final_budget(header: list[str]) -> str | None:
    """The largest ``sr@<budget>`` column of the summary (the final evaluation)."""
    budgets = [int(c[3:].split("_")[0]) for c in header if c.startswith("sr@") and c.endswith("_mean")]
    return f"sr@{max(budgets)}" if budgets else None


def headline_table(summary: Path) -> str:
    """Markdown: per env and arm, AUC and final SR with their 95% CIs over seeds, and n."""
    with open(summary, newline="") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows = [r for r in reader if r.get("arm") in ARMS]
    final = final_budget(header)
    if final is None or "auc_mean" not in header:
        raise ValueError(f"{summary}: expected columns auc_mean and sr@<budget>_mean (a benchmark summary.csv)")
    steps = int(final[3:])
    lines = [f"| env | arm | n | AUC [95% CI] | SR at {steps // 1000}k steps [95% CI] | LLM calls |",
             "|---|---|---|---|---|---|"]
    order = {arm: i for i, arm in enumerate(ARMS)}
    for row in sorted(rows, key=lambda r: (r["env"], order[r["arm"]])):
        env = row["env"].removeprefix("MiniGrid-").removesuffix("-v0")
        calls = _float(row, "llm_calls_mean")
        lines.append(f"| {env} | `{row['arm']}` | {row.get('runs', '—')} | {_cell(row, 'auc')} | "
                     f"{_cell(row, final)} | {calls:.0f} |")
    return "\n".join(lines)


def with_headline(readme: str, table: str) -> str:
    """``readme`` with the text between the marker lines replaced by ``table``."""
    if START not in readme or END not in readme:
        raise ValueError(f"README: the marker lines {START} and {END} are missing")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lore.paper.readme", description=__doc__.split("\n")[0])
    p.add_argument("--summary", type=Path, default=Path("docs/benchmark/summary.csv"))
    p.add_argument("--readme", type=Path, default=Path("README.md"))
    p.add_argument("--check", action="store_true", help="exit 1 if the README's table is stale; write nothing")
    args = p.parse_args(argv)
    try:
        text = args.readme.read_text()
        updated = with_headline(text, headline_table(args.summary))
    except (OSError, ValueError) as e:
        print(f"lore: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if args.check:
        return 0 if updated == text else 1
    if updated != text:
        from lore.utils.io import atomic_write_text

        atomic_write_text(args.readme, updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
