"""The LLM-prior benchmark as an output of the workflow: config/benchmark.yaml (grid blocks,
results_root) and the benchmark_report rule.

Every Snakemake call runs with ``--directory <tmp>`` so the checkout's results/ and docs/ stay untouched.
"""

from __future__ import annotations

import re

import pytest
import yaml
from workflow_helpers import CONFIG_DIR, HANG_GUARD_S, REPO, job_counts, run_snakemake, write_config

from lore.grid.workflow import GridError, check_workflow_config

BENCHMARK = CONFIG_DIR / "benchmark.yaml"
DOORKEY, LAVAGAP = "MiniGrid-DoorKey-5x5-v0", "MiniGrid-LavaGapS5-v0"


def _benchmark() -> dict:
    return yaml.safe_load(BENCHMARK.read_text())


# --------------------------------------------------------------------------- config checks (fast)


def test_benchmark_grid_blocks_expand_to_exactly_its_runs():
    jobs = check_workflow_config(_benchmark(), environ={})
    expected = {(env, arm, seed) for env in (DOORKEY, LAVAGAP) for arm in ("rl_only", "full", "full_adversarial")
                for seed in range(5)}
    assert len(jobs) == len(expected) == 30
    assert {(job.env, job.ablation, job.seed) for job in jobs} == expected
    assert all(job.run_dir == f"results/bench/runs/{job.env}/{job.ablation}/seed{job.seed}" for job in jobs)




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
    proc = run_snakemake(workdir, "--cores", "1", configfile=configfile, timeout=HANG_GUARD_S)
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
    default = run_snakemake(tmp_path / "default", "-n", configfile=CONFIG_DIR / "test.yaml", timeout=HANG_GUARD_S)
    moved_config = write_config(tmp_path / "moved.yaml", results_root="elsewhere/test")
    moved = run_snakemake(tmp_path / "moved", "-n", configfile=moved_config, timeout=HANG_GUARD_S)
    assert default.returncode == 0 and moved.returncode == 0, default.stderr[-2000:] + moved.stderr[-2000:]
    default_paths = _planned_paths(default.stdout)
    moved_paths = _planned_paths(moved.stdout)
    assert len(default_paths) > 20
    # config/test.yaml's default root is results/test (its paper macros too): only config/config.yaml writes results/.
    assert all(p.startswith("results/test/") for p in default_paths), default_paths
    assert all(p.startswith("elsewhere/test/") for p in moved_paths), moved_paths
    relocated = {("elsewhere/test/" + p.removeprefix("results/test/")) for p in default_paths}
    assert relocated == set(moved_paths)


def test_benchmark_dry_run_plans_the_grid_and_the_report(tmp_path):
    proc = run_snakemake(tmp_path, "-n", configfile=BENCHMARK, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout) == {"train": 30, "aggregate": 1, "figures": 1, "paper_macros": 1,
                                       "benchmark_report": 1, "all": 1, "total": 35}
    paths = _planned_paths(proc.stdout)
    assert "docs/benchmark/figures/fig1_success.png" in paths and "docs/benchmark/README.md" in paths
    assert all(p.startswith(("results/bench/", "docs/benchmark/")) for p in paths), paths
    assert not (tmp_path / "results").exists()


def test_benchmark_workflow_lint_is_clean(tmp_path):
    proc = run_snakemake(tmp_path, "--lint", configfile=BENCHMARK, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_readme_shows_the_figure_the_benchmark_config_writes():
    readme = (REPO / "README.md").read_text()
    out = _benchmark()["benchmark_report"]["out"]
    assert f"]({out}/figures/fig1_success.png)" in readme
    assert "--configfile config/benchmark.yaml" in readme
