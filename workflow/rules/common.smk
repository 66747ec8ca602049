# Helpers shared by the rules: config validation, the training grid, resources, paths.
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from lore.grid.workflow import (
    CRAFTER_ENV_NAMES,
    GridError,
    retry_resource,
    analysis_args,
    checked_workflow_config,
    env_resources,
    generated_dir,
    grid_envs,
    quote_all,
    results_root,
    runs_root,
    shared_cache_input,
    short,
    train_command_args,
    train_slurm_extra,
    write_grid_record,
)

# Rules call `lore` and `python -m lore...`: make the interpreter running Snakemake (e.g. the
# project's .venv) come first on PATH, so jobs find them without an activated environment.
# A conda deployment (--sdm conda) activates its own environment inside the job, which wins.
envvars:
    "PATH",


_BIN = str(Path(sys.executable).parent)
_PATH = os.environ["PATH"]
if _PATH.split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = os.pathsep.join([_BIN, _PATH])

# ---------------------------------------------------------------- validation (before any job)
REPO = Path(workflow.basedir)
# Snakemake has read the config files already, keeping the last of two equal keys and expanding aliases
# without bound: they are read again strictly, and every message is one short line naming the key.
try:
    TRAIN_JOBS = checked_workflow_config(config, workflow.configfiles, REPO / "config" / "config.yaml",
                                         REPO / "workflow" / "schemas" / "config.schema.yaml")
except GridError as e:
    raise WorkflowError(f"invalid workflow config: {short(e)}") from None

ENVS = grid_envs(config)

# Every output lives under `results_root` (results/ for config/config.yaml, results/<name> for any other config
# file unless it names its own), so two configs never write the same file; the main job's paper/generated is the
# exception (lore.grid.workflow.generated_dir).
RESULTS = results_root(config)
RUN_DIR = os.path.join(runs_root(config), "{env}", "{ablation}", "seed{seed}")
LOGS = f"{RESULTS}/logs"
TRAIN_LOG = os.path.join(LOGS, "train", "{env}", "{ablation}", "seed{seed}.log")
TRAIN_BENCHMARK = os.path.join(RESULTS, "benchmarks", "train", "{env}", "{ablation}", "seed{seed}.tsv")
TABLES = f"{RESULTS}/tables"
FIGURES_DIR = f"{RESULTS}/figures"
GENERATED = generated_dir(config)
PAPER_PDF = f"{RESULTS}/paper/lore.pdf"

TABLE_FILES = [f"{TABLES}/{name}.csv" for name in ("eval_points", "runs", "stats", "improvement", "achievements")]
LATEX_TABLE_FILES = [f"{TABLES}/{name}.tex" for name in ("sr_table", "efficiency_table", "crafter_table", "ablation_table")]
# the achievements figure only for grids with a Crafter env (nothing is drawn for envs not in the grid)
FIGURE_NAMES = ["fig1_success", "prior_dynamics", "kl_traces", "iqm_intervals", "p_improvement"]
FIGURE_NAMES += ["crafter_achievements"] if any(env in CRAFTER_ENV_NAMES for env in ENVS) else []
GENERATED_FILES = [f"{GENERATED}/{name}.tex" for name in ("macros", "sr_table", "efficiency_table", "crafter_table", "ablation_table")]

# The benchmark report (`benchmark_report: {out: ...}`, config/benchmark.yaml): what
# lore.report.benchmark_report.write_report writes (REPORT_FIGURES, REPORT_TABLES there; names kept
# here so that a dry run does not import pandas).
BENCHMARK_REPORT_DIR = os.path.normpath(config["benchmark_report"]["out"]) if config.get("benchmark_report") else None
BENCHMARK_REPORT_FIGURES = ["fig1_success", "prior_dynamics", "kl_traces"]
BENCHMARK_REPORT_TABLES = ["eval_points", "runs", "stats", "improvement", "achievements"]
BENCHMARK_REPORT_FILES = (
    [f"{BENCHMARK_REPORT_DIR}/README.md", f"{BENCHMARK_REPORT_DIR}/summary.csv"]
    + [f"{BENCHMARK_REPORT_DIR}/figures/{name}.png" for name in BENCHMARK_REPORT_FIGURES]
    + [f"{BENCHMARK_REPORT_DIR}/tables/{name}.csv" for name in BENCHMARK_REPORT_TABLES]
    if BENCHMARK_REPORT_DIR else []
)

