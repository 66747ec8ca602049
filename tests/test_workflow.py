"""The Snakemake workflow: config validation, the planned DAG, and (slow) end-to-end runs.

Every Snakemake call runs with ``--directory <tmp>`` so the checkout's results/ stay untouched.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import (
    CONFIG_DIR,
    HANG_GUARD_S,
    REPO,
    child_cpu_s,
    fake_sbatch_calls,
    fake_slurm,
    have_latex,
    job_counts,
    job_env,
    path_without,
    pdf_text,
    run_snakemake,
    snakemake_cmd,
    write_config,
)

from lore.grid.workflow import (
    CRAFTER_ENV_NAMES,
    GridError,
    check_workflow_config,
    run_overrides,
    train_command_args,
)

TEST_CONFIG = CONFIG_DIR / "test.yaml"


def _config(name: str = "test.yaml") -> dict:
    return yaml.safe_load((CONFIG_DIR / name).read_text())


# --------------------------------------------------------------------------- config checks (fast)


def test_crafter_names_match_the_environment_package():
    from lore.envs.crafter import CRAFTER_NAMES

    assert set(CRAFTER_ENV_NAMES) == set(CRAFTER_NAMES)


def test_seeds_given_on_the_command_line_are_accepted(tmp_path):
    """`snakemake --config seeds=[0,1,2]` hands the workflow strings; they plan as integer seeds."""
    proc = run_snakemake(tmp_path, "-n", "--config", "seeds=[0,1,2]", configfile=TEST_CONFIG, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = _config("test.yaml")
    assert job_counts(proc.stdout + proc.stderr)["train"] == len(config["envs"]) * len(config["ablations"]) * 3
    bad = run_snakemake(tmp_path, "-n", "--config", "seeds=[0,x]", configfile=TEST_CONFIG, timeout=HANG_GUARD_S)
    assert bad.returncode != 0 and "seeds" in (bad.stdout + bad.stderr)


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml", "test.yaml"])
def test_shipped_configs_are_valid(name):
    config = _config(name)
    jobs = check_workflow_config(config, environ={})
    assert len(jobs) == len(config["envs"]) * len(config["ablations"]) * len(config["seeds"])
    assert len({j.run_dir for j in jobs}) == len(jobs)


def test_paper_grid_covers_every_ablation_and_advisor_arm():
    from lore.ablations import ABLATIONS

    config = _config("paper.yaml")
    assert set(config["ablations"]) == set(ABLATIONS)
    assert {"full", "full_noisy", "full_adversarial"} <= set(config["ablations"])
    assert len(config["seeds"]) >= 5 and set(config["envs"]) == {"MiniGrid-DoorKey-5x5-v0", "crafter"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"ablations": ["rl_only", "fulll"]}, "ablations[1]: unknown ablation 'fulll'"),
        ({"envs": ["MiniGrid-DoorKey-5x6-v0"]}, "envs[0]: unknown environment"),
        ({"seeds": []}, "seeds: must be a non-empty list"),
        ({"seeds": [0, "one"]}, "seeds[1]: expected a non-negative integer"),
        ({"seeds": [1, 1]}, "seeds[1]: 1 is listed twice"),
        ({"run": {"train.steps": "lots"}}, "run: train.steps: expected an integer"),
        ({"run": {"train.stepz": 5}}, "unknown config key 'train.stepz'"),
        ({"run": {"seed": 3}}, "run.seed: set by the workflow"),
        ({"env_run": {"MiniGrid-DoorKey-5x5-v0": {"llm.backend": "none"}}}, "env_run.MiniGrid-DoorKey-5x5-v0.llm.backend"),
        ({"analysis": {"budgets": [0]}}, "analysis.budgets"),
        ({"llm_backend": "gemini"}, "GEMINI_API_KEY"),
        ({"run": {"llm.cache_path": "cache.sqlite"}}, "run.llm.cache_path: set by the workflow from `llm_cache.per_run`"),
        ({"run": {"llm.shared_cache": "cache.sqlite"}}, "run.llm.shared_cache: set by the workflow"),
        ({"llm_cache": {"shared": "/no/such/cache.sqlite"}}, "llm_cache.shared: /no/such/cache.sqlite is not a file"),
        ({"llm_cache": {"per_run": "yes"}}, "llm_cache.per_run: expected true or false"),
        ({"llm_cache": {"scope": "run"}}, "llm_cache.scope: unknown key"),
        ({"resources": {"default": {"slurm_extra": "--qos=long --constraint=a100"}}},
         "resources.default.slurm_extra: --qos is set by the SLURM executor plugin (which rejects it here); "
         "use resources.default.qos instead"),
        ({"resources": {"crafter": {"slurm_extra": "-C a100"}}}, "use resources.crafter.constraint instead"),
        ({"resources": {"default": {"slurm_extra": "--signal=USR1@60"}}}, "use resources.default.term_before_end_s"),
        ({"resources": {"default": {"gres": "gpu:a100:1", "gpu": 1}}}, "resources.default.gres: 'gpu:a100:1' requests GPUs"),
    ],
)
def test_invalid_config_names_the_field(change, field):
    config = {**_config(), **change}
    with pytest.raises(GridError) as err:
        check_workflow_config(config, environ={})
    assert field in str(err.value)


@pytest.mark.parametrize("fault", ["build", "reset"])
def test_an_env_that_cannot_run_here_fails_the_grid_check(broken_minigrid_ids, fault):
    config = {**_config(), "envs": [broken_minigrid_ids[fault]], "env_run": None}
    with pytest.raises(GridError) as err:
        check_workflow_config(config, environ={})
    assert str(err.value).startswith(f"envs: {broken_minigrid_ids[fault]} cannot be")


def test_gemini_backend_accepted_with_a_key_and_never_applied_to_rl_only():
    config = {**_config(), "llm_backend": "gemini"}
    check_workflow_config(config, environ={"GEMINI_API_KEY": "test-key"})
    assert run_overrides(config, "MiniGrid-DoorKey-5x5-v0", "full")["llm.backend"] == "gemini"
    assert "llm.backend" not in run_overrides(config, "MiniGrid-DoorKey-5x5-v0", "rl_only")


def test_train_arguments_resolve_to_the_configured_run():
    from lore.cli import _config_from_args, build_parser

    config = _config("paper.yaml")
    args = train_command_args(config, "crafter", "full_noisy", 4)
    parsed = build_parser().parse_args(["train", "--run-dir", "x", *__import__("shlex").split(args)])
    cfg = _config_from_args(parsed)
    assert (cfg.env.name, cfg.ablation, cfg.seed) == ("crafter", "full_noisy", 4)
    assert cfg.train.steps == config["env_run"]["crafter"]["train.steps"]
    assert cfg.advisor.mode == "noisy" and cfg.model.preset == "m"


# --------------------------------------------------------------------------- Snakemake (seconds)


def test_paper_grid_dry_run_plans_every_training_job(tmp_path):
    config = _config("paper.yaml")
    start = child_cpu_s()
    proc = run_snakemake(tmp_path, "-n", configfile=CONFIG_DIR / "paper.yaml", timeout=HANG_GUARD_S)
    cpu = child_cpu_s() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = job_counts(proc.stdout + proc.stderr)
    n_runs = len(config["envs"]) * len(config["ablations"]) * len(config["seeds"])
    assert n_runs == 144
    assert counts == {"train": n_runs, "aggregate": 1, "figures": 1, "paper_macros": 1, "paper": 1, "all": 1,
                      "total": n_runs + 5}
    assert cpu < 60, f"dry run took {cpu:.1f} s of CPU"
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ablations": ["rl_only", "bogus"]}, "ablations[1]: unknown ablation 'bogus'"),
        ({"seeds": []}, "seeds: [] should be non-empty"),
        ({"seeds": [0, "one"]}, "seeds[1]: expected integer, got str 'one'"),
        ({"envs": ["MiniGrid-NoSuchEnv-v0"]}, "envs[0]: unknown environment 'MiniGrid-NoSuchEnv-v0'"),
        ({"run": {"train.steps": "lots"}}, "train.steps: expected an integer"),
    ],
)
def test_snakemake_rejects_invalid_config_before_any_job(tmp_path, change, message):
    configfile = write_config(tmp_path / "bad.yaml", **change)
    workdir = tmp_path / "work"
    proc = run_snakemake(workdir, "--cores", "1", configfile=configfile, timeout=HANG_GUARD_S)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert not (workdir / "results").exists(), "a job ran despite the invalid config"


def test_workflow_lint_is_clean(tmp_path):
    proc = run_snakemake(tmp_path, "--lint", configfile=TEST_CONFIG, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


# --------------------------------------------------------------------------- SLURM submission (seconds)

SLURM_PROFILE = REPO / "workflow" / "profiles" / "slurm"


def _one_run_config(tmp_path: Path, ablation: str = "full", **resources) -> tuple[Path, str]:
    """config/test.yaml cut to one run (and extra `resources.default`); returns it and the run's `done`
    (under results/one: a config file other than config/config.yaml writes to results/<its name>)."""
    config = _config()
    config.update(ablations=[ablation], seeds=[0], paper=False)
    config["resources"]["default"].update(resources)
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, f"results/one/runs/{config['envs'][0]}/{ablation}/seed0/done"


def _submit_with_fake_slurm(tmp_path: Path, state: str, retries: int, **resources):
    configfile, target = _one_run_config(tmp_path, **resources)
    proc = run_snakemake(tmp_path / "work", "--profile", str(SLURM_PROFILE), "--retries", str(retries),
                         "--slurm-init-seconds-before-status-checks", "1", "--latency-wait", "1", target,
                         configfile=configfile, timeout=HANG_GUARD_S, env=fake_slurm(tmp_path / "slurm", state))
    return proc, fake_sbatch_calls(tmp_path / "slurm")


def test_sbatch_call_carries_qos_constraint_gres_and_the_early_term_signal(tmp_path):
    """The `resources.<env>` keys reach sbatch as the executor plugin's own options (it rejects
    them inside slurm_extra), and every training job is requeueable and warned before its time limit."""
    proc, calls = _submit_with_fake_slurm(tmp_path, "FAILED", retries=0, qos="long", constraint="a100|h100",
                                          gres="tmpdisk:10G", term_before_end_s=120, slurm_extra="--nice=10")
    output = proc.stdout + proc.stderr
    assert len(calls) == 1, output[-3000:]
    argv = calls[0]
    assert "--qos=long" in argv, argv
    assert argv[argv.index("-C") + 1] == "a100|h100", argv
    assert "--gres=tmpdisk:10G" in argv and "--nice=10" in argv, argv
    assert "--signal=TERM@120" in argv, argv  # lore train checkpoints 2 min before the time limit
    assert "--requeue" in argv, argv  # the profile's slurm-requeue: preempted jobs go back to the queue
    assert argv[argv.index("-t") + 1] == "20" and argv[argv.index("--mem") + 1] == "2000", argv
    assert proc.returncode != 0  # the stand-in squeue reports the job FAILED


def test_the_early_term_signal_leaves_short_jobs_time_to_train():
    from lore.grid.workflow import env_resources, train_slurm_extra

    assert env_resources({}, "x")["term_before_end_s"] == 300
    assert train_slurm_extra({"term_before_end_s": 300}, runtime_min=60) == "--signal=TERM@300"
    assert train_slurm_extra({"term_before_end_s": 300, "slurm_extra": "--nice=10"}, runtime_min=4) == \
        "--nice=10 --signal=TERM@120"  # at most half the time limit
    assert train_slurm_extra({"term_before_end_s": 0}, runtime_min=60) is None


def test_a_preempted_slurm_job_is_resubmitted_instead_of_waited_for(tmp_path):
    """PREEMPTED (cancelled by preemption) is terminal; the plugin alone would wait for it forever.
    workflow/rules/slurm.smk reports it as failed, so Snakemake resubmits it (`retries`)."""
    try:
        proc, calls = _submit_with_fake_slurm(tmp_path, "PREEMPTED", retries=1)
    except subprocess.TimeoutExpired:
        pytest.fail("the workflow waited for a preempted job instead of resubmitting it")
    output = proc.stdout + proc.stderr
    assert len(calls) == 2, f"expected the job and one resubmission:\n{output[-3000:]}"
    assert "was preempted" in output and "Reporting it as failed" in output, output[-3000:]
    assert proc.returncode != 0  # the stand-in preempts every attempt


# --------------------------------------------------------------------------- DAG inputs (seconds)


def _planned_inputs(dry_run_output: str) -> dict[str, list[list[str]]]:
    """{rule: [inputs of each planned job]} from a dry run's job listing."""
    jobs: dict[str, list[list[str]]] = {}
    rule = None
    for line in dry_run_output.splitlines():
        if line.startswith(("rule ", "localrule ")) and line.rstrip().endswith(":"):
            rule = line.split()[1].rstrip(":")
            jobs.setdefault(rule, []).append([])
        elif rule and line.strip().startswith("input:"):
            jobs[rule][-1] = [x.strip() for x in line.split("input:", 1)[1].split(",")]
    return jobs


