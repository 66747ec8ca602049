"""Hostile workflow configs: each is refused before any job, with one short line that names the key.

Most cases run the workflow's own check (lore.grid.workflow.checked_workflow_config, what
workflow/rules/common.smk calls) on a config file, in a scratch working directory; a handful go through
Snakemake itself. Every case: an error (non-zero exit), one line of at most MAX_MESSAGE_CHARS naming the key,
nothing written.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from workflow_helpers import CONFIG_DIR, HANG_GUARD_S, REPO, child_cpu_s, job_counts, run_snakemake

from lore.grid.workflow import (
    GRID_RECORD,
    MAX_MESSAGE_CHARS,
    GridError,
    check_grid_record,
    checked_workflow_config,
    write_grid_record,
)

MAIN = CONFIG_DIR / "config.yaml"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
DOORKEY = "MiniGrid-DoorKey-5x5-v0"
BASE = f"envs: [{DOORKEY}, crafter]\nablations: [rl_only, full]\nseeds: [0]\nrun: {{model.preset: debug}}\n"


def _bomb(level: str) -> str:
    """A YAML alias bomb: 9 ** 8 copies of ``level`` (a scalar, list or mapping) under one key."""
    lines = [f"a0: &a0 {level}"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return BASE + "\n".join(lines) + "\n"


# (case id, file content, what the message must contain)
LOADER_CASES = [
    ("duplicate top-level key", BASE + "seeds: [1]\n", "duplicate key 'seeds'"),
    ("duplicate nested key", BASE.replace("run: {model.preset: debug}", "run: {train.steps: 400, train.steps: 500}"),
     "duplicate key 'run.train.steps'"),
    ("duplicate key in a grid block",
     f"grid:\n  - envs: [{DOORKEY}]\n    ablations: [full]\n    ablations: [kl]\n    seeds: [0]\n",
     "duplicate key 'grid[0].ablations'"),
    ("duplicate resource", BASE + "resources:\n  default: {threads: 1, threads: 2}\n",
     "duplicate key 'resources.default.threads'"),
    ("alias bomb of lists", _bomb("[x, x, x, x, x, x, x, x, x]"), "values once its aliases are expanded"),
    ("alias bomb of mappings", _bomb("{a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"),
     "values once its aliases are expanded"),
    ("alias that contains itself", BASE + "loop: &loop [1, *loop]\n", "an alias that contains itself"),
    ("not UTF-8", BASE.encode() + b"paper: \xff\xfe\n", "not UTF-8"),
    ("top level is a list", "- envs\n- seeds\n", "top level must be a mapping"),
    ("top level is a scalar", "just a string\n", "top level must be a mapping"),
    ("empty file", "", "is empty"),
    ("tab indentation", BASE + "resources:\n\tdefault: {threads: 1}\n", "tab character"),
    ("integer of 5000 digits", BASE.replace("seeds: [0]", "seeds: [" + "9" * 5000 + "]"), "digits"),
]

SCHEMA_CASES = [
    ("seeds as a string", {"seeds": "0,1"}, "seeds: expected array, got str '0,1'"),
    ("envs as a string", {"envs": "crafter"}, "envs: expected array, got str 'crafter'"),
    ("run as a list", {"run": ["train.steps", 5]}, "run: expected object, got list"),
    ("threads as a string", {"resources": {"default": {"threads": "4"}}},
     "resources.default.threads: expected integer, got str '4'"),
    ("paper as a word", {"paper": "yes"}, "paper: expected boolean, got str 'yes'"),
    ("threshold as a word", {"analysis": {"threshold": "high"}}, "analysis.threshold: expected number"),
    ("results_root as a number", {"results_root": 5}, "results_root: expected string, got int 5"),
    ("overwrite as a word", {"overwrite": "maybe"}, "overwrite: expected boolean"),
    ("a seed that is a boolean", {"seeds": [True]}, "seeds[0]: expected integer, got bool True"),
    ("misspelt top-level key", {"analysys": {}}, "analysys: unknown key Did you mean 'analysis'?"),
    ("misspelt resource", {"resources": {"default": {"thread": 2}}},
     "resources.default.thread: unknown key Did you mean 'threads'?"),
    ("a 5000-digit seed as --config gives it", {"seeds": ["9" * 5000]}, "seeds[0]: expected integer, got str '999"),
    ("huge seed", {"seeds": [10**30]}, "seeds[0]: 1000000000000000000000000000000 is greater than the maximum"),
    ("huge memory", {"resources": {"default": {"mem_mb": 10**40}}}, "resources.default.mem_mb:"),
    ("huge resample count", {"analysis": {"resamples": 10**20}}, "analysis.resamples:"),
    ("a 200 kB list where a mapping goes", {"run": ["x"] * 50_000}, "run: expected object, got list"),
]

GRID_CASES = [
    ("misspelt env in env_run", {"env_run": {"crafterr": {"train.steps": 100}}},
     "env_run.crafterr: not an environment of the grid nor a registered one Did you mean 'crafter'?"),
    ("misspelt resources.default", {"resources": {"defualt": {"threads": 2}}},
     "resources.defualt: not an environment of the grid nor a registered one Did you mean 'default'?"),
    ("misspelt env in resources", {"resources": {"MiniGrid-DoorKey-5x5-v1": {"threads": 2}}},
     "resources.MiniGrid-DoorKey-5x5-v1: not an environment of the grid nor a registered one Did you mean 'MiniGrid-DoorKey-5x5-v0'?"),
    ("prior on without an advisor", {"run": {"prior.enabled": True}},
     "prior.enabled: true needs advice, but llm.backend is 'none' (ablation rl_only"),
    ("features on without an advisor", {"env_run": {"crafter": {"features.enabled": True}}},
     "env_run.crafter: features.enabled: true needs advice"),
    ("planning on without an advisor", {"run": {"plan.enabled": True}}, "plan.enabled: true needs advice"),
    ("base_url without a scheme", {"run": {"llm.base_url": "localhost:8080"}},
     "llm.base_url: 'localhost:8080': the scheme must be http or https"),
    ("base_url with a blank", {"run": {"llm.base_url": "http://exa mple.com/v1"}}, "llm.base_url:"),
    ("base_url with a bad port", {"run": {"llm.base_url": "https://example.com:99999"}}, "llm.base_url:"),
    ("huge step count", {"run": {"train.steps": 10**30}}, "train.steps must be in"),
    ("a 100 kB environment name", {"envs": ["x" * 100_000]}, "envs[0]: unknown environment 'xxx"),
    ("a 100 kB run value", {"run": {"env.obs": "x" * 100_000}}, "env.obs: 'xxx"),
]


def _refusal(tmp_path: Path, monkeypatch, content: str | bytes) -> str:
    """The one-line refusal of a config file with ``content`` (checked in ``tmp_path``, which stays empty)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "hostile.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    try:  # the dict Snakemake hands the workflow, as far as it can read the file
        config = yaml.safe_load(path.read_bytes().decode("utf-8", "replace"))
    except (yaml.YAMLError, ValueError):
        config = None
    config = config if isinstance(config, dict) else {}
    start = time.process_time()  # CPU time: a busy machine does not make it grow
    with pytest.raises(GridError) as err:
        checked_workflow_config(config, [path], MAIN, SCHEMA)
    assert time.process_time() - start < 2.0
    message = str(err.value)
    assert "\n" not in message and len(message) <= MAX_MESSAGE_CHARS, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.yaml"], "the check wrote something"
    return message


