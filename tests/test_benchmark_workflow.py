"""The LLM-prior benchmark as an output of the workflow: config/benchmark.yaml (grid blocks,
results_root), the benchmark_report rule, and adopting runs of the former benchmark script
(results/bench/<doorkey|lavagap>/<arm>/seed<k>) without retraining them.

Every Snakemake call runs with ``--directory <tmp>`` so the checkout's results/ and docs/ stay untouched.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import CONFIG_DIR, REPO, job_counts, job_env, run_snakemake, write_config

from lore.analysis.grid import GridError, check_workflow_config, train_command_args

BENCHMARK = CONFIG_DIR / "benchmark.yaml"
DOORKEY, LAVAGAP = "MiniGrid-DoorKey-5x5-v0", "MiniGrid-LavaGapS5-v0"


def _benchmark() -> dict:
    return yaml.safe_load(BENCHMARK.read_text())


# --------------------------------------------------------------------------- config checks (fast)


def test_benchmark_grid_blocks_expand_to_exactly_its_runs():
    jobs = check_workflow_config(_benchmark(), environ={})
    expected = {(DOORKEY, arm, seed) for arm in ("rl_only", "kl", "full", "full_noisy", "full_adversarial",
                                                 "full_distill") for seed in range(5)}
    expected |= {(DOORKEY, arm, seed) for arm in ("gate", "prior_only", "features") for seed in range(3)}
    expected |= {(LAVAGAP, arm, seed) for arm in ("rl_only", "kl", "full", "full_adversarial", "features")
                 for seed in range(5)}
    assert len(jobs) == len(expected) == 64
    assert {(job.env, job.ablation, job.seed) for job in jobs} == expected
    assert all(job.run_dir == f"results/bench/runs/{job.env}/{job.ablation}/seed{job.seed}" for job in jobs)


def test_benchmark_runs_are_the_cpu_learning_curve_runs():
    """benchmarks/learning_curve.py keeps its CPU_RUN for ad-hoc curves: the benchmark's runs must resolve
    to exactly what it runs with train.steps=10000 (the settings the README's numbers were made with)."""
    from lore.cli import _config_from_args, build_parser
    from lore.config import to_dict

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from learning_curve import CPU_RUN
    finally:
        sys.path.remove(str(REPO / "benchmarks"))

    def resolved(args: list[str]) -> dict:
        return to_dict(_config_from_args(build_parser().parse_args(["train", "--run-dir", "x", *args])))

    config = _benchmark()
    first_of_each_arm = {(job.env, job.ablation): job for job in reversed(check_workflow_config(config, environ={}))}
    for job in first_of_each_arm.values():
        script = ["--ablation", job.ablation, "--seed", str(job.seed)]
        for override in [f"env.name={job.env}", "train.steps=10000", *CPU_RUN]:
            script += ["--set", override]
        workflow = shlex.split(train_command_args(config, job.env, job.ablation, job.seed))
        assert resolved(workflow) == resolved(script), job


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"grid": []}, "grid: must be a non-empty list of blocks"),
        ({"grid": "all"}, "grid: must be a non-empty list of blocks"),
        ({"envs": [DOORKEY]}, "envs: `grid` replaces envs/ablations/seeds"),
        ({"grid": [{"envs": [DOORKEY], "ablations": ["full"]}]}, "grid[0].seeds: must be a non-empty list"),
        ({"grid": [{"envs": [DOORKEY], "ablations": ["full"], "seeds": [0], "arms": []}]},
         "grid[0].arms: unknown key"),
        ({"grid": [{"envs": [DOORKEY], "ablations": ["full"], "seeds": [0]},
                   {"envs": [LAVAGAP], "ablations": ["fulll"], "seeds": [0]}]},
         "grid[1].ablations[0]: unknown ablation 'fulll'"),
        ({"grid": [{"envs": ["MiniGrid-Nope-v0"], "ablations": ["full"], "seeds": [0]}]},
         "grid[0].envs[0]: unknown environment"),
        ({"grid": [{"envs": [DOORKEY], "ablations": ["full"], "seeds": [0, -1]}]},
         "grid[0].seeds[1]: expected a non-negative integer"),
        ({"grid": [{"envs": [DOORKEY], "ablations": ["full", "kl"], "seeds": [0, 1]},
                   {"envs": [DOORKEY], "ablations": ["kl"], "seeds": [1, 2]}]},
         f"grid[1]: run {DOORKEY} / kl / seed 1 is already in grid[0]"),
        ({"results_root": ""}, "results_root: expected a folder path"),
        ({"results_root": "results/my bench"}, "results_root: expected a folder path"),
        ({"results_root": "results/{env}"}, "results_root: expected a folder path"),
        ({"results_root": 3}, "results_root: expected a folder path"),
        ({"results_root": "./"}, "results_root: './' would mix the outputs with other files"),
        ({"benchmark_report": {"out": ""}}, "benchmark_report.out: expected a folder path"),
        ({"benchmark_report": {"dir": "docs"}}, "benchmark_report: expected a mapping {out: <folder>}"),
    ],
)
def test_invalid_grid_or_results_root_is_one_line_naming_the_key(change, message):
    config = {**_benchmark(), **change}
    with pytest.raises(GridError) as err:
        check_workflow_config(config, environ={})
    assert message in str(err.value)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- Snakemake dry runs (seconds)


def test_snakemake_refuses_a_bad_results_root_before_any_job(tmp_path):
    configfile = write_config(tmp_path / "bad.yaml", results_root="results/my bench")
    workdir = tmp_path / "work"
    proc = run_snakemake(workdir, "--cores", "1", configfile=configfile, timeout=120)
    assert proc.returncode != 0
    assert "invalid workflow config: results_root: expected a folder path" in proc.stdout + proc.stderr
    assert not (workdir / "results").exists()


