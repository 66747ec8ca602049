"""A run's train.log holds what `lore train` printed: run directly, or redirected into it by the workflow, each
line once; bad input writes none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workflow_helpers import HANG_GUARD_S

# a random-policy run: no updates, a few seconds
QUICK = ["--ablation", "rl_only", "--seed", "0", "--no-progress", "--set", "model.preset=debug",
         "--set", "train.policy=random", "--set", "train.steps=200", "--set", "train.prefill=50",
         "--set", "train.log_every=100", "--set", "eval.every=200", "--set", "eval.episodes=1"]


def _lore_train(run: Path, *extra: str, shell_redirect: bool = False) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "lore.cli", "train", "--run-dir", str(run), *QUICK, *extra]
    if shell_redirect:  # as the workflow's rule runs it
        run.mkdir(parents=True, exist_ok=True)
        with open(run / "train.log", "a") as log:
            return subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, text=True, timeout=HANG_GUARD_S)
    return subprocess.run(args, capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_a_direct_run_writes_what_it_prints_to_train_log_and_tensorboard_to_tb(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("an earlier attempt\n")
    proc = _lore_train(run)
    assert proc.returncode == 0, proc.stderr
    status = [line for line in proc.stderr.splitlines() if line.startswith("lore: MiniGrid-DoorKey-5x5-v0")]
    assert len(status) == 2 and proc.stdout.startswith('{"env_step": 200')
    assert (run / "train.log").read_text() == "an earlier attempt\n" + proc.stderr + proc.stdout  # appended
    assert any((run / "tb").glob("events.out.tfevents.*"))  # train.tensorboard is on by default


def test_a_run_redirected_into_its_train_log_writes_each_line_once(tmp_path):
    run = tmp_path / "run"
    proc = _lore_train(run, "--set", "train.tensorboard=false", shell_redirect=True)
    assert proc.returncode == 0
    lines = (run / "train.log").read_text().splitlines()
    assert len(lines) == len(set(lines)) == 3, lines  # two status lines and the summary
    assert lines[-1].startswith('{"env_step": 200') and not (run / "tb").exists()


def test_bad_input_writes_no_train_log(tmp_path):
    run = tmp_path / "run"
    proc = _lore_train(run, "--set", "train.prefill=500")
    assert proc.returncode == 2 and proc.stderr.startswith("lore: error: train.prefill")
    assert not run.exists()


def test_the_log_gets_the_status_line_while_the_terminal_shows_a_bar(tmp_path, capsys):
    from lore.train.run_log import RunLog, log_only, terminal

    run = tmp_path / "run"
    run.mkdir()
    with RunLog() as log:
        print("before the run directory is checked")
        assert terminal(sys.stderr) is not sys.stderr
        log.attach(run)
        log_only("lore: a status line")
        terminal(sys.stderr).write("\r[bar]")
        print("the summary")
    out, err = capsys.readouterr()
    assert out == "before the run directory is checked\nthe summary\n" and err == "\r[bar]"
    assert (run / "train.log").read_text() == ("before the run directory is checked\nlore: a status line\n"
                                               "the summary\n")


def test_a_log_that_cannot_be_opened_is_one_warning_and_the_output_still_shows(tmp_path, capsys):
    from lore.train.run_log import RunLog

    run = tmp_path / "run"
    (run / "train.log").mkdir(parents=True)  # a folder where the log goes
    with RunLog() as log:
        print("held")
        log.attach(run)
        print("after")
    out, err = capsys.readouterr()
    assert out == "held\nafter\n" and err.count("\n") == 1 and "train.log cannot be written" in err
