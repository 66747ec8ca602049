"""The LLM-prior benchmark (README Figure 1, docs/benchmark/): the workflow run on config/benchmark.yaml.

    .venv/bin/python benchmarks/prior_benchmark.py          # ~3.2 h on 2 idle cores; resumes
    .venv/bin/python benchmarks/prior_benchmark.py -n       # what would run (other flags go to snakemake)

is ``snakemake --cores 2 --configfile config/benchmark.yaml --profile workflow/profiles/default`` run in
the repository: the grid (DoorKey-5x5: 8 arms, 3 or 5 seeds; the held-out LavaGapS5: 4 arms, 3 seeds) and
the run settings are declared once, in config/benchmark.yaml; runs, tables and figures go to results/bench/,
the report (README.md, summary.csv, figures/, tables/) to docs/benchmark/. The profile keeps training the
other runs when one fails and reruns interrupted ones, which resume from their checkpoints.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = "config/benchmark.yaml"
PROFILE = "workflow/profiles/default"


def snakemake_command(cores: int, extra: list[str]) -> list[str]:
    """The workflow call, relative to the repository (its config and profile are checked-in paths)."""
    return [sys.executable, "-m", "snakemake", "--snakefile", "Snakefile", "--configfile", CONFIG,
            "--profile", PROFILE, "--cores", str(cores), *extra]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cores", type=int, default=2, help="CPU cores (one training run per core)")
    args, extra = p.parse_known_args(argv)
    return subprocess.call(snakemake_command(args.cores, extra), cwd=REPO)


if __name__ == "__main__":
    sys.exit(main())
