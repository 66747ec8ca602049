# Declared experiments (config/experiments/<name>.yaml): `snakemake --cores N --config experiment=<name>`
# (or a comma-separated list, or `all`) trains only the runs that are missing, compares them paired by seed,
# applies the declaration's decision rule and rewrites the experiment log (docs/experiments.md).
# A run is identified by its resolved config and seed: one that finished anywhere under results/ is reused.
from lore.analysis import experiments as EXP

try:
    EXPERIMENTS = EXP.selected(config.get("experiment"))
    _EXP_PAIRS = {name: EXP.run_dirs(EXP.load_declaration(name)) for name in EXPERIMENTS}
except EXP.ExperimentError as e:
    raise WorkflowError(f"invalid experiment: {' '.join(str(e).split())}") from None

EXP_RUNS_DIR = str(EXP.RESULTS_DIR / "runs")
EXP_RUN_DIR = os.path.join(EXP_RUNS_DIR, "{env}", "{key}", "seed{seed}")
# the runs this invocation may train: planned runs with no finished run of the same identity elsewhere
EXP_TRAIN = {(run.env, run.key, run.seed): run for pairs in _EXP_PAIRS.values() for run, folder in pairs
             if folder == run.default_dir()}


def experiment_targets():
    outputs = [f"{EXP.RESULTS_DIR}/{name}/comparison.md" for name in EXPERIMENTS]
    return outputs + ([str(EXP.LOG)] if EXPERIMENTS else [])


def experiment_train_args(wildcards):
    run = EXP_TRAIN[(wildcards.env, wildcards.key, int(wildcards.seed))]
    return quote_all(EXP.train_args(run, EXP_RUN_DIR.format(**wildcards)))


rule train_experiment:
    output:
        done=os.path.join(EXP_RUN_DIR, "done"),
    log:
        os.path.join(str(EXP.RESULTS_DIR), "logs", "{env}", "{key}", "seed{seed}.log"),
    wildcard_constraints:
        key="[A-Za-z0-9_]+-[0-9a-f]{10}",
    params:
        run_dir=EXP_RUN_DIR,
        args=experiment_train_args,
    threads: 1
    resources:
        mem_mb=3000,
        runtime=120,
    shell:
        "mkdir -p {params.run_dir} && ln -sf $(realpath {params.run_dir})/train.log {log}; "
        "export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}; "
        "exec lore train --run-dir {params.run_dir} {params.args} --no-progress >> {params.run_dir}/train.log 2>&1"


rule experiment_compare:
    input:
        lambda wildcards: [f"{folder}/done" for _, folder in _EXP_PAIRS[wildcards.name]],
    output:
        md=f"{EXP.RESULTS_DIR}/{{name}}/comparison.md",
        csv=f"{EXP.RESULTS_DIR}/{{name}}/comparison.csv",
        verdict=f"{EXP.RESULTS_DIR}/{{name}}/verdict.json",
        record=f"{EXP.RECORDS_DIR}/{{name}}.json",
    wildcard_constraints:
        name="[A-Za-z0-9_]+",
    shell:
        "python -m lore.analysis.experiments compare {wildcards.name} --record"


rule experiment_log:
    input:
        records=[f"{EXP.RECORDS_DIR}/{name}.json" for name in EXPERIMENTS],
    output:
        str(EXP.LOG),
    shell:
        "python -m lore.analysis.experiments log --out {output:q}"