def _planned_paths(dry_run_output: str) -> list[str]:
    """Every output, log and benchmark file of the jobs of a dry run."""
    paths = []
    for line in dry_run_output.splitlines():
        match = re.match(r"^\s+(output|log|benchmark): (.*)$", line)
        if match:
            paths += [p.strip() for p in match.group(2).split(",")]
    return paths


def test_results_root_moves_every_output(tmp_path):
    default = run_snakemake(tmp_path / "default", "-n", configfile=CONFIG_DIR / "test.yaml", timeout=120)
    moved_config = write_config(tmp_path / "moved.yaml", results_root="elsewhere/test")
    moved = run_snakemake(tmp_path / "moved", "-n", configfile=moved_config, timeout=120)
    assert default.returncode == 0 and moved.returncode == 0, default.stderr[-2000:] + moved.stderr[-2000:]
    default_paths = _planned_paths(default.stdout)
    moved_paths = _planned_paths(moved.stdout)
    assert len(default_paths) > 20
    # The default keeps today's paths: results/..., and the paper's macros where paper/lore.tex reads them.
    assert all(p.startswith(("results/", "paper/generated/")) for p in default_paths), default_paths
    assert all(p.startswith("elsewhere/test/") for p in moved_paths), moved_paths
    relocated = {("elsewhere/test/" + p.removeprefix("results/")) for p in default_paths}
    assert relocated == set(moved_paths)


def test_benchmark_dry_run_plans_the_grid_and_the_report(tmp_path):
    proc = run_snakemake(tmp_path, "-n", configfile=BENCHMARK, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout) == {"train": 64, "aggregate": 1, "figures": 1, "paper_macros": 1,
                                       "benchmark_report": 1, "all": 1, "total": 69}
    paths = _planned_paths(proc.stdout)
    assert "docs/benchmark/figures/fig1_success.png" in paths and "docs/benchmark/README.md" in paths
    assert all(p.startswith(("results/bench/", "docs/benchmark/")) for p in paths), paths
    assert not (tmp_path / "results").exists()


