"""The run archive in a hostile tree: FIFOs, links, files and unwritable folders where the archive has
folders, two writers at once, interrupted writes, and entries whose rows or numbers are not a run's. Every
failure is one ``lore: error: <path>: <what>`` line (exit 2), nothing is followed through a link, and nothing
an interrupted write leaves is taken for an entry."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workflow_helpers import HANG_GUARD_S, REPO

from lore import archive as ar
from lore.archive.files import entry_files
from lore.archive.layout import TEMP_PREFIX
from lore.archive.store import _write_entry
from lore.cli import main as lore_main

DOORKEY = "MiniGrid-DoorKey-5x5-v0"


def _synthetic(folder: Path, ablation: str = "rl_only", seed: int = 0) -> Path:
    from lore.report.synthetic import SyntheticRun, write_run

    return write_run(folder, SyntheticRun(env=DOORKEY, ablation=ablation, seed=seed, steps=2000, eval_every=500))


def _one_error(capsys, *words: str) -> str:
    """The command's stderr: exactly one ``lore: error:`` line holding every one of ``words``."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lore: error: ") and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def _where(run: Path, root: Path) -> Path:
    """The entry ``run`` would be archived as in ``root``."""
    ident = ar.read_identity(run)
    return ar.entry_path(root, ident.env, ident.key, ident.seed)


def _lore(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "lore.cli", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob(f"{TEMP_PREFIX}*")] if root.is_dir() else []


@pytest.fixture
def results(tmp_path) -> Path:
    """``<tmp>/results`` with two finished runs (seeds 0 and 1)."""
    for seed in (0, 1):
        _synthetic(tmp_path / "results" / f"r{seed}", seed=seed)
    return tmp_path / "results"


def _restore_argv(entry_config: Path, run_dir: Path, archive: Path) -> list[str]:
    return ["train", "--run-dir", str(run_dir), "--config", str(entry_config), "--archive", str(archive)]


# --------------------------------------------------------------------------- FIFOs, files and links in the archive


