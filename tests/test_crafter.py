"""Crafter for real (issue 10): the CPU run config and its one declaration, the workflow configs that
run Crafter, the random-policy baseline through the evaluation code, the benchmark and report scripts,
Crafter prompts grounded in the symbolic state, and Crafter-specific bad input."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from lore import cli
from lore.config import build_config, load_yaml, to_dict
from lore.envs.crafter import crafter_score

REPO = Path(__file__).resolve().parents[1]
from workflow_helpers import HANG_GUARD_S, job_counts  # noqa: E402

CPU_CONFIG = REPO / "config" / "crafter_cpu.yaml"
WORKFLOW_CONFIG = REPO / "config" / "crafter.yaml"
# A few env steps of the CPU config: enough for eval rows at three points, fast in a test.
TINY = ["train.steps=40", "train.prefill=10", "train.batch_length=8", "eval.every=20", "eval.episodes=2",
        "env.max_episode_steps=15", "model.preset=debug"]


def _workflow_config(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text())


# --------------------------------------------------------------------------- the configurations


def test_cpu_run_config_is_symbolic_crafter_on_cpu_for_every_arm():
    from lore.presets import PRESETS

    for arm in _workflow_config("crafter.yaml")["ablations"]:
        cfg = build_config(load_yaml(CPU_CONFIG), ablation=arm)
        assert (cfg.env.name, cfg.env.obs, cfg.device, cfg.model.preset) == ("crafter", "symbolic", "cpu", "xs")
        assert cfg.model.deter == PRESETS["xs"]["deter"] and cfg.train.torch_threads == 1
        assert cfg.train.steps % cfg.eval.every == 0 and cfg.train.steps // cfg.eval.every >= 4  # a curve, not a point
        assert cfg.eval.episodes >= 10




def _resolved(args: list[str]) -> dict:
    """The resolved config of a `lore train` argument list (``--config``, ``--set``, ``--ablation``, ``--seed``)."""
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--ablation")
    p.add_argument("--seed", type=int)
    known, _ = p.parse_known_args(args)
    cfg = build_config(load_yaml(REPO / known.config), [*known.set, f"seed={known.seed}"], known.ablation)
    data = to_dict(cfg)
    data["llm"].pop("cache_path")  # per-run cache (workflow) vs none (benchmark)
    data["llm"].pop("shared_cache")
    return data




def _crafter_run_configs(config: dict):
    """The resolved RunConfig of every Crafter arm of a workflow config (which must contain Crafter)."""
    from lore.grid.workflow import run_overrides

    assert "crafter" in config["envs"]
    for arm in config["ablations"]:
        sets = [f"{k}={v}" for k, v in run_overrides(config, "crafter", arm).items()]
        yield build_config(None, [s.replace("=None", "=null") for s in sets], arm)


def test_the_paper_grid_runs_crafter_on_pixels_with_preset_m():
    config = _workflow_config("paper.yaml")
    for cfg in _crafter_run_configs(config):
        assert (cfg.env.obs, cfg.model.preset, cfg.device) == ("pixels", "m", "auto")
        assert cfg.train.train_ratio == 512 and (cfg.train.batch_size, cfg.train.batch_length) == (16, 64)
        assert cfg.dreamer.imag_last == 0  # DreamerV3 as published on the GPU; the CPU knob stays off
        budgets = config["analysis"]["env_budgets"]["crafter"]
        assert max(budgets) == cfg.train.steps
        assert all(b % cfg.eval.every == 0 for b in budgets)  # every budget is an eval point


def test_the_test_grid_keeps_a_tiny_crafter_job():
    for cfg in _crafter_run_configs(_workflow_config("test.yaml")):
        assert cfg.model.preset == "debug" and cfg.train.steps <= 400
        assert cfg.eval.episodes == 1 and cfg.env.max_episode_steps <= 100


def test_the_crafter_workflow_plans_the_grid_and_the_achievements_figure(tmp_path):
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    shutil.copy(CPU_CONFIG, work / "config")  # run_config is relative to the working directory
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work),
                           "--configfile", str(WORKFLOW_CONFIG), "-n", "-p"], capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    root = "results/crafter"  # a config other than the main one writes under results/<its name>
    assert f"{root}/figures/crafter_achievements.png" in out and f"{root}/tables/achievements.csv" in out
    assert out.count("--config config/crafter_cpu.yaml") == 12
    counts = job_counts(out)
    assert counts["train"] == 12 and counts["figures"] == 1 and "paper" not in counts  # paper: false


# --------------------------------------------------------------------------- the random-policy baseline


def test_random_policy_is_evaluated_by_the_same_code_as_an_agent():
    from lore.envs import make_env_from_config
    from lore.method import LoReAgent
    from lore.train.evaluate import evaluate_policy
    from lore.train.random_policy import UniformRandomPolicy, evaluate_random_policy

    cfg = build_config(load_yaml(CPU_CONFIG), TINY)
    result = evaluate_random_policy(cfg, eval_index=0)
    assert evaluate_random_policy(cfg, eval_index=0) == result  # deterministic
    env = make_env_from_config(cfg.env, seed=10_000_000 + cfg.seed)
    agent = LoReAgent(env.observation_space, int(env.action_space.n), cfg)
    trained = evaluate_policy(agent, env, cfg, torch.device("cpu"), 0)
    assert set(result) == set(trained)  # the columns of eval.csv
    rates = [result[k] for k in sorted(result) if k.startswith("ach_")]
    assert len(rates) == 22 and result["episodes"] == 2 and result["length_mean"] <= 15
    assert result["crafter_score"] == pytest.approx(crafter_score(np.array(rates)))
    policy = UniformRandomPolicy(17, seed=0)
    actions = [int(policy.act(None, torch.ones(1, dtype=torch.bool), {}).action) for _ in range(3000)]
    counts = np.bincount(actions, minlength=17)
    assert counts.min() > 120 and counts.max() < 240  # uniform (expected 176 each)


def test_crafter_score_of_eval_and_of_the_tables_is_one_function():
    from lore.train.evaluate import crafter_score as eval_score

    rates = np.linspace(0, 1, 22)
    assert eval_score(list(100 * rates)) == pytest.approx(crafter_score(rates))
    assert np.isnan(eval_score([]))


def test_the_random_arm_trains_nothing_and_writes_the_random_policys_evaluations(tmp_path):
    from lore.train.random_policy import evaluate_random_policy

    run = tmp_path / "run"
    args = ["train", "--run-dir", str(run), "--config", str(CPU_CONFIG), "--ablation", "random", "--no-progress",
            *[a for o in TINY for a in ("--set", o)]]
    assert cli.main(args) == 0
    cfg = build_config(load_yaml(CPU_CONFIG), TINY, "random")
    evals = pd.read_csv(run / "eval.csv")
    assert list(evals["env_step"]) == [0, 20, 40]
    for index, row in evals.iterrows():  # the trainer's evaluation k is evaluate_random_policy's eval_index k
        expected = evaluate_random_policy(cfg, eval_index=index)
        assert row["crafter_score"] == pytest.approx(expected["crafter_score"])
        assert row["return_mean"] == pytest.approx(expected["return_mean"])
    assert pd.read_csv(run / "metrics.csv")["updates"].max() == 0
    assert (run / "done").is_file() and len(pd.read_csv(run / "episodes.csv")) >= 1
    # `lore eval` of the run evaluates the random policy it ran, and reproduces its last row
    out = run / "again.csv"
    assert cli.main(["eval", "--run-dir", str(run), "--out", str(out)]) == 0
    assert pd.read_csv(out)["crafter_score"].iloc[0] == pytest.approx(evals["crafter_score"].iloc[-1])


@pytest.mark.parametrize("override, key", [("llm.backend=scripted", "llm.backend"),
                                            ("features.enabled=true", "features.enabled")])
def test_a_random_policy_with_advice_switched_on_is_refused(override, key):
    from lore.config import ConfigError

    with pytest.raises(ConfigError, match=key):
        build_config(load_yaml(CPU_CONFIG), [*TINY, override], "random")



def _final_rows(arm_scores: dict[str, list[float]], distinct: dict[str, list[int]]) -> pd.DataFrame:
    """One final-evaluation row per arm and seed with the given score and number of unlocked achievements."""
    names = [f"ach_{i:02d}" for i in range(22)]
    rows = []
    for arm, scores in arm_scores.items():
        for seed, (score, k) in enumerate(zip(scores, distinct[arm], strict=True)):
            rows.append({"ablation": arm, "seed": seed, "crafter_score": score, "return_mean": score,
                         "episodes": 50, "env_step": 1000, **{n: float(i < k) * 0.5 for i, n in enumerate(names)}})
    return pd.DataFrame(rows)








def test_the_advisor_played_alone_beats_random_and_its_adversary_on_the_same_layouts():
    from lore.train.advisor_policy import evaluate_advisor_policy
    from lore.train.random_policy import evaluate_random_policy

    cfg = build_config(load_yaml(CPU_CONFIG), ["eval.episodes=4", "env.max_episode_steps=150"], "rl_only")
    good, bad = evaluate_advisor_policy(cfg, "good"), evaluate_advisor_policy(cfg, "adversarial")
    rand = evaluate_random_policy(cfg)
    assert good["episodes"] == bad["episodes"] == 4 and "crafter_score" in good
    assert good["ach_collect_wood"] == 1.0 and good["ach_place_table"] == 1.0  # every episode
    assert good["crafter_score"] > 3 * max(rand["crafter_score"], bad["crafter_score"])
    from lore.train.advisor_policy import AdvisorPolicy

    with pytest.raises(ValueError, match="snapshots"):
        AdvisorPolicy("crafter", ["noop"]).act({}, torch.ones(1, dtype=torch.bool), {})


# --------------------------------------------------------------------------- prompts grounded in the state


def test_crafter_prompt_is_grounded_in_the_symbolic_state():
    from lore.envs import make_env
    from lore.envs.crafter import INVENTORY_NAMES, MATERIAL_NAMES, nearest_by_kind, offset_text
    from lore.llm.prompt import build_prompt
    from lore.llm.scripted import ScriptedAdvisor

    env = make_env("crafter", seed=3)
    env.reset()
    advisor = ScriptedAdvisor()
    wood = INVENTORY_NAMES.index("wood")
    for _ in range(300):  # follow the good advisor until it has collected wood
        answer = advisor.advise(env.state_snapshot(), "crafter", env.action_names)
        env.step(int(np.argmax(answer["action_prior"]["logits"])))
        if env.state_snapshot()["inventory"][wood] >= 1:
            break
    snap = env.state_snapshot()
    assert snap["inventory"][wood] >= 1, "the scripted advisor did not reach a tree"
    prompt = build_prompt(env.describe(), env.action_names, "crafter")
    inventory = dict(zip(INVENTORY_NAMES, snap["inventory"].tolist(), strict=True))
    assert f"Inventory: {inventory['wood']} wood" in prompt
    assert (f"Vitals (0-9): health {inventory['health']}, food {inventory['food']}, drink {inventory['drink']}, "
            f"energy {inventory['energy']}.") in prompt
    unlocked = int(snap["achievements"].sum())
    assert f"Achievements this episode ({unlocked}/22): " in prompt and "collect_wood" in prompt
    centre = snap["semantic"].shape[0] // 2
    for sid, (dx, dy, count) in nearest_by_kind(snap["semantic"]).items():
        assert f"{MATERIAL_NAMES[sid]} {offset_text(dx, dy)} ({count} in view)" in prompt
        assert snap["semantic"][centre + dx, centre + dy] == sid  # the offset points at that material
    fx, fy = snap["facing"]
    assert f"directly in front: {MATERIAL_NAMES[snap['semantic'][centre + fx, centre + fy]]}." in prompt


# --------------------------------------------------------------------------- Crafter-specific bad input


def _reject(tmp_path, capsys, args: list[str], needle: str) -> None:
    run_dir = tmp_path / "out" / "run"
    capsys.readouterr()
    try:
        rc = cli.main(["train", "--run-dir", str(run_dir), *args])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("lore: error: "), err
    assert needle in lines[0] and "Traceback" not in err, lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overrides, needle", [
    (["env.name=crafter", "env.view=full"], "env.view"),
    (["env.name=crafter", "env.obs=pixels", "env.crafter_view=7"], "env.crafter_view"),
    (["env.crafter_view=7"], "env.crafter_view"),  # MiniGrid ignores it
    (["env.name=MiniGrid-Empty-5x5-v0", "env.crafter_area=32"], "env.crafter_area"),
    (["env.name=crafter", "env.crafter_view=4"], "env.crafter_view"),
    (["env.name=crafter", "env.crafter_area=15"], "env.crafter_area"),
    (["env.name=crafter", "env.crafter_view=65"], "env.crafter_view"),
    (["env.name=crafter", "env.crafter_area=16", "env.crafter_view=17"], "env.crafter_view"),
    (["env.name=crafter", "env.max_episode_steps=0"], "env.max_episode_steps"),
    (["env.name=crafter", "env.crafter_view=9.5"], "env.crafter_view"),
])
def test_crafter_settings_are_validated_like_the_rest(tmp_path, capsys, overrides, needle):
    _reject(tmp_path, capsys, [a for o in overrides for a in ("--set", o)], needle)


def test_crafter_settings_in_a_config_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: {name: crafter, view: full}\n")
    _reject(tmp_path, capsys, ["--config", str(bad)], "env.view")
    ok = build_config(load_yaml(CPU_CONFIG), ["env.obs=both", "env.crafter_view=7"])
    assert ok.env.crafter_view == 7  # a smaller symbolic map next to the pixels is fine


def test_a_workflow_that_sets_crafter_keys_for_minigrid_names_the_field():
    from lore.grid.workflow import GridError, check_workflow_config

    config = _workflow_config("test.yaml")
    config["run"] = {**config["run"], "env.crafter_view": 7}
    with pytest.raises(GridError, match=r"^run: env.crafter_view \(7\) only applies to Crafter"):
        check_workflow_config(config, environ={})
    config["run"].pop("env.crafter_view")
    config["env_run"]["crafter"]["env.crafter_view"] = 7
    check_workflow_config(config, environ={})  # where it belongs


# --------------------------------------------------------------------------- advice coverage per controller setting


def _coverage_run(run: Path, ablation: str, cooldown: int, steps: list[int], mask: list[float], scores: list[float]):
    backend = "none" if ablation == "rl_only" else "scripted"
    cfg = {"ablation": ablation, "llm": {"backend": backend, "plan_max_len": 32,
                                         "controller": {"budget": 500, "cooldown": cooldown,
                                                        "cooldown_after_success": cooldown}}}
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    metrics = {"env_step": steps}
    if backend != "none":
        metrics |= {"llm_calls": [s // cooldown for s in steps], "llm_plan_steps": [s // 1000 for s in steps],
                    "prior_mask_frac": mask}
    pd.DataFrame(metrics).to_csv(run / "metrics.csv", index=False)
    pd.DataFrame({"env_step": [0, *steps[1::2]], "crafter_score": scores}).to_csv(run / "eval.csv", index=False)












def _targets_report(folder: Path, arms: dict[str, list[tuple[float, int]]],
                    final: dict[str, list[tuple[float, int]]] | None = None):
    """A Crafter report's tables: per arm and seed (score, distinct achievements) at the last periodic eval
    point, and at the final evaluation where ``final`` is given."""
    (folder / "tables").mkdir(parents=True)
    runs, points = [], []
    for arm, per_seed in arms.items():
        for seed, (score, distinct) in enumerate(per_seed):
            runs.append({"env": "crafter", "ablation": arm, "seed": seed, "crafter_score": score})
            points.append({"env": "crafter", "ablation": arm, "seed": seed, "env_step": 100,
                           **{f"ach_{i}": float(i < distinct) for i in range(22)}})
    pd.DataFrame(runs).to_csv(folder / "tables" / "runs.csv", index=False)
    pd.DataFrame(points).to_csv(folder / "tables" / "eval_points.csv", index=False)
    if final:
        pd.DataFrame([{"ablation": arm, "seed": s, "crafter_score": v, "distinct": k} for arm, values in final.items()
                      for s, (v, k) in enumerate(values)]).to_csv(folder / "tables" / "final_eval.csv", index=False)
    return folder


