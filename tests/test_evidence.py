"""Archived runs as evidence: entries written by earlier versions restore as they are and are never
re-archived, and a decided experiment's record re-checks from the entries it lists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from workflow_helpers import HANG_GUARD_S, REPO, job_env

from lore import archive as ar
from lore.archive import files as archive_files
from lore.cli import main as lore_main

DOORKEY = "MiniGrid-DoorKey-5x5-v0"


def _synthetic(folder: Path, seed: int = 0) -> Path:
    from lore.report.synthetic import SyntheticRun, write_run

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


# --------------------------------------------------------------------------- re-checking records


RECORDS = sorted(p.stem for p in (REPO / "docs" / "experiments" / "records").glob("*.json"))


@pytest.mark.parametrize("name", RECORDS)
def test_every_record_rechecks_identically_from_the_archive(name, monkeypatch):
    from lore.experiments.recheck import recheck

    monkeypatch.chdir(REPO)
    result = recheck(name)
    assert result.identical, result.differences


def _crafter_project(tmp_path: Path) -> Path:
    """A copy of what crafter_cpu_full's record reads: its declaration, its base config, record and entries."""
    root = tmp_path / "project"
    for part in ("config", "docs/experiments/records", "runs/crafter"):
        shutil.copytree(REPO / part, root / part)
    return root


def test_recheck_names_every_difference_and_exits_1(tmp_path, monkeypatch, capsys):
    root = _crafter_project(tmp_path)
    monkeypatch.chdir(root)
    assert lore_main(["experiments", "recheck", "crafter_cpu_full"]) == 0
    assert "recheck crafter_cpu_full: identical" in capsys.readouterr().out
    # one seed of the full arm scores otherwise: the record no longer holds
    entry = next((root / "runs" / "crafter").glob("full-*/seed0"))
    lines = (entry / "eval.csv").read_text().splitlines()
    header = lines[0].split(",")
    ach = [i for i, c in enumerate(header) if c.startswith("ach_")]
    last = lines[-1].split(",")
    for i in ach:
        last[i] = "1"
    (entry / "eval.csv").write_text("\n".join([*lines[:-1], ",".join(last)]) + "\n")
    assert lore_main(["experiments", "recheck", "crafter_cpu_full"]) == 1
    out = capsys.readouterr().out
    assert "difference(s)" in out and "row crafter/full/rl_only/crafter_score: mean_arm recorded" in out


