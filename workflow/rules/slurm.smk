# SLURM: a preempted job is a failed job, which Snakemake resubmits (`retries`), and which resumes.
#
# snakemake-executor-plugin-slurm 2.8 treats the job state PREEMPTED as "still running" ("We leave
# it to SLURM to resume your job(s)"). But PREEMPTED is terminal ("job terminated due to
# preemption", squeue(1)): a job that SLURM requeues after preemption (PreemptMode=REQUEUE, and
# the profile submits with --requeue) shows as PENDING, then RUNNING, under the same id, and is
# never reported as PREEMPTED. A PREEMPTED job was cancelled (PreemptMode=CANCEL, or REQUEUE for a
# job that may not be requeued) and will never run again: the workflow would wait for it forever
# (with `squeue` it even drops out of the queue after MinJobAge). Here the plugin's status query is
# wrapped so that such a job is reported as CANCELLED, one of the states the plugin treats as a
# failure: Snakemake then resubmits it as a new job (profile `retries`), and `lore train` resumes
# from the checkpoint it wrote on the SIGTERM that preemption sends.
#
# Snakemake imports every installed executor plugin to build its command line, so the wrapper is in
# place whenever the plugin is installed; it is only ever called with `--executor slurm`.
# tests/test_slurm.py preempts a training job on a real cluster in both modes, and
# tests/test_workflow.py checks the resubmission with a stand-in `squeue`.

import sys as _sys


def _report_preempted_slurm_jobs_as_failed():
    plugin = _sys.modules.get("snakemake_executor_plugin_slurm")
    if plugin is None:
        return  # not running with --executor slurm
    original = getattr(plugin, "query_job_status", None)
    if original is None:
        # A warning, not an error: every installed plugin is imported, also for local runs.
        # tests/test_workflow.py fails on such a plugin version (a preempted job is waited for).
        from snakemake.logging import logger

        logger.warning(
            "snakemake-executor-plugin-slurm has no query_job_status (tested with 2.8): on SLURM, a job "
            "cancelled by preemption (state PREEMPTED) will not be resubmitted and the workflow will wait for it"
        )
        return
    if getattr(original, "lore_preempted_as_failed", False):
        return  # already wrapped (the Snakefile is evaluated more than once per process)
    reported = set()

    async def query_job_status(command, logger):
        status_of_jobs, duration = await original(command, logger)
        for job_id, state in (status_of_jobs or {}).items():
            if state.split(" ")[0] == "PREEMPTED":
                if job_id not in reported:
                    reported.add(job_id)
                    logger.warning(
                        f"SLURM job {job_id} was preempted (state PREEMPTED: cancelled, not requeued). "
                        "Reporting it as failed so that Snakemake resubmits it; `lore train` resumes "
                        "from its checkpoint."
                    )
                status_of_jobs[job_id] = "CANCELLED"
        return status_of_jobs, duration

    query_job_status.lore_preempted_as_failed = True
    plugin.query_job_status = query_job_status


_report_preempted_slurm_jobs_as_failed()
