"""The workflow's grid of training runs: its config checked, its jobs, and their status and ETA.

``workflow`` checks a workflow config (``config/*.yaml``) and turns it into training jobs (what
``workflow/rules/common.smk`` calls before any job); ``status`` reads the state, progress and ETA of every run
of a grid from its run directories (``lore status``). Nothing is imported here: the Snakefile loads
:mod:`lore.grid.workflow` on every dry run.
"""
