# Declared experiments (config/experiments/<name>.yaml): `snakemake --cores N --config experiment=<name>`
# (or a comma-separated list, or `all`) trains only the runs that are missing, compares them paired by seed,
# applies the declaration's decision rule and rewrites the experiment log (docs/experiments.md).
# With `trial=True` nothing is written under docs/ or runs/: the comparison goes to
# results/experiments/trial/<name>/ (rule experiment_trial), no record, no log, no run archived.
# A run is identified by its resolved config and seed: one that finished anywhere under results/, or that is
# archived in runs/ (tracked in git), is reused. Each run is archived in runs/ as soon as it finishes.
#
# One training rule per launch rank (lore.experiments.launch): the runs the decision rule reads, seed by seed,
# then the others; a higher rank has the higher priority, so a grid stopped half-way is balanced.

for _rank, (_name, _seed, _keys) in enumerate(EXP_RANKS):

    rule:
        name:
            _name
        output:
            done=os.path.join(EXP_RUN_DIR, "done"),
        log:
            os.path.join(str(EXP_PLAN.RESULTS_DIR), "logs", "{env}", "{key}", "seed{seed}.log"),
        wildcard_constraints:
            key="|".join(_keys),
            seed=str(_seed),
        priority: len(EXP_RANKS) - _rank
        params:
            run_dir=EXP_RUN_DIR,
            args=experiment_train_args,
            archive=str(EXP_ARCHIVE.ARCHIVE_ROOT),
            restore_only="--restore-only" if EXP_TRIAL else "",
        threads: 1
        resources:
            mem_mb=3000,
            runtime=120,
        conda:
            "../envs/lore.yaml"
        shell:
            "mkdir -p {params.run_dir} && ln -sf $(realpath {params.run_dir})/train.log {log}; "
            "export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}; "
            "exec lore train --run-dir {params.run_dir} {params.args} --no-progress --finished-line /dev/fd/3 "
            "--archive {params.archive} {params.restore_only} 3>&1 >> {params.run_dir}/train.log 2>&1"


rule experiment_trial:
    input:
        lambda wildcards: [f"{folder}/done" for _, folder in _EXP_PAIRS[wildcards.name]],
    output:
        md=f"{EXP_TRIAL_DIR}/{{name}}/comparison.md",
        verdict=f"{EXP_TRIAL_DIR}/{{name}}/verdict.json",
    log:
        f"{EXP_TRIAL_DIR}/logs/{{name}}.compare.log",
    wildcard_constraints:
        name="[A-Za-z0-9_]+",
    params:
        out=lambda wildcards: f"{EXP_TRIAL_DIR}/{wildcards.name}",
    conda:
        "../envs/lore.yaml"
    shell:
        "python -m lore.experiments.cli compare {wildcards.name} --out {params.out} > {log} 2>&1"


rule experiment_compare:
    input:
        lambda wildcards: [f"{folder}/done" for _, folder in _EXP_PAIRS[wildcards.name]],
    output:
        md=f"{EXP_PLAN.RESULTS_DIR}/{{name}}/comparison.md",
        csv=f"{EXP_PLAN.RESULTS_DIR}/{{name}}/comparison.csv",
        arms=f"{EXP_PLAN.RESULTS_DIR}/{{name}}/arms.csv",
        figure=f"{EXP_PLAN.RESULTS_DIR}/{{name}}/fig_success.png",
        verdict=f"{EXP_PLAN.RESULTS_DIR}/{{name}}/verdict.json",
        record=f"{EXP_LOG.RECORDS_DIR}/{{name}}.json",
    log:
        f"{EXP_PLAN.RESULTS_DIR}/logs/{{name}}.compare.log",
    wildcard_constraints:
        name="[A-Za-z0-9_]+",
    conda:
        "../envs/lore.yaml"
    shell:
        "python -m lore.experiments.cli compare {wildcards.name} --record > {log} 2>&1"


rule experiment_log:
    input:
        records=[f"{EXP_LOG.RECORDS_DIR}/{name}.json" for name in EXPERIMENTS],
    output:
        str(EXP_LOG.LOG),
    log:
        f"{EXP_PLAN.RESULTS_DIR}/logs/log.log",
    conda:
        "../envs/lore.yaml"
    shell:
        "python -m lore.experiments.cli log --out {output:q} > {log} 2>&1"
