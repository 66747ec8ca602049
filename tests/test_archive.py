"""The run archive: finished runs copied into ``runs/`` (tracked), read back exactly, checked, reproduced."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from workflow_helpers import HANG_GUARD_S, REPO, job_counts, run_snakemake

from lore import archive as ar
from lore.archive.check import entry_dirs
from lore.cli import main as lore_main
from lore.experiments import launch
from lore.experiments.compare import compare_experiment
from lore.experiments.declaration import load_declaration
from lore.experiments.plan import RESULTS_DIR, PlannedRun, plan, run_dirs

DOORKEY = "MiniGrid-DoorKey-5x5-v0"
TINY = ["model.preset=debug", "train.steps=300", "train.prefill=100", "eval.every=150", "eval.episodes=2",
        "train.log_every=100", "train.checkpoint_every=300", "train.tensorboard=false", "device=cpu"]


def _train(run_dir: Path, ablation: str, seed: int = 0) -> Path:
    from lore.config import build_config
    from lore.train.trainer import train

    train(build_config(None, [*TINY, f"seed={seed}", f"llm.cache_path={run_dir}/llm_cache.sqlite"], ablation),
          run_dir, show_progress=False)
    return run_dir


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory) -> Path:
    """Two tiny real runs (rl_only, full) under ``<tmp>/results/runs/<env>/<ablation>/seed0``."""
    root = tmp_path_factory.mktemp("real") / "results" / "runs" / DOORKEY
    for ablation in ("rl_only", "full"):
        _train(root / ablation / "seed0", ablation)
    return root.parent


def _analysis(runs_root: Path, out: Path) -> dict[str, bytes]:
    """Tables and PNG figures built from ``runs_root`` by the analysis commands, by relative path."""
    assert lore_main(["aggregate", "--runs-root", str(runs_root), "--out", str(out / "tables"),
                      "--budgets", "150", "300"]) == 0
    assert lore_main(["figures", "--runs-root", str(runs_root), "--tables", str(out / "tables"),
                      "--out", str(out / "figures"), "--budgets", "150", "300"]) == 0
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.suffix in (".csv", ".png")}


def test_tables_and_figures_rebuild_identically_from_the_archive(real_runs, tmp_path):
    before = _analysis(real_runs, tmp_path / "from_results")
    archive = tmp_path / "runs"
    entries = [ar.archive_run(d, archive)[0] for d in ar.finished_run_dirs(real_runs)]
    assert len(entries) == 2
    for entry in entries:
        names = set(os.listdir(entry))
        assert {"config.yaml", "done", "eval.csv", "metrics.csv", "episodes.csv"} <= names
        assert not names & {"checkpoint.pt", "train.log", "tb", ".lock", "llm_cache.sqlite"}
        assert sum(f.stat().st_size for f in entry.iterdir()) <= 10_000
    full = next(e for e in entries if e.parent.name.startswith("full-"))
    assert (full / "llm_calls.jsonl").is_file()
    copied = tmp_path / "copied"
    shutil.copytree(archive, copied)
    after = _analysis(copied, tmp_path / "from_archive")
    assert sorted(after) == sorted(before) and any(k.endswith(".png") for k in after)
    for name, data in before.items():
        assert after[name] == data, f"{name} differs when rebuilt from the archive"


def test_an_archived_run_records_its_commit_versions_and_times(real_runs, tmp_path):
    entry, new = ar.archive_run(real_runs / DOORKEY / "full" / "seed0", tmp_path / "runs")
    assert new and ar.archive_run(real_runs / DOORKEY / "full" / "seed0", tmp_path / "runs") == (entry, False)
    done = json.loads((entry / "done").read_text())
    prov = done["provenance"]
    assert len(prov["commit"]) == 40 and isinstance(prov["dirty"], bool)
    assert prov["torch"] and prov["lore"] and prov["threads"] >= 1
    assert done["wall_s"] > 0 and done["cpu_s"] > 0
    assert ar.run_commit(entry).startswith(prov["commit"][:10])


def test_reproduce_reports_an_exact_match_and_an_edited_eval_csv(real_runs, tmp_path, capsys):
    archive = tmp_path / "runs"
    entry, _ = ar.archive_run(real_runs / DOORKEY / "rl_only" / "seed0", archive)
    assert lore_main(["reproduce", "--archive", str(archive), "--sample", "1"]) == 0
    assert "1 of 1 archived runs reproduced exactly" in capsys.readouterr().out
    lines = (entry / "eval.csv").read_text().splitlines()
    cells = lines[1].split(",")
    cells[1] = "0.75" if cells[1] != "0.75" else "0.25"  # a success rate edited in the middle of the table
    lines[1] = ",".join(cells)
    (entry / "eval.csv").write_text("\n".join(lines) + "\n")
    assert lore_main(["reproduce", "--archive", str(archive), "--sample", "1"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "line 2" in out and "0 of 1" in out


# --------------------------------------------------------------------------- refusals


def _synthetic(folder: Path, ablation: str = "rl_only", seed: int = 0) -> Path:
    from lore.report.synthetic import SyntheticRun, write_run

    return write_run(folder, SyntheticRun(env=DOORKEY, ablation=ablation, seed=seed, steps=2000, eval_every=500))


@pytest.fixture
def entry(tmp_path) -> tuple[Path, Path]:
    archive = tmp_path / "runs"
    path, _ = ar.archive_run(_synthetic(tmp_path / "results" / "r0"), archive)
    return archive, path


def _refused(archive: Path, *words: str) -> str:
    with pytest.raises(ar.ArchiveError) as info:
        ar.index_archive(archive)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


def test_a_truncated_eval_csv_is_refused(entry):
    archive, path = entry
    text = (path / "eval.csv").read_text()
    (path / "eval.csv").write_text(text[: len(text) * 2 // 3])
    _refused(archive, str(path), "truncated")


@pytest.mark.parametrize("name, what", [("done", "done marker"), ("config.yaml", "config")])
def test_an_entry_without_its_done_or_config_is_refused(entry, name, what):
    archive, path = entry
    (path / name).unlink()
    _refused(archive, str(path), what)


def test_an_entry_whose_config_does_not_hash_to_its_key_is_refused(entry):
    archive, path = entry
    cfg = yaml.safe_load((path / "config.yaml").read_text())
    cfg["prior"]["beta_max"] = 0.123
    (path / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    _refused(archive, str(path), "does not hash to its key")


def test_an_entry_duplicating_another_is_refused(entry):
    archive, path = entry
    stale = path.parent.parent / "rl_only-0123456789" / "seed0"
    shutil.copytree(path, stale)
    _refused(archive, str(stale), "duplicates", str(path))


def test_stray_files_and_folders_in_the_archive_are_refused(entry):
    archive, path = entry
    (path / "checkpoint.pt").write_bytes(b"x")
    _refused(archive, "checkpoint.pt")
    (path / "checkpoint.pt").unlink()
    (path.parent / "seed01").mkdir()
    _refused(archive, "seed01", "not an archive entry")


def test_a_live_run_is_never_archived_half_way(tmp_path):
    from lore.utils.io import exclusive_dir_lock

    run = _synthetic(tmp_path / "results" / "r0")
    with exclusive_dir_lock(run):
        with pytest.raises(ar.ArchiveError, match="live training"):
            ar.archive_run(run, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
    ar.archive_run(run, tmp_path / "runs")


def test_an_entry_is_never_overwritten_silently(tmp_path):
    archive = tmp_path / "runs"
    run = _synthetic(tmp_path / "results" / "r0")
    path, _ = ar.archive_run(run, archive)
    before = (path / "eval.csv").read_bytes()
    (run / "eval.csv").write_text((run / "eval.csv").read_text().replace(",0.", ",0.0", 1))
    with pytest.raises(ar.ArchiveError, match="already archived with other content"):
        ar.archive_run(run, archive)
    assert (path / "eval.csv").read_bytes() == before


def test_the_archive_command_reports_refused_runs_and_archives_the_rest(tmp_path, capsys):
    good = _synthetic(tmp_path / "results" / "a", seed=0)
    bad = _synthetic(tmp_path / "results" / "b", seed=1)
    (bad / "eval.csv").write_text("env_step,success_rate\n0,0.0\n")  # ends before done's env step
    assert lore_main(["archive", str(tmp_path / "results"), "--to", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "not archived" in err and str(bad) in err
    assert len(ar.index_archive(tmp_path / "runs")) == 1 and good.exists()


# --------------------------------------------------------------------------- the workflow and the plan


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REPO / "config", root / "config", ignore=shutil.ignore_patterns("experiments"))
    (root / "config" / "experiments").mkdir()
    decl = {"question": "Does a smaller beta_max change the full method's success?",
            "base": "config/config.yaml", "grid": {"envs": [DOORKEY], "seeds": [0, 1, 2]},
            "arms": {"rl_only": {}, "full_half": {"ablation": "full", "settings": {"prior.beta_max": 0.5}},
                     "full_noisy": {"ablation": "full_noisy"}},
            "compare": [{"arm": "full_half", "vs": "rl_only"}, {"arm": "full_noisy", "vs": "rl_only"}],
            "metrics": ["auc", "final_sr"],
            "decision": {"rule": "adopt", "require": [{"arm": "full_half", "vs": "rl_only", "metric": "auc",
                                                       "test": "above"}]}}
    (root / "config" / "experiments" / "exp.yaml").write_text(yaml.safe_dump(decl, sort_keys=False))
    return root


def _finish(run: PlannedRun, folder: Path) -> Path:
    from lore.config import build_config, save_config
    from lore.report.synthetic import SyntheticRun, write_run

    cfg = build_config(None, [f"{k}={json.dumps(v)}" for k, v in run.overrides] + [f"seed={run.seed}"], run.ablation)
    write_run(folder, SyntheticRun(env=run.env, ablation=run.ablation, seed=run.seed, steps=cfg.train.steps,
                                   eval_every=cfg.eval.every))
    save_config(cfg, folder / "config.yaml")
    return folder


def _trained(counts: dict[str, int]) -> int:
    return sum(n for rule, n in counts.items() if rule.startswith("train_experiment"))


def test_a_half_archived_grid_trains_only_the_other_half_and_compares_from_the_archive(tmp_path):
    root = _project(tmp_path)
    decl = load_declaration("exp", root)
    runs = plan(decl, root)
    assert len(runs) == 9
    proc = run_snakemake(root, "-n", "--config", "experiment=exp", timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _trained(job_counts(proc.stdout)) == 9
    assert "9 runs: 0 archived, 0 finished, 0 running, 9 missing" in proc.stderr
    # seeds 0 and 1 of every arm finish in results/, are archived, and results/ goes away
    done = [r for r in runs if r.seed < 2]
    for r in done:
        folder = _finish(r, r.default_dir(root))
        ar.archive_run(folder, root / ar.ARCHIVE_ROOT)
    first = compare_experiment("exp", root)
    assert first["verdict"] == "incomplete" and first["reason"].startswith("3 of 9 runs")
    table = (root / RESULTS_DIR / "exp" / "comparison.csv").read_text()
    figure = (root / RESULTS_DIR / "exp" / "fig_success.png").read_bytes()
    shutil.rmtree(root / "results")
    proc = run_snakemake(root, "-n", "--config", "experiment=exp", timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _trained(job_counts(proc.stdout)) == 3
    assert "9 runs: 6 archived, 0 finished, 0 running, 3 missing" in proc.stderr
    again = compare_experiment("exp", root)
    assert (root / RESULTS_DIR / "exp" / "comparison.csv").read_text() == table
    assert (root / RESULTS_DIR / "exp" / "fig_success.png").read_bytes() == figure
    assert again["comparison"] == first["comparison"] and again["run_commits"] == {"unknown": 6}
    md = (root / RESULTS_DIR / "exp" / "comparison.md").read_text()
    assert "Code: runs from commit unknown (6)." in md
    assert f"| {DOORKEY} | full_half | " in md and md.count("(n = 2)") == 6  # 3 arms × (AUC, final SR)


def test_missing_runs_launch_seed_by_seed_with_the_decision_runs_first(tmp_path):
    root = _project(tmp_path)
    decl = load_declaration("exp", root)
    states = launch.run_states(decl, run_dirs(decl, root), root)
    order = [(s.feeds_decision, s.run.seed, s.run.arm) for s in states]
    assert order == [(True, 0, "rl_only"), (True, 0, "full_half"), (True, 1, "rl_only"), (True, 1, "full_half"),
                     (True, 2, "rl_only"), (True, 2, "full_half"),
                     (False, 0, "full_noisy"), (False, 1, "full_noisy"), (False, 2, "full_noisy")]
    assert [len(rank) for rank in launch.launch_ranks(states)] == [2, 2, 2, 1, 1, 1]


def test_the_eta_comes_from_measured_runs_of_the_same_preset_and_budget(tmp_path, capsys):
    root = _project(tmp_path)
    decl = load_declaration("exp", root)
    states = launch.run_states(decl, run_dirs(decl, root), root)
    assumed = launch.cost_summary(decl, states, {}, cores=1)
    assert assumed["assumed"] == 9 and "estimated at" in launch.cost_line(assumed)
    steps = int(dict(states[0].run.overrides).get("train.steps", 0))
    preset = dict(states[0].run.overrides).get("model.preset", "xs")
    times = {(DOORKEY, "rl_only", preset, "dreamer", steps): [100.0], ("other", "full", preset, "dreamer", steps): [300.0]}
    one = launch.cost_summary(decl, states, times, cores=1)
    two = launch.cost_summary(decl, states, times, cores=2)
    # full_noisy has no measured ablation: the median of the same preset and budget, 200
    assert one["assumed"] == 0 and one["eta_s"] == pytest.approx(3 * 100 + 3 * 300 + 3 * 200)
    assert two["eta_s"] == pytest.approx(launch.makespan([100] * 3 + [300] * 3 + [200] * 3, 2)) and two["eta_s"] < one["eta_s"]
    assert launch.makespan([3, 3, 2, 2], 2) == 5 and launch.makespan([4], 3) == 4


def test_a_random_policy_run_is_estimated_only_from_random_policy_runs():
    from types import SimpleNamespace

    learned = {("crafter", "full", "xs", "dreamer", 20000): [1400.0]}
    walker = SimpleNamespace(env="crafter", ablation="random", overrides=(("train.steps", 20000),))
    cheap = {("other", "random", "xs", "random", 20000): [90.0]}
    assert launch.estimate_seconds(walker, {**learned, **cheap}) == (90.0, True)
    # a learning run's time never stands in for it: without a random-policy run it is assumed
    assert launch.estimate_seconds(walker, learned) == (launch.JOB_START_S + 20000 * launch.ASSUMED_S_PER_STEP, False)
    # a learning arm of the same preset and budget still borrows the learning runs' time
    learner = SimpleNamespace(env="crafter", ablation="rl_only", overrides=(("train.steps", 20000),))
    assert launch.estimate_seconds(learner, {**learned, **cheap}) == (1400.0, True)
    settings = SimpleNamespace(env="crafter", ablation="rl_only", overrides=(("train.policy", "random"),
                                                                              ("train.steps", 20000)))
    assert launch.estimate_seconds(settings, {**learned, **cheap}) == (90.0, True)


@pytest.mark.parametrize(("done", "expected"), [
    ({"wall_s": 5000.0, "cpu_s": 1400.0, "provenance": {"threads": 1}}, 1400.0),  # paused for most of its wall
    ({"wall_s": 1000.0, "cpu_s": 3600.0, "provenance": {"threads": 4}}, 900.0),
    ({"wall_s": 1000.0, "cpu_s": 990.0, "provenance": {"threads": 1}}, 990.0),
    ({"wall_s": 1000.0, "cpu_s": 1200.0, "provenance": {"threads": 1}}, 1000.0),  # CPU over wall: the wall
    ({"wall_s": 1000.0}, 1000.0),  # no CPU time or threads recorded
    ({"wall_s": 1000.0, "cpu_s": "x", "provenance": {"threads": 0}}, 1000.0),
])
def test_a_finished_run_is_timed_on_its_own_cores(tmp_path, done, expected):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        {"env": {"name": "crafter"}, "ablation": "full", "model": {"preset": "xs"}, "train": {"steps": 20000}}))
    (tmp_path / "done").write_text(json.dumps(done))
    profile, seconds = launch._profile(tmp_path)
    assert profile == ("crafter", "full", "xs", "dreamer", 20000) and seconds == pytest.approx(expected)
    (tmp_path / "done").write_text(json.dumps({**done, "wall_s": -1.0}))
    assert launch._profile(tmp_path) is None


def test_live_runs_give_the_eta_their_own_speed_before_any_run_finishes(tmp_path):
    import dataclasses

    root = _project(tmp_path)
    decl = load_declaration("exp", root)
    states = launch.run_states(decl, run_dirs(decl, root), root)
    running = dataclasses.replace(states[0], state="running")  # rl_only seed 0, half-way at 5 env steps/s
    states = [running, *states[1:]]
    steps = int(dict(running.run.overrides).get("train.steps", 0))
    live = {running.folder: (steps // 2, steps, 5.0)}
    one = launch.cost_summary(decl, states, {}, cores=1, live=live)
    # the live run: its steps left at its speed; the other rl_only runs: its speed; the 6 others: assumed
    # (every run not yet started also pays its start-up)
    start = launch.JOB_START_S
    expected = (steps - steps // 2) / 5.0 + 2 * (start + steps / 5.0) + 6 * (start + steps * launch.ASSUMED_S_PER_STEP)
    assert one["assumed"] == 6 and one["eta_s"] == pytest.approx(expected)
    # a finished run of the same profile outranks the live speed (and backs every run of its preset and budget)
    times = {launch._profile_of(running.run): [7.0]}
    assert launch.cost_summary(decl, states, times, cores=1, live=live)["eta_s"] == pytest.approx(
        (steps - steps // 2) / 5.0 + 8 * 7.0)
    # with no speed logged yet, a live run counts for half its estimate
    assert launch.cost_summary(decl, states, {}, cores=1, live={})["eta_s"] == pytest.approx(
        (start + steps * launch.ASSUMED_S_PER_STEP) * (0.5 + 8))
    assert launch.live_progress(states) == {}  # no live training holds these folders


# --------------------------------------------------------------------------- restoring archived runs


def test_lore_train_restores_an_archived_run_instead_of_training_it(entry, tmp_path, capsys):
    archive, path = entry
    run_dir = tmp_path / "grid" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "train.log").write_text("")  # the workflow opens the log before lore train starts
    argv = ["train", "--run-dir", str(run_dir), "--config", str(path / "config.yaml"), "--archive", str(archive)]
    assert lore_main(argv) == 0
    assert "restored from the archive" in capsys.readouterr().out
    for name in os.listdir(path):
        assert (run_dir / name).read_bytes() == (path / name).read_bytes(), name
    assert not (run_dir / "checkpoint.pt").exists()  # nothing was trained
    assert ar.saved_identity(run_dir) == ar.saved_identity(path)


def test_a_run_of_its_own_is_not_replaced_and_a_broken_entry_is_refused(entry, tmp_path, capsys):
    from lore.config import config_from_saved, to_dict

    archive, path = entry
    config = to_dict(config_from_saved(path / "config.yaml"))
    own = tmp_path / "own"
    own.mkdir()
    (own / "checkpoint.pt").write_bytes(b"partial")
    assert ar.restore_run(config, own, archive) is None and sorted(os.listdir(own)) == ["checkpoint.pt"]
    assert ar.restore_run({**config, "seed": 7}, tmp_path / "other", archive) is None  # not archived
    (path / "eval.csv").write_text((path / "eval.csv").read_text().rsplit("\n", 2)[0] + "\n")
    fresh = tmp_path / "fresh"
    argv = ["train", "--run-dir", str(fresh), "--config", str(path / "config.yaml"), "--archive", str(archive)]
    assert lore_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lore: error:") and "truncated" in err and "\n" not in err
    assert not fresh.exists()  # nothing written


def test_a_grid_with_an_archive_passes_it_to_every_training():
    from lore.grid.workflow import train_command_args

    base = {"envs": [DOORKEY], "ablations": ["rl_only"], "seeds": [0], "run": {"train.steps": 300}}
    assert "--archive" not in train_command_args(base, DOORKEY, "rl_only", 0)
    assert train_command_args({**base, "archive": "runs"}, DOORKEY, "rl_only", 0).endswith("--archive runs")


# --------------------------------------------------------------------------- retired entries (removed variants)


KNOB = "prior.removed_variant_knob"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def retired_knob(monkeypatch):
    """A setting retired with neutral ``false`` (as a losing variant's switch is when the variant is removed)."""
    from lore.config import retired

    monkeypatch.setitem(retired.RETIRED, KNOB, False)


def _removed_variant(folder: Path, seed: int = 0, value: object = True) -> Path:
    """A finished synthetic run of a removed variant: its config holds :data:`KNOB` at ``value``, and its
    ``done`` names the commit it trained at."""
    run = _synthetic(folder, "full", seed)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["prior"][KNOB.split(".")[1]] = value
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    done = json.loads((run / "done").read_text())
    (run / "done").write_text(json.dumps({**done, "provenance": {"commit": COMMIT, "dirty": False}}))
    return run


@pytest.fixture
def retired_archive(tmp_path, retired_knob) -> tuple[Path, Path, Path]:
    """(archive, retired entry, current entry): a removed variant's run and a current run, archived."""
    archive = tmp_path / "runs"
    old, _ = ar.archive_run(_removed_variant(tmp_path / "results" / "old"), archive)
    now, _ = ar.archive_run(_synthetic(tmp_path / "results" / "now", "full"), archive)
    return archive, old, now


def test_a_retired_entry_is_checked_kept_as_the_record_and_never_reused(retired_archive, capsys):
    archive, old, now = retired_archive
    entries = {e.path: e for e in ar.check_archive(archive)}
    assert set(entries) == {old, now}
    assert entries[old].retired == ((KNOB, True),) and entries[now].retired == ()
    assert old.parent.name != now.parent.name  # the retired setting stays in its identity
    assert ar.index_archive(archive) == {(entries[now].key, 0): now}
    with pytest.raises(ar.ArchiveError, match=f"{KNOB}: true, a retired setting"):
        ar.saved_identity(old)  # a run the code cannot run again is never reused from results/ either
    assert lore_main(["archive", "--check", "--to", str(archive)]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and "2 entries (1 of removed variants, kept as the record), all valid" in line


def test_a_removed_variants_run_in_results_is_not_reused(tmp_path, retired_knob):
    from lore.experiments.plan import index_runs

    _removed_variant(tmp_path / "results" / "old")
    now = _synthetic(tmp_path / "results" / "now", "full")
    assert list(index_runs(tmp_path / "results").values()) == [now]


def _damage(path: Path, how: str) -> str:
    if how == "truncated":
        text = (path / "eval.csv").read_text()
        (path / "eval.csv").write_text(text[: len(text) * 2 // 3])
        return "truncated"
    cfg = yaml.safe_load((path / "config.yaml").read_text())
    if how == "other_setting":
        cfg["prior"]["beta_max"] = 0.123
    else:  # the retired setting itself at another non-neutral value
        cfg["prior"][KNOB.split(".")[1]] = "other"
    (path / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return "does not hash to its key"


@pytest.mark.parametrize("how", ["truncated", "other_setting", "other_retired_value"])
def test_a_damaged_retired_entry_is_refused_in_one_line(retired_archive, how):
    archive, old, _ = retired_archive
    needle = _damage(old, how)
    _refused(archive, str(old), needle)
    with pytest.raises(ar.ArchiveError) as info:
        ar.check_archive(archive)
    assert "\n" not in str(info.value) and str(old) in str(info.value)


def test_a_retired_entry_at_its_neutral_value_is_an_ordinary_entry(tmp_path, retired_knob):
    """The retired key at its neutral value is dropped: the entry is the current run, under the current key."""
    archive = tmp_path / "runs"
    neutral, _ = ar.archive_run(_removed_variant(tmp_path / "results" / "old", value=False), archive)
    current = ar.archive_run(_synthetic(tmp_path / "results" / "now", "full"), tmp_path / "other")[0]
    assert neutral.parent.name == current.parent.name
    assert [e.retired for e in ar.check_archive(archive)] == [()]


def test_a_retired_entry_cannot_be_reproduced_and_says_so_in_one_line(retired_archive, tmp_path, capsys):
    from lore.archive.reproduce import reproduce, sample_entries

    archive, old, now = retired_archive
    assert lore_main(["reproduce", "--archive", str(archive), "--match", old.parent.name]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and str(old) in line and f"{KNOB}: true" in line, line
    assert f"trained at {COMMIT[:10]}" in line and "cannot be reproduced at this commit" in line
    with pytest.raises(ar.ArchiveError, match="cannot be reproduced at this commit"):
        reproduce(old, tmp_path / "work")
    assert not (tmp_path / "work").exists()  # nothing trained
    said: list[str] = []
    assert sample_entries(archive, 2, report=said.append) == [now]  # a sample draws from the others
    assert len(said) == 1 and "1 entry of removed variants" in said[0] and KNOB in said[0]


def test_retiring_a_variants_setting_keeps_every_archived_key(monkeypatch):
    """The archive's full-method runs hold ``prior.align_temperature: true``: once that setting is retired
    (neutral false) they are retired entries under the keys they have, and every other entry is unchanged."""
    from lore.config import load_yaml, retired

    monkeypatch.setitem(retired.RETIRED, "prior.align_temperature", False)
    root = REPO / ar.ARCHIVE_ROOT
    entries = ar.check_archive(root)  # every entry's config still hashes to its folder's key
    aligned = {p for p in entry_dirs(root) if (load_yaml(p / "config.yaml").get("prior") or {}).get(
        "align_temperature") is True}
    assert aligned and {e.path for e in entries if e.retired} == aligned
    assert all(e.retired == (("prior.align_temperature", True),) for e in entries if e.retired)
    assert len(ar.index_archive(root)) == len(entries) - len(aligned)


def test_a_run_that_chose_a_retired_value_is_a_retired_entry_under_the_key_it_had(tmp_path, monkeypatch):
    """A removed choice of a setting that stays (``RETIRED_VALUES``): the run's config no longer loads, and its
    archive entry keeps the key it was archived under, marked as a removed variant's."""
    from lore.config import ConfigError, config_from_saved, retired

    run = _synthetic(tmp_path / "results" / "gated", "full")
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["prior"]["gate"] = "uncertainty"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    archive = tmp_path / "runs"
    entry, _ = ar.archive_run(run, archive)
    monkeypatch.setitem(retired.RETIRED_VALUES, "prior.gate", ("uncertainty",))
    with pytest.raises(ConfigError, match="prior.gate: uncertainty is a retired value"):
        config_from_saved(entry / "config.yaml")
    [checked] = ar.check_archive(archive)
    assert checked.retired == (("prior.gate", "uncertainty"),) and checked.key == entry.parent.name
    assert retired.retired_values({"prior": {"gate": "fixed"}}, changed_only=True) == {}  # its other values stay
