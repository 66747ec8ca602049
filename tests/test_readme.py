"""The README speaks for the project: its commands are the ones CI and the workflow run, its numbers are
generated, its links resolve, and the guides it links work as written."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from workflow_helpers import CONFIG_DIR, HANG_GUARD_S, REPO, job_counts, run_snakemake

from lore.paper import readme as rd

README = REPO / "README.md"


def _code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _commands(text: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for block in _code_blocks(text, "bash") for line in block.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_the_readme_is_short_and_reaches_the_install_early():
    lines = README.read_text().splitlines()
    assert len(lines) <= 180
    install = next(i for i, line in enumerate(lines, 1) if "./scripts/setup.sh" in line)
    assert install <= 40


def test_ci_runs_exactly_the_readmes_test_command():
    commands = _commands(README.read_text())
    test_command = next(c for c in commands if "pytest" in c and "setup.sh" in c)
    ci = (REPO / ".ci" / "run").read_text()
    assert test_command in ci


def test_the_quick_start_comes_first_and_needs_no_system_packages_nor_tex():
    quick = next(c for c in _commands(README.read_text()) if "snakemake" in c and "setup.sh" in c)
    assert "./scripts/setup.sh --no-system &&" in quick and "--config paper=false" in quick
    assert README.read_text().index("## Quick start") < README.read_text().index("## Install and run")


def test_the_readmes_main_job_command_plans_the_main_job(tmp_path):
    command = next(c for c in _commands(README.read_text()) if "snakemake" in c and "setup.sh" in c and "--profile" in c)
    args = shlex.split(command.split("&&", 1)[1])[1:]  # after `.venv/bin/snakemake`
    assert "--configfile" not in args  # the default config
    args = [a if a != "workflow/profiles/default" else str(REPO / a) for a in args]
    proc = run_snakemake(tmp_path, "-n", *args, configfile=CONFIG_DIR / "config.yaml", timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = yaml.safe_load((CONFIG_DIR / "config.yaml").read_text())
    runs = len(config["envs"]) * len(config["ablations"]) * len(config["seeds"])
    assert job_counts(proc.stdout)["train"] == runs


def test_every_config_and_experiment_the_readme_runs_exists():
    text = README.read_text()
    for path in re.findall(r"--configfile ([\w/.-]+\.yaml)", text):
        assert (REPO / path).is_file(), path
    for name in re.findall(r"--config experiment=(\w+)", text):
        assert (REPO / "config" / "experiments" / f"{name}.yaml").is_file(), name


def test_every_relative_link_of_the_readme_and_the_guides_resolves():
    for doc in [README, *sorted((REPO / "docs").glob("*.md")), REPO / "config" / "README.md"]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if not target.startswith("http"):
                assert (doc.parent / target).exists(), f"{doc.name}: {target}"


def test_the_headline_table_is_generated_from_the_benchmark_summary():
    text = README.read_text()
    assert rd.with_block(text, rd.HEADLINE, rd.headline_table(REPO / "docs" / "benchmark" / "summary.csv")) == text, \
        "README's headline table is stale: python -m lore.paper.readme"
    start, end = rd.markers(rd.HEADLINE)
    block = text.split(start, 1)[1].split(end, 1)[0]
    assert block.count("\n| ") >= 4 and "[" in block  # rows with CIs


def test_the_headline_refuses_a_summary_without_its_columns(tmp_path):
    bad = tmp_path / "summary.csv"
    bad.write_text("env,arm\nx,full\n")
    proc = subprocess.run([sys.executable, "-m", "lore.paper.readme", "--summary", str(bad), "--readme",
                           str(README), "--check"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 2 and "auc_mean" in proc.stderr and "\n" not in proc.stderr.strip()


def test_the_speed_paragraph_is_generated_from_the_peer_benchmark():
    text = README.read_text()
    peer = REPO / "docs" / "benchmark" / "peer.json"
    assert rd.with_block(text, rd.SPEED, rd.speed_text(peer)) == text, \
        "README's speed paragraph is stale: python -m lore.paper.readme"
    data = json.loads(peer.read_text())
    xs = next(r for r in data["rows"] if r["size"] == "xs")
    assert f"{xs['cpu_ms']['full/peer'][1]:.2f}x" in text and data["meta"]["when"] in text


def test_the_speed_paragraph_refuses_a_result_without_the_size(tmp_path):
    bad = tmp_path / "peer.json"
    bad.write_text(json.dumps({"meta": {"when": "2026-01-01"}, "rows": [{"size": "s"}]}))
    proc = subprocess.run([sys.executable, "-m", "lore.paper.readme", "--peer", str(bad), "--readme", str(README),
                           "--check"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 2 and "size xs" in proc.stderr and "\n" not in proc.stderr.strip()


# --------------------------------------------------------------------------- the guides, tried


def test_the_new_family_in_the_environment_guide_runs():
    code = _code_blocks((REPO / "docs" / "adding_an_environment.md").read_text(), "python")[0]
    namespace: dict = {}
    exec(compile(code, "adding_an_environment.md", "exec"), namespace)  # noqa: S102 - the guide's own code
    env = namespace["CorridorEnv"]()
    obs, _ = env.reset()
    assert env.observation_space.contains(obs)
    steps = 0
    done = False
    while not done:
        obs, reward, done, _, info = env.step(1)
        steps += 1
    assert steps == 4 and reward == 1.0 and info["success"] and env.describe() and env.state_key() == "4"


def test_the_minigrid_id_in_the_environment_guide_is_a_valid_grid():
    from lore.grid.workflow import check_workflow_config

    block = yaml.safe_load(_code_blocks((REPO / "docs" / "adding_an_environment.md").read_text(), "yaml")[0])
    config = {**yaml.safe_load((CONFIG_DIR / "config.yaml").read_text()), **block}
    jobs = check_workflow_config(config, environ={})
    assert {job.env for job in jobs} == set(block["envs"]) and len(jobs) == 2 * 5


def test_the_ablation_in_the_guide_is_accepted_everywhere(monkeypatch):
    from lore import ablations
    from lore.config import build_config

    code = _code_blocks((REPO / "docs" / "adding_an_ablation.md").read_text(), "python")[0]
    table = dict(ablations.ABLATIONS)
    monkeypatch.setattr(ablations, "ABLATIONS", table)
    exec(compile(code, "adding_an_ablation.md", "exec"), {"ABLATIONS": table, "_KL": ablations._KL})  # noqa: S102
    cfg = build_config(None, [], "kl_trust")
    assert cfg.prior.trust is True and cfg.prior.gate == "fixed"


def test_the_experiment_in_the_guide_is_a_valid_declaration(tmp_path):
    import shutil

    from lore.experiments.declaration import load_declaration
    from lore.experiments.plan import plan

    text = _code_blocks((REPO / "docs" / "experiments_guide.md").read_text(), "yaml")[0]
    root = tmp_path / "project"
    shutil.copytree(CONFIG_DIR, root / "config", ignore=shutil.ignore_patterns("experiments"))
    (root / "config" / "experiments").mkdir()
    (root / "config" / "experiments" / "beta_half.yaml").write_text(text)
    decl = load_declaration("beta_half", root)
    runs = plan(decl, root)
    # 2 arms and their 2 benchmark arms, on 2 envs, 5 seeds
    assert len(runs) == 4 * 2 * 5
    assert {r.arm for r in runs} == {"full", "full_adversarial", "baseline:full", "baseline:full_adversarial"}


@pytest.mark.parametrize("doc", ["experiments_guide.md", "adding_an_ablation.md", "adding_an_environment.md"])
def test_the_guides_are_linked_from_the_readme(doc):
    assert f"(docs/{doc})" in README.read_text()
