# One training run per (env, ablation, seed).
#
# The declared output is only the `done` marker that `lore train` writes LAST (atomically), not
# the run directory: Snakemake deletes the declared outputs of a failed or incomplete job, and a
# directory() output would take the checkpoint a preempted job must resume from with it. Because
# `done` is written after everything else, its presence means eval.csv & co. are final. A re-run
# after a kill (or a SLURM preemption, resubmitted through the profile's `retries`) starts
# `lore train` again on the same run directory, which resumes from checkpoint.pt.


rule train:
    output:
        done=os.path.join(RUN_DIR, "done"),
    log:
        "results/logs/train/{env}/{ablation}/seed{seed}.log",
    benchmark:
        "results/benchmarks/train/{env}/{ablation}/seed{seed}.tsv"
    params:
        run_dir=RUN_DIR,
        args=train_args,
    threads: train_threads
    resources:
        mem_mb=train_resource("mem_mb"),
        runtime=train_resource("runtime"),
        gpu=train_resource("gpu"),
        **{key: train_resource(key) for key in optional_train_resources()},
    conda:
        "../envs/lore.yaml"
    shell:
        # Append to the log: a resumed run keeps the history of its earlier attempts.
        "OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "
        "lore train --run-dir {params.run_dir} {params.args} --no-progress >> {log} 2>&1"