# The grid's fingerprint, recorded when jobs are about to run (never by a dry run): a later grid that differs
# is refused from the same results_root (lore.grid.workflow.check_grid_record).
onstart:
    if not config.get("experiment"):  # an experiment runs its own runs, not this grid
        write_grid_record(config)


wildcard_constraints:
    env="[A-Za-z0-9][A-Za-z0-9_.-]*",
    ablation="[A-Za-z0-9_]+",
    seed="[0-9]+",


def done_files():
    """The `done` marker of every run in the grid (the aggregation's inputs)."""
    return [f"{job.run_dir}/done" for job in TRAIN_JOBS]


def run_dirs():
    return [job.run_dir for job in TRAIN_JOBS]


def train_args(wildcards):
    return train_command_args(config, wildcards.env, wildcards.ablation, int(wildcards.seed))


def train_resource(name, default=None):
    """A resource of the training rule from `resources.default` / `resources.<env>`.

    mem_mb and runtime grow with the attempt number, so a job killed for exceeding them gets
    more on its retry, up to `max_mem_mb` / `max_runtime` (default: twice the value); runtime is in minutes.
    slurm_extra carries `--signal=TERM@<term_before_end_s>` (lore.grid.workflow.train_slurm_extra).
    """
    def get(wildcards, attempt):
        resources = env_resources(config, wildcards.env)
        if name == "slurm_extra":
            runtime = retry_resource(int(resources["runtime"]), attempt, resources.get("max_runtime"))
            return train_slurm_extra(resources, runtime_min=runtime)
        value = resources.get(name, default)
        if name in ("mem_mb", "runtime") and value is not None:
            return retry_resource(int(value), attempt, resources.get(f"max_{name}"))
        if name == "gpu" and not value:
            return None  # no GPU resource at all for CPU runs (None drops the resource)
        return value
    return get


def train_log_link(wildcards):
    """Where a training job's log links to: its run's train.log, relative to the link's folder."""
    names = dict(env=wildcards.env, ablation=wildcards.ablation, seed=wildcards.seed)
    link = TRAIN_LOG.format(**names)
    return os.path.relpath(os.path.join(RUN_DIR.format(**names), "train.log"), os.path.dirname(link))


def train_threads(wildcards):
    return int(env_resources(config, wildcards.env)["threads"])


# Keys of `resources.<env>` that are resources of the SLURM executor plugin under the same name.
SLURM_RESOURCE_KEYS = ("slurm_partition", "slurm_account", "gpu_model", "qos", "constraint", "gres")


def optional_train_resources():
    """SLURM-only keys (partition, account, qos, constraint, gres, ...) that some env in the grid sets."""
    keys = set()
    for env in ENVS:
        keys |= {k for k in env_resources(config, env) if k in SLURM_RESOURCE_KEYS}
    return sorted(keys)


def shared_cache(wildcards):
    """The read-only shared LLM cache (`llm_cache.shared`): an input of the runs that use an LLM."""
    return shared_cache_input(config, wildcards.ablation)


# The code each analysis rule runs (its `python -m lore.report.cli <command>` or `lore.paper.cli <command>`
# and every lore module that command imports), declared as inputs: editing it reruns the rule and what
# depends on it.
# tests/test_workflow.py checks these lists against the modules the commands load.
# the Crafter score is Crafter's (lore/envs/crafter.py), and importing it loads the envs package
_ENVS_CODE = ["envs/base", "envs/crafter", "envs/factory", "envs/minigrid", "envs/vector"]
_TABLES_CODE = ["report/cli", "report/aggregate", "report/runs", "report/stats", "report/settings",
                "report/latex", "report/synthetic", "report/outputs", "utils/io", "ablations", *_ENVS_CODE]
