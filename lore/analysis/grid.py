"""The workflow's experiment grid: checking a workflow config and turning it into training jobs.

The Snakefile validates the config's shape with ``workflow/schemas/config.schema.yaml`` and then
calls :func:`check_workflow_config` here, which checks what a schema cannot: ablation names
against :data:`lore.ablations.ABLATIONS`, environment ids against the registered ones, and that
every (env, ablation) run config resolves (unknown keys and wrong types in ``run:`` overrides are
caught before any job starts). Each error names the offending field.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

RUNS_ROOT = "results/runs"
# Kept here rather than imported from lore.envs.crafter (which imports crafter and torch, ~1 s,
# on every dry run); tests/test_workflow.py checks it equals lore.envs.crafter.CRAFTER_NAMES.
CRAFTER_ENV_NAMES = ("crafter", "CrafterReward-v1", "CrafterNoReward-v1")
LLM_BACKENDS = ("scripted", "gemini", "replay")


class GridError(ValueError):
    """An invalid workflow config; the message starts with the offending field."""


@dataclass(frozen=True)
class TrainJob:
    env: str
    ablation: str
    seed: int

    @property
    def run_dir(self) -> str:
        return f"{RUNS_ROOT}/{self.env}/{self.ablation}/seed{self.seed}"


def known_env(name: str) -> bool:
    if name in CRAFTER_ENV_NAMES:
        return True
    if not name.startswith("MiniGrid-"):
        return False
    import gymnasium
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    return name in gymnasium.registry


def _env_hint(name: str) -> str:
    import difflib

    import gymnasium
    import minigrid  # noqa: F401

    names = list(CRAFTER_ENV_NAMES) + [k for k in gymnasium.registry if k.startswith("MiniGrid-")]
    close = difflib.get_close_matches(name, names, n=3)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def uses_llm(ablation: str) -> bool:
    from lore.ablations import ablation_overrides

    return ablation_overrides(ablation).get("llm.backend", "scripted") != "none"


def run_overrides(config: dict, env: str, ablation: str) -> dict[str, object]:
    """Dotted overrides for one run: ``run`` <- ``env_run[env]`` <- env name <- LLM backend."""
    overrides: dict[str, object] = {}
    overrides.update(config.get("run") or {})
    overrides.update((config.get("env_run") or {}).get(env) or {})
    overrides["env.name"] = env
    backend = config.get("llm_backend")
    if backend and uses_llm(ablation):
        # Only for ablations that call an LLM: rl_only keeps llm.backend=none from its ablation.
        overrides["llm.backend"] = backend
    return overrides


def set_args(overrides: dict[str, object]) -> list[str]:
    """``--set key=value`` pairs; values as JSON, which the CLI parses back as YAML."""
    args = []
    for key, value in overrides.items():
        args += ["--set", f"{key}={json.dumps(value)}"]
    return args


def train_command_args(config: dict, env: str, ablation: str, seed: int) -> str:
    """Shell-quoted arguments of ``lore train`` after ``--run-dir``."""
    args = ["--ablation", ablation, "--seed", str(int(seed))]
    if config.get("run_config"):
        args += ["--config", str(config["run_config"])]
    args += set_args(run_overrides(config, env, ablation))
    return " ".join(shlex.quote(a) for a in args)


def _check_unique(name: str, values: list) -> None:
    seen = set()
    for i, value in enumerate(values):
        if value in seen:
            raise GridError(f"{name}[{i}]: {value!r} is listed twice")
        seen.add(value)


def normalise_cli_config(config: dict) -> dict:
    """Undo what ``snakemake --config`` does to lists: it parses them with YAML's BaseLoader, so
    ``--config seeds=[0,1,2]`` arrives as ``['0', '1', '2']``. Seeds written as decimal digits become
    ints (in place; returned for chaining); anything else is left for the schema to reject by name."""
    seeds = config.get("seeds")
    if isinstance(seeds, list):
        config["seeds"] = [int(s) if isinstance(s, str) and s.strip().isdigit() else s for s in seeds]
    return config


def check_workflow_config(config: dict, environ: dict | None = None) -> list[TrainJob]:
    """Raise :class:`GridError` naming the field if ``config`` cannot run; return the training jobs."""
    from lore.ablations import ABLATIONS
    from lore.analysis.settings import AnalysisSettings
    from lore.config import ConfigError, build_config, load_yaml

    environ = os.environ if environ is None else environ
    for key in ("envs", "ablations", "seeds"):
        value = config.get(key)
        if not isinstance(value, list) or not value:
            raise GridError(f"{key}: must be a non-empty list, got {value!r}")
    envs, ablations, seeds = config["envs"], config["ablations"], config["seeds"]
    for i, env in enumerate(envs):
        if not isinstance(env, str) or not known_env(env):
            raise GridError(f"envs[{i}]: unknown environment {env!r}.{_env_hint(str(env))} Accepted: "
                            f"{', '.join(CRAFTER_ENV_NAMES)} or a registered MiniGrid-* id")
    for i, ablation in enumerate(ablations):
        if ablation not in ABLATIONS:
            raise GridError(f"ablations[{i}]: unknown ablation {ablation!r} (valid: {', '.join(ABLATIONS)})")
    for i, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise GridError(f"seeds[{i}]: expected a non-negative integer, got {seed!r}")
    _check_unique("envs", envs)
    _check_unique("ablations", ablations)
    _check_unique("seeds", seeds)

    for section in ("run", "env_run", "resources", "analysis"):
        if config.get(section) is not None and not isinstance(config[section], dict):
            raise GridError(f"{section}: must be a mapping, got {type(config[section]).__name__}")
    managed = {"seed": "seeds", "ablation": "ablations", "env.name": "envs", "llm.backend": "llm_backend"}
    sections = [("run", config.get("run") or {})]
    sections += [(f"env_run.{env}", over or {}) for env, over in (config.get("env_run") or {}).items()]
    for where, overrides in sections:
        if not isinstance(overrides, dict):
            raise GridError(f"{where}: must be a mapping of dotted keys to values")
        for key in overrides:
            if key in managed:
                raise GridError(f"{where}.{key}: set by the workflow from `{managed[key]}`; remove it")
    backend = config.get("llm_backend")
    if backend is not None and backend not in LLM_BACKENDS:
        raise GridError(f"llm_backend: {backend!r} is not one of {list(LLM_BACKENDS)}")
    if backend == "gemini" and any(uses_llm(a) for a in ablations) and not environ.get("GEMINI_API_KEY"):
        raise GridError("llm_backend: 'gemini' needs the GEMINI_API_KEY environment variable "
                        "(or use llm_backend: scripted for the offline advisor)")

    file_data = None
    if config.get("run_config"):
        path = Path(config["run_config"])
        try:
            file_data = load_yaml(path)
        except ConfigError as e:
            raise GridError(f"run_config: {e}") from None
    for env in envs:
        for ablation in ablations:
            overrides = [f"{k}={json.dumps(v)}" for k, v in run_overrides(config, env, ablation).items()]
            try:
                build_config(file_data, overrides, ablation)
            except ConfigError as e:
                where = "env_run." + env if env in (config.get("env_run") or {}) else "run"
                raise GridError(f"{where}: {e} (run {env} / {ablation})") from None

    try:
        AnalysisSettings.from_mapping(config.get("analysis"))
    except (ValueError, TypeError) as e:
        raise GridError(str(e) if str(e).startswith("analysis") else f"analysis: {e}") from None
    return grid_jobs(config)


def grid_jobs(config: dict) -> list[TrainJob]:
    return [TrainJob(env, ablation, int(seed))
            for env in config["envs"] for ablation in config["ablations"] for seed in config["seeds"]]


def env_resources(config: dict, env: str) -> dict[str, object]:
    """``resources.default`` overlaid with ``resources[env]`` (threads, mem_mb, runtime, gpu, slurm_*)."""
    resources = config.get("resources") or {}
    out = {"threads": 1, "mem_mb": 4000, "runtime": 60, "gpu": 0}
    out.update(resources.get("default") or {})
    out.update(resources.get(env) or {})
    return out


def retry_resource(value: int, attempt: int, cap: int | None = None) -> int:
    """``value * attempt`` (a job killed for time or memory gets more on its retry), never above ``cap``.

    Without an explicit cap the growth stops at twice the configured value: a cluster job asking for
    4x its runtime on a 4th attempt (days for a Crafter run) waits in the queue far longer than it saves.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    limit = 2 * int(value) if cap is None else max(int(cap), int(value))
    return min(int(value) * int(attempt), limit)


def analysis_args(config: dict) -> str:
    """``lore aggregate`` flags for the ``analysis:`` section (unset keys keep AnalysisSettings' defaults)."""
    analysis = config.get("analysis") or {}
    args: list[str] = []
    flags = {"headline_budget": "--headline-budget", "threshold": "--threshold",
             "window_center": "--window-center", "window_half_width": "--window-half-width",
             "baseline": "--baseline", "confidence": "--confidence", "resamples": "--resamples",
             "seed": "--bootstrap-seed"}
    if analysis.get("budgets"):
        args += ["--budgets", *[str(int(b)) for b in analysis["budgets"]]]
    for env, budgets in (analysis.get("env_budgets") or {}).items():
        args += ["--env-budget", f"{env}={','.join(str(int(b)) for b in budgets)}"]
    for key, flag in flags.items():
        if analysis.get(key) is not None:
            args += [flag, str(analysis[key])]
    return " ".join(shlex.quote(a) for a in args)


def quote_all(items: Iterable[str]) -> str:
    return " ".join(shlex.quote(str(i)) for i in items)
