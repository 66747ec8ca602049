"""A corpus of hostile and corrupt inputs for ``lore aggregate | figures | paper-macros | benchmark-report``.

Every case must be rejected the same way: exit status 2, exactly one line ``lore <command>: error: ...`` on
stderr that names the offending file (and the column, key or line where there is one), no traceback, and
nothing written: the whole scratch folder (runs, tables, output folder) is byte-for-byte what it was.
Each case damages a copy of one small valid grid, which the first test shows is accepted as it is.
Atomic outputs are checked last: a full disk and a SIGKILL mid-write keep the previous tables.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from workflow_helpers import HANG_GUARD_S, analysis_main, snapshot

from lore.report.synthetic import write_grid

ENV = "MiniGrid-DoorKey-5x5-v0"
FAST = ["--resamples", "50"]
RUN = f"{ENV}/full/seed0"
"""The run every run-directory case damages (an LLM arm: it has a ledger)."""


# --------------------------------------------------------------------------- a valid grid and its tables


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """``runs/`` (rl_only and full, one seed) and ``tables/`` that ``lore aggregate`` wrote from it."""
    base = tmp_path_factory.mktemp("pristine")
    write_grid(base / "runs", [ENV], ["rl_only", "full"], [0], steps=2000, eval_every=1000)
    assert analysis_main(["aggregate", "--runs-root", str(base / "runs"), "--out", str(base / "tables"), *FAST]) == 0
    return base


@pytest.fixture
def scratch(pristine, tmp_path) -> Path:
    shutil.copytree(pristine / "runs", tmp_path / "runs", symlinks=True)
    shutil.copytree(pristine / "tables", tmp_path / "tables")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "previous.txt").write_text("an earlier output, to be left alone\n")
    return tmp_path


def run_cli(capsys, args: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    rc = analysis_main(args)
    return rc, capsys.readouterr().err


def assert_rejected(capsys, root: Path, args: list[str], needles: tuple[str, ...]) -> None:
    before = snapshot(root)
    rc, err = run_cli(capsys, args)
    assert "Traceback" not in err and rc == 2, (rc, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lore {args[0]}: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert snapshot(root) == before, "the command wrote or removed something"


def aggregate_args(root: Path) -> list[str]:
    return ["aggregate", "--runs-root", str(root / "runs"), "--out", str(root / "out"), *FAST]


def test_the_pristine_grid_is_accepted_by_every_command(scratch, capsys):
    rc, err = run_cli(capsys, aggregate_args(scratch))
    assert rc == 0 and not err, err
    rc, err = run_cli(capsys, ["paper-macros", "--tables", str(scratch / "tables"), "--out", str(scratch / "gen")])
    assert rc == 0 and not err, err
    assert (scratch / "out" / "stats.csv").read_text() == (scratch / "tables" / "stats.csv").read_text()


# --------------------------------------------------------------------------- damaging one run


def write(rel: str, content: str | bytes) -> Callable[[Path], None]:
    def damage(runs: Path) -> None:
        path = runs / RUN / rel
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return damage


def edit(rel: str, change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    """Apply ``change`` to the lines of a run file."""

    def damage(runs: Path) -> None:
        path = runs / RUN / rel
        path.write_text("\n".join(change(path.read_text().splitlines())) + "\n")

    return damage


def cell(row: int, column: int, value: str) -> Callable[[list[str]], list[str]]:
    """Set one CSV cell (row 0 is the header)."""

    def change(lines: list[str]) -> list[str]:
        fields = lines[row].split(",")
        fields[column] = value
        return lines[:row] + [",".join(fields)] + lines[row + 1:]

    return change


def dup_row(row: int, column: int, value: str) -> Callable[[list[str]], list[str]]:
    """Append a copy of one CSV row with one cell changed (a second, different row for its env step)."""

    def change(lines: list[str]) -> list[str]:
        fields = lines[row].split(",")
        fields[column] = value
        return lines + [",".join(fields)]

    return change


def config_edit(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(runs: Path) -> None:
        path = runs / RUN / "config.yaml"
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data))

    return damage


def replaced(path: str) -> Callable[[Path], None]:
    def damage(runs: Path) -> None:
        target = runs / RUN / path
        target.unlink()
        target.mkdir()

    return damage


EVAL = "eval.csv"  # env_step,success_rate,return_mean,return_std,length_mean,episodes; rows at 0, 1000, 2000
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))

RUN_CASES: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    # eval.csv: the table every statistic comes from
    "eval-zero-bytes": (write(EVAL, ""), (EVAL, "empty file")),
    "eval-header-only": (write(EVAL, "env_step,success_rate\n"), (EVAL, "header only")),
    "eval-wrong-columns": (write(EVAL, "step,sr\n0,0.5\n"), (EVAL, "missing column", "success_rate")),
    "eval-non-numeric": (edit(EVAL, cell(2, 1, "lots")), (EVAL, "'success_rate'", "line 3", "not a number")),
    "eval-nan-sr": (edit(EVAL, cell(2, 1, "nan")), (EVAL, "'success_rate'", "no value")),
    "eval-empty-sr": (edit(EVAL, cell(3, 1, "")), (EVAL, "'success_rate'", "line 4", "no value")),
    "eval-inf-sr": (edit(EVAL, cell(2, 1, "inf")), (EVAL, "'success_rate'", "infinite")),
    "eval-inf-return": (edit(EVAL, cell(2, 2, "-inf")), (EVAL, "'return_mean'", "infinite")),
    "eval-sr-above-one": (edit(EVAL, cell(2, 1, "1.5")), (EVAL, "'success_rate'", "outside [0, 1]")),
    "eval-sr-negative": (edit(EVAL, cell(2, 1, "-0.1")), (EVAL, "'success_rate'", "outside [0, 1]")),
    "eval-negative-step": (edit(EVAL, cell(1, 0, "-1000")), (EVAL, "'env_step'", "line 2", "whole number")),
    "eval-fractional-step": (edit(EVAL, cell(2, 0, "999.5")), (EVAL, "'env_step'", "whole number")),
    "eval-huge-step": (edit(EVAL, cell(3, 0, "1e13")), (EVAL, "'env_step'", "whole number")),
    "eval-disagreeing-steps": (edit(EVAL, dup_row(2, 2, "-0.25")), (EVAL, "'env_step'", "different rows")),
    "eval-ragged-short": (edit(EVAL, lambda ls: ls[:2] + [ls[2].rsplit(",", 1)[0]] + ls[3:]),
                          (EVAL, "line 3", "ragged")),
    "eval-ragged-long": (edit(EVAL, lambda ls: ls[:3] + [ls[3] + ",7"]), (EVAL, "line 4", "ragged")),
    "eval-binary": (write(EVAL, bytes(range(256)) * 4), (EVAL, "binary")),
    "eval-latin1": (write(EVAL, "env_step,success_rate\n0,caf\xe9\n".encode("latin-1")), (EVAL, "UTF-8")),
    "eval-huge-line": (write(EVAL, "env_step,success_rate\n0," + "9" * 200_000 + "\n"), (EVAL, "line 2")),
    "eval-repeated-column": (write(EVAL, "env_step,success_rate,success_rate\n0,0.1,0.2\n"),
                             (EVAL, "repeated column", "success_rate")),
    "eval-a-folder": (replaced(EVAL), (EVAL, "not a regular file")),
    "eval-achievement-rate": (edit(EVAL, lambda ls: [ls[0] + ",ach_collect_wood"] + [x + ",0.5" for x in ls[1:-1]]
                                   + [ls[-1] + ",2"]), (EVAL, "'ach_collect_wood'", "outside [0, 1]")),
    # metrics.csv and episodes.csv
    "metrics-zero-bytes": (write("metrics.csv", b""), ("metrics.csv", "empty file")),
    "metrics-non-numeric": (edit("metrics.csv", cell(2, 1, "high")), ("metrics.csv", "'wm_loss'", "not a number")),
    "metrics-no-env-step": (write("metrics.csv", "wm_loss\n1.0\n"), ("metrics.csv", "missing column", "env_step")),
    "metrics-disagreeing-steps": (edit("metrics.csv", dup_row(1, 1, "-7")), ("metrics.csv", "different rows")),
    "episodes-success-range": (edit("episodes.csv", cell(1, 5, "3")), ("episodes.csv", "'success'", "outside [0, 1]")),
    "episodes-negative-step": (edit("episodes.csv", cell(1, 0, "-5")), ("episodes.csv", "'env_step'", "whole number")),
    # config.yaml
    "config-not-yaml": (write("config.yaml", "env: [unclosed\n"), ("config.yaml", "not valid YAML")),
    "config-a-list": (write("config.yaml", "- env\n- seed\n"), ("config.yaml", "mapping")),
    "config-a-scalar": (write("config.yaml", "42\n"), ("config.yaml", "mapping")),
    "config-empty": (write("config.yaml", ""), ("config.yaml", "empty")),
    "config-binary": (write("config.yaml", b"\x89PNG\r\n\x1a\n\x00\x00"), ("config.yaml",)),
    "config-alias-bomb": (write("config.yaml", BOMB + "env: {name: *i}\nablation: full\nseed: 0\n"),
                          ("config.yaml",)),
    "config-env-name-a-list": (config_edit(lambda c: c["env"].update(name=["a", "b"])), ("config.yaml", "env.name")),
    "config-seed-text": (config_edit(lambda c: c.update(seed="zero")), ("config.yaml", "'seed'")),
    "config-section-a-list": (config_edit(lambda c: c.update(prior=[1, 2])), ("config.yaml", "'prior'")),
    "config-leaf-a-mapping": (config_edit(lambda c: c["train"].update(steps={"a": 1})), ("config.yaml", "train.steps")),
    # llm_calls.jsonl
    "ledger-not-json": (edit("llm_calls.jsonl", lambda ls: ls[:1] + ["{not json"] + ls[1:]),
                        ("llm_calls.jsonl:2", "not valid JSON")),
    "ledger-not-an-object": (edit("llm_calls.jsonl", lambda ls: ["[1, 2]"] + ls), ("llm_calls.jsonl:1", "JSON object")),
    "ledger-wrong-type": (edit("llm_calls.jsonl", lambda ls: ['{"env_step": 3, "ok": "yes"}'] + ls),
                          ("llm_calls.jsonl:1", "'ok'")),
    "ledger-negative-step": (edit("llm_calls.jsonl", lambda ls: ['{"env_step": -3, "ok": true}'] + ls),
                             ("llm_calls.jsonl:1", "'env_step'")),
    "ledger-no-step": (edit("llm_calls.jsonl", lambda ls: ['{"ok": true}'] + ls), ("llm_calls.jsonl:1", "'env_step'")),
    # done marker
    "done-a-list": (write("done", "[1, 2]"), ("done", "JSON object")),
    "done-not-json": (write("done", '{"wall_s": 1'), ("done", "not valid JSON")),
    "done-wall-text": (write("done", '{"wall_s": "long"}'), ("done", "'wall_s'")),
    "done-a-folder": (replaced("done"), ("done", "not a regular file")),
}


@pytest.mark.parametrize("case", sorted(RUN_CASES))
def test_a_damaged_run_is_named_and_nothing_is_written(scratch, capsys, case):
    damage, needles = RUN_CASES[case]
    damage(scratch / "runs")
    assert_rejected(capsys, scratch, aggregate_args(scratch), needles + (RUN,))


# --------------------------------------------------------------------------- output paths and symlinks


def _out_is_a_file(root: Path) -> list[str]:
    (root / "out.csv").write_text("x\n")
    return [*aggregate_args(root)[:3], "--out", str(root / "out.csv"), *FAST]


def _out_below_a_file(root: Path) -> list[str]:
    return [*aggregate_args(root)[:3], "--out", str(root / "out" / "previous.txt" / "tables"), *FAST]


def _out_is_a_run(root: Path) -> list[str]:
    return [*aggregate_args(root)[:3], "--out", str(root / "runs" / RUN), *FAST]


def _run_list_is_an_output(root: Path) -> list[str]:
    (root / "out" / "runs.csv").write_text(str(root / "runs" / RUN) + "\n")
    return ["aggregate", "--run-list", str(root / "out" / "runs.csv"), "--out", str(root / "out"), *FAST]


def _settings_is_an_output(root: Path) -> list[str]:
    (root / "out" / "stats.csv").write_text("resamples: 50\n")
    return [*aggregate_args(root), "--settings", str(root / "out" / "stats.csv")]


def _link(name: str, target: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    def setup(root: Path) -> list[str]:
        (root / "runs" / name).symlink_to(target(root), target_is_directory=True)
        return aggregate_args(root)

    return setup


def _run_file_link_outside(root: Path) -> list[str]:
    (root / "elsewhere.jsonl").write_text("")
    ledger = root / "runs" / RUN / "llm_calls.jsonl"
    ledger.unlink()
    ledger.symlink_to(root / "elsewhere.jsonl")
    return aggregate_args(root)


PATH_CASES: dict[str, tuple[Callable[[Path], list[str]], tuple[str, ...]]] = {
    "out-is-a-file": (_out_is_a_file, ("out.csv", "--out", "is a file")),
    "out-below-a-file": (_out_below_a_file, ("previous.txt", "--out", "below")),
    "out-is-a-run-directory": (_out_is_a_run, (RUN, "also one of its inputs")),
    "run-list-is-an-output": (_run_list_is_an_output, ("runs.csv", "also one of its inputs")),
    "settings-is-an-output": (_settings_is_an_output, ("stats.csv", "also one of its inputs")),
    "symlink-to-root-of-fs": (_link("everything", lambda root: Path("/")), ("runs/everything", "outside the runs root")),
    "symlink-to-a-sibling": (_link("sibling", lambda root: root / "tables"), ("runs/sibling", "outside the runs root")),
    "symlink-loop-up": (_link("up", lambda root: root), ("runs/up", "outside the runs root")),
    "run-file-links-outside": (_run_file_link_outside, ("llm_calls.jsonl", "outside the runs root")),
}


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_bad_output_paths_and_links_out_of_the_root_are_refused(scratch, capsys, case):
    setup, needles = PATH_CASES[case]
    args = setup(scratch)
    assert_rejected(capsys, scratch, args, needles)


def test_a_link_loop_inside_the_root_is_walked_once(scratch, capsys):
    (scratch / "runs" / RUN / "again").symlink_to(scratch / "runs", target_is_directory=True)
    rc, err = run_cli(capsys, aggregate_args(scratch))
    assert rc == 0, err
    assert len((scratch / "out" / "runs.csv").read_text().splitlines()) == 3  # header + two runs, once each


# --------------------------------------------------------------------------- the tables figures and macros read


def table_edit(name: str, change: Callable[[str], str]) -> Callable[[Path], None]:
    def damage(tables: Path) -> None:
        path = tables / name
        path.write_text(change(path.read_text()))

    return damage


def _column_set(name: str, column: str, value: str) -> Callable[[Path], None]:
    def change(text: str) -> str:
        lines = text.splitlines()
        j = lines[0].split(",").index(column)
        fields = lines[1].split(",")
        fields[j] = value
        return "\n".join([lines[0], ",".join(fields), *lines[2:]]) + "\n"

    return table_edit(name, change)


def _remove(name: str) -> Callable[[Path], None]:
    return lambda tables: (tables / name).unlink()


TABLE_CASES: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "stats-zero-bytes": (table_edit("stats.csv", lambda t: ""), ("stats.csv", "empty file")),
    "stats-wrong-columns": (table_edit("stats.csv", lambda t: "a,b\n1,2\n"), ("stats.csv", "missing column")),
    "stats-missing": (_remove("stats.csv"), ("stats.csv", "missing")),
    "stats-text-in-mean": (_column_set("stats.csv", "mean", "high"), ("stats.csv", "'mean'", "not a number")),
    "stats-fractional-n": (_column_set("stats.csv", "n", "1.5"), ("stats.csv", "'n'", "whole number")),
    "runs-header-only": (table_edit("runs.csv", lambda t: t.splitlines()[0] + "\n"), ("runs.csv", "header only")),
    "eval-points-sr-range": (_column_set("eval_points.csv", "success_rate", "7"),
                             ("eval_points.csv", "'success_rate'", "outside [0, 1]")),
    "improvement-p-range": (_column_set("improvement.csv", "p_improve", "1.5"),
                            ("improvement.csv", "'p_improve'", "outside [0, 1]")),
    "achievements-binary": (lambda tables: (tables / "achievements.csv").write_bytes(b"\x00\x01\x02"),
                            ("achievements.csv", "binary")),
}


@pytest.mark.parametrize("command", ["paper-macros", "figures"])
@pytest.mark.parametrize("case", sorted(TABLE_CASES))
def test_damaged_tables_are_named_before_any_figure_or_macro_is_written(scratch, capsys, case, command):
    damage, needles = TABLE_CASES[case]
    damage(scratch / "tables")
    args = [command, "--tables", str(scratch / "tables"), "--out", str(scratch / "out"), *FAST]
    if command == "figures":
        args += ["--runs-root", str(scratch / "runs")]
    assert_rejected(capsys, scratch, args, needles)


def test_the_report_may_not_copy_a_table_onto_itself(scratch, capsys):
    (scratch / "figs").mkdir()
    args = ["benchmark-report", "--tables", str(scratch / "tables"), "--figures", str(scratch / "figs"),
            "--out", str(scratch)]  # <out>/tables/ is the tables folder it reads
    assert_rejected(capsys, scratch, args, ("tables", "also one of its inputs"))


def test_paper_macros_output_that_is_a_file(scratch, capsys):
    args = ["paper-macros", "--tables", str(scratch / "tables"), "--out", str(scratch / "out" / "previous.txt")]
    assert_rejected(capsys, scratch, args, ("previous.txt", "is a file"))


# --------------------------------------------------------------------------- atomic outputs


def test_a_full_disk_keeps_every_previous_table(scratch, capsys, monkeypatch):
    assert run_cli(capsys, aggregate_args(scratch))[0] == 0
    previous = snapshot(scratch / "out")
    (scratch / "runs" / f"{ENV}/rl_only/seed0").rename(scratch / "rl_only_seed0")  # new tables would differ
    calls = []
    real_fsync = os.fsync

    def full_disk(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    rc, err = run_cli(capsys, aggregate_args(scratch))
    assert rc == 1 and len(err.splitlines()) == 1 and "no space left on device" in err.lower(), err
    now = snapshot(scratch / "out")
    assert now.keys() == previous.keys()  # no temporary left behind
    changed = sorted(name for name in now if now[name] != previous[name])
    assert changed == ["eval_points.csv", "runs.csv"]  # written whole before the disk filled; the rest kept
    assert now["stats.csv"] == previous["stats.csv"]


KILLED_AGGREGATE = """
import os, sys, time
from lore.report import cli
real = os.fsync
count = []
def slow(fd):
    count.append(fd)
    if len(count) == 2:
        time.sleep(120)  # the parent kills us here, with runs.csv's temporary written
    real(fd)