# the paper's commands, lore.paper.build and the modules it assembles macros.tex from
_PAPER_CODE = ["paper/cli", "paper/build", "paper/macros", "paper/numbers", "paper/results", "paper/method"]
# the defaults the paper quotes come from lore.config, a package: every module of it
_CONFIG_CODE = [f"config/{path.stem}" for path in sorted((REPO / "lore" / "config").glob("*.py"))]
ANALYSIS_CODE = {
    "aggregate": _TABLES_CODE,
    "figures": _TABLES_CODE + ["report/figures"],
    "paper_macros": _TABLES_CODE + ["report/figures", *_PAPER_CODE, *_CONFIG_CODE],
    # paper-build only compiles the TeX, but loading lore.paper.build (and lore.report.cli) loads the table code
    "paper": ["report/cli", *_PAPER_CODE, "report/aggregate", "report/latex", "report/runs",
              "report/settings", "report/stats", "report/outputs", "utils/io", *_ENVS_CODE],
    "benchmark_report": _TABLES_CODE + ["report/benchmark_report"],
}


def analysis_code(rule_name):
    """Absolute paths of the lore source files ``rule_name`` runs (see ANALYSIS_CODE)."""
    return [str(REPO / "lore" / f"{name}.py") for name in ANALYSIS_CODE[rule_name]]


def analysis_flags():
    return analysis_args(config)


def folder_of(files):
    """The folder of the first of ``files`` (params derived from inputs/outputs, not hardcoded)."""
    return os.path.dirname(files[0])


def all_targets():
    targets = TABLE_FILES + LATEX_TABLE_FILES
    targets += [f"{FIGURES_DIR}/{name}.{ext}" for name in FIGURE_NAMES for ext in ("png", "pdf")]
    targets += GENERATED_FILES
    if config.get("paper", True):
        targets.append(PAPER_PDF)
    if config.get("benchmark_report"):
        targets += BENCHMARK_REPORT_FILES
    return targets


# ---------------------------------------------------------------- the console at the end
def outputs_lines():
    """Where the outputs are, and the command that builds the HTML report of this run."""
    configfiles = "".join(f" --configfile {shown_path(path)}" for path in workflow.overwrite_configfiles or [])
    no_paper = "" if config.get("paper", True) else " --config paper=false"
    places = [("paper", PAPER_PDF), ("figures", FIGURES_DIR), ("tables", TABLES), ("runs", runs_root(config))]
    lines = [f"  {label:8s} {path}" for label, path in places if os.path.exists(path)]
    return lines + [f"  report   snakemake --report {RESULTS}/report.html{configfiles}{no_paper}"]