def test_recheck_refuses_a_record_whose_run_is_not_archived(tmp_path, monkeypatch, capsys):
    root = _crafter_project(tmp_path)
    monkeypatch.chdir(root)
    shutil.rmtree(next((root / "runs" / "crafter").glob("random-*/seed3")))
    assert lore_main(["experiments", "recheck", "crafter_cpu_full"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lore: error:") and "seed3" in err and "does not hold" in err and "\n" not in err


# --------------------------------------------------------------------------- sound comparisons, trials


def _declare(root: Path, name: str, decl: dict) -> None:
    folder = root / "config" / "experiments"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(decl, sort_keys=False))


def test_a_comparison_across_budgets_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    root = tmp_path / "project"
    shutil.copytree(REPO / "config", root / "config", ignore=shutil.ignore_patterns("experiments"))
    _declare(root, "short", {
        "question": "Does full learn at 400 steps?", "base": "config/benchmark.yaml",
        "settings": {"train.steps": 4000}, "grid": {"envs": [DOORKEY], "seeds": [0, 1]},
        "arms": {"full": {}}, "baseline": "benchmark", "metrics": ["auc"],
        "decision": {"rule": "adopt", "require": [{"arm": "full", "vs": "baseline", "metric": "auc",
                                                    "test": "not_below"}]}})
    monkeypatch.chdir(root)
    for command in ("check", "plan"):
        assert lore_main(["experiments", command, "short"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("lore: error:") and "train.steps is 4000 against 10000" in err, err
    assert not (root / "results").exists()


@pytest.mark.parametrize("cores", ["0", "100000", "1e12"])
def test_cores_beyond_the_machine_are_refused_in_one_line(cores, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    try:
        status = lore_main(["experiments", "plan", "crafter_cpu", "--cores", cores])
    except SystemExit as e:  # a usage error: not a whole number
        status = e.code
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.startswith("lore: error:") and "--cores" in err and "\n" not in err


def test_the_eta_shows_every_second_of_work():
    from lore.experiments.launch import format_duration, makespan

    assert format_duration(145 / 4) == "37 s" and format_duration(145) == "2 min 25 s"
    assert format_duration(0.2) == "1 s" and format_duration(0) == "0 s"
    assert format_duration(3 * 3600 + 300) == "3 h 05 min"
    assert makespan([10.0, 20.0], 10**12) == 20.0  # more cores than jobs allocates nothing for the idle ones


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def test_a_trial_writes_nothing_under_docs_or_runs(tmp_path):
    from lore.config import build_config, save_config
    from lore.experiments.declaration import load_declaration
    from lore.experiments.plan import plan
    from lore.report.synthetic import SyntheticRun, write_run

    root = tmp_path / "project"
    shutil.copytree(REPO / "config", root / "config", ignore=shutil.ignore_patterns("experiments"))
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    _declare(root, "trial", {
        "question": "Does rl_only beat the random policy at 400 steps?", "base": "config/test.yaml",
        "grid": {"envs": [DOORKEY], "seeds": [0, 1]}, "arms": {"rl_only": {}, "random": {}},
        "compare": [{"arm": "rl_only", "vs": "random"}], "metrics": ["auc"],
        "decision": {"rule": "adopt", "require": [{"arm": "rl_only", "vs": "random", "metric": "auc",
                                                    "test": "above"}]}})
    (root / "docs").mkdir()
    (root / "docs" / "experiments.md").write_text("the log\n")
    runs = plan(load_declaration("trial", root), root)
    for run in runs[1:]:  # every run archived but one, which the trial trains
        cfg = build_config(None, [f"{k}={json.dumps(v)}" for k, v in run.overrides] + [f"seed={run.seed}"],
                           run.ablation)
        folder = write_run(tmp_path / "made" / run.arm / str(run.seed),
                           SyntheticRun(env=run.env, ablation=run.ablation, seed=run.seed, steps=cfg.train.steps,
                                        eval_every=cfg.eval.every))
        save_config(cfg, folder / "config.yaml")
        ar.archive_run(folder, root / "runs")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "declare")
    proc = subprocess.run([sys.executable, "-m", "lore.cli", "experiments", "try", "trial", "--cores", "2"],
                          cwd=root, capture_output=True, text=True, timeout=HANG_GUARD_S, env=job_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _git(root, "status", "--porcelain") == ""  # nothing under docs/ or runs/, nothing tracked touched
    verdict = json.loads((root / "results" / "experiments" / "trial" / "trial" / "verdict.json").read_text())
    assert "fewer than 5" in verdict["reason"] and verdict["verdict"] != "incomplete"
    trained = runs[0].default_dir(root)
    assert (trained / "done").is_file() and not ar.entry_path(root / "runs", runs[0].env, runs[0].key, runs[0].seed).exists()
    assert "a trial: nothing was written under docs/ or runs/" in proc.stdout + proc.stderr


# --------------------------------------------------------------------------- the README's rebuild, fresh clone


@pytest.mark.slow  # a clone and the benchmark's 30 runs restored through Snakemake: minutes
def test_the_figure_1_command_rebuilds_from_a_fresh_clone_without_training(tmp_path):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: there is no commit to clone")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=HANG_GUARD_S)
    # the README's command, run from the clone's root with this venv's snakemake and the clone's code
    cmd = [str(Path(sys.executable).parent / "snakemake"), "--cores", "2", "--configfile", "config/benchmark.yaml"]
    proc = subprocess.run(cmd, cwd=clone, capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env=job_env({"PYTHONPATH": str(clone)}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _git(clone, "status", "--porcelain") == ""
    runs = [p.parent for p in (clone / "results" / "bench" / "runs").glob("*/*/seed*/done")]
    assert len(runs) == 30
    for run in runs:  # every run restored, none trained
        assert "restored from the archive" in (run / "train.log").read_text(), run
        assert not (run / "checkpoint.pt").exists(), run


# --------------------------------------------------------------------------- the power rule


def _power_project(tmp_path: Path, seeds: list[int], at_least: float = 0.3) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REPO / "config", root / "config", ignore=shutil.ignore_patterns("experiments"))
    envs = [DOORKEY, "MiniGrid-LavaGapS5-v0", "MiniGrid-Empty-Random-6x6-v0"]
    _declare(root, "pilot", {
        "question": "On which envs does rl_only learn at the test budget?", "base": "config/test.yaml",
        "grid": {"envs": envs, "seeds": seeds}, "arms": {"rl_only": {}}, "metrics": ["final_sr"],
        "decision": {"rule": "power", "arm": "rl_only", "metric": "final_sr", "at_least": at_least}})
    return root


@pytest.mark.parametrize("at_least, powered", [(0.3, ["LavaGapS5", "Empty-Random-6x6"]), (0.5, ["Empty-Random-6x6"]),
                                               (0.95, [])])
def test_the_power_rule_names_the_envs_where_the_arm_learns(tmp_path, monkeypatch, at_least, powered):
    from lore.config import build_config, save_config
    from lore.experiments.compare import compare_experiment
    from lore.experiments.declaration import load_declaration
    from lore.experiments.plan import plan
    from lore.report.synthetic import SyntheticRun, write_run

    root = _power_project(tmp_path, [0, 1, 2, 3, 4], at_least)
    monkeypatch.chdir(root)
    final = {DOORKEY: [0.1, 0.2, 0.3, 0.2, 0.1], "MiniGrid-LavaGapS5-v0": [0.2, 0.5, 0.4, 0.3, 0.4],
             "MiniGrid-Empty-Random-6x6-v0": [0.9, 0.8, 0.9, 1.0, 0.7]}
    for run in plan(load_declaration("pilot")):
        cfg = build_config(None, [f"{k}={json.dumps(v)}" for k, v in run.overrides] + [f"seed={run.seed}"], "rl_only")
        points = cfg.train.steps // cfg.eval.every + 1
        sr = [0.0] * (points - 1) + [final[run.env][run.seed]]
        write_run(run.default_dir(), SyntheticRun(env=run.env, seed=run.seed, steps=cfg.train.steps,
                                                  eval_every=cfg.eval.every, eval_sr=sr))
        save_config(cfg, run.default_dir() / "config.yaml")
    rec = compare_experiment("pilot")
    expected = "powered: " + ", ".join(powered) if powered else "none"
    assert rec["verdict"] == expected, rec
    assert rec["scores"]["MiniGrid-LavaGapS5-v0"] == pytest.approx(0.36)
    assert "fewer than 5" not in rec["reason"]


def test_the_power_rule_flags_fewer_than_five_seeds_and_refuses_an_unknown_arm(tmp_path, monkeypatch, capsys):
    from lore.experiments.compare import power_verdict
    from lore.experiments.declaration import load_declaration

    root = _power_project(tmp_path, [0, 1])
    monkeypatch.chdir(root)
    decl = load_declaration("pilot")
    import pandas as pd

    table = pd.DataFrame([{"env": env, "arm": "rl_only", "seed": s, "final_sr": 0.5} for env in decl.envs
                          for s in (0, 1)])
    decided = power_verdict(decl, table)
    assert decided["verdict"].startswith("powered: ") and "fewer than 5" in decided["reason"]
    assert power_verdict(decl, table[table["env"] != DOORKEY])["verdict"] == "incomplete"
    text = (root / "config" / "experiments" / "pilot.yaml").read_text().replace("arm: rl_only", "arm: full")
    (root / "config" / "experiments" / "pilot.yaml").write_text(text)
    assert lore_main(["experiments", "check", "pilot"]) == 2
    err = capsys.readouterr().err
    assert "decision.arm" in err and "unknown arm 'full'" in err


def test_a_run_archived_before_the_cut_changed_is_still_its_entry(tmp_path, monkeypatch):
    archive = tmp_path / "runs"
    run = _synthetic(tmp_path / "results" / "r0")
    monkeypatch.setattr(archive_files, "METRIC_COLUMNS", ("env_step", "steps_per_s"))  # an older, narrower cut
    monkeypatch.setattr(archive_files, "LEDGER_FIELDS", archive_files.LEDGER_FIELDS[:2])
    path, new = ar.archive_run(run, archive)
    before = _snapshot(path)
    monkeypatch.undo()  # today's cut keeps more columns: the run is still the entry, which stays as it was
    assert ar.archive_run(run, archive) == (path, False)
    assert _snapshot(path) == before
    lines = (run / "metrics.csv").read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + ",1.5"  # another run: its speed differs in a column the entry keeps
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ar.ArchiveError, match="already archived with other content"):
        ar.archive_run(run, archive)


@pytest.mark.parametrize("field, value, words", [
    ("env", "../../outside", "is not an environment name"), ("key", "full-../../x", "is not a run key"),
    ("seed", -1, "is not a seed"), ("seed", True, "is not a seed"), ("arm", None, "is not a name")])
def test_a_hostile_record_is_refused_in_one_line_naming_its_field(tmp_path, monkeypatch, capsys, field, value, words):
    root = _crafter_project(tmp_path)
    monkeypatch.chdir(root)
    path = root / "docs" / "experiments" / "records" / "crafter_cpu_full.json"
    rec = json.loads(path.read_text())
    rec["runs"][2][field] = value
    path.write_text(json.dumps(rec))
    assert lore_main(["experiments", "recheck", "crafter_cpu_full"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lore: error:") and f"runs[2].{field}" in err and words in err and "\n" not in err
