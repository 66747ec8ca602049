"""``lore train`` end to end: outputs, resume equivalence, preemption, and bad input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from workflow_helpers import HANG_GUARD_S

from lore.config import build_config
from lore.train.checkpoint import load_checkpoint
from lore.train.trainer import Trainer, train

TINY = [
    "env.name=MiniGrid-Empty-5x5-v0", "model.preset=debug", "train.steps=240", "train.prefill=80",
    "train.batch_size=4", "train.batch_length=8", "train.train_ratio=16", "eval.every=120",
    "eval.episodes=2", "train.log_every=60", "train.checkpoint_every=10000", "train.tensorboard=false",
    "train.progress=false", "llm.cache_path=null",
]


def tiny_cfg(*extra, ablation="rl_only"):
    return build_config(overrides=TINY + list(extra), ablation=ablation)


def lore_cli(*args, timeout=HANG_GUARD_S, env=None):
    return subprocess.run([sys.executable, "-m", "lore.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_run_writes_every_output_and_a_second_call_is_a_noop(tmp_path):
    run = tmp_path / "run"
    summary = train(tiny_cfg(), run, show_progress=False)
    assert summary["env_step"] == 240
    for name in ("config.yaml", "eval.csv", "episodes.csv", "metrics.csv", "checkpoint.pt", "done"):
        assert (run / name).exists(), name
    evals = pd.read_csv(run / "eval.csv")
    assert list(evals.columns[:6]) == ["env_step", "success_rate", "return_mean", "return_std", "length_mean", "episodes"]
    assert evals["env_step"].tolist() == [0, 120, 240]
    metrics = pd.read_csv(run / "metrics.csv")
    for col in ("env_step", "wm_loss", "kl_dyn", "entropy_wm", "return_scale", "grad_norm_wm", "steps_per_s"):
        assert col in metrics.columns, col
    assert metrics["wm_loss"].notna().any()
    # the final row (ledger counts settled) merges into the periodic row of the last step: one row per step
    assert metrics["env_step"].is_unique and metrics["env_step"].iloc[-1] == 240
    assert metrics["wm_loss"].iloc[-1] == metrics["wm_loss"].iloc[-1]  # the periodic means are kept (not NaN)
    episodes = pd.read_csv(run / "episodes.csv")
    assert {"env_step", "episode", "env_index", "return", "length", "success"} <= set(episodes.columns)
    assert "control" not in episodes.columns  # rl_only has no prior: no control episodes to tell apart
    before = (run / "eval.csv").read_text()
    again = train(tiny_cfg(), run, show_progress=False)
    assert again.get("already_done") and (run / "eval.csv").read_text() == before


class _StopAt(Trainer):
    """Deliver a 'SIGTERM' at a chosen env step, as a preempting scheduler would."""

    stop_at = 0

    def _collect_step(self):
        super()._collect_step()
        if self.env_step == self.stop_at:
            self._stop_signal = signal.SIGTERM


@pytest.mark.parametrize("num_envs, stop_at", [(1, 150), (2, 150), (1, 120)])
def test_interrupted_and_resumed_run_matches_uninterrupted(tmp_path, num_envs, stop_at):
    """150: mid-episode after prefill; 120: the signal lands during an evaluation, which is redone."""
    cfg = tiny_cfg(f"env.num_envs={num_envs}")
    straight = train(cfg, tmp_path / "straight", show_progress=False)
    _StopAt.stop_at = stop_at
    from lore.train.trainer import Preempted

    with pytest.raises(Preempted):
        _StopAt(cfg, tmp_path / "resumed", show_progress=False).run()
    assert load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")["env_step"] == stop_at
    assert not (tmp_path / "resumed" / "done").exists()
    resumed = train(cfg, tmp_path / "resumed", show_progress=False)
    assert resumed["env_step"] == straight["env_step"]
    a = pd.read_csv(tmp_path / "straight" / "eval.csv")
    b = pd.read_csv(tmp_path / "resumed" / "eval.csv")
    pd.testing.assert_frame_equal(a, b)
    ea = pd.read_csv(tmp_path / "straight" / "episodes.csv")
    eb = pd.read_csv(tmp_path / "resumed" / "episodes.csv")
    pd.testing.assert_frame_equal(ea, eb)
    ma = pd.read_csv(tmp_path / "straight" / "metrics.csv")
    mb = pd.read_csv(tmp_path / "resumed" / "metrics.csv")
    assert ma["env_step"].tolist() == mb["env_step"].tolist()
    pd.testing.assert_series_equal(ma["wm_loss"], mb["wm_loss"])


def test_sigterm_writes_a_loadable_checkpoint_and_exits_143(tmp_path):
    run = tmp_path / "run"
    args = ["train", "--run-dir", str(run), "--ablation", "rl_only", "--no-progress"]
    for o in TINY:
        args += ["--set", o]
    args += ["--set", "train.steps=100000", "--set", "train.log_every=20"]
    proc = subprocess.Popen([sys.executable, "-m", "lore.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + HANG_GUARD_S
    while not (run / "metrics.csv").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 143, err
    assert "checkpoint written" in err
    payload = load_checkpoint(run / "checkpoint.pt")
    assert payload["env_step"] > 0 and "agent" in payload and "replay" in payload


@pytest.mark.parametrize("args, needle", [
    (["--set", "env.name=MiniGrid-NoSuchThing-v0"], "NoSuchThing"),
    (["--set", "train.steps"], "KEY=VALUE"),
    (["--set", "train.stepz=3"], "train.stepz"),
    (["--set", "train.steps=lots"], "train.steps"),
    (["--ablation", "everything"], "everything"),
])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, args, needle):
    res = lore_cli("train", "--run-dir", str(tmp_path / "run"), *args)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("lore: error")]
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_unwritable_run_dir_is_rejected(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    res = lore_cli("train", "--run-dir", str(blocker / "run"), "--set", "model.preset=debug")
    assert res.returncode == 2 and "not writable" in res.stderr


def test_corrupt_checkpoint_is_reported_and_left_untouched(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"\x00garbage" * 10)
    res = lore_cli("train", "--run-dir", str(run), *sum((["--set", o] for o in TINY), []))
    assert res.returncode == 2 and "corrupt" in res.stderr, res.stderr
    assert (run / "checkpoint.pt").read_bytes() == b"\x00garbage" * 10


def test_resume_with_a_different_config_is_refused(tmp_path):
    run = tmp_path / "run"
    train(tiny_cfg(), run, show_progress=False)
    (run / "done").unlink()
    from lore.config import ConfigError

    with pytest.raises(ConfigError, match="train.batch_size"):
        Trainer(tiny_cfg("train.batch_size=2"), run, show_progress=False).run()


def test_config_command_prints_resolved_yaml():
    res = lore_cli("config", "--ablation", "full", "--set", "model.preset=s")
    assert res.returncode == 0
    assert "ablation: full" in res.stdout and "deter: 512" in res.stdout


def test_done_summary_is_json(tmp_path):
    run = tmp_path / "run"
    train(tiny_cfg(), run, show_progress=False)
    summary = json.loads(Path(run / "done").read_text())
    assert summary["env_step"] == 240 and 0.0 <= summary["final_success_rate"] <= 1.0


def test_a_second_process_on_a_run_dir_is_refused_and_a_dead_holders_lock_is_not_stale(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom lore.utils.io import exclusive_dir_lock\n"
         f"with exclusive_dir_lock({str(run)!r}):\n    print('held', flush=True)\n    time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        res = lore_cli("train", "--run-dir", str(run), *[a for s in TINY for a in ("--set", s)])
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("lore: error")]
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert f"pid {holder.pid}" in lines[0] and "in use" in lines[0]
        assert sorted(p.name for p in run.iterdir()) == [".lock"]  # nothing else touched
    finally:
        holder.kill()  # SIGKILL: no cleanup code runs, the kernel drops the lock
        holder.wait()
    summary = train(tiny_cfg("train.steps=100", "train.prefill=60", "eval.every=100"), run)
    assert summary["env_step"] >= 100 and (run / "done").exists()


def test_batch_jobs_log_a_status_line_per_log_interval(tmp_path):
    from lore.train.trainer import status_line

    cfg = tiny_cfg()
    assert status_line(cfg, 120, 40.0, 0.5) == (
        "lore: MiniGrid-Empty-5x5-v0 rl_only seed 0: step 120/240 (50%), 40.0 steps/s, eval SR 0.50, ETA 00:00:03")
    assert status_line(cfg, 0, 0.0, float("nan")).endswith("eval SR -, ETA —")
    res = lore_cli("train", "--run-dir", str(tmp_path / "run"), "--no-progress",
                   *[a for s in TINY for a in ("--set", s)])
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("lore: MiniGrid-Empty-5x5-v0 rl_only seed 0: step")]
    assert len(lines) >= 240 // 60 and "step 240/240 (100%)" in lines[-1]  # log_every = 60, plus the final row


class _ObservationPolicy:
    """Deterministic per episode (no draws): left, right or forward from the observation and the step."""

    generator = None

    def initial_state(self, batch: int) -> dict:
        return {"t": torch.zeros(batch, dtype=torch.long)}

    def act(self, obs, is_first, state, extra=None, env_step: int = 0, sample: bool = True):
        from lore.train.evaluate import PolicyAct

        flat = obs["symbolic"].reshape(obs["symbolic"].shape[0], -1).float()
        keys = (flat * torch.arange(1, flat.shape[1] + 1)).sum(1).long()
        t = torch.where(is_first, torch.zeros_like(state["t"]), state["t"])
        turn = (keys * 7 + t * t) % 7 == 0  # mostly forward, a turn now and then: some episodes reach the goal
        return PolicyAct(action=torch.where(turn, (keys // 4) % 2, torch.full_like(keys, 2)), state={"t": t + 1})


def test_episodes_side_by_side_score_like_episodes_one_after_another():
    """Waves of 1, 4 (the last one short) and 6 envs: each episode keeps its layout, return, length and success; envs that
    finish early idle without being counted twice."""
    from lore.train.evaluate import evaluate_policy, make_eval_envs

    cfg = tiny_cfg("env.name=MiniGrid-Empty-Random-5x5-v0", "eval.episodes=6", "env.max_episode_steps=30")
    results, hooks = [], []
    for wave in (1, 4, 6):
        seen: list[tuple[str, int]] = []
        hooks.append(seen)
        results.append(evaluate_policy(
            _ObservationPolicy(), make_eval_envs(cfg, cfg.seed, wave), cfg, torch.device("cpu"), 0,
            on_reset=lambda k, env, obs, seen=seen: seen.append(("reset", k)),
            on_step=lambda k, env, a, obs, r, done, seen=seen: seen.append(("end", k)) if done else None))
    hooks = [sorted(h) for h in hooks]
    assert results[0] == results[1] == results[2]
    assert 0.0 < results[0]["success_rate"] < 1.0 and results[0]["length_mean"] < 30  # episodes differ in length
    assert hooks[0] == hooks[1] == hooks[2] == sorted([("reset", k) for k in range(6)] + [("end", k) for k in range(6)])


def test_features_arm_stops_asking_once_its_feature_program_runs(tmp_path):
    """The ``features`` arm reads only the LLM's feature code: after one program is adopted, no more calls
    (with a cooldown of 5 steps the controller would otherwise ask ~30 times in this run)."""
    import json as _json

    run = tmp_path / "run"
    train(tiny_cfg("llm.controller.cooldown=5", "llm.controller.cooldown_after_success=5", ablation="features"),
          run, show_progress=False)
    calls = [_json.loads(line) for line in (run / "llm_calls.jsonl").read_text().splitlines() if line.strip()]
    assert len(calls) == 1 and calls[0]["ok"] and "features_code" in calls[0]["answer"]
    metrics = pd.read_csv(run / "metrics.csv")
    assert metrics["feature_program_adopted"].dropna().iloc[-1] == 1.0
    # with the prior on, the same controller keeps asking: the advice is what acts
    full = tmp_path / "full"
    train(tiny_cfg("llm.controller.cooldown=5", "llm.controller.cooldown_after_success=5", ablation="full"),
          full, show_progress=False)
    assert len((full / "llm_calls.jsonl").read_text().splitlines()) > 3
    # its episodes say whether they ran without the prior
    episodes = pd.read_csv(full / "episodes.csv")
    assert len(episodes) and set(episodes["control"]) <= {0.0, 1.0}


@pytest.mark.parametrize("before", [False, True])
def test_an_answer_steers_the_step_it_was_asked_at_only_when_asked_before_acting(tmp_path, before):
    """``llm.ask_before_act``: the controller is asked about the state being acted in and an in-line answer
    (the scripted advisor) is mixed into that very act; asked after the act, the answer is about a state the
    agent has left, so the step that asked never has advice (a served env is not asked)."""
    cfg = tiny_cfg("llm.controller.cooldown=1", "llm.controller.cooldown_after_success=1", "train.prefill=8",
                   f"llm.ask_before_act={str(before).lower()}", "prior.dropout=0", "prior.control_episodes=0",
                   ablation="prior_only")
    trainer = Trainer(cfg, tmp_path / "run", show_progress=False)
    trainer._start_episodes()
    asked = steered = 0
    for _ in range(80):
        calls = trainer.agent.advisor.controller.counters()["llm_calls"]
        trainer._collect_step()
        if trainer.agent.advisor.controller.counters()["llm_calls"] > calls:
            asked += 1
            mask = float(trainer.agent.advisor.last_llm["mask"][0])
            steered += int(mask > 0)
            staged = [row for row in trainer.replay.staging[0] if not row["is_last"]]
            if staged:  # what the replay keeps for the step is what the act used
                assert float(staged[-1]["llm_mask"]) == mask
    assert asked >= 5
    assert steered == (asked if before else 0)
