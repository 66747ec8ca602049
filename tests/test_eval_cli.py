"""``lore eval``: a run's checkpoint evaluated the way training evaluates, read-only on the run.

One tiny ``prior_only`` run (scripted advisor, ~5 s) is trained once for the module; every eval
goes through ``lore.cli.main`` in-process (torch is imported once).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lore import cli
from lore.train.checkpoint import load_checkpoint, save_checkpoint
from lore.train.trainer import train
from lore.utils.io import exclusive_dir_lock

sys.path.insert(0, str(Path(__file__).parent))
from test_train import tiny_cfg  # noqa: E402

# 12 evaluation episodes: a barely trained policy reaches the 5x5 goal in about a quarter of them, so
# the compared rows are not all time-outs (which any policy would reproduce).
EVAL_EPISODES = 12


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("eval") / "run"
    train(tiny_cfg(f"eval.episodes={EVAL_EPISODES}", ablation="prior_only"), run, show_progress=False)
    return run


def lore_eval(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(["eval", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_default_eval_writes_eval_csv_columns_and_reproduces_the_last_training_eval(run, capsys):
    """With the defaults (the run's seed and eval.episodes) the eval at the final checkpoint replays
    training's last evaluation exactly: same layouts, same sampling generator seed (the index of the
    eval.csv row at the checkpoint's step), same agent state (the checkpoint is written after that
    evaluation, which restores every RNG and the prior layer's statistics it touched). It does so while
    the run directory is locked (a training in progress) and changes nothing but its own output."""
    before = snapshot(run)
    with exclusive_dir_lock(run):
        rc, out, err = lore_eval(capsys, "--run-dir", run)
    assert rc == 0, err
    written = run / f"eval_step240_seed0_n{EVAL_EPISODES}.csv"
    assert str(written) in out
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k != written.name and k != ".lock"} == \
        {k: v for k, v in before.items() if k != ".lock"}
    train_eval = pd.read_csv(run / "eval.csv")
    ours = pd.read_csv(written)
    columns = list(train_eval.columns)
    assert list(ours.columns[:len(columns)]) == columns
    assert {"eval_seed", "env", "with_prior", "prior_applied_frac", "llm_calls"} <= set(ours.columns)
    assert len(ours) == 1 and ours["with_prior"].iloc[0] == 0 and ours["prior_applied_frac"].iloc[0] == 0
    last = train_eval.iloc[-1]
    assert ours[columns].iloc[0].tolist() == last.tolist()
    assert last["env_step"] == 240 and last["episodes"] == EVAL_EPISODES
    assert last["success_rate"] > 0  # not a row of time-outs (see EVAL_EPISODES)


def test_same_seed_same_numbers_and_the_prior_changes_them(run, tmp_path, capsys):
    before = snapshot(run)
    rows = {}
    for name, extra in [("a", []), ("b", []), ("other", ["--seed", 7]), ("prior_a", ["--with-prior"]),
                        ("prior_b", ["--with-prior"])]:
        seed = [] if name == "other" else ["--seed", 3]
        rc, _, err = lore_eval(capsys, "--run-dir", run, "--episodes", 4, "--out", tmp_path / f"{name}.csv",
                               *seed, *extra)
        assert rc == 0, err
        rows[name] = pd.read_csv(tmp_path / f"{name}.csv").iloc[0]
    assert rows["a"].equals(rows["b"]) and rows["prior_a"].equals(rows["prior_b"])
    assert rows["a"]["eval_seed"] == 3 and rows["other"]["eval_seed"] == 7
    assert not rows["a"].equals(rows["other"])
    plain, prior = rows["a"], rows["prior_a"]
    assert prior["with_prior"] == 1 and prior["llm_calls"] >= 1
    assert prior["prior_applied_frac"] > 0 and prior["beta_mean"] > 0 and plain["beta_mean"] == 0
    assert (prior["length_mean"], prior["return_mean"]) != (plain["length_mean"], plain["return_mean"])
    assert snapshot(run) == before  # --out honoured; no ledger, cache or lock written by --with-prior


def test_another_env_with_the_same_spaces_and_frames(run, tmp_path, capsys):
    frames = tmp_path / "frames"
    rc, _, err = lore_eval(capsys, "--run-dir", run, "--env", "MiniGrid-Empty-6x6-v0", "--episodes", 1,
                           "--frames", frames)
    assert rc == 0, err
    row = pd.read_csv(run / "eval_step240_seed0_n1_MiniGrid-Empty-6x6-v0.csv").iloc[0]
    assert row["env"] == "MiniGrid-Empty-6x6-v0" and row["episodes"] == 1
    pngs = sorted((frames / "episode_000").glob("step_*.png"))
    assert len(pngs) == row["length_mean"] + 1  # the reset frame and one per step
    assert (frames / "episode_000.gif").stat().st_size > 0


def _fake_run(tmp_path: Path, run: Path, **changes) -> Path:
    """A copy of ``run`` as if trained with ``changes`` (``section__key=value``): its config.yaml and the
    config its checkpoint records both changed."""
    fake = tmp_path / "fake"
    fake.mkdir()
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    for key, value in changes.items():
        section, name = key.split("__")
        cfg[section][name] = value
    (fake / "config.yaml").write_text(yaml.safe_dump(cfg))
    payload = load_checkpoint(run / "checkpoint.pt")
    save_checkpoint(fake / "checkpoint.pt", {**payload, "config": cfg})
    return fake


def test_with_prior_asks_about_the_state_being_acted_in_when_the_run_did(run, tmp_path, capsys):
    """A run trained with ``llm.ask_before_act`` is evaluated the same way: each in-line answer steers the
    step it was asked at, so at least as many steps are advised as calls were made, and the eval replays."""
    fake = _fake_run(tmp_path, run, llm__ask_before_act=True)
    rows = []
    for name in ("a", "b"):
        rc, _, err = lore_eval(capsys, "--run-dir", fake, "--episodes", 3, "--seed", 1, "--with-prior",
                               "--out", tmp_path / f"{name}.csv")
        assert rc == 0, err
        rows.append(pd.read_csv(tmp_path / f"{name}.csv").iloc[0])
    assert rows[0].equals(rows[1])
    row = rows[0]
    steps = row["length_mean"] * row["episodes"]
    assert row["llm_calls"] >= 1 and row["prior_applied_frac"] * steps >= row["llm_calls"] - 1e-6


@pytest.mark.parametrize("case, needle", [
    ("missing_run", "does not exist"),
    ("no_checkpoint", "checkpoint.pt not found"),
    ("episodes_0", "--episodes must be in 1..10000, got 0"),
    ("episodes_negative", "--episodes must be in 1..10000, got -3"),
    ("episodes_too_many", "--episodes must be in 1..10000, got 10001"),
    ("seed_negative", "--seed must be in 0..4294967295"),
    ("seed_too_big", "--seed must be in 0..4294967295 (2**32 - 1), got 4294967296"),
    ("out_below_a_file", "which is a file, not a directory"),
    ("out_is_checkpoint", "would overwrite the run's own checkpoint.pt"),
    ("out_is_train_log", "would overwrite the run's own train.log"),
    ("out_is_cache_journal", "would overwrite the run's own llm_cache.sqlite-wal"),
    ("out_is_the_lock", "would overwrite the run's own .lock"),
    ("frames_is_the_run", "--frames"),
    ("frames_below_a_file", "which is a file, not a directory"),
    ("unknown_env", "unknown environment 'MiniGrid-NoSuchThing-v0'"),
    ("incompatible_env", "does not fit the run's agent"),
    ("out_is_eval_csv", "would overwrite the run's own eval.csv"),
    ("prior_without_llm", "this run has no LLM prior"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(run, tmp_path, capsys, case, needle):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    target = run
    if case == "missing_run":
        target = tmp_path / "nowhere"
    elif case == "no_checkpoint":
        target = tmp_path / "half"
        target.mkdir()
        shutil.copy(run / "config.yaml", target / "config.yaml")
    elif case == "prior_without_llm":
        target = _fake_run(tmp_path, run, llm__backend="none", prior__enabled=False)
    frames = {"frames_is_the_run": run, "frames_below_a_file": a_file / "frames"}.get(case,
                                                                                      tmp_path / "frames")
    args = {"episodes_0": ["--episodes", 0], "episodes_negative": ["--episodes", -3],
            "episodes_too_many": ["--episodes", 10_001], "seed_negative": ["--seed", -1],
            "seed_too_big": ["--seed", 2**32], "unknown_env": ["--env", "MiniGrid-NoSuchThing-v0"],
            "incompatible_env": ["--env", "crafter"], "out_is_eval_csv": ["--out", run / "eval.csv"],
            "out_below_a_file": ["--out", a_file / "x.csv"],
            "out_is_checkpoint": ["--out", run / "checkpoint.pt"], "out_is_train_log": ["--out", run / "train.log"],
            "out_is_cache_journal": ["--out", run / "llm_cache.sqlite-wal"],
            "out_is_the_lock": ["--out", run / ".lock"],
            "prior_without_llm": ["--with-prior"]}.get(case, [])
    before_run, before_tmp = snapshot(run), snapshot(tmp_path)
    rc, out, err = lore_eval(capsys, "--run-dir", target, "--frames", frames, *args)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lore: error: ") and needle in lines[0], err
    assert out == ""
    assert snapshot(run) == before_run and snapshot(tmp_path) == before_tmp
    assert not (tmp_path / "frames").exists()