@pytest.mark.parametrize(("content", "needle"), [case[1:] for case in LOADER_CASES],
                         ids=[case[0] for case in LOADER_CASES])
def test_a_config_file_that_is_not_a_plain_mapping_is_refused_naming_the_file(tmp_path, monkeypatch, content,
                                                                                needle):
    message = _refusal(tmp_path, monkeypatch, content)
    assert needle in message and "hostile.yaml" in message, message


@pytest.mark.parametrize(("change", "needle"), [case[1:] for case in SCHEMA_CASES + GRID_CASES],
                         ids=[case[0] for case in SCHEMA_CASES + GRID_CASES])
def test_a_wrong_value_is_refused_naming_the_key(tmp_path, monkeypatch, change, needle):
    config = {**yaml.safe_load(BASE), **change}
    message = _refusal(tmp_path, monkeypatch, yaml.safe_dump(config))
    assert needle in message, message


def test_settings_for_a_registered_env_outside_the_grid_are_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {**yaml.safe_load(BASE), "env_run": {"MiniGrid-LavaGapS5-v0": {"train.steps": 100}},
              "resources": {"crafter": {"threads": 2}}}
    assert checked_workflow_config(config, [], MAIN, SCHEMA)


def test_the_corpus_covers_every_category():
    assert len(LOADER_CASES) + len(SCHEMA_CASES) + len(GRID_CASES) >= 20
    assert len(LOADER_CASES) >= 10 and len(SCHEMA_CASES) >= 10 and len(GRID_CASES) >= 10


def test_the_shipped_configs_pass_the_whole_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no results folder here: no grid record to compare with
    for name in ("config.yaml", "test.yaml", "paper.yaml", "benchmark.yaml"):
        path = CONFIG_DIR / name
        config = yaml.safe_load(path.read_text())
        assert checked_workflow_config(config, [path], MAIN, SCHEMA), name
        expected = {"config.yaml": "results", "benchmark.yaml": "results/bench"}.get(name, f"results/{path.stem}")
        assert config["results_root"] == expected


# --------------------------------------------------------------------------- grids that would overwrite each other


def _grid(tmp_path: Path, **changes) -> dict:
    config = {**yaml.safe_load(BASE), "results_root": str(tmp_path / "shared"), **changes}
    checked = checked_workflow_config(dict(config), [], MAIN, SCHEMA)
    assert checked
    return config


