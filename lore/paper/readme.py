"""The README's generated blocks, each between two marker lines: the headline table, from the benchmark's
``summary.csv``, and the speed paragraph, from the peer benchmark's JSON (``benchmarks/peer_benchmark.py``).

    python -m lore.paper.readme [--summary docs/benchmark/summary.csv] [--peer docs/benchmark/peer.json]
                                [--readme README.md] [--check]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import textwrap
from pathlib import Path

HEADLINE, SPEED = "headline", "speed"
"""The names of the README's generated blocks (their marker lines: :func:`markers`)."""
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


def markers(block: str) -> tuple[str, str]:
    """The start and end marker lines of the README's generated ``block``."""
    return f"<!-- {block}:start -->", f"<!-- {block}:end -->"


def with_block(readme: str, block: str, text: str) -> str:
    """``readme`` with the text between ``block``'s marker lines replaced by ``text``."""
    start, end = markers(block)
    if start not in readme or end not in readme:
        raise ValueError(f"README: the marker lines {start} and {end} are missing")
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{text}\n{end}{tail}"


def speed_text(peer: Path, size: str = "xs") -> str:
    """The speed paragraph: one update of ``full`` at ``size`` against sheeprl's, on the CPU clock (median ratio
    and interquartile range over the rounds), with one critic head, and when and where it was measured."""
    try:
        data = json.loads(peer.read_text())
        meta = data["meta"]
        row = next(r for r in data["rows"] if r["size"] == size)
        cpu = row["cpu_ms"]
        ratio, core = cpu["full/peer"], cpu["core/peer"]
        text = (f"**Speed.** One DreamerV3 update of `full` at {size.upper()} (batch {meta['batch']}x{meta['length']}, one "
                f"thread): {cpu['full'][1]:.0f} ms of CPU, {ratio[1]:.2f}x sheeprl {meta['sheeprl']}'s (interquartile "
                f"range {ratio[0]:.2f}-{ratio[2]:.2f}x, {row['rounds']} rounds); {core[1]:.2f}x with one critic head, as "
                f"sheeprl has. {meta['cpus']} CPUs ({meta.get('cpu', 'model not recorded')}), {meta['when']}, "
                "`benchmarks/peer_benchmark.py` ([report](docs/benchmark/peer.md)).")
    except (KeyError, IndexError, TypeError, StopIteration, json.JSONDecodeError) as e:
        raise ValueError(f"{peer}: not a peer benchmark result with size {size} ({type(e).__name__}: {e})") from e
    return textwrap.fill(text, width=110, break_long_words=False, break_on_hyphens=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lore.paper.readme", description=__doc__.split("\n")[0])
    p.add_argument("--summary", type=Path, default=Path("docs/benchmark/summary.csv"))
    p.add_argument("--peer", type=Path, default=Path("docs/benchmark/peer.json"))
    p.add_argument("--readme", type=Path, default=Path("README.md"))
    p.add_argument("--check", action="store_true", help="exit 1 if a generated block is stale; write nothing")
    args = p.parse_args(argv)
    try:
        text = args.readme.read_text()
        updated = with_block(text, HEADLINE, headline_table(args.summary))
        if markers(SPEED)[0] in updated:
            updated = with_block(updated, SPEED, speed_text(args.peer))
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
