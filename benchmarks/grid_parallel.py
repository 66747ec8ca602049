"""Run a workflow grid's training jobs on a many-core machine without Snakemake, under a wall-clock deadline.

    python benchmarks/grid_parallel.py --configfile config/benchmark.yaml config/lavagap_seeds.yaml \
        --jobs 16 --deadline-s 540 --archive $OUT/runs.tar.gz

For a borrowed machine that has many cores, a time limit and no Snakemake (the device machine of
docs/benchmark/gpu/): the config files are merged as ``snakemake --configfile A B`` merges them, checked by
the workflow's own :func:`lore.analysis.grid.check_workflow_config`, and each run gets exactly the
``lore train`` arguments the workflow's ``train`` rule gives it (:func:`lore.analysis.grid.train_command_args`),
one thread each, into the same run directories. Runs whose ``done`` marker exists are skipped. At the
deadline every run still going gets SIGTERM (``lore train`` writes its checkpoint and exits) and no new one
starts. ``--archive`` packs the run directories without their checkpoints (which hold the replay buffer)
into one tar.gz; unpacked into the repository, ``snakemake`` with the same config files then sees the
finished runs as done and only aggregates. Prints one line per run: finished, stopped or failed, and its
wall time.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml

from lore.analysis.grid import check_workflow_config, grid_jobs, train_command_args
from lore.config import deep_merge

ARCHIVE_SKIP = ("checkpoint.pt", ".lock")
"""Run files left out of the archive: the checkpoint (model, optimiser and replay; ~80 MB) and the run lock."""


def merged_config(paths: list[Path]) -> dict:
    """Config files merged like ``snakemake --configfile``: later files update earlier ones, nested dicts key by key."""
    config: dict = {}
    for path in paths:
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise SystemExit(f"grid_parallel: error: {path}: a workflow config must be a mapping")
        config = deep_merge(config, loaded)
    return config


def job_command(config: dict, job) -> str:
    return (f"exec {sys.executable} -m lore.cli train --run-dir {job.run_dir} "
            f"{train_command_args(config, job.env, job.ablation, job.seed)} --no-progress "
            f">> {job.run_dir}/train.log 2>&1")


def run_all(config: dict, jobs: list, parallel: int, deadline_s: float) -> list[tuple]:
    """Start up to ``parallel`` runs at a time until the deadline; returns (job, status, wall_s) per run."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    pending = [j for j in jobs if not Path(j.run_dir, "done").exists()]
    results = [(j, "already done", 0.0) for j in jobs if Path(j.run_dir, "done").exists()]
    running: dict = {}
    stopping = False
    while pending or running:
        late = time.monotonic() - start >= deadline_s
        if late and not stopping:
            stopping = True
            for proc, _, _ in running.values():
                proc.send_signal(signal.SIGTERM)  # lore train checkpoints and exits
        while pending and not stopping and len(running) < parallel:
            job = pending.pop(0)
            Path(job.run_dir).mkdir(parents=True, exist_ok=True)
            proc = subprocess.Popen(job_command(config, job), shell=True, env=env, start_new_session=True)
            running[proc.pid] = (proc, job, time.monotonic())
        for pid, (proc, job, t0) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[pid]
            done = Path(job.run_dir, "done").exists()
            status = "finished" if done else ("stopped at the deadline" if stopping else f"failed (exit {proc.returncode})")
            results.append((job, status, time.monotonic() - t0))
            print(f"grid_parallel: {job.env} {job.ablation} seed {job.seed}: {status}, "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
        if stopping and not running:
            results += [(j, "not started", 0.0) for j in pending]
            break
        time.sleep(1.0)
    return results


def write_archive(jobs: list, archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(archive.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for job in jobs:
            run = Path(job.run_dir)
            for path in sorted(run.glob("*")) if run.is_dir() else []:
                if path.is_file() and path.name not in ARCHIVE_SKIP:
                    tar.add(path, arcname=str(path))
    tmp.replace(archive)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configfile", nargs="+", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="runs at a time (one thread each)")
    parser.add_argument("--deadline-s", type=float, default=float("inf"),
                        help="SIGTERM every run still going after this many seconds")
    parser.add_argument("--archive", type=Path, help="tar.gz of the run directories without checkpoints")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    missing = [str(p) for p in args.configfile if not p.is_file()]
    if missing:
        parser.error(f"--configfile: no such file: {', '.join(missing)}")
    config = merged_config(args.configfile)
    check_workflow_config(config)
    jobs = grid_jobs(config)
    results = run_all(config, jobs, args.jobs, args.deadline_s)
    if args.archive:
        write_archive(jobs, args.archive)
    finished = sum(status in ("finished", "already done") for _, status, _ in results)
    print(f"grid_parallel: {finished}/{len(jobs)} runs done")
    return 0 if finished == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
