"""The workflow on a real single-node SLURM cluster through workflow/profiles/slurm.

The test starts munged, slurmctld and slurmd (Debian's slurmctld/slurmd/slurm-client/munge) as
root, or reuses a cluster that is already up, runs config/test.yaml through the SLURM profile
and checks that every job went through sbatch and that all outputs exist. It stops only the
daemons it started, by PID. CI runs it as root; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import (
    CONF_MARKER,
    HANG_GUARD_S,
    REPO,
    URGENT_PARTITION,
    SlurmCluster,
    SlurmUnavailable,
    have_latex,
    job_env,
    run_snakemake,
    slurm_unavailable_reason,
    snakemake_cmd,
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
    # sbatch --requeue: SLURM requeues a job it preempts (PreemptMode=REQUEUE) instead of cancelling it
    assert profile["slurm-requeue"] is True


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


def _jobs_by_id(env: dict) -> dict[str, tuple[str, str]]:
    """{job id: (comment, state)} of the jobs SLURM still remembers (MinJobAge keeps finished ones)."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%k|%T"], capture_output=True, text=True,
                         env=env, check=True).stdout
    jobs = {}
    for line in out.splitlines():
        if line.count("|") == 2:
            job_id, comment, state = line.split("|")
            jobs[job_id] = (comment, state)
    return jobs


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(REASON is not None, reason=f"cannot run SLURM here: {REASON}")
def test_test_config_runs_through_the_slurm_profile(slurm_cluster, tmp_path):

    env = {**os.environ, **slurm_cluster.env}
    before = set(_jobs_by_id(env))
    configfile = write_config(tmp_path / "test.yaml", paper=have_latex(), results_root="results")
    config = yaml.safe_load(configfile.read_text())
    workdir = tmp_path / "work"
    proc = run_snakemake(
        workdir, "--profile", str(PROFILE), "--jobs", "4", "--latency-wait", "5",
        "--slurm-init-seconds-before-status-checks", "2", "--slurm-keep-successful-logs",
        configfile=configfile, timeout=HANG_GUARD_S, env=slurm_cluster.env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    output = proc.stdout + proc.stderr
    assert "sbatch" in output or "SLURM" in output

    # keyed by comment (rule and wildcards); job ids of earlier tests, still listed, are left out
    jobs = {c: s for job_id, (c, s) in _jobs_by_id(env).items() if job_id not in before}
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


# --------------------------------------------------------------------------- preemption

RESUMED = re.compile(r"lore: resuming \S+ from checkpoint at env step (\d+)")
INTERRUPTED = re.compile(r"lore: interrupted: checkpoint written at env step (\d+)")


def _slurm(*args: str, env: dict) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, env=env, check=True).stdout


def _train_jobs(env: dict, before: set[str], env_name: str = "") -> dict[str, str]:
    """{SLURM job id: state} of the training jobs this test submitted (of ``env_name``'s runs if given)."""
    out = _slurm("squeue", "-h", "-t", "all", "-o", "%i|%k|%T", env=env)
    jobs = {}
    for line in out.splitlines():
        job_id, comment, state = line.split("|")
        if comment.startswith("rule_train") and env_name in comment and job_id not in before:
            jobs[job_id] = state
    return jobs


def _preempt(env: dict) -> str:
    """Submit a job to the `urgent` partition asking for every CPU of the node: SLURM preempts the
    running training job to start it, as a higher-priority job of another user would."""
    cpus = _slurm("sinfo", "-h", "-p", URGENT_PARTITION, "-o", "%c", env=env).split()[0]
    return _slurm("sbatch", "--parsable", "-p", URGENT_PARTITION, "-c", cpus.rstrip("+"), "--mem", "100",
                  "-o", "/dev/null", "--wrap", "sleep 2", env=env).strip()