def test_shared_llm_cache_is_an_input_of_the_llm_runs_only(tmp_path):
    from lore.llm.cache import AdviceCache

    shared = tmp_path / "shared.sqlite"
    AdviceCache(shared).close()
    configfile = write_config(tmp_path / "shared.yaml", llm_cache={"shared": str(shared)})
    proc = run_snakemake(tmp_path / "work", "-n", "-p", configfile=configfile, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    train = _planned_inputs(output)["train"]
    with_cache = [inputs for inputs in train if str(shared) in inputs]
    envs = _config()["envs"]
    n_llm = len(envs) * 2  # full x 2 seeds per env; rl_only never asks an LLM
    assert len(with_cache) == n_llm and len(train) == 2 * n_llm, train
    for env in envs:
        for seed in (0, 1):  # each run writes only its own cache, inside its run directory
            assert f"llm.cache_path=\"results/shared/runs/{env}/full/seed{seed}/llm_cache.sqlite\"" in output
    assert output.count(f"llm.shared_cache=\"{shared}\"") == n_llm


def _copy_workflow(dest: Path) -> Path:
    """The Snakefile, workflow/, paper sources and lore/*.py copied to ``dest``: the rules take their
    code inputs from the Snakefile's folder, so the copy's mtimes can be set freely."""
    import shutil

    shutil.copy2(REPO / "Snakefile", dest / "Snakefile")
    shutil.copytree(REPO / "workflow", dest / "workflow")
    shutil.copytree(REPO / "paper", dest / "paper", ignore=shutil.ignore_patterns("generated", "figures", "build"))
    shutil.copytree(REPO / "lore", dest / "lore", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "Snakefile"


def test_analysis_rules_declare_the_code_their_commands_load(tmp_path):
    # the test grid with the benchmark report (config/benchmark.yaml's rule) on top
    configfile = write_config(tmp_path / "with_report.yaml", benchmark_report={"out": "report"})
    proc = run_snakemake(tmp_path / "work", "-n", configfile=configfile, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = _planned_inputs(proc.stdout + proc.stderr)
    entry = {"aggregate": ["report.cli", "report.aggregate", "report.latex", "report.runs"],
             "figures": ["report.cli", "report.aggregate", "report.figures", "report.runs"],
             "paper_macros": ["paper.cli", "report.aggregate", "paper.build"], "paper": ["paper.cli", "paper.build"],
             "benchmark_report": ["report.cli", "report.benchmark_report"]}
    for rule, modules in entry.items():
        code = {Path(p).relative_to(REPO).as_posix() for p in planned[rule][0] if p.endswith(".py")}
        script = ("import importlib, sys\n"
                  f"for m in {[f'lore.{m}' for m in modules]}: "
                  "importlib.import_module(m)\n"
                  "print(' '.join(m.__file__ for n, m in sys.modules.items() if n.startswith('lore.')))")
        loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                                cwd=REPO).stdout.split()
        loaded = {Path(p).relative_to(REPO).as_posix() for p in loaded if not p.endswith("__init__.py")}
        assert loaded <= code, f"rule {rule} does not declare {sorted(loaded - code)}"
        assert all((REPO / p).is_file() for p in code)


def test_editing_analysis_code_reruns_the_rules_that_run_it(tmp_path):
    snakefile = _copy_workflow(tmp_path)
    workdir = tmp_path / "work"
    workdir.mkdir()
    base = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "--directory", str(workdir),
            "--configfile", str(TEST_CONFIG), "-n"]
    first = subprocess.run(base, capture_output=True, text=True, timeout=HANG_GUARD_S, env=job_env())
    assert first.returncode == 0, first.stderr[-3000:]
    outputs = []
    for line in (first.stdout + first.stderr).splitlines():
        if line.strip().startswith("output:"):
            outputs += [x.strip() for x in line.split("output:", 1)[1].split(",")]
    now = time.time()
    for code in (tmp_path / "lore").rglob("*.py"):  # all code older than all outputs
        os.utime(code, (now - 3600, now - 3600))
    for out in outputs:  # every output exists, built an hour after the code
        path = workdir / out
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        os.utime(path, (now - 60, now - 60))

    def planned_after_editing(name: str) -> set[str]:
        os.utime(tmp_path / "lore" / name, (now, now))
        try:
            proc = subprocess.run(base, capture_output=True, text=True, timeout=HANG_GUARD_S, env=job_env())
        finally:
            os.utime(tmp_path / "lore" / name, (now - 3600, now - 3600))
        assert proc.returncode == 0, proc.stderr[-3000:]
        if "Nothing to be done" in proc.stdout + proc.stderr:
            return set()
        return set(job_counts(proc.stdout + proc.stderr)) - {"total", "all"}

    assert planned_after_editing("grid/workflow.py") == set()  # the workflow's own helper: no analysis rule
    assert planned_after_editing("report/figures.py") == {"figures", "paper_macros", "paper"}
    assert planned_after_editing("report/stats.py") == {"aggregate", "figures", "paper_macros", "paper"}
    assert planned_after_editing("paper/build.py") == {"paper_macros", "paper"}


# --------------------------------------------------------------------------- end to end (minutes)


def _stats_numbers(stats_csv: Path) -> list[str]:
    """Formatted IQM values of the statistics table, as the paper prints them (per environment: the
    rows pooling the environments, env == "all", are not in the success-rate tables)."""
    from lore.report.aggregate import ALL_ENVS
    from lore.report.latex import formatter_for

    stats = pd.read_csv(stats_csv)
    numbers = []
    for row in stats[stats["env"] != ALL_ENVS].itertuples():
        if row.metric == "final_sr" or row.metric.startswith("sr@"):
            if not math.isnan(row.iqm):
                numbers.append(formatter_for(row.metric)(row.iqm))
    return numbers


TEX_PROGRAMS = ("pdflatex", "latexmk", "pdftex", "latex", "lualatex", "xelatex")


def _quick_start() -> tuple[list[str], list[str]]:
    """The README's quick start: the Snakemake arguments of its command, and the outputs it names."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    command = next(line for line in section.splitlines() if "setup.sh --no-system" in line and "snakemake" in line)
    args = shlex.split(command.split("&&", 1)[1])[1:]  # after `.venv/bin/snakemake`
    args = [str(REPO / a) if (REPO / a).is_file() else a for a in args]
    return args, re.findall(r"`(results/[^`]+)`", section)


@pytest.mark.slow
def test_the_readmes_quick_start_runs_without_tex(tmp_path):
    """The README's quick start, as written, where no TeX is installed: it exits 0 and writes the outputs the
    README names; the report builds. With TeX, the same runs then give the paper, which quotes stats.csv."""
    args, named = _quick_start()
    assert "paper=false" in args and named
    no_tex = {"PATH": path_without(TEX_PROGRAMS, tmp_path / "no-tex")}
    assert shutil.which("pdflatex", path=no_tex["PATH"]) is None and shutil.which("lore", path=no_tex["PATH"])
    work = tmp_path / "work"
    proc = run_snakemake(work, *args, env=no_tex)
    assert proc.returncode == 0, proc.stderr[-5000:]
    for path in named:
        assert list(work.glob(re.sub(r"<[^>]+>", "*", path))), f"the README names {path}; not written"
    config = _config()
    results = work / "results" / "test"  # config/test.yaml's default results_root
    runs = results / "runs" / config["envs"][0]
    for ablation in config["ablations"]:
        for seed in config["seeds"]:
            run = runs / ablation / f"seed{seed}"
            assert (run / "done").is_file() and (run / "eval.csv").is_file() and (run / "train.log").is_file()
            assert (results / "benchmarks" / "train" / config["envs"][0] / ablation / f"seed{seed}.tsv").is_file()
    for name in ("fig1_success", "prior_dynamics", "kl_traces", "iqm_intervals", "p_improvement"):
        assert (results / "figures" / f"{name}.png").stat().st_size > 1000
    assert (results / "tables" / "sr_table.tex").is_file() and not (results / "paper" / "lore.pdf").exists()
    # the console names the outputs and the report command, which works without the paper
    assert "  tables   results/test/tables" in proc.stdout, proc.stdout[-2000:]
    report_line = next(line for line in proc.stdout.splitlines() if line.startswith("  report   snakemake "))
    report = run_snakemake(work, *shlex.split(report_line)[2:], env=no_tex)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (results / "report.html").stat().st_size > 10_000
    if not have_latex():
        return
    # with TeX: only the paper is left to build; every success-rate statistic reaches the PDF
    paper = run_snakemake(work, "--cores", "1", configfile=TEST_CONFIG)
    assert paper.returncode == 0, paper.stderr[-5000:]
    assert "rule train" not in paper.stdout + paper.stderr
    text = pdf_text(results / "paper" / "lore.pdf")
    numbers = _stats_numbers(results / "tables" / "stats.csv")
    assert numbers, "no success-rate statistics in stats.csv"
    missing = [n for n in set(numbers) if n not in text]
    assert not missing, f"numbers from stats.csv not in the PDF: {missing}"
    assert "??" not in text, "an undefined statistic macro reached the PDF"
    again = run_snakemake(work, "--cores", "1", "-n", configfile=TEST_CONFIG)
    assert "Nothing to be done" in again.stdout + again.stderr


def _processes_in_group(pgid: int) -> dict[int, str]:
    """{pid: command line} of the live processes in a process group (from /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            out[int(entry.name)] = cmdline
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the training process through /proc (Linux)")
def test_killed_training_job_resumes_from_its_checkpoint(tmp_path):
    """SIGKILL the `lore train` process of a job once it has a checkpoint (what preemption or a
    node failure does to a job); the workflow reports the failure, and re-running it resumes the
    run from its checkpoint instead of starting over, and produces every output."""
    config = _config()
    config.update(ablations=["rl_only"], seeds=[0], paper=False, results_root="results")
    configfile = tmp_path / "preempt.yaml"
    configfile.write_text(yaml.safe_dump(config))
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_dir = workdir / "results" / "runs" / config["envs"][0] / "rl_only" / "seed0"
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(snakemake_cmd(workdir, "--cores", "1", configfile=configfile), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, env=job_env())
        try:
            deadline = time.time() + HANG_GUARD_S
            while time.time() < deadline and not (run_dir / "checkpoint.pt").is_file():
                assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
                time.sleep(0.2)
            assert (run_dir / "checkpoint.pt").is_file(), "no checkpoint appeared"
            trainers = [pid for pid, cmd in _processes_in_group(proc.pid).items()
                        if " train " in cmd and str(run_dir.relative_to(workdir)) in cmd
                        and "python" in cmd.split()[0]]  # the Python process, not its bash wrapper
            assert len(trainers) == 1, _processes_in_group(proc.pid)
            os.kill(trainers[0], signal.SIGKILL)
            assert proc.wait(timeout=HANG_GUARD_S) != 0, "the workflow did not notice the killed job"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    assert not (run_dir / "done").exists(), "the run finished before it could be killed; lower train.checkpoint_every"
    from lore.train.checkpoint import load_checkpoint

    step_at_kill = load_checkpoint(run_dir / "checkpoint.pt")["env_step"]
    assert step_at_kill > 0
    config_stamp = (run_dir / "config.yaml").stat().st_mtime_ns  # a fresh (non-resumed) start rewrites it

    again = run_snakemake(workdir, "--cores", "1", "--rerun-incomplete", configfile=configfile, timeout=HANG_GUARD_S)
    assert again.returncode == 0, again.stderr[-5000:]
    assert (run_dir / "done").is_file()
    assert (run_dir / "config.yaml").stat().st_mtime_ns == config_stamp, "the run started over instead of resuming"
    # the job's log links to the run's train.log, which keeps both attempts (Snakemake deletes a
    # job's log before each attempt)
    job_log = workdir / "results" / "logs" / "train" / config["envs"][0] / "rl_only" / "seed0.log"
    assert job_log.is_symlink() and job_log.resolve() == (run_dir / "train.log").resolve()
    history = job_log.read_text()
    assert f"from checkpoint at env step {step_at_kill}" in history
    assert history.index("step 100/") < history.index("lore: resuming"), "the first attempt's lines are lost"
    eval_steps = pd.read_csv(run_dir / "eval.csv")["env_step"].tolist()
    assert eval_steps == sorted(set(eval_steps)), f"duplicated eval rows after resume: {eval_steps}"
    assert eval_steps[-1] == config["run"]["train.steps"]
    episodes = pd.read_csv(run_dir / "episodes.csv")
    assert episodes["episode"].is_unique, "episodes logged twice after resume"
    for path in ("results/tables/stats.csv", "results/figures/fig1_success.png", "paper/generated/macros.tex"):
        assert (workdir / path).is_file(), path


def test_retry_resources_grow_with_the_attempt_but_stop_at_the_cap():
    from lore.grid.workflow import retry_resource

    assert [retry_resource(2880, a) for a in (1, 2, 3, 4)] == [2880, 5760, 5760, 5760]  # default cap 2x
    assert [retry_resource(60, a, cap=150) for a in (1, 2, 3)] == [60, 120, 150]
    assert retry_resource(60, 3, cap=30) == 60  # a cap below the base value never shrinks the request
    with pytest.raises(ValueError, match="attempt"):
        retry_resource(60, 0)
