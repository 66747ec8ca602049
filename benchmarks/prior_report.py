"""The LLM-prior benchmark report for runs outside the workflow's layout (e.g. an older benchmark).

    .venv/bin/python benchmarks/prior_report.py --runs-root results/bench_welch --out /tmp/report

The benchmark itself writes its report through the workflow (``snakemake --configfile
config/benchmark.yaml``, rule ``benchmark_report``). This script runs the same code on every finished run
under ``--runs-root`` (``done`` present; unfinished ones are named on stderr and left out, so a benchmark
cut short reports what it reached, with its n): ``lore aggregate``, ``lore figures`` and
``python -m lore.analysis.cli benchmark-report`` (lore.analysis.benchmark_report), with the ``analysis:``
settings of config/benchmark.yaml. ``--out`` gets README.md, summary.csv, figures/ and tables/.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BENCHMARK_CONFIG = REPO / "config" / "benchmark.yaml"


def finished_runs(root: Path, run_list: Path) -> Path:
    """Write the finished runs under ``root`` to ``run_list``; unfinished ones are named on stderr."""
    done, unfinished = [], []
    for eval_csv in sorted(root.rglob("eval.csv")):
        (done if (eval_csv.parent / "done").exists() else unfinished).append(eval_csv.parent)
    for run in unfinished:
        print(f"prior_report: {run} has not finished; left out", file=sys.stderr)
    run_list.write_text("".join(f"{run}\n" for run in done))
    return run_list


def analysis_flags(config: Path) -> list[str]:
    """The statistics flags of the benchmark's ``analysis:`` section (lore.analysis.grid.analysis_args)."""
    import shlex

    from lore.analysis.grid import analysis_args

    return shlex.split(analysis_args(yaml.safe_load(config.read_text())))


def run_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "lore.analysis.cli", *args], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs-root", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--config", type=Path, default=BENCHMARK_CONFIG, help="workflow config with the analysis: settings")
    args = p.parse_args(argv)
    settings = analysis_flags(args.config)
    with tempfile.TemporaryDirectory() as work:
        tables, figures = Path(work) / "tables", Path(work) / "figures"
        runs = ["--run-list", str(finished_runs(args.runs_root, Path(work) / "run_list.txt"))]
        run_cli("aggregate", *runs, *settings, "--out", str(tables))
        run_cli("figures", *runs, *settings, "--tables", str(tables), "--out", str(figures))
        run_cli("benchmark-report", *settings, "--tables", str(tables), "--figures", str(figures), "--out", str(args.out))
    print((args.out / "README.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