def _checkpoint_step(run_dir: Path) -> int:
    from lore.train.checkpoint import CheckpointError, load_checkpoint

    try:
        return int(load_checkpoint(run_dir / "checkpoint.pt")["env_step"])
    except (FileNotFoundError, CheckpointError):
        return 0


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(REASON is not None, reason=f"cannot run SLURM here: {REASON}")
def test_a_preempted_training_job_resumes_from_its_checkpoint(slurm_cluster, tmp_path):
    """Preempt a running training job twice, by a job of a higher-priority partition:

    1. PreemptMode=REQUEUE (the job was submitted with --requeue): SLURM sends SIGTERM, `lore train`
       writes its checkpoint, SLURM requeues the job under the same id and restarts it later;
    2. PreemptMode=CANCEL: the job ends PREEMPTED, which the executor plugin alone would wait for
       forever; the workflow reports it as failed and Snakemake resubmits it (`retries`).

    Both times the run resumes from its checkpoint (the log says from which step; config.yaml, which a
    fresh start rewrites, keeps its mtime), and the workflow completes with every output."""
    env = {**os.environ, **slurm_cluster.env}
    config_text = _slurm("scontrol", "show", "config", env=env)
    partitions = _slurm("sinfo", "-h", "-o", "%R", env=env).split()
    if "preempt/partition_prio" not in config_text or URGENT_PARTITION not in partitions:
        pytest.skip("the running SLURM cluster has no partition_prio preemption and `urgent` partition "
                    "(a cluster started by tests/workflow_helpers.py has)")
    if CONF_MARKER not in slurm_cluster.conf.read_text():
        pytest.skip("switching PreemptMode (scontrol update partition) is only done on a test cluster")
    before = set(_train_jobs(env, set()))

    steps = 1500
    configfile = write_config(tmp_path / "preempt.yaml", ablations=["rl_only"], seeds=[0], paper=False,
                              results_root="results")
    config = yaml.safe_load(configfile.read_text())
    config["envs"] = config["envs"][:1]  # one training job: the other env's run would only add minutes
    config.pop("env_run")  # its only section is the dropped env's
    config["run"].update({"train.steps": steps, "train.checkpoint_every": 50, "train.log_every": 50,
                          "eval.every": 500})
    configfile.write_text(yaml.safe_dump(config))
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_dir = workdir / "results" / "runs" / config["envs"][0] / "rl_only" / "seed0"
    train_log = workdir / "results" / "logs" / "train" / config["envs"][0] / "rl_only" / "seed0.log"
    snakemake_log = tmp_path / "snakemake.log"

    def log_text() -> str:
        return train_log.read_text() if train_log.exists() else ""

    def wait(ready, timeout: float, what: str):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = ready()
            if value:
                return value
            assert proc.poll() is None, f"Snakemake exited while waiting for {what}:\n" + \
                snakemake_log.read_text()[-4000:]
            time.sleep(1)
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n--- train log:\n{log_text()[-3000:]}"
                    f"\n--- snakemake:\n{snakemake_log.read_text()[-3000:]}")

    cmd = snakemake_cmd(workdir, "--profile", str(PROFILE), "--jobs", "1", "--latency-wait", "5",
                        "--slurm-init-seconds-before-status-checks", "2", configfile=configfile)
    with open(snakemake_log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=job_env(slurm_cluster.env),
                                start_new_session=True)
    try:
        # --- 1. PreemptMode=REQUEUE: requeued under the same job id, resumes when it restarts
        job_id = wait(lambda: next((j for j, s in _train_jobs(env, before, config["envs"][0]).items()
                                    if s == "RUNNING"), None), HANG_GUARD_S, "the training job to run")
        wait(lambda: _checkpoint_step(run_dir) >= 100, HANG_GUARD_S, "a checkpoint at env step >= 100")
        config_stamp = (run_dir / "config.yaml").stat().st_mtime_ns  # a fresh start would rewrite it
        step_before = _checkpoint_step(run_dir)
        _preempt(env)
        wait(lambda: _train_jobs(env, before).get(job_id) == "PENDING", HANG_GUARD_S, "the preempted job to be requeued")
        assert "Restarts=1" in _slurm("scontrol", "show", "job", job_id, env=env)
        first = int(wait(lambda: RESUMED.findall(log_text()), HANG_GUARD_S, "the requeued job to resume")[0])
        assert first >= step_before > 0, (first, step_before)
        interrupted = [int(s) for s in INTERRUPTED.findall(log_text())]
        assert interrupted and interrupted[0] == first, "lore train did not checkpoint on SLURM's SIGTERM"

        # --- 2. PreemptMode=CANCEL: the job ends PREEMPTED; Snakemake resubmits it as a new job
        _slurm("scontrol", "update", f"PartitionName={_default_partition(env)}", "PreemptMode=CANCEL", env=env)
        wait(lambda: _checkpoint_step(run_dir) > first, HANG_GUARD_S, "a checkpoint after the first resume")
        step_before_second = _checkpoint_step(run_dir)
        _preempt(env)
        wait(lambda: _train_jobs(env, before).get(job_id) == "PREEMPTED", HANG_GUARD_S, "the job to be preempted")
        second = wait(lambda: RESUMED.findall(log_text())[1:], HANG_GUARD_S, "the resubmitted job to resume")
        second = int(second[0])
        assert second >= step_before_second > first, (first, step_before_second, second)
        assert proc.wait(timeout=HANG_GUARD_S) == 0, snakemake_log.read_text()[-5000:]
    finally:
        subprocess.run(["scontrol", "update", f"PartitionName={_default_partition(env)}", "PreemptMode=REQUEUE"],
                       env=env, capture_output=True)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)

    output = snakemake_log.read_text()
    jobs = _train_jobs(env, before)
    # the preempted job, then the resubmission(s) Snakemake made for it, all completed
    others = [state for j, state in jobs.items() if j != job_id]
    assert jobs.get(job_id) == "PREEMPTED" and others and set(others) == {"COMPLETED"}, jobs
    assert f"SLURM job {job_id} was preempted" in output
    assert (run_dir / "done").is_file()
    assert (run_dir / "config.yaml").stat().st_mtime_ns == config_stamp, "the run started over instead of resuming"
    assert RESUMED.findall(log_text()) == [str(first), str(second)]
    eval_steps = pd.read_csv(run_dir / "eval.csv")["env_step"].tolist()
    assert eval_steps == sorted(set(eval_steps)) and eval_steps[-1] == steps, eval_steps
    assert pd.read_csv(run_dir / "episodes.csv")["episode"].is_unique
    assert (workdir / "results" / "tables" / "stats.csv").is_file()
    print(f"preempted (REQUEUE) at checkpoint step {step_before}, resumed at {first}; "
          f"preempted (CANCEL) after {first}, resubmitted and resumed at {second}; SLURM jobs {jobs}")
    for line in log_text().splitlines():
        if RESUMED.search(line) or INTERRUPTED.search(line):
            print(line)


def _default_partition(env: dict) -> str:
    for name in _slurm("sinfo", "-h", "-o", "%P", env=env).split():
        if name.endswith("*"):
            return name.rstrip("*")
    raise AssertionError("no default partition")
