"""``lore status`` on hand-built run directories in every state, the ETA estimator, and plain log files."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_train import TINY
from workflow_helpers import HANG_GUARD_S

from lore.cli import main as lore_main
from lore.grid.status import read_csv_rows, workflow_lines
from lore.train.progress import (
    eta_seconds,
    format_duration,
    log_points,
    training_rate,
)
from lore.utils.io import exclusive_dir_lock

ENV, ARM = "MiniGrid-DoorKey-5x5-v0", "full"


# ---------------------------------------------------------------- the estimator


def test_prefill_intervals_never_enter_the_rate():
    # 1,000 steps/s of prefill (no updates), then 10 steps/s of training
    prefill = [(0, 0.0, 0), (1000, 1.0, 0), (2000, 2.0, 0)]
    assert math.isnan(training_rate(prefill))
    first = prefill + [(3000, 102.0, 50)]  # the interval from 2000 starts without updates: still unknown
    assert math.isnan(training_rate(first))
    assert math.isnan(eta_seconds(3000, 10_000, training_rate(first)))
    trained = first + [(4000, 202.0, 100)]
    assert training_rate(trained) == pytest.approx(10.0)
    assert eta_seconds(4000, 10_000, training_rate(trained)) == pytest.approx(600.0)
    # the run's cumulative average (what a naive ETA would use) is about twice as fast
    assert 4000 / 202.0 > 1.9 * training_rate(trained)
    # a run that never updates (the random policy): every interval is its speed
    assert training_rate(prefill, trains=False) == pytest.approx(1000.0)
    # knowing the prefill (2000 steps), the first interval of training counts: speed from the first log line
    assert training_rate(first, prefill=2000) == pytest.approx(10.0)
    assert math.isnan(training_rate(prefill, prefill=2000))
    assert math.isnan(training_rate(first, prefill=2500))  # an interval that holds prefill steps does not count


def test_rate_follows_recent_intervals_and_skips_broken_ones():
    steady = [(i * 100, i * 10.0, 5 * i + 1) for i in range(6)]  # 10 steps/s throughout
    assert training_rate(steady) == pytest.approx(10.0)
    slower = steady + [(600, 70.0, 40)]  # the newest interval at 5 steps/s pulls the rate down, not all the way
    assert 5.0 < training_rate(slower) < 10.0
    assert training_rate(slower, alpha=1.0) == pytest.approx(5.0)
    broken = steady + [(600, 40.0, 40), (600, 41.0, 40)]  # time going backwards, no new steps: ignored
    assert training_rate(broken) == pytest.approx(10.0)


def test_log_points_recover_the_wall_time_from_cumulative_rates():
    rows = [{"env_step": "100", "updates": "0", "steps_per_s": "50"},
            {"env_step": "200", "updates": "10", "steps_per_s": "nan"},
            {"env_step": "300", "updates": "20", "steps_per_s": "30"}]
    assert log_points(rows) == [(100, 2.0, 0), (300, 10.0, 20)]


def test_format_duration():
    assert format_duration(3 * 3600 + 2 * 60 + 1) == "03:02:01"
    assert format_duration(3 * 86400) == "3.0 d"
    assert format_duration(math.nan) == "-" and format_duration(math.nan, unknown="—") == "—"


def test_status_line_says_eta_dash_until_training_is_measured():
    from lore.config import build_config
    from lore.train.trainer import status_line

    cfg = build_config(overrides=["env.name=MiniGrid-Empty-5x5-v0", "train.steps=1000", "train.prefill=100"], ablation="rl_only")
    assert status_line(cfg, 100, math.nan, 0.5).endswith("- steps/s, eval SR 0.50, ETA —")
    assert status_line(cfg, 500, 10.0, math.nan).endswith("10.0 steps/s, eval SR -, ETA 00:00:50")


# ---------------------------------------------------------------- run directories by hand


def make_run(root: Path, env=ENV, arm=ARM, seed=0, steps=1000, config=True, metrics=(), evals=(), done=None,
             log=None) -> Path:
    """A run directory as ``lore train`` leaves it; ``metrics`` rows are (env_step, updates, steps_per_s)."""
    run = root / env / arm / f"seed{seed}"
    run.mkdir(parents=True)
    if config:
        (run / "config.yaml").write_text(yaml.safe_dump(
            {"seed": seed, "ablation": arm, "env": {"name": env}, "train": {"steps": steps}}))
    if metrics:
        lines = ["env_step,updates,wm_loss,steps_per_s"] + [f"{s},{u},0.5,{r}" for s, u, r in metrics]
        (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    if evals:
        lines = ["env_step,success_rate,return_mean"] + [f"{s},{sr},0.1" for s, sr in evals]
        (run / "eval.csv").write_text("\n".join(lines) + "\n")
    if done is not None:
        (run / "done").write_text(json.dumps(done))
    if log is not None:
        (run / "train.log").write_text(log)
    return run


# prefill at 100 steps/s to step 200 (cumulative rate), then 10 steps/s: wall 2 s, 12 s, 22 s
TRAINING = [(100, 0, 100.0), (200, 10, 100.0), (300, 20, 300 / 12), (400, 30, 400 / 22)]


def status(*args, capsys) -> tuple[int, str, str]:
    code = lore_main(["status", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def status_json(root, capsys, *extra) -> dict:
    code, out, err = status(root, "--json", *extra, capsys=capsys)
    assert code == 0 and err == ""
    return json.loads(out)


def by_seed(report: dict) -> dict:
    return {int(r["seed"]): r for r in report["runs"]}


def test_every_state_and_its_row(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root, seed=0, done={"env_step": 1000, "wall_s": 3725.0, "final_success_rate": 0.8},
             metrics=TRAINING, evals=[(0, 0.0), (1000, 0.8)])
    running = make_run(root, seed=1, metrics=TRAINING, evals=[(0, 0.0), (250, 0.25)])
    make_run(root, seed=2, metrics=TRAINING[:2], log="lore: step 200/1000\nlore: error: CUDA out of memory\n")
    make_run(root, seed=3)  # config only: waiting
    (root / ENV / ARM / "seed4").mkdir()  # the workflow's mkdir, nothing else yet
    make_run(root, seed=5, metrics=TRAINING, log="lore: interrupted: checkpoint written at env step 400; run "
                                                 "again to resume\n")
    with exclusive_dir_lock(running):
        report = status_json(root, capsys)
        code, table, _ = status(root, capsys=capsys)
    runs = by_seed(report)
    assert {s: r["state"] for s, r in runs.items()} == {0: "done", 1: "running", 2: "failed", 3: "waiting",
                                                       4: "waiting", 5: "failed"}
    assert runs[0]["step"] == 1000 and runs[0]["eval_sr"] == 0.8 and "wall 01:02:05" in runs[0]["note"]
    # running: the rate of the training intervals only (10 steps/s), 600 steps left
    assert runs[1]["steps_per_s"] == pytest.approx(10.0) and runs[1]["eta_s"] == pytest.approx(60.0)
    assert runs[1]["step"] == 400 and runs[1]["total"] == 1000 and runs[1]["eval_sr"] == 0.25
    assert runs[2]["note"] == "lore: error: CUDA out of memory" and runs[2]["eta_s"] is None
    assert runs[5]["note"].startswith("lore: interrupted")
    assert (runs[4]["env"], runs[4]["arm"], runs[4]["step"], runs[4]["total"]) == (ENV, ARM, None, None)
    summary = report["summary"]
    assert (summary["done"], summary["running"], summary["waiting"], summary["failed"]) == (1, 1, 2, 2)
    assert summary["eta_s"] is None  # seed 4 has no total steps: the grid's time left is not known
    assert code == 0
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["ENV", "ARM", "SEED"] and len(lines) == 1 + 6 + 1
    assert lines[-1] == "6 runs: 1 done, 1 running, 2 waiting, 2 failed; ETA - at 1 in parallel"
    assert "\x1b" not in table


def test_grid_eta_spreads_the_work_left_over_the_running_runs(tmp_path, capsys):
    root = tmp_path / "runs"
    for seed in (0, 1):
        make_run(root, seed=seed, metrics=TRAINING)
    make_run(root, seed=2)  # waiting: 1,000 steps at the env's mean rate (10 steps/s)
    with exclusive_dir_lock(root / ENV / ARM / "seed0"), exclusive_dir_lock(root / ENV / ARM / "seed1"):
        summary = status_json(root, capsys)["summary"]
    assert summary["running"] == 2 and summary["eta_s"] == pytest.approx((60 + 60 + 100) / 2)


@pytest.mark.parametrize("name, content, problem", [
    ("metrics.csv", "env_step,updates,steps_per_s\n100,0,50\n200,1", "half-written"),
    ("metrics.csv", "env_step,updates,steps_per_s\nabc,0,50\n200,1\n", "corrupt (2 of 2 rows unparsable)"),
    ("metrics.csv", "", "corrupt (empty)"),
    ("eval.csv", b"\x89PNG\r\n\x1a\n\x00\xff", "corrupt (not UTF-8 text)"),
    ("eval.csv", "success_rate\n0.5\n", "corrupt (no env_step column)"),
    ("config.yaml", "seed: [0\n", "corrupt ("),
])
def test_damaged_files_are_named_in_the_row_and_never_crash(tmp_path, capsys, name, content, problem):
    root = tmp_path / "runs"
    run = make_run(root, metrics=TRAINING[:1], evals=[(0, 0.5)])
    (run / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    code, table, err = status(root, capsys=capsys)
    assert code == 0 and err == ""
    row = table.splitlines()[1]
    assert f"{name} {problem}" in row
    assert row.split()[:2] == [ENV, ARM] and " failed " in row  # progress and no live holder


def test_half_written_table_keeps_its_complete_rows(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("env_step,updates,steps_per_s\r\n100,0,50\r\n200,10,40\r\n30")
    rows, problem = read_csv_rows(path)
    assert [r["env_step"] for r in rows] == ["100", "200"] and problem == "metrics.csv half-written (last line cut off)"


def test_status_reads_and_never_writes(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root, seed=0, metrics=TRAINING)
    make_run(root, seed=1)

    def snapshot():
        return {p: p.stat().st_mtime_ns for p in sorted(tmp_path.rglob("*"))}

    before = snapshot()
    status(root, capsys=capsys)
    assert snapshot() == before  # no .lock created where there was none
    run = root / ENV / ARM / "seed0"
    with exclusive_dir_lock(run):
        pass  # a .lock left by a finished process
    status(root, capsys=capsys)
    with exclusive_dir_lock(run):  # the status check released its own attempt at once
        pass


def test_results_root_empty_root_and_missing_root(tmp_path, capsys):
    results = tmp_path / "results"
    make_run(results / "runs", seed=7, metrics=TRAINING)
    assert [r["seed"] for r in status_json(results, capsys)["runs"]] == ["7"]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = status(empty, capsys=capsys)
    assert code == 0 and err == "" and out.splitlines() == [
        f"no run directories under {empty}", "0 runs: 0 done, 0 running, 0 waiting, 0 failed; nothing running"]
    for missing in (tmp_path / "nope", tmp_path / "file"):
        if missing.name == "file":
            missing.write_text("x")
        code, out, err = status(missing, capsys=capsys)
        assert code == 2 and out == ""
        assert err.startswith("lore: error: status: ") and str(missing) in err and err.count("\n") == 1


def test_other_run_directories_with_a_config_are_listed(tmp_path, capsys):
    root = tmp_path / "runs"
    other = root / "sweeps" / "lr3e-4"
    other.mkdir(parents=True)
    (other / "config.yaml").write_text(yaml.safe_dump({"seed": 3, "ablation": "rl_only", "env": {"name": "crafter"},
                                                        "train": {"steps": 500}}))
    (other / "tb" / "nested").mkdir(parents=True)
    (other / "tb" / "nested" / "config.yaml").write_text("not: a run\n")  # inside a run: not searched
    runs = status_json(root, capsys)["runs"]
    assert [(r["env"], r["arm"], r["seed"], r["total"], r["state"]) for r in runs] == [
        ("crafter", "rl_only", "3", 500, "waiting")]


def test_workflow_config_adds_the_runs_without_a_directory(tmp_path, capsys):
    config = {"envs": ["MiniGrid-Empty-5x5-v0"], "ablations": ["rl_only"], "seeds": [0, 1],
              "results_root": str(tmp_path / "res"), "run": {"train.steps": 300, "train.prefill": 100}}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(config))
    make_run(tmp_path / "res" / "runs", env="MiniGrid-Empty-5x5-v0", arm="rl_only", seed=1, steps=300,
             metrics=TRAINING[:2])
    report = status_json(tmp_path / "res", capsys, "--config", path)
    assert [(r["seed"], r["state"], r["total"]) for r in report["runs"]] == [("0", "waiting", 300), ("1", "failed", 300)]
    path.write_text(yaml.safe_dump({**config, "ablations": ["no_such_arm"]}))
    code, out, err = status(tmp_path / "res", "--config", path, capsys=capsys)
    assert code == 2 and out == "" and err.startswith(f"lore: error: --config {path}: ") and "no_such_arm" in err


def test_the_grid_the_workflow_recorded_lists_the_runs_not_started(tmp_path, capsys):
    from lore.grid.workflow import grid_fingerprint, write_grid_record

    config = {"envs": ["MiniGrid-Empty-5x5-v0"], "ablations": ["rl_only"], "seeds": [0, 1, 2],
              "results_root": str(tmp_path / "res"), "run": {"train.steps": 300, "train.prefill": 100}}
    assert grid_fingerprint(config)["runs"]
    write_grid_record(config)
    make_run(tmp_path / "res" / "runs", env="MiniGrid-Empty-5x5-v0", arm="rl_only", seed=1, steps=300,
             metrics=TRAINING[:2])
    report = status_json(tmp_path / "res", capsys)
    assert [(r["seed"], r["state"], r["total"]) for r in report["runs"]] == [
        ("0", "waiting", 300), ("1", "failed", 300), ("2", "waiting", 300)]
    (tmp_path / "res" / ".grid.json").write_text("not json")  # a damaged record: the run directories alone
    assert [r["seed"] for r in status_json(tmp_path / "res", capsys)["runs"]] == ["1"]


def test_workflow_lines_name_the_failed_runs_and_their_logs(tmp_path):
    from lore.grid.workflow import TrainJob

    root = tmp_path / "runs"
    make_run(root, seed=0, done={"env_step": 1000, "wall_s": 10.0, "final_success_rate": 1.0})
    failed = make_run(root, seed=1, metrics=TRAINING, log="Traceback (most recent call last):\nValueError: boom\n")
    make_run(root.parent / "elsewhere", seed=9)  # not under the grid's root
    lines = workflow_lines(str(root), [TrainJob(ENV, ARM, s) for s in (0, 1, 2)])
    assert lines[0] == "lore: 3 runs: 1 done, 0 running, 1 waiting, 1 failed; nothing running"
    assert lines[1:] == [f"  failed: {ENV} {ARM} seed 1: ValueError: boom (log: {failed}/train.log)"]


# ---------------------------------------------------------------- a tiny real run: its log and its row


def test_train_log_is_plain_text_and_the_finished_run_reports_itself(tmp_path, capsys):
    run = tmp_path / "runs" / "MiniGrid-Empty-5x5-v0" / "rl_only" / "seed0"
    finished = tmp_path / "console.txt"
    log = tmp_path / "train.log"
    with open(log, "w") as fh:  # not a terminal, and no --no-progress: still no bar, no colour
        proc = subprocess.run([sys.executable, "-m", "lore.cli", "train", "--run-dir", str(run), "--ablation",
                               "rl_only", "--finished-line", str(finished), *[a for s in TINY for a in ("--set", s)],
                               "--set", "train.progress=true"],
                              stdout=fh, stderr=subprocess.STDOUT, timeout=HANG_GUARD_S, env={**os.environ})
    text = log.read_bytes()
    assert proc.returncode == 0, text[-2000:]
    assert b"\x1b" not in text and b"\r" not in text
    status_lines = [ln for ln in text.decode().splitlines() if ln.startswith("lore: MiniGrid-Empty-5x5-v0 rl_only")]
    assert len(status_lines) == 240 // 60 and len(set(status_lines)) == len(status_lines)  # one per log interval
    assert status_lines[0].endswith("ETA —")  # prefill: no rate to extrapolate yet
    assert "ETA —" not in status_lines[-1]
    line = finished.read_text()
    assert line.startswith("lore: MiniGrid-Empty-5x5-v0 rl_only seed 0 finished: eval SR ") and "240 steps in" in line
    row = by_seed(status_json(tmp_path, capsys))[0]
    assert (row["state"], row["step"], row["total"]) == ("done", 240, 240)
    assert row["steps_per_s"] > 0 and row["note"].startswith("wall ")  # no file of the run reported damaged


def test_a_run_stopped_at_a_checkpoint_says_it_resumes_and_a_killed_one_still_fails(tmp_path, capsys):
    interrupted = make_run(tmp_path, seed=0, metrics=TRAINING, log="step 400\nlore: interrupted: checkpoint written "
                           "at env step 400; run again to resume\n")
    (interrupted / "checkpoint.pt").write_bytes(b"x")
    killed = make_run(tmp_path, seed=1, metrics=TRAINING, log="step 400\n")
    (killed / "checkpoint.pt").write_bytes(b"x")
    code, out, _ = status(tmp_path, "--json", capsys=capsys)
    report = json.loads(out)
    states = {r["seed"]: (r["state"], r["note"]) for r in report["runs"]}
    assert code == 0 and states["0"][0] == "interrupted" and "run again to resume" in states["0"][1]
    assert states["1"] == ("failed", "stopped without an error in train.log (killed?)")
    code, out, _ = status(tmp_path, capsys=capsys)
    assert "2 runs: 0 done, 0 running, 0 waiting, 1 interrupted, 1 failed" in out
