# LoRe: environment x ablation x seed training runs -> statistics -> figures -> paper.
#
#   snakemake --cores 2                                   # default main job (config/config.yaml)
#   snakemake --profile workflow/profiles/default         # same, with keep-going / retries
#   snakemake --cores 2 --configfile config/test.yaml --config paper=false   # quick start: tiny grid, no TeX
#   snakemake --profile workflow/profiles/slurm --configfile config/paper.yaml
#   snakemake --report results/report.html                # HTML report of the last run
#   snakemake --cores 2 --configfile config/benchmark.yaml  # LLM-prior benchmark -> docs/benchmark/
#   snakemake --cores 2 --config experiment=<name>        # a declared experiment (config/experiments/)
#
# See docs/workflow.md.
import shutil

from snakemake.utils import min_version

min_version("8.0")


# --configfile REPLACES the default config instead of being deep-merged into it (Snakemake's
# default), so keys of config/config.yaml never leak into config/paper.yaml or config/test.yaml.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/benchmark_report.smk"
include: "workflow/rules/slurm.smk"
include: "workflow/rules/experiments.smk"


report: "workflow/report/workflow.rst"


# Cheap rules, and the ones that need TeX, run where Snakemake runs, never as cluster jobs
# (benchmark_report, defined only for configs with `benchmark_report:`, says so itself).
localrules:
    all,
    aggregate,
    figures,
    paper_macros,
    paper,
    experiment_compare,
    experiment_trial,
    experiment_log,


rule all:
    default_target: True
    input:
        experiment_targets() if config.get("experiment") else all_targets(),


# ---------------------------------------------------------------- the console at the end
onsuccess:
    from lore.grid.status import workflow_lines

    if config.get("experiment"):
        print("\n".join(experiment_lines()))
    else:
        print("\n".join(workflow_lines(runs_root(config), TRAIN_JOBS) + outputs_lines()))


onerror:
    from lore.grid.status import workflow_lines

    print("\n".join(workflow_lines(runs_root(config), TRAIN_JOBS)))
    print(f"  `lore status {RESULTS}` shows every run; job logs are under {LOGS}")
    if config.get("paper", True) and not config.get("experiment") and shutil.which("pdflatex") is None:
        print("  no TeX Live here (pdflatex not found), so the paper cannot be built: add --config paper=false")