def test_a_recorded_grid_refuses_another_one_but_not_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = _grid(tmp_path)
    write_grid_record(first)
    check_grid_record(first)  # the same grid again: fine
    cases = [({"seeds": [0, 1]}, "4 runs added, 0 dropped"),
             ({"run": {"model.preset": "debug", "train.steps": 500}}, "the run settings of"),
             ({"llm_backend": "replay"}, "the run settings of")]
    for change, what in cases:
        other = {**first, **change}
        with pytest.raises(GridError) as err:
            check_grid_record(other)
        message = str(err.value)
        assert what in message and "--config results_root=results/<name>" in message, message
        assert "--config overwrite=true" in message and len(message) <= MAX_MESSAGE_CHARS
        check_grid_record({**other, "overwrite": True})
        check_grid_record({**other, "results_root": str(tmp_path / "own")})  # a folder of its own


def test_a_damaged_grid_record_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _grid(tmp_path)
    record = Path(config["results_root"]) / GRID_RECORD
    record.parent.mkdir(parents=True)
    record.write_bytes(b"\xff not json")
    with pytest.raises(GridError, match="is not a grid record"):
        check_grid_record(config)


# --------------------------------------------------------------------------- through Snakemake (seconds each)


def _snakemake_refusal(tmp_path: Path, content: str | bytes, *args: str) -> str:
    path = tmp_path / "hostile.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    workdir = tmp_path / "work"
    start = child_cpu_s()
    proc = run_snakemake(workdir, "-n", *args, configfile=path, timeout=HANG_GUARD_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-2000:]
    assert child_cpu_s() - start < 60
    assert not (workdir / "results").exists() and "Job stats" not in output, "jobs were planned"
    return output


@pytest.mark.parametrize(("content", "needle"), [
    (BASE + "seeds: [1]\n", "duplicate key 'seeds' (line 5)"),
    (_bomb("[x, x, x, x, x, x, x, x, x]"), "values once its aliases are expanded"),
    (BASE + "env_run:\n  crafterr: {train.steps: 100}\n", "env_run.crafterr: not an environment of the grid"),
    (BASE.replace("run: {model.preset: debug}", "run: {model.preset: debug, prior.enabled: true}"),
     "prior.enabled: true needs advice"),
], ids=["duplicate key", "alias bomb", "misspelt env", "prior without advisor"])
def test_snakemake_refuses_with_one_short_line(tmp_path, content, needle):
    output = _snakemake_refusal(tmp_path, content)
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1 and lines[0].startswith("invalid workflow config:"), output[-2000:]
    assert len(lines[0]) <= MAX_MESSAGE_CHARS + len("invalid workflow config: ")
    assert len(output) < 2000, f"{len(output)} characters of output"


def test_snakemake_refuses_bytes_that_are_not_utf8_before_reading_the_workflow(tmp_path):
    """Snakemake reads --configfile itself before the Snakefile: a file that is not UTF-8 fails there."""
    output = _snakemake_refusal(tmp_path, BASE.encode() + b"paper: \xff\n")
    assert "UnicodeDecodeError" in output or "utf-8" in output.lower(), output[-2000:]


def test_two_grids_never_write_one_results_folder(tmp_path):
    """The first real run records its grid (a dry run records nothing); another grid is refused from that
    folder unless it says overwrite=true, and the recorded grid itself is planned as before."""
    workdir = tmp_path / "work"
    one = tmp_path / "one.yaml"
    one.write_text(f"envs: [{DOORKEY}]\nablations: [rl_only]\nseeds: [0]\npaper: false\nresults_root: results/x\n")
    two = tmp_path / "two.yaml"
    two.write_text(one.read_text().replace("seeds: [0]", "seeds: [0, 1]"))
    record = workdir / "results" / "x" / GRID_RECORD

    dry = run_snakemake(workdir, "-n", configfile=one, timeout=HANG_GUARD_S)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert not record.exists(), "a dry run recorded its grid"
    touched = run_snakemake(workdir, "--cores", "1", "--touch", configfile=one, timeout=HANG_GUARD_S)
    assert touched.returncode == 0, touched.stderr[-2000:]
    assert record.is_file(), "the run did not record its grid"

    refused = run_snakemake(workdir, "-n", configfile=two, timeout=HANG_GUARD_S)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "results_root: results/x holds another grid" in output
    assert "--config results_root=results/<name>" in output and "Job stats" not in output
    forced = run_snakemake(workdir, "-n", "--config", "overwrite=true", configfile=two, timeout=HANG_GUARD_S)
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert job_counts(forced.stdout)["train"] == 2  # --touch creates no missing output: both runs are planned
    elsewhere = run_snakemake(workdir, "-n", "--config", "results_root=results/y", configfile=two, timeout=HANG_GUARD_S)
    assert elsewhere.returncode == 0 and job_counts(elsewhere.stdout)["train"] == 2, elsewhere.stderr[-2000:]
    again = run_snakemake(workdir, "-n", configfile=one, timeout=HANG_GUARD_S)
    assert again.returncode == 0, again.stderr[-2000:]
