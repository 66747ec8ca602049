# Declared experiments (config/experiments/<name>.yaml): `snakemake --cores N --config experiment=<name>`
# (or a comma-separated list, or `all`) trains only the runs that are missing, compares them paired by seed,
# applies the declaration's decision rule and rewrites the experiment log (docs/experiments.md).
# A run is identified by its resolved config and seed: one that finished anywhere under results/ is reused.


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
    conda:
        "../envs/lore.yaml"
    shell:
        "mkdir -p {params.run_dir} && ln -sf $(realpath {params.run_dir})/train.log {log}; "
        "export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}; "
        "exec lore train --run-dir {params.run_dir} {params.args} --no-progress --finished-line /dev/fd/3 "
        "3>&1 >> {params.run_dir}/train.log 2>&1"


rule experiment_compare:
    input:
        lambda wildcards: [f"{folder}/done" for _, folder in _EXP_PAIRS[wildcards.name]],
    output:
        md=f"{EXP.RESULTS_DIR}/{{name}}/comparison.md",
        csv=f"{EXP.RESULTS_DIR}/{{name}}/comparison.csv",
        verdict=f"{EXP.RESULTS_DIR}/{{name}}/verdict.json",
        record=f"{EXP.RECORDS_DIR}/{{name}}.json",
    log:
        f"{EXP.RESULTS_DIR}/logs/{{name}}.compare.log",
    wildcard_constraints:
        name="[A-Za-z0-9_]+",
    conda:
        "../envs/lore.yaml"
    shell:
        "python -m lore.analysis.experiments compare {wildcards.name} --record > {log} 2>&1"


rule experiment_log:
    input:
        records=[f"{EXP.RECORDS_DIR}/{name}.json" for name in EXPERIMENTS],
    output:
        str(EXP.LOG),
    log:
        f"{EXP.RESULTS_DIR}/logs/log.log",
    conda:
        "../envs/lore.yaml"
    shell:
        "python -m lore.analysis.experiments log --out {output:q} > {log} 2>&1"
