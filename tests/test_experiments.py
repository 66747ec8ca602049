"""Declared experiments: checking declarations, planning by run identity, paired comparison, verdict, log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from workflow_helpers import HANG_GUARD_S, REPO, job_counts, run_snakemake

from lore.archive import run_key
from lore.experiments.compare import (
    LEGACY_STATISTICS,
    compare_experiment,
    compare_pair,
    comparison_table,
    distinct_at_last_eval,
    verdict,
)
from lore.experiments.declaration import Declaration, ExperimentError, declared_names, load_declaration
from lore.experiments.log import IMPORTED, LOG, log_markdown
from lore.experiments.plan import RESULTS_DIR, PlannedRun, plan, run_dirs

DOORKEY = "MiniGrid-DoorKey-5x5-v0"
DATA = REPO / "tests" / "data" / "comparisons"


def _workdir(tmp_path: Path, declarations: dict[str, dict]) -> Path:
    """A scratch project: the repository's config/ (workflow configs) and the given declarations only."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "config", root / "config", ignore=shutil.ignore_patterns("experiments"))
    (root / "config" / "experiments").mkdir()
    for name, data in declarations.items():
        (root / "config" / "experiments" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def _decl(**changes) -> dict:
    data = {"question": "Does a smaller beta_max change the full method's success?",
            "base": "config/config.yaml",
            "grid": {"envs": [DOORKEY], "seeds": [0, 1], "steps": 3000},
            "arms": {"rl_only": {"reference": True}, "full_half": {"ablation": "full",
                                                                    "settings": {"prior.beta_max": 0.5}}},
            "compare": [{"arm": "full_half", "vs": "rl_only"}],
            "metrics": ["auc", "final_sr"],
            "decision": {"rule": "adopt", "require": [{"arm": "full_half", "vs": "rl_only", "metric": "auc",
                                                       "test": "above"}]}}
    data.update(changes)
    return data


def _finish(run: PlannedRun, folder: Path, root: Path, eval_sr: list[float] | None = None) -> Path:
    """A finished synthetic run whose config.yaml is the planned run's resolved config."""
    from lore.config import build_config, save_config
    from lore.report.synthetic import SyntheticRun, write_run

    overrides = [f"{k}={json.dumps(v)}" for k, v in run.overrides] + [f"seed={run.seed}"]
    cfg = build_config(None, overrides, run.ablation)
    write_run(folder, SyntheticRun(env=run.env, ablation=run.ablation, seed=run.seed, steps=cfg.train.steps,
                                   eval_every=cfg.eval.every, eval_sr=eval_sr))
    save_config(cfg, folder / "config.yaml")
    return folder


def trained(counts: dict[str, int]) -> int:
    """Training jobs of a dry run's job counts (one rule per launch rank: train_experiment_seed<k>...)."""
    return sum(n for rule, n in counts.items() if rule.startswith("train_experiment"))


# --------------------------------------------------------------------------- identity and planning


def test_run_key_ignores_the_seed_and_cache_paths_but_not_a_setting(tmp_path):
    from lore.config import build_config, to_dict

    def key(*overrides):
        return run_key("full", to_dict(build_config(None, list(overrides), "full")))

    assert key("seed=1") == key("seed=2") == key("seed=3", "llm.cache_path=elsewhere.sqlite")
    assert key("prior.beta_max=0.5") != key()
    assert key().startswith("full-") and len(key()) == len("full-") + 10


def test_a_base_with_a_run_config_file_runs_with_that_files_settings(tmp_path):
    from lore.config import build_config, load_yaml, to_dict

    root = _workdir(tmp_path, {"crafter_exp": _decl(base="config/crafter.yaml", grid={"envs": ["crafter"], "seeds": [0, 1]},
                                                   arms={"rl_only": {}, "random": {}}, compare=[],
                                                   decision={"rule": "adopt", "require": [
                                                       {"arm": "rl_only", "vs": "random", "metric": "auc",
                                                        "test": "above"}]})})
    runs = plan(load_declaration("crafter_exp", root), root)
    file_cfg = load_yaml(root / "config" / "crafter_cpu.yaml")
    for run in runs:
        overrides = dict(run.overrides)
        cfg = build_config(None, [f"{k}={json.dumps(v)}" for k, v in overrides.items()], run.ablation)
        expected = build_config(file_cfg, [], run.ablation)  # what `lore train --config crafter_cpu.yaml` runs
        assert to_dict(cfg) == to_dict(expected)
        assert (cfg.train.steps, cfg.train.batch_length) == (file_cfg["train"]["steps"], file_cfg["train"]["batch_length"])
    assert {run.key.split("-")[0] for run in runs} == {"rl_only", "random"}


def test_a_run_is_found_by_its_identity_wherever_it_finished_and_shared_with_another_experiment(tmp_path):
    root = _workdir(tmp_path, {"exp_a": _decl(),
                               "exp_b": _decl(baseline="exp_a",
                                              arms={"full_quarter": {"ablation": "full",
                                                                     "settings": {"prior.beta_max": 0.25}}},
                                              compare=[{"arm": "full_quarter", "vs": "baseline:rl_only"}],
                                              decision={"rule": "adopt", "require": [
                                                  {"arm": "full_quarter", "vs": "baseline:rl_only",
                                                   "metric": "auc", "test": "not_below"}]})})
    a = load_declaration("exp_a", root)
    planned = {(r.arm, r.seed): r for r in plan(a, root)}
    assert set(planned) == {("rl_only", 0), ("rl_only", 1), ("full_half", 0), ("full_half", 1)}
    # two runs finished somewhere else under results/ (e.g. by another grid)
    elsewhere = _finish(planned[("rl_only", 0)], root / "results" / "other" / "r0", root)
    _finish(planned[("full_half", 1)], root / "results" / "other" / "f1", root)
    found = {(r.arm, r.seed): folder for r, folder in run_dirs(a, root)}
    assert found[("rl_only", 0)] == elsewhere
    assert found[("full_half", 1)] == root / "results" / "other" / "f1"
    assert found[("rl_only", 1)] == planned[("rl_only", 1)].default_dir(root)
    # exp_b's baseline rl_only is exp_a's rl_only: the same identity, so the same run
    b = {(r.arm, r.seed): (r, folder) for r, folder in run_dirs(load_declaration("exp_b", root), root)}
    assert b[("baseline:rl_only", 0)][1] == elsewhere
    assert b[("baseline:rl_only", 1)][0].key == planned[("rl_only", 1)].key
    # a setting that differs makes a different run
    assert b[("full_quarter", 0)][0].key != planned[("full_half", 0)].key


def test_the_dry_run_trains_only_the_missing_runs_and_shares_runs_between_experiments(tmp_path):
    root = _workdir(tmp_path, {"exp_a": _decl(),
                               "exp_b": _decl(arms={"rl_only": {"reference": True},
                                                    "full_quarter": {"ablation": "full",
                                                                     "settings": {"prior.beta_max": 0.25}}},
                                              compare=[{"arm": "full_quarter", "vs": "rl_only"}],
                                              decision={"rule": "adopt", "require": [
                                                  {"arm": "full_quarter", "vs": "rl_only", "metric": "auc",
                                                   "test": "above"}]})})
    a = {(r.arm, r.seed): r for r in plan(load_declaration("exp_a", root), root)}
    _finish(a[("rl_only", 0)], root / "results" / "runs" / "somewhere" / "seed0", root)
    _finish(a[("full_half", 1)], a[("full_half", 1)].default_dir(root), root)
    proc = run_snakemake(root, "-n", "--config", "experiment=exp_a", timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = job_counts(proc.stdout)
    assert trained(counts) == 2 and counts["experiment_compare"] == 1 and counts["experiment_log"] == 1
    assert "train" not in counts  # the main grid is not run
    both = run_snakemake(root, "-n", "--config", "experiment=exp_a,exp_b", timeout=HANG_GUARD_S)
    assert both.returncode == 0, both.stderr[-3000:]
    # exp_b: 2 full_quarter + its rl_only, which is exp_a's (seed 0 done, seed 1 planned once for both)
    assert trained(job_counts(both.stdout)) == 2 + 2
    assert not (root / RESULTS_DIR / "exp_a").exists() and not (root / LOG).exists()


# --------------------------------------------------------------------------- comparison and verdict


def _seed_values(table: pd.DataFrame, env: str, arm: str, metric: str) -> dict[int, float]:
    rows = table[(table["env"] == env) & (table["ablation"] == arm)]
    return dict(zip(rows["seed"], rows[metric], strict=True))


def _rounded(result: dict) -> tuple:
    return tuple(round(result[k], 3) for k in ("difference", "low", "high")) + (result["n_paired"],)


@pytest.mark.parametrize(("env", "arm", "metric", "expected"), [
    # an earlier MiniGrid comparison (a trust setting against the benchmark's runs), paired by seed
    ("MiniGrid-DoorKey-5x5-v0", "full_adversarial", "auc", (0.010, 0.003, 0.018, 5)),
    ("MiniGrid-DoorKey-5x5-v0", "full_adversarial", "final_sr", (0.080, 0.020, 0.140, 5)),
    ("MiniGrid-LavaGapS5-v0", "full", "auc", (-0.007, -0.066, 0.052, 5)),
    ("MiniGrid-LavaGapS5-v0", "full", "final_sr", (0.070, -0.050, 0.180, 5)),
])
def test_the_comparison_reproduces_a_committed_minigrid_comparison(env, arm, metric, expected):
    x, y = pd.read_csv(DATA / "minigrid_experiment_runs.csv"), pd.read_csv(DATA / "minigrid_baseline_runs.csv")
    result = compare_pair(_seed_values(x, env, arm, metric), _seed_values(y, env, arm, metric),
                          statistics=LEGACY_STATISTICS)  # as it was computed then
    assert _rounded(result) == pytest.approx(expected)
    assert result["n_arm"] == result["n_vs"] == 5


@pytest.mark.parametrize(("arm", "metric", "expected", "p_improvement"), [
    # an earlier Crafter comparison (full and full_adversarial against rl_only), paired by seed
    ("full", "auc", (0.046, 0.030, 0.062, 5), 1.00),
    ("full", "crafter_score", (0.511, 0.020, 1.002, 5), 0.76),
    ("full", "distinct", (0.800, -0.200, 2.000, 5), 0.72),
    ("full_adversarial", "crafter_score", (-0.376, -0.791, -0.020, 5), 0.16),
    ("full_adversarial", "distinct", (-0.800, -2.400, 0.600, 5), 0.30),
])
def test_the_comparison_reproduces_a_committed_crafter_comparison(arm, metric, expected, p_improvement):
    def values(prefix: str, ablation: str) -> dict[int, float]:
        if metric != "distinct":
            return _seed_values(pd.read_csv(DATA / f"{prefix}_runs.csv"), "crafter", ablation, metric)
        points = pd.read_csv(DATA / f"{prefix}_eval_points.csv")
        points = points[points["ablation"] == ablation]
        return {int(seed): distinct_at_last_eval(group.reset_index(drop=True))
                for seed, group in points.groupby("seed")}

    result = compare_pair(values("crafter_experiment", arm), values("crafter_baseline", "rl_only"),
                          statistics=LEGACY_STATISTICS)  # as it was computed then
    assert _rounded(result) == pytest.approx(expected)
    assert round(result["p_improvement"], 2) == pytest.approx(p_improvement)


def _metrics(rows: dict[str, list[float]], env: str = DOORKEY) -> pd.DataFrame:
    return pd.DataFrame([{"env": env, "arm": arm, "seed": s, "auc": v, "final_sr": v}
                         for arm, values in rows.items() for s, v in enumerate(values)])


def _select_decl(root: Path) -> Declaration:
    arms = {"rl_only": {}, "a": {"ablation": "kl"}, "a_adv": {"ablation": "kl_adversarial"},
            "b": {"ablation": "full"}, "b_adv": {"ablation": "full_adversarial"}}
    data = _decl(arms=arms, grid={"envs": [DOORKEY], "seeds": [0, 1, 2, 3, 4]}, compare=[],
                 decision={"rule": "select", "candidates": {"a": {"good": "a", "adversarial": "a_adv", "mechanisms": 2},
                                                            "b": {"good": "b", "adversarial": "b_adv", "mechanisms": 5}},
                           "require": [{"role": "adversarial", "vs": "rl_only", "metric": "auc", "test": "not_below"}],
                           "score": {"role": "good", "metric": "auc"}, "tie": 0.01})
    _workdir(root, {"sel": data})
    return load_declaration("sel", root / "project")


@pytest.mark.parametrize(("a", "b", "b_adv", "winner"), [
    ([0.50, 0.52, 0.55, 0.51, 0.53], [0.60, 0.62, 0.65, 0.61, 0.63], [0.20, 0.22, 0.21, 0.20, 0.23], "select b"),
    # b is best but within the tie of a: the fewer mechanisms win
    ([0.600, 0.62, 0.65, 0.61, 0.63], [0.605, 0.625, 0.655, 0.615, 0.635], [0.20, 0.22, 0.21, 0.20, 0.23],
     "select a"),
    # b's adversarial arm is below rl_only beyond the CI: b is not eligible
    ([0.50, 0.52, 0.55, 0.51, 0.53], [0.60, 0.62, 0.65, 0.61, 0.63], [0.05, 0.06, 0.04, 0.05, 0.06], "select a"),
])
def test_the_select_rule_reads_the_paired_cis_and_breaks_ties_towards_fewer_mechanisms(tmp_path, a, b, b_adv, winner):
    decl = _select_decl(tmp_path)
    rl = [0.20, 0.21, 0.22, 0.20, 0.21]
    metrics = _metrics({"rl_only": rl, "a": a, "a_adv": [v + 0.01 for v in rl], "b": b, "b_adv": b_adv})
    table = comparison_table(decl, metrics)
    assert verdict(decl, table, metrics)["verdict"] == winner
    # a candidate with no runs yet: no verdict
    partial = metrics[metrics["arm"] != "b_adv"]
    assert verdict(decl, comparison_table(decl, partial), partial)["verdict"] == "incomplete"


def test_a_bound_on_the_loss_reads_the_lower_end_of_the_paired_ci(tmp_path):
    require = [{"arm": "full_half", "vs": "rl_only", "metric": "auc", "test": "lower_at_least", "value": -0.02}]
    root = _workdir(tmp_path, {"exp": _decl(decision={"rule": "adopt", "require": require})})
    decl = load_declaration("exp", root)
    close = _metrics({"rl_only": [0.20, 0.30, 0.25, 0.22, 0.28], "full_half": [0.20, 0.29, 0.25, 0.22, 0.28]})
    assert verdict(decl, comparison_table(decl, close), close)["verdict"] == "adopt"
    lower = _metrics({"rl_only": [0.20, 0.30, 0.25, 0.22, 0.28], "full_half": [0.15, 0.30, 0.25, 0.22, 0.28]})
    table = comparison_table(decl, lower)
    assert float(table[table["metric"] == "auc"]["low"].iloc[0]) < -0.02
    assert verdict(decl, table, lower)["verdict"] == "reject"


def test_only_the_decision_envs_decide_and_the_others_are_reported(tmp_path):
    lava = "MiniGrid-LavaGapS5-v0"
    require = [{"arm": "full_half", "vs": "rl_only", "metric": "auc", "test": "not_below"}]
    data = _decl(grid={"envs": [DOORKEY, lava], "seeds": [0, 1, 2], "steps": 3000},
                 decision={"rule": "adopt", "require": require, "envs": [DOORKEY]})
    decl = load_declaration("exp", _workdir(tmp_path, {"exp": data}))
    rows = {"rl_only": [0.2, 0.3, 0.25], "full_half": [0.2, 0.3, 0.26]}
    worse = {"rl_only": [0.5, 0.6, 0.55], "full_half": [0.1, 0.1, 0.1]}
    metrics = pd.concat([_metrics(rows), _metrics(worse, env=lava)])
    table = comparison_table(decl, metrics)
    assert set(table["env"]) == {DOORKEY, lava}  # both are reported
    assert verdict(decl, table, metrics)["verdict"] == "adopt"  # the unpowered env decides nothing
    doorkey_only = metrics[metrics["env"] == DOORKEY]
    assert verdict(decl, comparison_table(decl, doorkey_only), doorkey_only)["verdict"] == "adopt"
    none_yet = metrics[metrics["env"] == lava]
    assert verdict(decl, comparison_table(decl, none_yet), none_yet)["verdict"] == "incomplete"


@pytest.mark.parametrize(("change", "key", "needle"), [
    ({"envs": ["MiniGrid-Empty-5x5-v0"]}, "decision.envs[0]", "not in grid.envs"),
    ({"envs": ["MiniGrid-LavaGapS5-v0"]}, "decision.envs", "does not run on"),
])
def test_bad_decision_envs_are_refused(tmp_path, change, key, needle):
    arms = {"rl_only": {"reference": True}, "full_half": {"ablation": "full", "envs": [DOORKEY]}}
    decision = {"rule": "adopt", "require": [{"arm": "full_half", "vs": "rl_only", "metric": "auc",
                                              "test": "above"}], **change}
    data = _decl(arms=arms, grid={"envs": [DOORKEY, "MiniGrid-LavaGapS5-v0"], "seeds": [0, 1]}, decision=decision)
    root = _workdir(tmp_path, {"exp": data})
    with pytest.raises(ExperimentError, match=needle) as err:
        load_declaration("exp", root)
    assert key in str(err.value)


def test_an_arm_runs_on_its_own_seeds_and_pairs_on_the_shared_ones(tmp_path):
    arms = {"rl_only": {"reference": True}, "full_half": {"ablation": "full", "seeds": [0, 2],
                                                          "settings": {"prior.beta_max": 0.5}}}
    root = _workdir(tmp_path, {"exp": _decl(arms=arms, grid={"envs": [DOORKEY], "seeds": [0, 1, 2], "steps": 3000})})
    runs = plan(load_declaration("exp", root), root)
    assert sorted((r.arm, r.seed) for r in runs) == [("full_half", 0), ("full_half", 2), ("rl_only", 0),
                                                      ("rl_only", 1), ("rl_only", 2)]


def test_the_adopt_rule_needs_every_requirement_on_every_env(tmp_path):
    root = _workdir(tmp_path, {"exp": _decl()})
    decl = load_declaration("exp", root)
    better = _metrics({"rl_only": [0.1, 0.2], "full_half": [0.5, 0.7]})
    assert verdict(decl, comparison_table(decl, better), better)["verdict"] == "adopt"
    mixed = _metrics({"rl_only": [0.1, 0.6], "full_half": [0.5, 0.5]})
    assert verdict(decl, comparison_table(decl, mixed), mixed)["verdict"] == "reject"


def test_compare_writes_the_paired_comparison_and_the_verdict_from_finished_runs(tmp_path):
    root = _workdir(tmp_path, {"exp": _decl()})
    decl = load_declaration("exp", root)
    curves = {"rl_only": [0.0, 0.1, 0.1, 0.2, 0.2, 0.2, 0.3], "full_half": [0.0, 0.5, 0.8, 0.9, 1.0, 1.0, 1.0]}
    for run in plan(decl, root):
        _finish(run, run.default_dir(root), root, eval_sr=curves[run.arm])
    rec = compare_experiment("exp", root, record_dir=root / "records")
    assert rec["verdict"] == "adopt"
    table = pd.read_csv(root / RESULTS_DIR / "exp" / "comparison.csv")
    auc = table[table["metric"] == "auc"].iloc[0]
    assert (auc["arm"], auc["vs"], auc["n_paired"]) == ("full_half", "rl_only", 2)
    assert auc["low"] > 0 and auc["p_improvement"] == 1.0
    assert json.loads((root / "records" / "exp.json").read_text())["verdict"] == "adopt"
    assert "**adopt**" in (root / RESULTS_DIR / "exp" / "comparison.md").read_text()


# --------------------------------------------------------------------------- bad declarations


BAD = [
    ("unknown arm", {"arms": {"full_half": {"ablation": "fulll"}}}, "arms.full_half.ablation", "unknown arm"),
    ("unknown settings key", {"arms": {"rl_only": {"reference": True},
                                       "full_half": {"ablation": "full", "settings": {"prior.beta_maxx": 1}}}},
     "arms.full_half.settings", "beta_maxx"),
    ("settings of a wrong type", {"settings": {"prior.beta_max": "high"},
                                  "arms": {"rl_only": {"reference": True}, "full_half": {"ablation": "full"}}},
     "settings", "beta_max"),
    ("missing baseline", {"baseline": "nope"}, "baseline", "no experiment 'nope'"),
    ("seeds that do not pair", {"baseline": "benchmark", "grid": {"envs": [DOORKEY], "seeds": [0, 9]}},
     "grid.seeds", "seed 9"),
    ("env not in the baseline", {"baseline": "benchmark", "grid": {"envs": ["MiniGrid-Empty-5x5-v0"], "seeds": [0, 1]}},
     "grid.envs", "not in baseline"),
    ("unknown env", {"grid": {"envs": ["MiniGrid-Nope-v0"], "seeds": [0, 1]}}, "grid.envs[0]", "unknown environment"),
    ("decision on an unknown metric", {"decision": {"rule": "adopt", "require": [
        {"arm": "full_half", "vs": "rl_only", "metric": "returns", "test": "above"}]}}, "decision", "returns"),
    ("decision on a metric not judged", {"decision": {"rule": "adopt", "require": [
        {"arm": "full_half", "vs": "rl_only", "metric": "crafter_score", "test": "above"}]}},
     "decision.require[0].metric", "crafter_score"),
    ("comparison with an unknown arm", {"compare": [{"arm": "full_half", "vs": "kl"}]}, "compare[0].vs", "'kl'"),
    ("a single seed", {"grid": {"envs": [DOORKEY], "seeds": [0]}}, "grid.seeds", "too short"),
    ("unknown top-level key", {"notes": "x"}, "(top level)", "notes"),
    ("no question", {"question": None}, "question", "None"),
    ("its own baseline", {"baseline": "exp"}, "baseline", "own baseline"),
    ("ratio without a value", {"decision": {"rule": "adopt", "require": [
        {"arm": "full_half", "vs": "rl_only", "metric": "auc", "test": "ratio_at_least"}]}},
     "decision.require[0].value", "needs a value"),
    ("bound without a value", {"decision": {"rule": "adopt", "require": [
        {"arm": "full_half", "vs": "rl_only", "metric": "auc", "test": "lower_at_least"}]}},
     "decision.require[0].value", "needs a value"),
    ("an arm seed outside the grid", {"arms": {"rl_only": {"reference": True},
                                               "full_half": {"ablation": "full", "seeds": [0, 7]}}},
     "arms.full_half.seeds", "seed 7 is not in grid.seeds"),
]


def _check(root: Path, name: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lore.experiments.cli", "check", name], cwd=root,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


@pytest.mark.parametrize(("case", "change", "key", "needle"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_declaration_is_one_line_naming_the_file_and_the_key(tmp_path, case, change, key, needle):
    root = _workdir(tmp_path, {"exp": _decl(**change)})
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    proc = _check(root, "exp")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith("lore: error: config/experiments/exp.yaml: ")
    assert f": {key}:" in line and needle in line, line
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


@pytest.mark.parametrize(("text", "needle"), [
    ("question: [unclosed\n", "not valid YAML"),
    ("question: a b c d e f g h\nquestion: twice over\n", "duplicate key 'question'"),
    ("- a list\n", "mapping"),
    ("", "empty"),
])
def test_malformed_declaration_yaml_is_one_line(tmp_path, text, needle):
    root = _workdir(tmp_path, {})
    (root / "config" / "experiments" / "exp.yaml").write_text(text)
    proc = _check(root, "exp")
    assert proc.returncode == 2 and "\n" not in proc.stderr.strip()
    assert "config/experiments/exp.yaml" in proc.stderr and needle in proc.stderr, proc.stderr


def test_the_workflow_refuses_a_bad_or_unknown_experiment_before_any_job(tmp_path):
    root = _workdir(tmp_path, {"exp": _decl(arms={"x": {"ablation": "nope"}})})
    for name, needle in (("exp", "config/experiments/exp.yaml: arms.x.ablation: unknown arm 'nope'"), ("missing", "experiment 'missing': no file")):
        proc = run_snakemake(root, "--cores", "1", "--config", f"experiment={name}", timeout=HANG_GUARD_S)
        assert proc.returncode != 0
        assert f"invalid experiment: {needle}" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert not (root / "results").exists()


# --------------------------------------------------------------------------- the project's declarations and log


def test_every_declared_experiment_is_valid_and_the_decision_is_pre_registered():
    names = declared_names(REPO)
    assert "decide_default" in names
    for name in names:
        decl = load_declaration(name, REPO)
        assert decl.decision.get("text"), f"{name}: the decision rule in words"
    decide = load_declaration("decide_default", REPO)
    assert len(decide.decision["candidates"]) <= 3
    simple = decide.arms[decide.decision["candidates"]["simple"]["good"]]
    assert simple.ablation == "kl" and simple.settings.get("prior.trust") is True
    assert "prior.gate" not in simple.settings and "features.enabled" not in simple.settings


def test_the_experiment_log_is_what_the_declarations_and_records_produce():
    assert (REPO / LOG).read_text() == log_markdown(REPO), \
        "docs/experiments.md is stale: python -m lore.experiments.cli log"


def test_imported_entries_are_complete_and_speak_to_users():
    entries = yaml.safe_load((REPO / IMPORTED).read_text())
    assert len(entries) >= 30
    keys = {"name", "question", "change", "grid", "n", "baseline", "effect", "verdict", "outcome", "commit", "source"}
    for entry in entries:
        assert set(entry) == keys, entry["name"]
        assert entry["verdict"] in {"adopted", "rejected", "inconclusive", "not run", "reference"}
    text = (REPO / LOG).read_text().lower()
    assert "issue " not in text and "issue" not in np.array(text.split()).tolist()


# --------------------------------------------------------------------------- decided experiments are closed


def _record(root: Path, name: str = "exp", verdict: str = "adopt", commit: str | None = "abc1234") -> Path:
    path = root / "docs" / "experiments" / "records" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "commit": commit, "verdict": verdict, "reason": "r", "scores": None,
                                "comparison": []}))
    return path


def _experiments(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lore.experiments.cli", *args], cwd=root,
                          capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


DECIDED = ("lore: error: exp: decided at abc1234 (verdict: adopt); its record is docs/experiments/records/exp.json "
           "and its runs, where archived, are in runs/; `lore experiments recheck exp` recomputes it from them, "
           "and a new question is a new experiment")


def test_a_decided_experiment_is_neither_planned_nor_compared_again(tmp_path):
    root = _workdir(tmp_path, {"exp": _decl()})
    _record(root)
    (root / "docs" / "experiments.md").write_text("old log\n")
    before = _files(root)
    for args in (("plan", "exp"), ("compare", "exp"), ("compare", "exp", "--record")):
        proc = _experiments(root, *args)
        assert proc.returncode == 2 and proc.stderr.strip() == DECIDED, (args, proc.stdout, proc.stderr)
    assert _files(root) == before
    from lore.experiments.log import ExperimentDecided

    with pytest.raises(ExperimentDecided, match="exp: decided at abc1234"):
        compare_experiment("exp", root)
    # its declaration is still checked, and the log is still written from its record
    assert _experiments(root, "check", "exp").returncode == 0
    proc = _experiments(root, "log")
    assert proc.returncode == 0, proc.stderr
    assert "- Verdict: adopt (r)" in (root / "docs" / "experiments.md").read_text()


def test_an_undecided_experiment_plans_and_records_once(tmp_path):
    root = _workdir(tmp_path, {"exp": _decl()})
    proc = _experiments(root, "plan", "exp")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\tmissing\t") == 4 and "4 runs: 0 archived" in proc.stdout
    for cores in ("1e12", "0", "many"):  # checked before anything is sized by it: one line, exit 2
        proc = _experiments(root, "plan", "exp", "--cores", cores)
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("lore: error: ") and "--cores" in proc.stderr
    assert "on 65536 core(s)" in _experiments(root, "plan", "exp", "--cores", "65536").stdout
    _record(root, verdict="incomplete")  # a comparison with runs missing decides nothing
    assert _experiments(root, "plan", "exp").returncode == 0
    decl = load_declaration("exp", root)
    curves = {"rl_only": [0.0, 0.1, 0.1, 0.2, 0.2, 0.2, 0.3], "full_half": [0.0, 0.5, 0.8, 0.9, 1.0, 1.0, 1.0]}
    for run in plan(decl, root):
        _finish(run, run.default_dir(root), root, eval_sr=curves[run.arm])
    records = root / "docs" / "experiments" / "records"
    assert compare_experiment("exp", root, record_dir=records)["verdict"] == "adopt"
    proc = _experiments(root, "compare", "exp", "--record")  # a record is written once
    assert proc.returncode == 2 and "exp: decided at" in proc.stderr and "(verdict: adopt)" in proc.stderr


def test_selecting_a_decided_experiment_is_refused_and_all_leaves_it_out(tmp_path):
    from lore.experiments.log import ExperimentDecided
    from lore.experiments.plan import selected

    root = _workdir(tmp_path, {"exp": _decl(), "other": _decl()})
    _record(root, commit=None)
    with pytest.raises(ExperimentDecided, match=r"^exp: decided at an unknown commit \(verdict: adopt\)"):
        selected("other,exp", root)
    said: list[str] = []
    assert selected("all", root, report=said.append) == ["other"]
    assert len(said) == 1 and "leaves out the decided exp" in said[0]
    assert selected("other", root) == ["other"]


def test_the_workflow_refuses_a_decided_experiment_and_runs_nothing_when_all_are_decided(tmp_path):
    root = _workdir(tmp_path, {"exp": _decl()})
    _record(root)
    proc = run_snakemake(root, "-n", "--config", "experiment=exp", timeout=HANG_GUARD_S)
    assert proc.returncode != 0
    assert DECIDED.removeprefix("lore: error: ") in proc.stdout + proc.stderr, proc.stderr[-2000:]
    proc = run_snakemake(root, "-n", "--config", "experiment=all", timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "leaves out the decided exp" in proc.stderr
    assert set(job_counts(proc.stdout)) <= {"all", "total"}  # neither the experiment's grid nor the main grid
    assert not (root / "results").exists()


@pytest.fixture
def retired_beta_choice(monkeypatch):
    """``prior.gate: uncertainty`` made a retired value, as a losing variant's choice is once it is removed."""
    from lore.config import retired

    monkeypatch.setitem(retired.RETIRED_VALUES, "prior.gate", ("uncertainty",))


def _removed_variant_decl() -> dict:
    return _decl(arms={"rl_only": {"reference": True},
                       "gated": {"ablation": "full", "settings": {"prior.gate": "uncertainty"}}},
                 compare=[{"arm": "gated", "vs": "rl_only"}],
                 decision={"rule": "adopt", "require": [{"arm": "gated", "vs": "rl_only", "metric": "auc",
                                                         "test": "above"}]})


def test_a_decided_experiment_keeps_an_arm_of_a_removed_variant_and_an_open_one_refuses_it(tmp_path,
                                                                                            retired_beta_choice):
    root = _workdir(tmp_path, {"exp": _removed_variant_decl()})
    decl = load_declaration("exp", root)  # the declaration itself still loads: it says what was asked
    with pytest.raises(ExperimentError, match=r"arms\.gated: prior\.gate: uncertainty, a retired setting "
                                              r"\(the variant was removed\); an open experiment cannot run it"):
        plan(decl, root)
    _record(root)
    assert [r.arm for r in plan(decl, root)] == ["rl_only", "rl_only"]  # decided: its record names gated's runs
    proc = _experiments(root, "check", "exp")
    assert proc.returncode == 0, proc.stderr