def shown_path(path):
    """``path`` relative to the working directory when it lies below it (as a user would type it)."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


# ---------------------------------------------------------------- declared experiments
from lore import archive as EXP_ARCHIVE
from lore.experiments import declaration as EXP_DECL
from lore.experiments import log as EXP_LOG
from lore.experiments import plan as EXP_PLAN

from lore.experiments import launch as EXP_LAUNCH

def _exp_report(line):
    if workflow.is_main_process:
        print(line, file=sys.stderr)


# A decided experiment (one with a record) is closed: naming it is refused, `experiment=all` leaves it out.
try:
    EXPERIMENTS = EXP_PLAN.selected(config.get("experiment"), report=_exp_report)
    _EXP_PAIRS = {name: EXP_PLAN.run_dirs(EXP_DECL.load_declaration(name)) for name in EXPERIMENTS}
    _EXP_STATES = {name: EXP_LAUNCH.run_states(EXP_DECL.load_declaration(name), _EXP_PAIRS[name])
                   for name in EXPERIMENTS}
except EXP_LOG.ExperimentDecided as e:
    raise WorkflowError(f"lore: {' '.join(str(e).split())}") from None
except EXP_DECL.ExperimentError as e:
    raise WorkflowError(f"invalid experiment: {' '.join(str(e).split())}") from None

EXP_TRIAL = bool(config.get("trial"))
EXP_TRIAL_DIR = str(EXP_PLAN.TRIAL_DIR)
EXP_RUNS_DIR = str(EXP_PLAN.RESULTS_DIR / "runs")
EXP_RUN_DIR = os.path.join(EXP_RUNS_DIR, "{env}", "{key}", "seed{seed}")
# the runs this invocation may train: planned runs with no finished run of the same identity elsewhere
EXP_TRAIN = {(run.env, run.key, run.seed): run for pairs in _EXP_PAIRS.values() for run, folder in pairs
             if folder == run.default_dir()}


def _experiment_ranks():
    """(rule name, seed, run keys) of each launch rank of the runs to train; a run in several experiments
    goes to its earliest rank."""
    ranked = {}
    for states in _EXP_STATES.values():
        for s in states:
            if (s.run.env, s.run.key, s.run.seed) in EXP_TRAIN:
                rank = (not s.feeds_decision, s.run.seed)
                ranked[(s.run.key, s.run.seed)] = min(rank, ranked.get((s.run.key, s.run.seed), rank))
    groups = {}
    for (key, seed), rank in ranked.items():
        groups.setdefault(rank, set()).add(key)
    return [(f"train_experiment_seed{seed}{'_reported' if reported else ''}", seed, sorted(groups[(reported, seed)]))
            for reported, seed in sorted(groups)]


EXP_RANKS = _experiment_ranks()
if EXPERIMENTS and workflow.is_main_process:  # what the grid costs, dry runs included
    _finished = (list(EXP_ARCHIVE.index_archive(EXP_ARCHIVE.ARCHIVE_ROOT).values())
                 + list(EXP_PLAN.index_runs(Path("results")).values()))
    _times = EXP_LAUNCH.measured_times(_finished)
    for _name in EXPERIMENTS:
        _summary = EXP_LAUNCH.cost_summary(EXP_DECL.load_declaration(_name), _EXP_STATES[_name], _times,
                                           workflow.cores if workflow._cores else 1)
        print(EXP_LAUNCH.cost_line(_summary), file=sys.stderr)


def experiment_targets():
    """The comparison of every selected experiment and the log."""
    if EXP_TRIAL:  # nothing under docs/: the comparison alone, in the trial folder
        return [f"{EXP_TRIAL_DIR}/{name}/comparison.md" for name in EXPERIMENTS]
    outputs = [f"{EXP_PLAN.RESULTS_DIR}/{name}/comparison.md" for name in EXPERIMENTS]
    return outputs + ([str(EXP_LOG.LOG)] if EXPERIMENTS else [])


def experiment_train_args(wildcards):
    """``lore train`` arguments of one planned experiment run."""
    run = EXP_TRAIN[(wildcards.env, wildcards.key, int(wildcards.seed))]
    return quote_all(EXP_PLAN.train_args(run, EXP_RUN_DIR.format(**wildcards)))




def experiment_lines():
    """The verdict of every selected experiment and where its comparison is."""
    import json

    lines = []
    folder = EXP_PLAN.TRIAL_DIR if EXP_TRIAL else EXP_PLAN.RESULTS_DIR
    for name in EXPERIMENTS:
        record = json.loads((folder / name / "verdict.json").read_text())
        lines.append(f"lore: {name}{' (trial)' if EXP_TRIAL else ''}: {record['verdict']} ({record['reason']}); "
                     f"{folder / name}/comparison.md")
    if EXP_TRIAL:
        return lines + ["lore: a trial: nothing was written under docs/ or runs/"]
    return lines + [f"lore: experiment log: {EXP_LOG.LOG}"]


def readme_headline_command(wildcards, output):
    """Shell to rewrite the README's headline table from the report's summary: only for docs/benchmark."""
    out = os.path.dirname(output.readme)
    if os.path.normpath(out) != "docs/benchmark":
        return ""
    return f"&& python -m lore.paper.readme --summary {out}/summary.csv --readme README.md"
