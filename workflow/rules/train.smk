# One training run per (env, ablation, seed).
#
# The declared output is only the `done` marker that `lore train` writes LAST (atomically), not
# the run directory: Snakemake deletes the declared outputs of a failed or incomplete job, and a
# directory() output would take the checkpoint a preempted job must resume from with it. Because
# `done` is written after everything else, its presence means eval.csv & co. are final. A re-run
# after a kill starts `lore train` again on the same run directory, which resumes from checkpoint.pt.
#
# On SLURM (docs/workflow.md, "Resuming and preemption"): a job preempted under PreemptMode=REQUEUE
# is requeued by SLURM itself (the profile submits with --requeue) and resumes when it restarts; one
# preempted under PreemptMode=CANCEL is reported as failed (workflow/rules/slurm.smk) and resubmitted
# through the profile's `retries`; before the time limit SLURM sends SIGTERM (slurm_extra
# --signal=TERM@<term_before_end_s>). In every case `lore train` gets SIGTERM first, writes its
# checkpoint and exits; the next attempt resumes from it.


rule train:
    input:
        # the read-only shared LLM answer cache (llm_cache.shared), for the runs that call an LLM
        shared_cache=shared_cache,
    output:
        done=os.path.join(RUN_DIR, "done"),
    log:
        TRAIN_LOG,
    benchmark:
        TRAIN_BENCHMARK
    params:
        run_dir=RUN_DIR,
        log_link=train_log_link,
        args=train_args,
    threads: train_threads
    resources:
        mem_mb=train_resource("mem_mb"),
        runtime=train_resource("runtime"),
        gpu=train_resource("gpu"),
        slurm_extra=train_resource("slurm_extra"),
        **{key: train_resource(key) for key in optional_train_resources()},
    conda:
        "../envs/lore.yaml"
    shell:
        # The output of every attempt is appended to <run_dir>/train.log (`lore train`, which writes that file
        # itself when run directly, sees the redirect and does not copy its lines again), and {log} links to it:
        # Snakemake deletes a job's log file before each attempt, so the history of a resumed run
        # (where it was interrupted, where it resumed) would otherwise be lost. `exec` makes `lore
        # train` the job's process itself: a SIGTERM (preemption, time limit, scancel) reaches it while
        # Snakemake, which stops gracefully on SIGTERM, waits for its checkpoint; a bash in between
        # would die at once and leave it to be SIGKILLed with the job step. Descriptor 3 is the job's
        # own stdout (Snakemake's console when run locally): `lore train` writes one line there when the
        # run is complete (env, ablation, seed, final eval SR, wall time). No `message:` here: it would
        # replace the job's input/wildcards/resources listing in dry runs too.
        "mkdir -p {params.run_dir} && ln -sf {params.log_link} {log}; "
        "export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}; "
        "exec lore train --run-dir {params.run_dir} {params.args} --no-progress --finished-line /dev/fd/3 "
        "3>&1 >> {params.run_dir}/train.log 2>&1"