@pytest.mark.parametrize("level", [1, 2, 3])  # the env, key or entry folder
@pytest.mark.parametrize("kind", ["fifo", "file"])
def test_a_fifo_or_file_where_the_archive_has_folders_is_one_line_everywhere(tmp_path, results, capsys, level,
                                                                              kind):
    archive = tmp_path / "runs"
    run = results / "r0"
    entry = _where(run, archive)
    odd = archive.joinpath(*entry.relative_to(archive).parts[:level])
    odd.parent.mkdir(parents=True)
    os.mkfifo(odd) if kind == "fifo" else odd.write_text("x")
    what = "a FIFO" if kind == "fifo" else "a regular file"
    assert lore_main(["archive", str(results), "--to", str(archive)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == (1 if level == 3 else 2), err  # one line per run it stops: seed 1 is archived beside it
    assert all(line.startswith(f"lore: error: {odd}: {what}") and line.endswith("not archived") for line in err)
    assert lore_main(["archive", "--check", "--to", str(archive)]) == 2
    _one_error(capsys, str(odd))
    fresh = tmp_path / "fresh"
    assert lore_main(_restore_argv(run / "config.yaml", fresh, archive)) == 2
    _one_error(capsys, str(odd), what)
    assert not fresh.exists()


@pytest.fixture
def outside(tmp_path, results) -> Path:
    """An archive outside ``<tmp>/runs`` holding the seed-0 run, for links to point into."""
    ar.archive_run(results / "r0", tmp_path / "outside")
    return tmp_path / "outside"


@pytest.mark.parametrize("level", [1, 2, 3])
def test_no_link_inside_the_archive_is_followed_writing_checking_or_restoring(tmp_path, results, outside, capsys,
                                                                               level):
    archive = tmp_path / "runs"
    entry = _where(results / "r0", archive)
    parts = entry.relative_to(archive).parts[:level]
    link = archive.joinpath(*parts)
    link.parent.mkdir(parents=True)
    link.symlink_to(outside.joinpath(*parts), target_is_directory=True)
    before = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    # writing: the seed-1 run would land outside the archive through a linked env or key folder
    assert lore_main(["archive", str(results), "--to", str(archive)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"lore: error: {link}: a symbolic link" in err, err
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == before
    # checking
    assert lore_main(["archive", "--check", "--to", str(archive)]) == 2
    _one_error(capsys, str(link), "symbolic link")
    # restoring: the linked entry is refused, not copied and not trained around
    fresh = tmp_path / "fresh"
    assert lore_main(_restore_argv(results / "r0" / "config.yaml", fresh, archive)) == 2
    _one_error(capsys, str(link), "never followed")
    assert not fresh.exists()


@pytest.mark.parametrize("kind", ["file", "fifo", "dangling link", "link to a folder"])
def test_an_archive_that_is_not_a_folder_is_one_line_for_every_command(tmp_path, results, capsys, kind):
    to = tmp_path / "runs"
    if kind == "file":
        to.write_text("not an archive")
    elif kind == "fifo":
        os.mkfifo(to)
    elif kind == "dangling link":
        to.symlink_to(tmp_path / "nowhere")
    else:
        (tmp_path / "elsewhere").mkdir()
        to.symlink_to(tmp_path / "elsewhere")
    for argv in (["archive", str(results), "--to", str(to)], ["archive", "--check", "--to", str(to)],
                 _restore_argv(results / "r0" / "config.yaml", tmp_path / "fresh", to),
                 ["reproduce", "--archive", str(to)]):
        assert lore_main(argv) == 2, argv
        _one_error(capsys, f"lore: error: {to}: ")
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "fresh").exists()
    assert kind != "link to a folder" or not any((tmp_path / "elsewhere").iterdir())


def test_an_empty_archive_name_is_one_line_not_the_current_folder(tmp_path, results, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["archive", str(results), "--to", " "], ["archive", "--check", "--to", ""],
                 ["reproduce", "--archive", ""]):
        assert lore_main(argv) == 2
        _one_error(capsys, "empty folder name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_an_interrupted_archive_says_so_in_one_line(tmp_path, results, capsys, monkeypatch):
    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(ar, "archive_run", interrupted)
    assert lore_main(["archive", str(results), "--to", str(tmp_path / "runs")]) == 130
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "interrupted" in err[0]


def test_an_os_error_with_a_message_of_its_own_keeps_it():
    from lore.utils.io import NoSpaceError

    assert ar.os_error_text(NoSpaceError("no space left on device writing runs/x")) == \
        "no space left on device writing runs/x"
    assert ar.os_error_text(OSError(errno.ENOSPC, "No space left on device", "runs/x")) == \
        "runs/x: no space left on device"


# --------------------------------------------------------------------------- unwritable targets, unreadable runs


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's /sys")
def test_a_target_the_system_refuses_is_one_line_and_stops_the_command(results, capsys):
    """/sys refuses new folders even to root (EPERM); the command stops at the first run instead of repeating it."""
    to = Path("/sys/lore-archive-test")
    assert lore_main(["archive", str(results), "--to", str(to)]) == 2
    _one_error(capsys, str(to), "cannot create the archive folder")


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC, errno.EACCES])
def test_a_read_only_full_or_forbidden_archive_is_one_line_naming_the_entry(tmp_path, results, capsys, monkeypatch,
                                                                             code):
    archive = tmp_path / "runs"
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and str(path).startswith(str(archive)):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    assert lore_main(["archive", str(results), "--to", str(archive)]) == 2
    line = _one_error(capsys, "cannot write the entry", os.strerror(code).lower(), "nothing archived")
    assert str(_where(results / "r0", archive)) in line
    assert not _temporaries(archive) and not list(archive.rglob("seed*"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission bits")
def test_a_read_only_archive_folder_is_one_line(tmp_path, results, capsys):
    archive = tmp_path / "runs"
    archive.mkdir()
    archive.chmod(0o555)
    try:
        assert lore_main(["archive", str(results), "--to", str(archive)]) == 2
        _one_error(capsys, str(archive), "permission denied")
    finally:
        archive.chmod(0o755)


def test_a_run_file_that_cannot_be_read_is_one_line_and_the_other_runs_are_archived(tmp_path, results, capsys,
                                                                                    monkeypatch):
    unreadable = results / "r1" / "eval.csv"
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if Path(path) == unreadable:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    assert lore_main(["archive", str(results), "--to", str(tmp_path / "runs")]) == 2
    _one_error(capsys, f"{unreadable}: cannot read it: permission denied", "not archived")
    assert len(ar.check_archive(tmp_path / "runs")) == 1


def test_a_fifo_in_a_run_is_refused_without_blocking(tmp_path, results, capsys):
    (results / "r1" / "metrics.csv").unlink()
    os.mkfifo(results / "r1" / "metrics.csv")
    assert lore_main(["archive", str(results), "--to", str(tmp_path / "runs")]) == 2
    _one_error(capsys, str(results / "r1" / "metrics.csv"), "not a regular file")


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's /sys")
def test_restoring_into_a_folder_that_cannot_be_written_is_one_line(tmp_path, results, capsys):
    archive = tmp_path / "runs"
    entry, _ = ar.archive_run(results / "r0", archive)
    run_dir = Path("/sys/lore-restore-test/run")
    assert lore_main(_restore_argv(entry / "config.yaml", run_dir, archive)) == 2
    _one_error(capsys, "/sys/lore-restore-test", "cannot restore it from the archive")


def test_reproduce_into_a_keep_folder_that_is_a_file_is_one_line(tmp_path, results, capsys):
    archive = tmp_path / "runs"
    ar.archive_run(results / "r0", archive)
    keep = tmp_path / "keep"
    keep.write_text("a file")
    assert lore_main(["reproduce", "--archive", str(archive), "--sample", "1", "--keep", str(keep)]) == 2
    _one_error(capsys, str(keep), "not a directory")


# --------------------------------------------------------------------------- two writers, interrupted writes


def test_a_second_archive_waits_for_the_first_and_both_finish(tmp_path, results):
    archive = tmp_path / "runs"
    archive.mkdir()
    fd = os.open(archive, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer at work
        waiting = _lore("archive", str(results), "--to", str(archive))
        time.sleep(2.0)
        assert waiting.poll() is None and not any(archive.iterdir())
    finally:
        os.close(fd)
    out, err = waiting.communicate(timeout=HANG_GUARD_S)
    assert waiting.returncode == 0, err
    assert "2 run(s) archived" in out
    # two at once over the same runs: each run is archived once, neither fails
    for seed in range(2, 8):
        _synthetic(results / f"r{seed}", seed=seed)
    both = [_lore("archive", str(results), "--to", str(archive)) for _ in range(2)]
    outs = [p.communicate(timeout=HANG_GUARD_S) for p in both]
    assert [p.returncode for p in both] == [0, 0], outs
    assert len(ar.check_archive(archive)) == 8 and not _temporaries(archive)


def test_check_refuses_the_remains_of_an_interrupted_archive(tmp_path, results, capsys):
    archive = tmp_path / "runs"
    entry, _ = ar.archive_run(results / "r0", archive)
    left = entry.parent / f"{TEMP_PREFIX}1.k2m4x9q1"  # what a SIGKILL mid-write leaves
    left.mkdir()
    (left / "config.yaml").write_bytes((entry / "config.yaml").read_bytes())
    assert lore_main(["archive", "--check", "--to", str(archive)]) == 2
    _one_error(capsys, str(left), "interrupted", "not an entry", "safe to delete")
    with pytest.raises(ar.ArchiveError, match="interrupted"):
        ar.index_archive(archive)


def test_the_next_archive_removes_what_a_killed_one_left_but_not_a_newer_temporary(tmp_path, results):
    archive = tmp_path / "runs"
    entry, _ = ar.archive_run(results / "r0", archive)
    stale, newer = entry.parent / ".seed5.aaaaaaaa", entry.parent / ".seed6.bbbbbbbb"
    for left in (stale, newer):
        left.mkdir()
        (left / "eval.csv").write_text("env_step,success_rate\n")
    os.utime(stale, (time.time() - 3600,) * 2)
    os.utime(newer, (time.time() + 3600,) * 2)  # taken after this writer's lock: not its to remove
    ar.archive_run(results / "r1", archive)
    assert not stale.exists() and newer.is_dir()


def test_sigterm_mid_write_removes_the_half_written_entry(tmp_path, results):
    archive = tmp_path / "runs"
    run = results / "r0"
    files = entry_files(run)
    dest = _where(run, archive)
    archive.mkdir()

    class KilledAfterOneFile(dict):
        def items(self):
            for i, item in enumerate(super().items()):
                if i == 1:
                    os.kill(os.getpid(), signal.SIGTERM)  # delivered to this (main) thread at once
                yield item

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stop:
        _write_entry(archive, dest, KilledAfterOneFile(files))
    assert stop.value.code == 128 + signal.SIGTERM
    assert not dest.exists() and not _temporaries(archive)
    assert signal.getsignal(signal.SIGTERM) == before


SLOW_WRITER = """
import sys, time
from pathlib import Path
from lore import archive as ar
from lore.archive.files import entry_files
from lore.archive.store import _write_entry
run, root = Path(sys.argv[1]), Path(sys.argv[2])
ident = ar.read_identity(run)

class Slow(dict):  # a slow disk: a pause after each file
    def items(self):
        for item in super().items():
            yield item
            time.sleep(0.3)

_write_entry(root, ar.entry_path(root, ident.env, ident.key, ident.seed), Slow(entry_files(run)))
"""


def test_sigterm_from_another_process_mid_write_leaves_nothing(tmp_path, results):
    archive = tmp_path / "runs"
    archive.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(results / "r0"), str(archive)],
                              env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + HANG_GUARD_S
    while not any(p.is_file() for p in archive.rglob("*")) and time.time() < deadline:
        time.sleep(0.01)
    temporaries = _temporaries(archive)
    writer.send_signal(signal.SIGTERM)
    _, err = writer.communicate(timeout=HANG_GUARD_S)
    assert temporaries and writer.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and not _temporaries(archive) and not list(archive.rglob("seed*"))


def test_a_terminated_archive_command_leaves_only_whole_entries(tmp_path):
    """SIGTERM to a ``lore archive`` of many sizeable runs, once it has begun writing: what it leaves is whole."""
    results = tmp_path / "results"
    for seed in range(24):
        run = _synthetic(results / f"r{seed}", seed=seed)
        with open(run / "episodes.csv", "a") as fh:  # ~1.5 MB of episodes each, all before done's step
            fh.writelines(f"{i % 2000},{i % 2}\n" for i in range(150_000))
    archive = tmp_path / "runs"
    proc = _lore("archive", str(results), "--to", str(archive))
    deadline = time.time() + HANG_GUARD_S
    while not _temporaries(archive) and not list(archive.rglob("seed*")) and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM), err
    assert "Traceback" not in err and not _temporaries(archive)
    ar.check_archive(archive)  # every entry it wrote is whole


# --------------------------------------------------------------------------- rows and numbers against done


@pytest.fixture
def entry(tmp_path) -> tuple[Path, Path]:
    archive = tmp_path / "runs"
    path, _ = ar.archive_run(_synthetic(tmp_path / "results" / "r0", "full"), archive)
    assert (path / "llm_calls.jsonl").is_file()
    return archive, path


def _edit_lines(path: Path, edit) -> None:
    lines = path.read_text().splitlines()
    edit(lines)
    path.write_text("\n".join(lines) + "\n")


def _set_step(line: str, step: int) -> str:
    return ",".join([str(step), *line.split(",")[1:]])


def _done(path: Path, **changes) -> None:
    done = json.loads((path / "done").read_text())
    for key, value in changes.items():
        if key == "threads":
            done["provenance"] = {**done.get("provenance", {}), "threads": value}
        else:
            done[key] = value
    (path / "done").write_text(json.dumps(done))


ROW_DAMAGE = {
    "eval row past done": ("eval.csv", lambda lines: lines.insert(2, _set_step(lines[1], 9_999_999)), "past done's"),
    "eval ends past done": ("eval.csv", lambda lines: lines.__setitem__(-1, _set_step(lines[-1], 2500)),
                            "past done's"),
    "eval row repeated": ("eval.csv", lambda lines: lines.insert(2, lines[2]), "go up strictly"),
    "eval rows swapped": ("eval.csv", lambda lines: lines.__setitem__(slice(2, 4), lines[3:1:-1]), "go up strictly"),
    "episode past done": ("episodes.csv", lambda lines: lines.append(_set_step(lines[-1], 2001)), "past done's"),
    "metrics row past done": ("metrics.csv", lambda lines: lines.append(_set_step(lines[-1], 40_000)), "past done's"),
    "llm call past done": ("llm_calls.jsonl", lambda lines: lines.append('{"env_step":2001,"ok":true}'),
                           "past done's"),
}


@pytest.mark.parametrize("case", ROW_DAMAGE)
def test_every_row_is_checked_against_done(entry, capsys, case):
    archive, path = entry
    name, edit, words = ROW_DAMAGE[case]
    _edit_lines(path / name, edit)
    assert lore_main(["archive", "--check", "--to", str(archive)]) == 2
    _one_error(capsys, str(path), name, words)


DONE_DAMAGE = {
    "wall_s": [1e308, -1.0, float("inf"), float("nan"), "3600", True],
    "cpu_s": [1e12, -0.5],
    "env_step": [2000.0, -1],
    "updates": [-3, 1e300],
    "final_success_rate": [1.5],
    "final_return_mean": [1e308],
    "llm_calls": [-1.0, 1e300],
    "threads": [0, 10**9, True, 1.5],
}


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in DONE_DAMAGE.items() for v in vs])
def test_every_number_of_done_is_bounded(entry, capsys, key, value):
    archive, path = entry
    _done(path, **{key: value})
    assert lore_main(["archive", "--check", "--to", str(archive)]) == 2
    _one_error(capsys, str(path), key)


@pytest.mark.parametrize(("name", "column", "value"), [
    ("eval.csv", "return_mean", "1e308"), ("eval.csv", "length_mean", "-2e9"),
    ("metrics.csv", "llm_calls", "1e308"), ("metrics.csv", "beta_mean", "inf"), ("metrics.csv", "steps_per_s", "-inf"),
])
def test_a_table_number_no_run_has_is_refused(entry, capsys, name, column, value):
    archive, path = entry
    header = (path / name).read_text().splitlines()[0].split(",")

    def put(lines):
        cells = lines[2].split(",")
        cells[header.index(column)] = value
        lines[2] = ",".join(cells)

    _edit_lines(path / name, put)
    assert lore_main(["archive", "--check", "--to", str(archive)]) == 2
    _one_error(capsys, str(path), name, column, value)


def test_a_missing_metric_is_no_number_and_passes(entry):
    archive, path = entry
    header = (path / "metrics.csv").read_text().splitlines()[0].split(",")

    def gaps(lines):
        cells = lines[2].split(",")
        cells[header.index("beta_mean")], cells[header.index("llm_calls")] = "nan", ""
        lines[2] = ",".join(cells)

    _edit_lines(path / "metrics.csv", gaps)
    assert len(ar.check_archive(archive)) == 1


def test_a_run_with_a_number_no_run_has_is_not_archived(tmp_path):
    run = _synthetic(tmp_path / "results" / "r3", seed=3)
    _done(run, wall_s=1e308)
    with pytest.raises(ar.ArchiveError, match="wall_s"):
        ar.archive_run(run, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_fields_an_older_entry_lacks_or_leaves_null_are_accepted(entry):
    archive, path = entry
    done = json.loads((path / "done").read_text())
    for key in ("cpu_s", "provenance", "updates", "final_return_mean"):
        done.pop(key, None)
    (path / "done").write_text(json.dumps({**done, "wall_s": None, "llm_calls": None, "unknown_later": 1e308}))
    assert len(ar.check_archive(archive)) == 1


def test_every_entry_of_the_real_archive_passes(capsys):
    assert lore_main(["archive", "--check", "--to", str(REPO / ar.ARCHIVE_ROOT)]) == 0
    assert "all valid" in capsys.readouterr().out


def test_a_finished_run_timed_at_1e308_seconds_does_not_break_the_plan(tmp_path, monkeypatch, capsys):
    import shutil

    import yaml

    from lore.config import build_config, save_config
    from lore.experiments.cli import main as experiments_main
    from lore.experiments.declaration import load_declaration
    from lore.experiments.plan import plan
    from lore.report.synthetic import SyntheticRun, write_run

    root = tmp_path / "project"
    shutil.copytree(REPO / "config", root / "config", ignore=shutil.ignore_patterns("experiments"))
    (root / "config" / "experiments").mkdir()
    decl = {"question": "Does a smaller beta_max change the full method's success?", "base": "config/config.yaml",
            "grid": {"envs": [DOORKEY], "seeds": [0, 1, 2]},
            "arms": {"rl_only": {}, "full_half": {"ablation": "full", "settings": {"prior.beta_max": 0.5}}},
            "compare": [{"arm": "full_half", "vs": "rl_only"}], "metrics": ["auc"],
            "decision": {"rule": "adopt", "require": [{"arm": "full_half", "vs": "rl_only", "metric": "auc",
                                                       "test": "above"}]}}
    (root / "config" / "experiments" / "exp.yaml").write_text(yaml.safe_dump(decl, sort_keys=False))
    runs = plan(load_declaration("exp", root), root)
    for run in runs[:2]:  # two finished runs in results/, each claiming 1e308 s
        folder = run.default_dir(root)
        cfg = build_config(None, [f"{k}={json.dumps(v)}" for k, v in run.overrides] + [f"seed={run.seed}"],
                           run.ablation)
        write_run(folder, SyntheticRun(env=run.env, ablation=run.ablation, seed=run.seed, steps=cfg.train.steps,
                                       eval_every=cfg.eval.every))
        save_config(cfg, folder / "config.yaml")
        _done(folder, wall_s=1e308, cpu_s=1e308)
    monkeypatch.chdir(root)
    assert experiments_main(["plan", "exp", "--cores", "1"]) == 0
    assert "ETA" in capsys.readouterr().out
    # archived, such a run is refused by the check the plan makes: one line, no traceback
    ar.archive_target(Path(ar.ARCHIVE_ROOT))
    ident = ar.read_identity(runs[0].default_dir(root))
    entry = ar.entry_path(Path(ar.ARCHIVE_ROOT), ident.env, ident.key, ident.seed)
    entry.mkdir(parents=True)
    for name in ("config.yaml", "done", "eval.csv"):
        shutil.copy(runs[0].default_dir(root) / name, entry / name)
    shutil.rmtree(root / "results")
    assert experiments_main(["plan", "exp", "--cores", "1"]) == 2
    _one_error(capsys, str(entry), "wall_s")