def test_benchmark_workflow_lint_is_clean(tmp_path):
    proc = run_snakemake(tmp_path, "--lint", configfile=BENCHMARK, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_readme_shows_the_figure_the_benchmark_config_writes():
    readme = (REPO / "README.md").read_text()
    out = _benchmark()["benchmark_report"]["out"]
    assert f"]({out}/figures/fig1_success.png)" in readme
    assert f"]({out}/README.md)" in readme
    assert "--configfile config/benchmark.yaml" in readme


def test_the_benchmark_script_is_the_workflow_on_the_benchmark_config():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from prior_benchmark import snakemake_command
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    command = snakemake_command(2, ["-n"])
    assert command[1:3] == ["-m", "snakemake"] and command[-1] == "-n"
    assert " --configfile config/benchmark.yaml " in " ".join(command) and " --cores 2 " in " ".join(command)
    assert (REPO / command[command.index("--profile") + 1] / "config.yaml").is_file()


# --------------------------------------------------------------------------- adopting old runs (a minute)


def migration_commands() -> str:
    """The commands docs/workflow.md gives for moving runs of the former benchmark script into the
    workflow's layout (the fenced block after its heading), so the test runs exactly what the docs say."""
    text = (REPO / "docs" / "workflow.md").read_text()
    section = text.split("### Adopting runs of the former benchmark script", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def _old_layout_runs(root: Path, grid: list[dict]) -> None:
    """Synthetic finished runs where benchmarks/learning_curve.py put them: <root>/<doorkey|lavagap>/<arm>/
    seed<k>, with the run's log next to it."""
    from lore.analysis.synthetic import SyntheticRun, write_run

    folder = {DOORKEY: "doorkey", LAVAGAP: "lavagap"}
    for block in grid:
        for env in block["envs"]:
            for arm in block["ablations"]:
                for seed in block["seeds"]:
                    run = write_run(root / folder[env] / arm / f"seed{seed}",
                                    SyntheticRun(env=env, ablation=arm, seed=seed, eval_episodes=20))
                    (run.parent / f"seed{seed}.log").write_text("lore train output\n")


@pytest.mark.slow
def test_adopted_benchmark_runs_are_not_retrained_and_the_report_is_written(tmp_path):
    grid = [{"envs": [DOORKEY], "ablations": ["rl_only", "full"], "seeds": [0, 1]},
            {"envs": [LAVAGAP], "ablations": ["rl_only", "full"], "seeds": [0]}]
    config = _benchmark()
    configfile = write_config(tmp_path / "bench.yaml", base="benchmark.yaml", grid=grid,
                              analysis={**config["analysis"], "resamples": 200})
    workdir = tmp_path / "work"
    _old_layout_runs(workdir / config["results_root"], grid)
    subprocess.run(["bash", "-euc", migration_commands()], cwd=workdir, check=True)
    run = workdir / "results/bench/runs" / DOORKEY / "full" / "seed1"
    assert (run / "done").is_file() and (run / "train.log").read_text() == "lore train output\n"

    plan = run_snakemake(workdir, "-n", configfile=configfile, timeout=120)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert job_counts(plan.stdout) == {"aggregate": 1, "figures": 1, "paper_macros": 1, "benchmark_report": 1,
                                       "all": 1, "total": 5}

    proc = run_snakemake(workdir, "--cores", "2", configfile=configfile, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    report = workdir / config["benchmark_report"]["out"]
    text = (report / "README.md").read_text()
    assert f"## {DOORKEY}" in text and f"## {LAVAGAP}" in text and "20 episodes per point" in text
    summary = pd.read_csv(report / "summary.csv")
    assert sorted(zip(summary["env"], summary["arm"], summary["runs"], strict=True)) == [
        (DOORKEY, "full", 2), (DOORKEY, "rl_only", 2), (LAVAGAP, "full", 1), (LAVAGAP, "rl_only", 1)]
    assert list(summary["arm"][summary["env"] == DOORKEY]) == ["rl_only", "full"]  # the baseline first
    assert (report / "figures" / "fig1_success.png").stat().st_size > 1000
    assert (report / "tables" / "stats.csv").is_file()
    again = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
                            str(workdir), "--configfile", str(configfile), "-n"],
                           capture_output=True, text=True, timeout=120, env=job_env())
    assert "Nothing to be done" in again.stdout + again.stderr


def _auc_tables(full: list[float], kl: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """stats.csv and runs.csv rows of two arms' per-seed AUCs (only what the target line reads)."""
    import numpy as np

    from lore.analysis import stats as st

    env = "MiniGrid-DoorKey-5x5-v0"
    runs = pd.DataFrame([{"env": env, "ablation": arm, "seed": i, "auc": v}
                         for arm, values in (("full", full), ("kl", kl)) for i, v in enumerate(values)])
    rows = []
    for arm, values in (("full", full), ("kl", kl)):
        x = np.asarray(values)
        ci = st.stratified_bootstrap_ci([x], "mean", seed=0)
        low, high = ci.low, ci.high
        rows.append({"env": env, "ablation": arm, "metric": "auc", "n": x.size, "mean": x.mean(),
                     "mean_low": low, "mean_high": high})
    return pd.DataFrame(rows), runs


@pytest.mark.parametrize("full, kl, verdict, strict", [
    # overlapping groups, full's mean a little lower: the difference CI reaches 0 (met), the one-sided
    # reading (full's upper bound below kl's mean) fails: both are printed
    ([0.73, 0.68, 0.68, 0.68, 0.63], [0.70, 0.78, 0.77, 0.79, 0.60], "**met**", "fails"),
    # full clearly worse on every seed: not met on either reading
    ([0.30, 0.32, 0.31, 0.29, 0.33], [0.70, 0.78, 0.77, 0.79, 0.72], "**not met**", "fails"),
    # full better: met, and the stricter reading holds
    ([0.80, 0.82, 0.81, 0.79, 0.83], [0.70, 0.72, 0.71, 0.69, 0.73], "**met**", "holds"),
])
def test_the_not_below_target_reads_the_difference_ci_and_prints_the_stricter_reading(full, kl, verdict, strict):
    from lore.analysis.benchmark_report import not_below_line
    from lore.analysis.settings import AnalysisSettings

    stats, runs = _auc_tables(full, kl)
    line = not_below_line(stats, runs, "MiniGrid-DoorKey-5x5-v0", "kl", AnalysisSettings())
    assert f"→ {verdict};" in line
    assert line.endswith(f": {strict}")
    assert "n = 5 vs 5" in line and "P(full > kl)" in line
    diff = float(re.search(r"full − kl = ([+-][0-9.]+)", line).group(1))
    assert diff == pytest.approx(sum(full) / 5 - sum(kl) / 5, abs=5e-4)


@pytest.mark.parametrize("overlay, root, added, arms, count, report", [
    ("gate_three_signals", "bench_gate_three_signals", " --set prior.w_value=1.0 --set prior.w_disagreement=1.0",
     {"full", "full_adversarial"}, 10, "docs/benchmark/gate_three_signals"),
    ("critic_shared", "bench_critic_shared", " --set 'dreamer.critic_trunk=\"shared\"'",
     {"rl_only", "kl", "full", "full_noisy", "full_adversarial"}, 5 * 5 + 4 * 3, "docs/benchmark/critic_shared"),
    ("uncertainty_heads_lean", "bench_uncertainty_heads_lean", " --set dreamer.uncertainty_head_steps=2",
     {"rl_only", "kl", "full", "full_adversarial"}, 4 * 5 + 2 * 3,
     "docs/benchmark/uncertainty_heads_lean"),
    ("trust_act_returns", "bench_trust_act_returns", " --set 'prior.trust_act_evidence=\"returns\"'",
     {"full", "full_adversarial", "full_noisy"}, 2 * 5 + 3 * 5, "docs/benchmark/trust_act_returns"),
    ("control_half", "bench_control_half", " --set prior.control_episodes=0.5",
     {"full", "full_adversarial"}, 2 * 5, "docs/benchmark/control_half"),
    ("control_matching", "bench_control_matching", " --set 'prior.control_allocation=\"matching\"'",
     {"full", "full_adversarial"}, 2 * 5 + 2 * 5, "docs/benchmark/control_matching"),
    ("trust_act_floor", "bench_trust_act_floor", " --set prior.trust_act_floor=0.25",
     {"full_adversarial"}, 5, "docs/benchmark/trust_act_floor"),
    ("trust_failures", "bench_trust_failures", " --set prior.trust_failures=true",
     {"full_adversarial"}, 5, "docs/benchmark/trust_failures"),
    ("trust_act_pooled", "bench_trust_act_pooled", " --set prior.trust_act_pooled=true",
     {"full", "full_adversarial"}, 10 + 2 * 5, "docs/benchmark/trust_act_pooled"),
    ("trust_act_uninformed", "bench_trust_act_uninformed", " --set prior.trust_act_uninformed=0.5",
     {"full", "full_adversarial"}, 10 + 2 * 5, "docs/benchmark/trust_act_uninformed"),
    ("trust_model_failures", "bench_trust_model_failures", " --set prior.trust_model_failures=true",
     {"full", "full_adversarial"}, 10 + 2 * 5, "docs/benchmark/trust_model_failures"),
    ("trust_step_failures", "bench_trust_step_failures", " --set prior.trust_step_failures=true",
     {"full", "full_adversarial"}, 20 + 2 * 5, "docs/benchmark/trust_step_failures"),
    ("advice_silenced", "bench_advice_silenced", " --set prior.beta_max=0.0 --set features.enabled=false",
     {"full_adversarial"}, 10, "docs/benchmark/advice_silenced"),
    ("no_features", "bench_no_features", " --set features.enabled=false",
     {"full", "full_adversarial"}, 10 + 5, "docs/benchmark/no_features"),
    ("trust_value_off", "bench_trust_value_off", " --set prior.trust_value_weight=0.0",
     {"full", "full_adversarial"}, 2 * 5, "docs/benchmark/trust_value_off"),
    ("temperature_off", "bench_temperature_off", " --set prior.align_temperature=false",
     {"full"}, 5 + 3, "docs/benchmark/temperature_off"),
    ("features_residual", "bench_features_residual", " --set features.enabled=false",
     {"full_adversarial"}, 10, "docs/benchmark/features_residual"),
    ("trust_episode_acted", "bench_trust_episode_acted", " --set prior.trust_episode_acted=true",
     {"full", "full_adversarial"}, 5 + 3 + 2 * 3, "docs/benchmark/trust_episode_acted"),
    ("trust_episode_strength", "bench_trust_episode_strength",
     " --set 'prior.trust_act_evidence=\"returns\"' --set prior.trust_episode_strength=true",
     {"full", "full_adversarial"}, 2 * 5 + 2 * 3, "docs/benchmark/trust_episode_strength"),
    ("gate_trust_floor", "bench_gate_trust_floor", " --set prior.gate_trust_floor=true",
     {"full", "full_noisy", "full_adversarial"}, 5 * 5 + 3 * 3, "docs/benchmark/gate_trust_floor"),
    ("absorb_over_all", "bench_absorb_over_all", " --set 'prior.absorb_over=\"all\"'",
     {"full", "full_adversarial"}, 2 * 5, "docs/benchmark/absorb_over_all"),
    ("trust_familywise", "bench_trust_familywise",
     " --set 'prior.absorb_over=\"all\"' --set prior.trust_familywise=true",
     {"full", "full_adversarial"}, 2 * 5, "docs/benchmark/trust_familywise"),
    ("absorb_tilt", "bench_absorb_tilt",
     " --set 'prior.absorb_over=\"all\"' --set prior.trust_familywise=true --set 'prior.absorb_trust=\"tilt\"'",
     {"full", "full_adversarial"}, 2 * 5, "docs/benchmark/absorb_tilt"),
    ("absorb_tilt_rest", "bench_absorb_tilt_rest",
     " --set 'prior.absorb_over=\"all\"' --set prior.trust_familywise=true --set 'prior.absorb_trust=\"tilt\"'",
     {"kl", "kl_adversarial", "full", "full_adversarial"}, 2 * 5 + 4 * 5, "docs/benchmark/absorb_tilt_rest"),
    ("ask_before_act", "bench_ask_before_act", " --set llm.ask_before_act=true",
     {"kl", "full", "full_adversarial"}, 2 * 3 * 5, "docs/benchmark/ask_before_act"),
    # not experiments: the benchmark's own settings, run again on newer code or for more seeds
    ("rerun_current", "bench_rerun_current", "", {"rl_only", "kl", "full", "full_adversarial", "full_noisy"}, 5 * 5,
     "docs/benchmark/rerun_current"),
    ("heldout_distshift", "bench_heldout_distshift", "", {"rl_only", "kl", "full", "full_adversarial"}, 4 * 3,
     "docs/benchmark/heldout_distshift"),
    ("heldout_obstacles", "bench_heldout_obstacles", "", {"rl_only", "kl", "full", "full_adversarial"}, 4 * 3,
     "docs/benchmark/heldout_obstacles"),
    ("current_default", "bench_current_default", "", {"full_noisy", "full_adversarial", "full_distill"}, 3 * 5,
     "docs/benchmark/current_default"),
    # not an experiment: a subset of the benchmark's own runs, into the benchmark's own report
    ("benchmark_main_arms", "bench", "", {"rl_only", "kl", "full", "full_noisy", "full_adversarial"}, 5 * 5,
     "docs/benchmark"),
])
def test_an_experiment_overlay_changes_only_its_settings_of_the_benchmark_runs(tmp_path, overlay, root, added, arms,
                                                                              count, report):
    """config/<overlay>.yaml on top of config/benchmark.yaml: runs whose commands are the benchmark's own for
    the same (env, arm, seed) plus the overlay's settings, under their own root."""
    proc = run_snakemake(tmp_path, "-n", "-p", "--configfile", str(BENCHMARK), str(CONFIG_DIR / f"{overlay}.yaml"),
                         timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout)["train"] == count
    base = run_snakemake(tmp_path, "-n", "-p", configfile=BENCHMARK, timeout=120)
    assert base.returncode == 0, base.stderr[-3000:]

    def commands(out: str, prefix: str) -> dict[str, str]:
        found = {}
        for line in out.splitlines():
            match = re.search(r"exec lore train --run-dir (\S+) (.*?) >> ", line)
            if match:
                found[match.group(1).removeprefix(prefix)] = match.group(2)
        return found

    runs, bench = commands(proc.stdout, f"results/{root}/"), commands(base.stdout, "results/bench/")
    bench_arms = {run.split("/")[2] for run in bench}
    assert len(runs) == count and {run.split("/")[2] for run in runs} == arms
    for run, args in runs.items():
        assert added in args
        if run not in bench:  # a seed (or env) the benchmark does not run: its seed-0 command with those changed
            env, arm, seed = run.split("/")[1], run.split("/")[2], run.rsplit("/seed", 1)[1]
            held_out = "MiniGrid-LavaGapS5-v0"
            # an arm the benchmark does not run (kl_adversarial: an overlay of its own) reads its advisor from the
            # ablation table, so its command is its good-advisor arm's with the arm's name in place
            stand_in = arm if arm in bench_arms else arm.removesuffix("_adversarial")
            template = bench.get(f"runs/{env}/{stand_in}/seed0") or bench[
                f"runs/{held_out}/{stand_in}/seed0"].replace(held_out, env)
            template = template.replace(f"/{stand_in}/", f"/{arm}/").replace(f"--ablation {stand_in} ",
                                                                             f"--ablation {arm} ")
            bench[run] = template.replace("/seed0 ", f"/seed{seed} ").replace("--seed 0 ", f"--seed {seed} ")
        assert args.replace(added, "") == bench[run]
    assert f"{report}/README.md" in _planned_paths(proc.stdout)


def test_gate_signal_separation_reads_the_paired_difference_per_run():
    from lore.analysis.benchmark_report import signal_separation
    from lore.analysis.settings import AnalysisSettings

    rows = []
    for seed, jitter in enumerate((-0.01, 0.0, 0.01, 0.005, -0.005)):
        rows.append({"env": "E", "ablation": "full", "seed": seed,
                     # entropy clearly higher on d states, disagreement clearly lower, value the same but noisy
                     "u_entropy_frac_disagree_avg": 0.6 + jitter, "u_entropy_frac_agree_avg": 0.5,
                     "u_disagreement_ratio_disagree_avg": 0.4, "u_disagreement_ratio_agree_avg": 0.45 + jitter,
                     "u_value_ratio_disagree_avg": 0.5 + 4 * jitter, "u_value_ratio_agree_avg": 0.5,
                     "beta_disagree_avg": 0.5, "beta_agree_avg": 0.5})
    lines = signal_separation(pd.DataFrame(rows), AnalysisSettings())
    table = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ") and " | 5 | " in line}
    assert "+0.100 [" in table["entropy"] and table["entropy"].endswith("| higher where the policy disagrees |")
    assert table["disagreement"].endswith("| **lower** where the policy disagrees |")
    assert table["value"].endswith("| no evidence of a difference |")
    assert table["β (combined)"].endswith("| no evidence of a difference |")
    assert signal_separation(pd.DataFrame(rows), AnalysisSettings(), arms=("gate",)) == []  # arm not run


def test_experiment_comparison_reads_each_difference_from_its_interval(tmp_path, capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import experiment_compare as cmp

    def table(folder: Path, arms: dict[str, list[float]]) -> Path:
        (folder / "tables").mkdir(parents=True)
        pd.DataFrame([{"env": "E", "ablation": arm, "seed": i, "auc": v, "final_sr": 0.5}
                      for arm, values in arms.items() for i, v in enumerate(values)]).to_csv(
            folder / "tables" / "runs.csv", index=False)
        return folder

    base = table(tmp_path / "bench", {"full": [0.60, 0.62, 0.61, 0.59, 0.63], "kl": [0.7] * 5})
    exp = table(tmp_path / "exp", {"full": [0.80, 0.82, 0.81, 0.79, 0.83], "only_here": [0.1, 0.2, 0.3]})
    assert cmp.main(["--experiment", str(exp), "--baseline", str(base), "--title", "T"]) == 0
    text = (exp / "comparison.md").read_text()
    assert text.startswith(f"# T: against the runs of `{base}`\n")  # a baseline other than the benchmark is named
    rows = [line for line in text.split("## Paired by seed")[0].splitlines() if line.startswith("| E |")]
    assert len(rows) == 2  # full x (AUC, final SR); only_here and kl are on one side only
    auc = next(r for r in rows if "| AUC |" in r)
    assert "| 5 / 5 | 0.810 | 0.610 | +0.200 [" in auc and auc.endswith("| 1.00 | higher |")
    assert next(r for r in rows if "| final SR |" in r).endswith("| no evidence of a difference |")
    with pytest.raises(SystemExit) as missing:
        cmp.main(["--experiment", str(tmp_path / "nothing"), "--baseline", str(base)])
    assert missing.value.code == 2 and "tables/runs.csv not found" in capsys.readouterr().err
    # --against: every experiment arm against one baseline arm, into its own file
    assert cmp.main(["--experiment", str(exp), "--baseline", str(base), "--against", "kl"]) == 0
    assert (exp / "comparison.md").read_text() == text  # untouched
    text_before_out = text
    rows = [line for line in (exp / "comparison_vs_kl.md").read_text().split("## Paired by seed")[0].splitlines()
            if "| AUC |" in line]
    assert [r.split(" | ")[1] for r in rows] == ["full vs kl", "only_here vs kl"]
    assert "| 0.810 | 0.700 | +0.110 [" in rows[0] and "| 0.200 | 0.700 | -0.500 [" in rows[1]
    # paired by seed: per-seed difficulty (a common offset) hides a constant gain from the unpaired interval
    offsets = [0.0, 0.3, 0.6, 0.1, 0.5, 0.2]
    hard = table(tmp_path / "hard", {"rl_only": offsets, "arm": [o + 0.05 for o in offsets]})
    assert cmp.main(["--experiment", str(hard), "--baseline", str(hard), "--against", "rl_only"]) == 0
    text = (hard / "comparison_vs_rl_only.md").read_text()
    unpaired = next(r for r in text.splitlines() if r.startswith("| E | arm vs rl_only | AUC | 6 / 6 |"))
    assert unpaired.endswith("| no evidence of a difference |")
    paired = next(r for r in text.split("## Paired by seed")[1].splitlines() if "| arm vs rl_only | AUC |" in r)
    assert "| 6 | +0.050 [+0.050, +0.050] | higher |" in paired
    with pytest.raises(SystemExit) as unknown:
        cmp.main(["--experiment", str(exp), "--baseline", str(base), "--against", "rl_onyl"])
    assert unknown.value.code == 2 and "no arm 'rl_onyl'" in capsys.readouterr().err
    # --out: a second baseline into a file of its own, the others untouched; a bad target is refused first
    assert cmp.main(["--experiment", str(exp), "--baseline", str(hard), "--against", "rl_only",
                     "--out", str(exp / "vs_hard.md")]) == 0
    assert "# exp: against the runs of" in (exp / "vs_hard.md").read_text()
    assert (exp / "comparison.md").read_text() == text_before_out
    for bad in (exp / "vs_hard.txt", tmp_path / "no_such_dir" / "x.md"):
        with pytest.raises(SystemExit) as refused:
            cmp.main(["--experiment", str(exp), "--baseline", str(base), "--out", str(bad)])
        assert refused.value.code == 2 and "--out" in capsys.readouterr().err
        assert not bad.exists()

    # when the advice was caught: runs whose act-time trust fell below 0.1, and the first step it did
    def caught(folder: Path, steps: list[float | None]) -> Path:
        (folder / "tables").mkdir(parents=True)
        pd.DataFrame([{"env": "E", "ablation": "full_adversarial", "seed": i, "auc": 0.1, "final_sr": 0.1,
                       "trust_low_frac": 0.0 if s is None else 0.5, "trust_low_step": s}
                      for i, s in enumerate(steps)]).to_csv(folder / "tables" / "runs.csv", index=False)
        return folder

    early = caught(tmp_path / "early", [1000, 1500, 2500])
    late = caught(tmp_path / "late", [4000, None, 9000, None])
    assert cmp.main(["--experiment", str(early), "--baseline", str(late)]) == 0
    section = (early / "comparison.md").read_text().split("## When the advice was caught")[1]
    assert "| E | full_adversarial | 3 / 3, median 1500 (1000–2500) | 2 / 4, median 6500 (4000–9000) |" in section
    assert "## When the advice was caught" not in (hard / "comparison_vs_rl_only.md").read_text()  # no trust


def test_experiment_comparison_pairs_the_final_evaluation_a_crafter_report_kept(tmp_path):
    """The raw runs of a Crafter baseline may be gone (another machine, a cleaned results/): its report's
    tables still pair a new arm with it by seed, on the final evaluation as well as the periodic one."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import experiment_compare as cmp

    def report(folder: Path, arm: str, periodic: list[float], final: list[float], prior: list[float] | None) -> Path:
        (folder / "tables").mkdir(parents=True)
        pd.DataFrame([{"env": "crafter", "ablation": arm, "seed": s, "crafter_score": v}
                      for s, v in enumerate(periodic)]).to_csv(folder / "tables" / "runs.csv", index=False)
        rows = [{"ablation": arm, "seed": s, "crafter_score": v, "distinct": 5 + s} for s, v in enumerate(final)]
        rows += [{"ablation": f"{arm} + prior", "seed": s, "crafter_score": v, "distinct": 9}
                 for s, v in enumerate(prior or [])]
        rows += [{"ablation": "random", "seed": s, "crafter_score": 1.0, "distinct": 4} for s in range(len(final))]
        pd.DataFrame(rows).to_csv(folder / "tables" / "final_eval.csv", index=False)
        return folder

    base = report(tmp_path / "base", "rl_only", [1.0, 2.0, 3.0], [1.5, 2.5, 3.5], None)
    exp = report(tmp_path / "exp", "full", [1.2, 2.2, 2.7], [2.0, 3.0, 4.0], [5.0, 6.0, 7.0])
    assert cmp.main(["--experiment", str(exp), "--baseline", str(base), "--against", "rl_only"]) == 0
    paired = (exp / "comparison_vs_rl_only.md").read_text().split("## Paired by seed")[1]
    row = lambda label: next(r for r in paired.splitlines() if f"| {label} |" in r)  # noqa: E731
    assert "| 3† | +0.500 [+0.500, +0.500] | higher |" in row("Crafter score, final eval")
    assert "| 3† | +0.033 [" in row("Crafter score, last periodic eval")
    assert "| 3† | +0.000 [+0.000, +0.000] |" in row("distinct achievements, final eval")
    # with the prior mixed in: no baseline arm had one, so there is nothing to pair it with
    assert "final eval + prior" not in paired
    # a report without final_eval.csv (written before it existed) still compares on runs.csv alone
    (base / "tables" / "final_eval.csv").unlink()
    assert cmp.main(["--experiment", str(exp), "--baseline", str(base), "--against", "rl_only"]) == 0
    paired = (exp / "comparison_vs_rl_only.md").read_text().split("## Paired by seed")[1]
    assert "final eval" not in paired and "| Crafter score, last periodic eval |" in paired


def test_experiment_comparison_counts_the_achievements_of_each_runs_last_periodic_eval(tmp_path):
    """Issue 10 measures full against rl_only by distinct achievements too: read from eval_points.csv at each
    run's last eval point (an earlier point's unlocks do not count), paired by seed like the score."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import experiment_compare as cmp

    def report(folder: Path, arm: str, unlocked_last: list[int]) -> Path:
        (folder / "tables").mkdir(parents=True)
        pd.DataFrame([{"env": "crafter", "ablation": arm, "seed": s, "crafter_score": 1.0}
                      for s in range(len(unlocked_last))]).to_csv(folder / "tables" / "runs.csv", index=False)
        points = []
        for s, k in enumerate(unlocked_last):
            # at step 0 every run unlocked 6; at the last point (env step 200) it unlocked k
            for step, count in ((0, 6), (200, k), (100, 1)):
                points.append({"env": "crafter", "ablation": arm, "seed": s, "env_step": step,
                               **{f"ach_{i}": (0.1 if i < count else 0.0) for i in range(8)}})
        pd.DataFrame(points).to_csv(folder / "tables" / "eval_points.csv", index=False)
        return folder

    base = report(tmp_path / "base", "rl_only", [2, 3, 4, 2, 3])
    exp = report(tmp_path / "exp", "full", [4, 5, 6, 4, 5])
    runs = cmp.read_runs(exp)
    assert runs.set_index("seed")["distinct_last"].tolist() == [4, 5, 6, 4, 5]
    assert cmp.main(["--experiment", str(exp), "--baseline", str(base), "--against", "rl_only"]) == 0
    text = (exp / "comparison_vs_rl_only.md").read_text()
    label = "distinct achievements, last periodic eval"
    unpaired = next(r for r in text.split("## Paired by seed")[0].splitlines() if f"| {label} |" in r)
    assert "| 5 / 5 | 4.800 | 2.800 | +2.000 [" in unpaired
    paired = next(r for r in text.split("## Paired by seed")[1].splitlines() if f"| {label} |" in r)
    assert "| 5 | +2.000 [+2.000, +2.000] | higher |" in paired
    # MiniGrid reports have eval points without achievement columns: no such row
    (tmp_path / "mg" / "tables").mkdir(parents=True)
    pd.DataFrame([{"env": "E", "ablation": "a", "seed": 0, "env_step": 0, "success_rate": 0.5}]).to_csv(
        tmp_path / "mg" / "tables" / "eval_points.csv", index=False)
    pd.DataFrame([{"env": "E", "ablation": "a", "seed": 0, "auc": 0.5}]).to_csv(
        tmp_path / "mg" / "tables" / "runs.csv", index=False)
    assert "distinct_last" not in cmp.read_runs(tmp_path / "mg")


def _runs_csv(folder: Path, rows: list[dict]) -> Path:
    (folder / "tables").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "tables" / "runs.csv", index=False)
    return folder


def _auc_rows(arm: str, values: list[float], first_seed: int = 0, env: str = "MiniGrid-DoorKey-5x5-v0",
              **settings) -> list[dict]:
    return [{"env": env, "ablation": arm, "seed": first_seed + i, "auc": v, "final_sr": v, "sr@10000": v,
             "llm_calls": 0.0, **settings} for i, v in enumerate(values)]


def test_pooled_report_pools_seeds_of_one_configuration_and_reads_the_targets_on_all(tmp_path, capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import pooled_report as pooled
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    bench = _runs_csv(tmp_path / "bench", _auc_rows("rl_only", [0.2, 0.1, 0.1, 0.1, 0.0], cfg_train_steps=10000)
                      + _auc_rows("full_adversarial", [0.05] * 5, cfg_train_steps=10000))
    more = _runs_csv(tmp_path / "more", _auc_rows("rl_only", [0.0] * 5, first_seed=5, cfg_train_steps=10000)
                     + _auc_rows("kl_adversarial", [0.01, 0.02, 0.0, 0.01, 0.01], cfg_train_steps=10000))
    out = tmp_path / "pooled"
    assert pooled.main(["--reports", str(bench), str(more), "--configfile", str(BENCHMARK), "--out", str(out)]) == 0
    text = (out / "README.md").read_text()
    # rl_only pooled over both reports: n = 10, mean 0.05; the low-regret target reads the pooled mean
    assert "| MiniGrid-DoorKey-5x5-v0 | rl_only | 10 | 0, 1, 2, 3, 4 (" in text
    assert "AUC: 0.050 vs 0.9 × 0.050 = 0.045 → **met**" in text
    # the extra arm is compared with full_adversarial on its own line, from the difference's interval
    line = next(x for x in text.splitlines() if "AUC full_adversarial − kl_adversarial" in x)
    assert "= +0.040 [" in line and "n = 5 vs 5" in line and line.endswith("→ higher")
    regret = next(x for x in text.splitlines() if "AUC full_adversarial − rl_only" in x)
    assert "= +0.000 [" in regret and "n = 5 vs 10" in regret and regret.endswith("→ no evidence of a difference")
    assert len(pd.read_csv(out / "tables" / "runs.csv")) == 20

    # the same run in two reports, or one arm under two settings: one line naming them, nothing written
    twice = _runs_csv(tmp_path / "twice", _auc_rows("rl_only", [0.3], first_seed=2, cfg_train_steps=10000))
    assert pooled.main(["--reports", str(bench), str(twice), "--out", str(tmp_path / "x")]) == 2
    assert "rl_only seed 2 is in more than one report" in capsys.readouterr().err
    other = _runs_csv(tmp_path / "other", _auc_rows("rl_only", [0.3], first_seed=9, cfg_train_steps=20000))
    assert pooled.main(["--reports", str(bench), str(other), "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert "rl_only: cfg_train_steps differs between the runs: 10000 (" in err and "20000 (" in err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()

    # a newer default: its arm replaces every run of that arm in the older reports (seeds 0-4 here), other arms stay
    newer = _runs_csv(tmp_path / "newer", _auc_rows("full_adversarial", [0.1] * 3, cfg_train_steps=10000,
                                                   cfg_prior_trust_step_failures=True))
    out = tmp_path / "pooled_newer"
    assert pooled.main(["--reports", str(bench), str(more), "--replacing", str(newer), "--configfile",
                        str(BENCHMARK), "--out", str(out), "--note", "kl_adversarial predates it."]) == 0
    runs = pd.read_csv(out / "tables" / "runs.csv")
    adversarial = runs[runs["ablation"] == "full_adversarial"]
    assert len(runs) == 18 and set(adversarial["source"]) == {str(newer)} and len(adversarial) == 3
    text = (out / "README.md").read_text()
    assert f"| MiniGrid-DoorKey-5x5-v0 | full_adversarial | 5 ({bench}) | {newer} |" in text
    assert "\n\nkl_adversarial predates it.\n\n" in text
    assert "AUC: 0.100 vs 0.9 × 0.050 = 0.045 → **met**" in text
    # the same folder as older and newer, or a newer report without runs: one line, nothing written
    with pytest.raises(SystemExit) as same:
        pooled.main(["--reports", str(bench), "--replacing", str(bench), "--out", str(tmp_path / "z")])
    assert same.value.code == 2 and "--replacing: also in --reports" in capsys.readouterr().err
    with pytest.raises(SystemExit) as empty:
        pooled.main(["--reports", str(bench), "--replacing", str(tmp_path / "none"), "--out", str(tmp_path / "z")])
    assert empty.value.code == 2 and "--replacing: no runs table" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


def test_advisor_check_tells_the_advisors_apart_before_any_learning(capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import advisor_check as ac
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    good = ac.play("MiniGrid-Empty-5x5-v0", "good", 3)
    assert good["success"] == 3 and good["failure"] == 0 and good["length"] < 10
    bad = ac.play("MiniGrid-LavaGapS5-v0", "adversarial", 3)
    assert bad["success"] == 0
    with pytest.raises(ValueError, match="policy must be one of"):
        ac.play("MiniGrid-Empty-5x5-v0", "greedy", 1)
    with pytest.raises(SystemExit):
        ac.main(["crafter"])
    assert "only MiniGrid tasks" in capsys.readouterr().err


def test_grid_parallel_merges_configs_like_snakemake_and_archives_runs_without_checkpoints(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import grid_parallel as gp
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from lore.analysis.grid import TrainJob

    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("results_root: r\nrun:\n  train.steps: 700\ngrid:\n  - envs: [MiniGrid-LavaGapS5-v0]\n"
                       "    ablations: [rl_only]\n    seeds: [7]\n")
    config = gp.merged_config([BENCHMARK, overlay])
    # mappings merge key by key (run: keeps the benchmark's other settings), lists and scalars are replaced
    assert config["run"]["train.steps"] == 700 and config["run"]["model.preset"] == "debug"
    assert config["grid"] == [{"envs": ["MiniGrid-LavaGapS5-v0"], "ablations": ["rl_only"], "seeds": [7]}]
    job = TrainJob("MiniGrid-LavaGapS5-v0", "rl_only", 7, "r/runs")
    command = gp.job_command(config, job)
    assert command.startswith(f"exec {sys.executable} -m lore.cli train --run-dir r/runs/MiniGrid-LavaGapS5-v0/rl_only/seed7 ")
    assert train_command_args(config, job.env, job.ablation, job.seed) in command
    assert command.endswith(">> r/runs/MiniGrid-LavaGapS5-v0/rl_only/seed7/train.log 2>&1")

    run = tmp_path / job.run_dir
    run.mkdir(parents=True)
    for name in ("eval.csv", "done", "checkpoint.pt", ".lock"):
        (run / name).write_text(name)
    archive = tmp_path / "out" / "runs.tar.gz"
    gp.write_archive([TrainJob(job.env, job.ablation, job.seed, str(tmp_path / "r/runs"))], archive)
    with tarfile.open(archive) as tar:
        names = sorted(Path(n).name for n in tar.getnames())
    assert names == ["done", "eval.csv"]


def test_trust_null_benchmark_replays_real_return_sequences_and_refuses_bad_folders(tmp_path, capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import trust_null_benchmark as tnb
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    runs = tmp_path / "runs"
    for seed in range(2):  # drifting returns, as a learning agent's are
        folder = runs / "arm" / f"seed{seed}"
        folder.mkdir(parents=True)
        rows = [f"{10 * i},{i},0,{0.02 * i + (i * 7 % 5) * 0.3:.3f},10,0" for i in range(60)]
        (folder / "episodes.csv").write_text("env_step,episode,env_index,return,length,success\n" + "\n".join(rows))
    (runs / "linked").symlink_to(runs / "arm")  # the same two runs through a link: read once
    (tmp_path / "baseline" / "seed0").mkdir(parents=True)  # a linked baseline run: read
    (tmp_path / "baseline" / "seed0" / "episodes.csv").write_text((runs / "arm" / "seed0" / "episodes.csv").read_text())
    (runs / "base").symlink_to(tmp_path / "baseline")
    (runs / "short" / "seed0").mkdir(parents=True)  # too short to be a sequence: left out
    (runs / "short" / "seed0" / "episodes.csv").write_text("env_step,episode,env_index,return,length,success\n0,0,0,1,1,0")
    assert [len(q) for q in tnb.read_returns(sorted(runs.rglob("episodes.csv")))] == [60, 60]
    out = tmp_path / "doc" / "trust_null.md"
    assert tnb.main(["--runs", "4", "--draws", "3", "--shift", "3", "--returns-from", str(runs), "--out", str(out)]) == 0
    text = out.read_text()
    assert f"## Real return sequences: {runs} (3 runs, 3 labellings each)" in text
    real = text.split("## Real return sequences")[1]
    rows = [line for line in real.splitlines() if line.startswith("| advised + 3 sd")]
    assert len(rows) == len(tnb.RULES) and all("| 1.00 |" in row for row in rows)  # 3 sd of help is always found
    assert "| null (labels at random) | prior.trust_familywise" in real
    # every rule reads the same episodes: the welch rule's statistic takes the comparison's four sums
    assert len(tnb.replay("welch", [0.0, 1.0] * 20, 0.0, 0, 0.25, tnb.PriorConfig())) == 40
    for bad, message in ((tmp_path / "missing", "not a directory"), (runs / "short", "no episodes.csv with at least 30")):
        with pytest.raises(SystemExit) as exc:
            tnb.main(["--runs", "2", "--returns-from", str(bad), "--out", str(tmp_path / "bad.md")])
        assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "bad.md").exists()
