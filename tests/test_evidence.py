"""Archived runs as evidence: entries written by earlier versions restore as they are and are never
re-archived, and a decided experiment's record re-checks from the entries it lists."""

from __future__ import annotations

import os
from pathlib import Path

from lore.analysis import archive as ar
from lore.cli import main as lore_main

DOORKEY = "MiniGrid-DoorKey-5x5-v0"


def _synthetic(folder: Path, seed: int = 0) -> Path:
    from lore.analysis.synthetic import SyntheticRun, write_run

    return write_run(folder, SyntheticRun(env=DOORKEY, ablation="rl_only", seed=seed, steps=2000, eval_every=500))


def _old_format_entry(tmp_path: Path) -> tuple[Path, Path]:
    """An entry as an earlier version cut it: metrics.csv still carries a column today's cut drops."""
    archive = tmp_path / "runs"
    path, _ = ar.archive_run(_synthetic(tmp_path / "results" / "r0"), archive)
    lines = (path / "metrics.csv").read_text().splitlines()
    lines = [f"{lines[0]},temperature"] + [f"{line},1" for line in lines[1:]]
    (path / "metrics.csv").write_text("\n".join(lines) + "\n")
    return archive, path


def _snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_an_old_format_entry_restores_and_is_never_rewritten(tmp_path, capsys):
    archive, path = _old_format_entry(tmp_path)
    before = _snapshot(path)
    assert [e.path for e in ar.check_archive(archive)] == [path]  # read as it is
    run_dir = tmp_path / "grid" / "run"
    argv = ["train", "--run-dir", str(run_dir), "--config", str(path / "config.yaml"), "--archive", str(archive)]
    assert lore_main(argv) == 0, capsys.readouterr().err
    assert "restored from the archive" in capsys.readouterr().out
    assert lore_main(argv) == 0  # a second pass over the restored run: still nothing to do
    assert lore_main(["archive", str(tmp_path / "grid"), "--to", str(archive)]) == 0
    assert "0 run(s) archived" in capsys.readouterr().out
    assert _snapshot(path) == before and sorted(os.listdir(path.parent)) == ["seed0"]


def test_a_true_conflict_keeps_the_entry_and_never_advises_deleting_it(tmp_path):
    archive, path = _old_format_entry(tmp_path)
    before = _snapshot(path)
    other = _synthetic(tmp_path / "results" / "other")
    (other / "eval.csv").write_text((other / "eval.csv").read_text().replace(",0.", ",0.0", 1))
    try:
        ar.archive_run(other, archive)
    except ar.ArchiveError as e:
        message = str(e)
    else:
        raise AssertionError("a run that differs from its entry was archived")
    assert "already archived with other content" in message and "stays as it is" in message
    assert "remove" not in message and "delete" not in message
    assert _snapshot(path) == before
