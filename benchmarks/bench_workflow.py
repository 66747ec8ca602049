"""Workflow benchmarks:

1. dry run of the 132-job paper grid (config/paper.yaml)               goal <= 5 s
   dry run of the benchmark with every declared experiment
   (config/benchmark.yaml, --config experiment=all)                      goal <= 10 s
2. aggregate + statistics + figures + paper macros over 132 synthetic
   run directories (2 envs x 11 ablations x 6 seeds)                     goal <= 60 s
3. (--main-job) wall time of the default main job, config/config.yaml,
   `snakemake --cores 2` in a scratch directory                          goal <= 30 min

    .venv/bin/python benchmarks/bench_workflow.py [--main-job] [--out results/benchmarks/workflow.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def snakemake(workdir: Path, configfile: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(configfile), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def bench_dry_run(repeats: int = 3) -> dict:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            proc = snakemake(Path(tmp), REPO / "config" / "paper.yaml", "-n", "--quiet", timeout=300)
            times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr[-3000:])
    return {"paper_grid_dry_run_s": round(statistics.median(times), 2), "runs": [round(t, 2) for t in times],
            "goal_s": 5}


def bench_experiments_dry_run(repeats: int = 3) -> dict:
    """The benchmark's config with every declaration of config/experiments/ planned (runs identified by config)."""
    import shutil

    times, jobs = [], None
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(REPO / "config", Path(tmp) / "config")
            start = time.perf_counter()
            proc = snakemake(Path(tmp), Path(tmp) / "config" / "benchmark.yaml", "-n", "--config", "experiment=all",
                             timeout=300)
            times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr[-3000:])
            jobs = next((int(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("total")), None)
    return {"experiments_dry_run_s": round(statistics.median(times), 2), "runs": [round(t, 2) for t in times],
            "jobs": jobs, "goal_s": 10}


def bench_analysis() -> dict:
    from lore.paper.build import write_generated
    from lore.report.aggregate import AnalysisSettings, aggregate
    from lore.report.figures import make_figures
    from lore.report.latex import write_latex_tables
    from lore.report.runs import load_runs
    from lore.report.synthetic import write_grid

    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    settings = AnalysisSettings.from_mapping(config["analysis"])
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        # DoorKey at its full 100k budget; Crafter shortened to 200k so the synthetic files stay small.
        paths = write_grid(tmp / "runs", config["envs"], config["ablations"], config["seeds"], steps=100_000,
                           eval_every=2_500, env_steps={"crafter": 200_000})
        out["write_synthetic_s"] = round(time.perf_counter() - start, 2)
        out["run_dirs"] = len(paths)
        crafter = dict(settings.env_budgets)
        crafter["crafter"] = (50_000, 100_000, 200_000)
        settings = AnalysisSettings.from_mapping({**config["analysis"], "env_budgets": crafter})
        t0 = time.perf_counter()
        runs = load_runs(paths)
        t1 = time.perf_counter()
        tables = aggregate(runs, settings)
        tables.write_csv(tmp / "tables")
        write_latex_tables(tables, settings, tmp / "tables")
        t2 = time.perf_counter()
        make_figures(runs, tables, settings, tmp / "figures")
        t3 = time.perf_counter()
        write_generated(tables, settings, tmp / "generated", config["envs"])
        t4 = time.perf_counter()
        out.update(load_s=round(t1 - t0, 2), aggregate_stats_s=round(t2 - t1, 2), figures_s=round(t3 - t2, 2),
                   macros_s=round(t4 - t3, 2), total_s=round(t4 - t0, 2), goal_s=60)
    return out


def bench_main_job() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = snakemake(Path(tmp), REPO / "config" / "config.yaml", "--cores", "2", timeout=3 * 3600)
        elapsed = time.perf_counter() - start
        result = {"main_job_s": round(elapsed, 1), "returncode": proc.returncode, "goal_s": 1800}
        if proc.returncode != 0:
            result["stderr_tail"] = proc.stderr[-2000:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--main-job", action="store_true", help="also time the default main job (~30 min)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    results = {"dry_run": bench_dry_run(), "experiments_dry_run": bench_experiments_dry_run(),
               "analysis": bench_analysis()}
    if args.main_job:
        results["main_job"] = bench_main_job()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
