"""What the run archive costs: bytes per archived run, and the time to rebuild an experiment's comparison,
verdict and figure from the archive alone (no results/, no training), as on a fresh clone.

    .venv/bin/python benchmarks/bench_archive.py                        # runs/, decide_default
    .venv/bin/python benchmarks/bench_archive.py --experiment crafter_cpu_full

The rebuild runs ``python -m lore.experiments.cli compare <name>`` in a temporary copy of the tracked
tree (``git archive HEAD`` plus the working tree's ``runs/``) without ``results/``, so only archived runs
count; it is timed end to end, interpreter start included.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def entry_sizes(root: Path) -> list[int]:
    from lore.archive import index_archive

    return sorted(sum(f.stat().st_size for f in p.iterdir()) for p in index_archive(root).values())


def rebuild_seconds(name: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        clone.mkdir()
        tar = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(clone)], input=tar, check=True)
        subprocess.run(["rm", "-rf", str(clone / "runs")], check=True)
        subprocess.run(["cp", "-r", str(REPO / "runs"), str(clone / "runs")], check=True)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "lore.experiments.cli", "compare", name], cwd=clone,
                              capture_output=True, text=True, env={"PYTHONPATH": str(clone), "PATH": "/usr/bin:/bin"})
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"compare failed: {proc.stderr.strip()[-400:]}")
        return seconds, proc.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archive", type=Path, default=REPO / "runs")
    parser.add_argument("--experiment", default="decide_default")
    args = parser.parse_args()
    sizes = entry_sizes(args.archive)
    if not sizes:
        raise SystemExit(f"{args.archive}: no archived runs")
    print(f"archived runs: {len(sizes)}; bytes per run: median {statistics.median(sizes):.0f}, max {max(sizes)}, "
          f"min {min(sizes)}; total {sum(sizes)} ({sum(sizes) / len(sizes) * 200 / 1e6:.2f} MB per 200 runs)")
    seconds, verdict = rebuild_seconds(args.experiment)
    print(f"rebuild of {args.experiment}'s comparison, verdict and figure from the archive: {seconds:.1f} s "
          f"({verdict})")


if __name__ == "__main__":
    main()