os.fsync = slow
cli.main(sys.argv[1:])
"""


def test_sigkill_mid_write_keeps_previous_tables_and_the_next_run_clears_the_temporary(scratch, capsys):
    assert run_cli(capsys, aggregate_args(scratch))[0] == 0
    previous = snapshot(scratch / "out")
    (scratch / "runs" / f"{ENV}/rl_only/seed0").rename(scratch / "rl_only_seed0")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_AGGREGATE, *aggregate_args(scratch)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=Path(__file__).parents[1])
    deadline = time.monotonic() + HANG_GUARD_S
    while not list((scratch / "out").glob(".runs.csv.*.tmp")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stale = list((scratch / "out").glob(".runs.csv.*.tmp"))
    assert stale, "the writer was killed before its temporary appeared"
    now = snapshot(scratch / "out")
    assert now["runs.csv"] == previous["runs.csv"] and now["stats.csv"] == previous["stats.csv"]
    assert now["eval_points.csv"] != previous["eval_points.csv"]  # the file before it was replaced whole
    rc, err = run_cli(capsys, aggregate_args(scratch))
    assert rc == 0, err
    assert not list((scratch / "out").glob(".*.tmp"))
    assert snapshot(scratch / "out")["runs.csv"] != previous["runs.csv"]


def _paper_build_args(root: Path, out: Path, generated: Path | None = None) -> list[str]:
    generated = generated or root / "tables"
    return ["paper-build", "--tex", str(root / "tables" / "sr_table.tex"), "--generated", str(generated),
            "--figures", str(root / "out"), "--out", str(out)]


@pytest.mark.parametrize("case", ["out-is-a-folder", "out-below-a-file", "out-is-an-input", "inputs-in-build"])
def test_paper_build_checks_its_output_before_touching_anything(scratch, capsys, case):
    root = scratch
    if case == "out-is-a-folder":
        args, needles = _paper_build_args(root, root / "out"), ("--out", "is a folder")
    elif case == "out-below-a-file":
        args, needles = _paper_build_args(root, root / "out" / "previous.txt" / "lore.pdf"), ("previous.txt", "below")
    elif case == "out-is-an-input":
        args, needles = _paper_build_args(root, root / "out" / "previous.txt"), ("previous.txt", "also one of its inputs")
    else:  # paper-build empties <out>/../build: it must not hold what the build reads
        shutil.copytree(root / "tables", root / "paper" / "build")
        args = _paper_build_args(root, root / "paper" / "lore.pdf", generated=root / "paper" / "build")
        needles = ("build", "empties")
    assert_rejected(capsys, root, args, needles)
