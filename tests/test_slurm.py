"""The workflow on a real single-node SLURM cluster through workflow/profiles/slurm.

The test starts munged, slurmctld and slurmd (Debian's slurmctld/slurmd/slurm-client/munge) as
root, or reuses a cluster that is already up, runs config/test.yaml through the SLURM profile
and checks that every job went through sbatch and that all outputs exist. It stops only the
daemons it started, by PID. CI runs it as root; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml
from workflow_helpers import (
    REPO,
    SlurmCluster,
    SlurmUnavailable,
    have_latex,
    run_snakemake,
    slurm_unavailable_reason,
    write_config,
)

PROFILE = REPO / "workflow" / "profiles" / "slurm"
REASON = slurm_unavailable_reason()


def test_slurm_profile_polls_with_squeue_and_resubmits():
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    # Without slurmdbd, sacct exits 1 and the plugin's sacct default never sees jobs finish.
    assert profile["slurm-status-command"] == "squeue"
    assert profile["retries"] >= 1 and profile["rerun-incomplete"] is True
    assert "jobs" in profile


@pytest.fixture(scope="module")
def slurm_cluster():
    if REASON:
        pytest.skip(f"cannot run SLURM here: {REASON}")
    cluster = SlurmCluster()
    try:
        cluster.start()
    except SlurmUnavailable as e:
        pytest.skip(f"cannot run SLURM here: {e}")
    yield cluster
    cluster.stop()


def _jobs_by_comment(env: dict) -> dict[str, str]:
    """{comment: state} of the jobs SLURM still remembers (MinJobAge keeps finished ones)."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%k|%T"], capture_output=True, text=True,
                         env=env, check=True).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(REASON is not None, reason=f"cannot run SLURM here: {REASON}")
def test_test_config_runs_through_the_slurm_profile(slurm_cluster, tmp_path):

    env = {**os.environ, **slurm_cluster.env}
    before = set(_jobs_by_comment(env))
    configfile = write_config(tmp_path / "test.yaml", paper=have_latex())
    config = yaml.safe_load(configfile.read_text())
    workdir = tmp_path / "work"
    proc = run_snakemake(
        workdir, "--profile", str(PROFILE), "--jobs", "4", "--latency-wait", "5",
        "--slurm-init-seconds-before-status-checks", "2", "--slurm-keep-successful-logs",
        configfile=configfile, timeout=2400, env=slurm_cluster.env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    output = proc.stdout + proc.stderr
    assert "sbatch" in output or "SLURM" in output

    jobs = {c: s for c, s in _jobs_by_comment(env).items() if c not in before}
    n_train = len(config["envs"]) * len(config["ablations"]) * len(config["seeds"])
    train_jobs = [c for c in jobs if c.startswith("rule_train")]
    assert len(train_jobs) == n_train, f"expected {n_train} sbatch'ed training jobs, SLURM saw {sorted(jobs)}"
    # the analysis and the TeX build are local rules: compute nodes need neither the tables nor TeX
    for rule in ("aggregate", "figures", "paper_macros", "paper"):
        assert not any(c.startswith(f"rule_{rule}") for c in jobs), f"rule {rule} went through sbatch"
    assert all(state == "COMPLETED" for state in jobs.values()), jobs
    assert any((workdir / ".snakemake" / "slurm_logs").rglob("*.log"))

    results = workdir / "results"
    for ablation in config["ablations"]:
        for seed in config["seeds"]:
            assert (results / "runs" / config["envs"][0] / ablation / f"seed{seed}" / "done").is_file()
    assert (results / "tables" / "stats.csv").is_file()
    assert (results / "figures" / "fig1_success.pdf").is_file()
    if config["paper"]:
        assert (results / "paper" / "lore.pdf").is_file()
