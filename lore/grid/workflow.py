"""The workflow's experiment grid: checking a workflow config and turning it into training jobs.

workflow/rules/common.smk calls :func:`checked_workflow_config` before any job: the config files are read
again strictly (duplicate keys, alias bombs), the config's shape is checked against
``workflow/schemas/config.schema.yaml`` (:func:`schema_problem`), and :func:`check_workflow_config` checks
what a schema cannot: ablation names against :data:`lore.ablations.ABLATIONS`, environment ids against the
registered ones, that ``env_run`` / ``resources`` name environments of the grid, that no run is in two
blocks of ``grid:``, and that every (env, ablation) run config resolves and can work (unknown keys, wrong
types and contradictory settings in ``run:`` overrides are caught before any job starts). Each error is one
short line that starts with the offending field.

The grid is the product ``envs`` x ``ablations`` x ``seeds``, or the union of the products of the
blocks of ``grid:``; every output goes under ``results_root`` (default ``results`` for config/config.yaml,
``results/<name>`` for any other config file), whose ``.grid.json`` records the grid that wrote it
(:func:`check_grid_record`: another grid is refused there unless ``overwrite: true``).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lore.validation import show

DEFAULT_RESULTS_ROOT = "results"
"""Where the workflow writes runs, logs, tables, figures and the PDF unless ``results_root`` says otherwise."""
GRID_RECORD = ".grid.json"
"""``<results_root>/.grid.json``: the fingerprint of the grid whose outputs the folder holds."""
MAX_MESSAGE_CHARS = 300
"""Longest error message the workflow prints (values in it are shortened by :func:`lore.validation.show`)."""
RUNS_ROOT = f"{DEFAULT_RESULTS_ROOT}/runs"
GRID_KEYS = ("envs", "ablations", "seeds")
"""The keys of one block of the grid: every (env, ablation, seed) of their product is one training run."""
# Letters, digits and . _ - / only: the path goes unquoted into shell commands ({log}) and must not
# hold Snakemake wildcards ({...}).
_RESULTS_ROOT_PATTERN = r"^[A-Za-z0-9_./-]+$"
# Kept here rather than imported from lore.envs.crafter (which imports crafter and torch, ~1 s,
# on every dry run); tests/test_workflow.py checks it equals lore.envs.crafter.CRAFTER_NAMES.
CRAFTER_ENV_NAMES = ("crafter", "CrafterReward-v1", "CrafterNoReward-v1")
LLM_BACKENDS = ("scripted", "gemini", "openai", "replay")
RUN_CACHE_NAME = "llm_cache.sqlite"
"""The run's own LLM answer cache, inside its run directory (``llm_cache.per_run``)."""
DEFAULT_TERM_BEFORE_END_S = 300
"""SLURM sends training jobs SIGTERM this long before their time limit (``--signal=TERM@300``)."""
# sbatch options that snakemake-executor-plugin-slurm sets itself and rejects in `slurm_extra`,
# with the `resources.<env>` key that sets each instead.
_LONG = r"(?=[=\s]|$)"  # an option name ends at "=", a blank or the end: --time, not --time-min
_SHORT = r"(?=\s|$|\w)"
SLURM_EXTRA_MANAGED = (
    (rf"--qos{_LONG}", "qos"),
    (rf"--constraint{_LONG}|(^|\s)-C{_SHORT}", "constraint"),
    (rf"--gres{_LONG}", "gres"),
    (rf"--gpus{_LONG}", "gpu (and gpu_model)"),
    (rf"--partition{_LONG}|(^|\s)-p{_SHORT}", "slurm_partition"),
    (rf"--account{_LONG}|(^|\s)-A{_SHORT}", "slurm_account"),
    (rf"--time{_LONG}|(^|\s)-t{_SHORT}", "runtime"),
    (rf"--mem{_LONG}|--mem-per-cpu{_LONG}", "mem_mb"),
    (rf"--cpus-per-task{_LONG}|(^|\s)-c{_SHORT}", "threads"),
    (rf"--signal{_LONG}", "term_before_end_s"),
)


class GridError(ValueError):
    """An invalid workflow config; the message starts with the offending field."""


@dataclass(frozen=True)
class TrainJob:
    env: str
    ablation: str
    seed: int
    runs_root: str = RUNS_ROOT

    @property
    def run_dir(self) -> str:
        return f"{self.runs_root}/{self.env}/{self.ablation}/seed{self.seed}"


def results_root(config: dict) -> str:
    """The folder every output of the workflow goes under (``results_root``, default ``results``)."""
    return os.path.normpath(config.get("results_root") or DEFAULT_RESULTS_ROOT)


def runs_root(config: dict) -> str:
    return f"{results_root(config)}/runs"


def generated_dir(config: dict) -> str:
    """Where ``lore paper-macros`` writes: ``paper/generated`` (read by ``paper/lore.tex`` when built in
    place) for the default results root; under any other root, inside it, so that a second grid (e.g.
    the benchmark) never overwrites the main job's macros."""
    root = results_root(config)
    return "paper/generated" if root == DEFAULT_RESULTS_ROOT else f"{root}/paper/generated"


def known_env(name: str) -> bool:
    if name in CRAFTER_ENV_NAMES:
        return True
    if not name.startswith("MiniGrid-"):
        return False
    import gymnasium
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    return name in gymnasium.registry


def _env_hint(name: str) -> str:
    import gymnasium
    import minigrid  # noqa: F401

    return did_you_mean(name, list(CRAFTER_ENV_NAMES) + [k for k in gymnasium.registry if k.startswith("MiniGrid-")])


def uses_llm(ablation: str) -> bool:
    from lore.ablations import ablation_overrides

    return ablation_overrides(ablation).get("llm.backend", "scripted") != "none"


def run_overrides(config: dict, env: str, ablation: str, seed: int | None = None) -> dict[str, object]:
    """Dotted overrides for one run: ``run`` <- ``env_run[env]`` <- env name <- LLM backend <- LLM
    caches (those only with ``seed``: the run's own cache lives in its run directory)."""
    overrides: dict[str, object] = {}
    overrides.update(config.get("run") or {})
    overrides.update((config.get("env_run") or {}).get(env) or {})
    overrides["env.name"] = env
    backend = config.get("llm_backend")
    if backend and uses_llm(ablation):
        # Only for ablations that call an LLM: rl_only keeps llm.backend=none from its ablation.
        overrides["llm.backend"] = backend
    if seed is not None and uses_llm(ablation):
        overrides.update(cache_overrides(config, TrainJob(env, ablation, int(seed), runs_root(config))))
    elif not (config.get("llm_cache") or {}).get("per_run", True):
        # `per_run: false` is "no writable cache" for every run, said in the config.yaml of the runs that
        # never ask an LLM too (as benchmarks/learning_curve.py did), so those runs, started by either, resume
        # under the workflow with the config they were started with.
        overrides["llm.cache_path"] = None
    return overrides


def cache_overrides(config: dict, job: TrainJob) -> dict[str, object]:
    """``llm.cache_path`` / ``llm.shared_cache`` of one run from the workflow's ``llm_cache`` section.

    Every run writes only its own cache, ``<run_dir>/llm_cache.sqlite`` (``per_run: true``, the
    default; ``false``: none), so no two jobs ever write one SQLite file (unsafe on the network
    filesystems of clusters) and a run's cache hits never depend on which runs finished before it.
    ``shared`` is an optional read-only cache every run consults after its own (an input of the DAG).
    """
    cache = config.get("llm_cache") or {}
    per_run = cache.get("per_run", True)
    return {"llm.cache_path": f"{job.run_dir}/{RUN_CACHE_NAME}" if per_run else None,
            "llm.shared_cache": cache.get("shared") or None}


def shared_cache_input(config: dict, ablation: str) -> list[str]:
    """The shared read-only cache as an input of a training job ([] when unused)."""
    shared = (config.get("llm_cache") or {}).get("shared")
    return [str(shared)] if shared and uses_llm(ablation) else []


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
    args += set_args(run_overrides(config, env, ablation, seed))
    if config.get("archive"):
        args += ["--archive", str(config["archive"])]
    return " ".join(shlex.quote(a) for a in args)


def _check_unique(name: str, values: list) -> None:
    seen = set()
    for i, value in enumerate(values):
        if value in seen:
            raise GridError(f"{name}[{i}]: {show(value)} is listed twice")
        seen.add(value)


CLI_SWITCHES = ("overwrite", "paper")
"""Top-level true/false keys that ``snakemake --config key=true`` hands over as the string ``'true'``."""


def normalise_cli_config(config: dict) -> dict:
    """Undo what ``snakemake --config`` does to values: it parses lists with YAML's BaseLoader, so
    ``--config seeds=[0,1,2]`` arrives as ``['0', '1', '2']``, and takes only ``True`` / ``False`` for
    booleans. Seeds written as decimal digits become ints, ``true`` / ``false`` of :data:`CLI_SWITCHES`
    booleans (in place; returned for chaining); anything else is left for the schema to reject by name."""
    seeds = config.get("seeds")
    if isinstance(seeds, list):
        config["seeds"] = [int(s) if isinstance(s, str) and s.strip().isdigit() and len(s) < 100 else s
                           for s in seeds]
    for key in CLI_SWITCHES:
        if isinstance(config.get(key), str) and config[key].lower() in ("true", "false"):
            config[key] = config[key].lower() == "true"
    return config


def short(message: object) -> str:
    """``message`` on one line of at most :data:`MAX_MESSAGE_CHARS` characters."""
    text = " ".join(str(message).split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 4] + " ..."


def check_config_files(paths: Iterable[str | os.PathLike]) -> None:
    """Re-read each workflow config file strictly (Snakemake's loader keeps the last of two equal keys and
    expands aliases without bound): a duplicate key, an alias bomb, bytes that are not UTF-8 or a top level
    that is not a mapping raise :class:`GridError` naming the file."""
    from lore.config import ConfigError, load_yaml

    for path in paths:
        try:
            load_yaml(path)
        except ConfigError as e:
            message = str(e)
            raise GridError(message if str(path) in message else f"config file {path}: {message}") from None


def default_results_root(configfiles: Iterable[str | os.PathLike], main: str | os.PathLike) -> str:
    """``results`` for the main config ``main`` (or none), else ``results/<name of the last config file>``,
    so that another config never writes into the main job's folder unless it names that folder itself."""
    import re

    files = [Path(f).resolve() for f in configfiles]
    if not files or files == [Path(main).resolve()]:
        return DEFAULT_RESULTS_ROOT
    return f"{DEFAULT_RESULTS_ROOT}/{re.sub(r'[^A-Za-z0-9_.-]', '_', files[-1].stem)}"


def schema_problem(config: dict, schema: dict) -> str | None:
    """The most relevant violation of the JSON ``schema`` by ``config`` as one short line naming the key
    (None when it conforms); values are shortened, never echoed whole."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(schema).iter_errors(config))
    if error is None:
        return None
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
    where = where.lstrip(".")
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(error.schema.get("properties") or {})
        unknown = sorted((key for key in error.instance if key not in known), key=str)
        if unknown:
            name = f"{where}.{unknown[0]}" if where else str(unknown[0])
            return short(f"{name}: unknown key{did_you_mean(str(unknown[0]), known)} (valid: {', '.join(known)})")
    if error.validator == "type":
        expected = error.validator_value if isinstance(error.validator_value, str) else " or ".join(error.validator_value)
        return short(f"{where or 'config'}: expected {expected}, got {type(error.instance).__name__} "
                     f"{show(error.instance)}")
    message = error.message
    shown = repr(error.instance)
    if message.startswith(shown):
        message = show(error.instance) + message[len(shown):]
    return short(f"{where or 'config'}: {message}")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the choices close to ``name`` (empty when none is)."""
    import difflib

    close = difflib.get_close_matches(name, [str(c) for c in choices], n=3) if len(name) < 200 else []
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _check_env_sections(config: dict, envs: list[str]) -> None:
    """Every key of ``env_run`` and of ``resources`` (but ``default``) is an environment of the grid or a
    registered one (settings kept for an env the grid may add): a misspelt environment would otherwise be
    ignored without a word."""
    for section, extra in (("env_run", ()), ("resources", ("default",))):
        for key in config.get(section) or {}:
            if key in envs or key in extra or (isinstance(key, str) and known_env(key)):
                continue
            name = key if isinstance(key, str) else show(key)
            raise GridError(short(f"{section}.{name}: not an environment of the grid nor a registered one"
                                  f"{did_you_mean(str(key), [*envs, *extra])} (the grid's: {', '.join(envs)}"
                                  f"{'; or default' if extra else ''})"))


def checked_workflow_config(config: dict, configfiles: list, main: str | os.PathLike,
                            schema_path: str | os.PathLike) -> list[TrainJob]:
    """Everything the workflow checks before it plans a job, in order; ``config`` is Snakemake's (the merged
    ``configfiles`` and ``--config``), completed in place with its default ``results_root`` and the schema's
    defaults. The config files strictly (:func:`check_config_files`), the schema at ``schema_path``, the grid
    (:func:`check_workflow_config`) and the results folder's record (:func:`check_grid_record`); the training jobs."""
    import yaml

    check_config_files(configfiles)
    config.setdefault("results_root", default_results_root(configfiles, main))
    normalise_cli_config(config)
    schema = yaml.safe_load(Path(schema_path).read_text())
    problem = schema_problem(config, schema)
    if problem:
        raise GridError(problem)
    for key, spec in schema["properties"].items():
        if "default" in spec:
            config.setdefault(key, spec["default"])
    jobs = check_workflow_config(config)
    check_grid_record(config)
    return jobs


def check_workflow_config(config: dict, environ: dict | None = None) -> list[TrainJob]:
    """Raise :class:`GridError` naming the field if ``config`` cannot run; return the training jobs."""
    from lore.ablations import ABLATIONS
    from lore.config import ConfigError, build_config, check_advisor_settings, load_yaml
    from lore.report.settings import AnalysisSettings

    environ = os.environ if environ is None else environ
    _check_results_root(config)
    jobs = _checked_grid(config, ABLATIONS)
    ablations = list(dict.fromkeys(job.ablation for job in jobs))

    for section in ("run", "env_run", "resources", "analysis"):
        if config.get(section) is not None and not isinstance(config[section], dict):
            raise GridError(f"{section}: must be a mapping, got {type(config[section]).__name__}")
    _check_env_sections(config, list(dict.fromkeys(job.env for job in jobs)))
    managed = {"seed": "seeds", "ablation": "ablations", "env.name": "envs", "llm.backend": "llm_backend",
               "llm.cache_path": "llm_cache.per_run", "llm.shared_cache": "llm_cache.shared"}
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
        raise GridError(f"llm_backend: {show(backend)} is not one of {list(LLM_BACKENDS)}")
    if backend == "gemini" and any(uses_llm(a) for a in ablations) and not environ.get("GEMINI_API_KEY"):
        raise GridError("llm_backend: 'gemini' needs the GEMINI_API_KEY environment variable "
                        "(or use llm_backend: scripted for the offline advisor)")

    _check_llm_cache(config)
    _check_resources(config)

    file_data = None
    if config.get("run_config"):
        path = Path(config["run_config"])
        try:
            file_data = load_yaml(path)
        except ConfigError as e:
            raise GridError(f"run_config: {e}") from None
    from lore.envs.factory import probe_env

    probed: set[str] = set()  # each distinct env section built once
    first_seed = {}  # one run per (env, ablation): the seed only names the run's own cache
    for job in jobs:
        first_seed.setdefault((job.env, job.ablation), job.seed)
    for (env, ablation), seed in first_seed.items():
        overrides = [f"{k}={json.dumps(v)}" for k, v in run_overrides(config, env, ablation, seed).items()]
        where = "env_run." + env if env in (config.get("env_run") or {}) else "run"
        try:
            cfg = build_config(file_data, overrides, ablation)
            check_advisor_settings(cfg)
        except ConfigError as e:
            raise GridError(f"{where}: {e} (run {env} / {ablation})") from None
        if cfg.llm.backend == "openai" and not (cfg.llm.base_url or environ.get("OPENAI_BASE_URL")):
            raise GridError(f"llm_backend: 'openai' needs the server's endpoint: set llm.base_url (and llm.model) "
                            f"in `run:` or the run_config (run {env} / {ablation})")
        env_key = repr(cfg.env)
        if env_key not in probed:
            probed.add(env_key)
            try:
                probe_env(cfg.env)
            except ValueError as e:
                raise GridError(f"envs: {e}") from None

    try:
        AnalysisSettings.from_mapping(config.get("analysis"))
    except (ValueError, TypeError) as e:
        raise GridError(str(e) if str(e).startswith("analysis") else f"analysis: {e}") from None
    _check_benchmark_report(config)
    return jobs


def grid_blocks(config: dict) -> list[tuple[str, dict]]:
    """``(where, block)`` pairs: the blocks of ``grid:``, or the one product of ``envs`` x ``ablations`` x
    ``seeds``; ``where`` prefixes the key names in error messages (``grid[1].`` or nothing)."""
    if config.get("grid") is not None:
        return [(f"grid[{i}].", block) for i, block in enumerate(config["grid"])]
    return [("", {key: config.get(key) for key in GRID_KEYS})]


def _checked_grid(config: dict, ablation_names) -> list[TrainJob]:
    """Every block of the grid checked, named by key; the training jobs, each run at most once."""
    grid = config.get("grid")
    if grid is not None:
        if not isinstance(grid, list) or not grid:
            raise GridError(f"grid: must be a non-empty list of blocks {{envs, ablations, seeds}}, got {show(grid)}")
        both = [key for key in GRID_KEYS if config.get(key) is not None]
        if both:
            raise GridError(f"{both[0]}: `grid` replaces envs/ablations/seeds; give each block its own {both[0]}")
    for where, block in grid_blocks(config):
        _check_block(where, block, ablation_names)
    seen: dict[TrainJob, str] = {}
    for where, block in grid_blocks(config):
        for job in _block_jobs(config, block):
            if job in seen:
                raise GridError(f"{where.rstrip('.') or 'grid'}: run {job.env} / {job.ablation} / seed {job.seed} "
                                f"is already in {seen[job].rstrip('.')}")
            seen[job] = where
    return list(seen)


def _check_block(where: str, block: object, ablation_names) -> None:
    if not isinstance(block, dict):
        raise GridError(f"{where.rstrip('.')}: must be a mapping with keys {', '.join(GRID_KEYS)}, got {show(block)}")
    unknown = sorted(set(block) - set(GRID_KEYS), key=str)
    if unknown:
        raise GridError(f"{where}{unknown[0]}: unknown key (valid: {', '.join(GRID_KEYS)})")
    for key in GRID_KEYS:
        value = block.get(key)
        if not isinstance(value, list) or not value:
            raise GridError(f"{where}{key}: must be a non-empty list, got {show(value)}")
    for i, env in enumerate(block["envs"]):
        if not isinstance(env, str) or not known_env(env):
            raise GridError(f"{where}envs[{i}]: unknown environment {show(env)}.{_env_hint(str(env))} Accepted: "
                            f"{', '.join(CRAFTER_ENV_NAMES)} or a registered MiniGrid-* id")
    for i, ablation in enumerate(block["ablations"]):
        if ablation not in ablation_names:
            raise GridError(f"{where}ablations[{i}]: unknown ablation {show(ablation)} (valid: {', '.join(ablation_names)})")
    for i, seed in enumerate(block["seeds"]):
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise GridError(f"{where}seeds[{i}]: expected a non-negative integer, got {show(seed)}")
    for key in GRID_KEYS:
        _check_unique(f"{where}{key}", block[key])


def _block_jobs(config: dict, block: dict) -> list[TrainJob]:
    root = runs_root(config)
    return [TrainJob(env, ablation, int(seed), root)
            for env in block["envs"] for ablation in block["ablations"] for seed in block["seeds"]]


def _check_results_root(config: dict) -> None:

    root = config.get("results_root")
    if root is None:
        return
    _check_output_folder("results_root", root)


def _check_benchmark_report(config: dict) -> None:

    report = config.get("benchmark_report")
    if report is None:
        return
    if not isinstance(report, dict) or set(report) != {"out"}:
        raise GridError(f"benchmark_report: expected a mapping {{out: <folder>}}, got {show(report)}")
    _check_output_folder("benchmark_report.out", report["out"])


def _check_output_folder(key: str, folder: object) -> None:
    """A folder of its own for generated files: a plain relative or absolute path, not ``.`` or ``/``."""
    import re

    if not isinstance(folder, str) or not re.match(_RESULTS_ROOT_PATTERN, folder):
        raise GridError(f"{key}: expected a folder path of letters, digits and . _ - / "
                        f"(no blanks or wildcards), got {show(folder)}")
    if os.path.normpath(folder) in (".", "/"):
        raise GridError(f"{key}: {show(folder)} would mix the outputs with other files; name a folder of "
                        f"its own, e.g. results/bench")


def _check_llm_cache(config: dict) -> None:
    cache = config.get("llm_cache")
    if cache is None:
        return
    if not isinstance(cache, dict):
        raise GridError(f"llm_cache: must be a mapping (per_run, shared), got {type(cache).__name__}")
    unknown = sorted(set(cache) - {"per_run", "shared"})
    if unknown:
        raise GridError(f"llm_cache.{unknown[0]}: unknown key (valid: per_run, shared)")
    if not isinstance(cache.get("per_run", True), bool):
        raise GridError(f"llm_cache.per_run: expected true or false, got {show(cache['per_run'])}")
    shared = cache.get("shared")
    if shared is None:
        return
    if not isinstance(shared, str) or not shared.strip():
        raise GridError(f"llm_cache.shared: expected the path of an SQLite answer cache, got {show(shared)}")
    path = Path(shared)
    if not path.is_file():
        raise GridError(f"llm_cache.shared: {shared} is not a file (a read-only cache must exist before the "
                        f"workflow starts, e.g. a finished run's {RUN_CACHE_NAME})")
    written = {Path(f"{job.run_dir}/{RUN_CACHE_NAME}").resolve() for job in grid_jobs(config)}
    if path.resolve() in written:
        raise GridError(f"llm_cache.shared: {shared} is the cache a run of this grid writes; copy it elsewhere "
                        f"first (the shared cache must not change while runs read it)")


def _check_resources(config: dict) -> None:
    """What the SLURM executor plugin would reject at submission (or silently double), named by key."""
    import re

    for section, res in (config.get("resources") or {}).items():
        if not isinstance(res, dict):
            raise GridError(f"resources.{section}: must be a mapping of resources")
        extra = res.get("slurm_extra")
        if extra is not None and not isinstance(extra, str):
            raise GridError(f"resources.{section}.slurm_extra: expected a string of sbatch options")
        for pattern, key in SLURM_EXTRA_MANAGED if extra else ():
            if re.search(pattern, extra):
                option = re.search(pattern, extra).group(0).strip()
                raise GridError(f"resources.{section}.slurm_extra: {option} is set by the SLURM executor plugin "
                                f"(which rejects it here); use resources.{section}.{key} instead")
        gres = res.get("gres")
        if isinstance(gres, str) and re.match(r"^gpu\b", gres) and res.get("gpu"):
            raise GridError(f"resources.{section}.gres: {show(gres)} requests GPUs, and so does gpu: {res['gpu']}; "
                            f"use gpu (and gpu_model) alone")
        term = res.get("term_before_end_s")
        if term is not None and (isinstance(term, bool) or not isinstance(term, int) or not 0 <= term <= 65535):
            raise GridError(f"resources.{section}.term_before_end_s: expected seconds in 0..65535, got {show(term)}")


def grid_jobs(config: dict) -> list[TrainJob]:
    """The training runs of a (checked) config: the product of each block, blocks in order."""
    return [job for _, block in grid_blocks(config) for job in _block_jobs(config, block)]


def grid_envs(config: dict) -> list[str]:
    """The environments of the grid, each once, in the order the config names them."""
    return list(dict.fromkeys(job.env for job in grid_jobs(config)))


def grid_fingerprint(config: dict) -> dict:
    """What a (checked) config trains: its runs (env, ablation, seed), each (env, ablation)'s dotted run
    settings, and the run-config file's content, with their SHA-256 under ``sha256``."""
    import hashlib

    from lore.config import load_yaml

    jobs = grid_jobs(config)
    pairs = list(dict.fromkeys((job.env, job.ablation) for job in jobs))
    record = {
        "runs": sorted([job.env, job.ablation, job.seed] for job in jobs),
        "settings": {f"{env} / {ablation}": run_overrides(config, env, ablation) for env, ablation in pairs},
        "run_config": load_yaml(config["run_config"]) if config.get("run_config") else None,
    }
    text = json.dumps(record, sort_keys=True, default=str)
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), **json.loads(text)}


def _grid_difference(old: dict, new: dict) -> str:
    """What differs between two fingerprints, in a few words."""
    old_runs = {tuple(run) for run in old.get("runs") or []}
    new_runs = {tuple(run) for run in new["runs"]}
    if old_runs != new_runs:
        return f"{len(new_runs - old_runs)} runs added, {len(old_runs - new_runs)} dropped"
    changed = sorted(key for key in new["settings"] if (old.get("settings") or {}).get(key) != new["settings"][key])
    if changed:
        return f"the run settings of {changed[0]} differ"
    return "the run_config file differs"


def check_grid_record(config: dict) -> None:
    """Refuse a grid whose fingerprint differs from the one recorded in ``<results_root>/.grid.json`` (its
    outputs would overwrite the recorded grid's), unless ``overwrite: true``; no record: nothing to check."""
    root = results_root(config)
    path = Path(root) / GRID_RECORD
    if config.get("overwrite") or not path.is_file():
        return
    try:
        recorded = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GridError(short(f"results_root: {path} is not a grid record ({e}); remove it, or pass "
                              f"--config overwrite=true")) from None
    new = grid_fingerprint(config)
    if not isinstance(recorded, dict) or recorded.get("sha256") != new["sha256"]:
        what = _grid_difference(recorded, new) if isinstance(recorded, dict) else "unreadable record"
        raise GridError(f"results_root: {root} holds another grid ({what}); use "
                        f"--config results_root={DEFAULT_RESULTS_ROOT}/<name>, or --config overwrite=true")


def write_grid_record(config: dict) -> Path:
    """Record the grid's fingerprint in ``<results_root>/.grid.json`` (atomically); its path."""
    from lore.utils.io import atomic_write_text

    path = Path(results_root(config)) / GRID_RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(grid_fingerprint(config), indent=1, sort_keys=True) + "\n")
    return path


def env_resources(config: dict, env: str) -> dict[str, object]:
    """``resources.default`` overlaid with ``resources[env]`` (threads, mem_mb, runtime, gpu, SLURM keys)."""
    resources = config.get("resources") or {}
    out = {"threads": 1, "mem_mb": 4000, "runtime": 60, "gpu": 0, "term_before_end_s": DEFAULT_TERM_BEFORE_END_S}
    out.update(resources.get("default") or {})
    out.update(resources.get(env) or {})
    return out


def train_slurm_extra(resources: dict, runtime_min: int | None = None) -> str | None:
    """``slurm_extra`` of a training job: the configured one plus ``--signal=TERM@<term_before_end_s>``.

    SLURM then sends every process of the job step (``lore train`` included) SIGTERM that long
    before the time limit (up to 60 s earlier: SLURM's resolution): ``lore train`` writes its
    checkpoint and exits, the job ends FAILED instead of TIMEOUT-killed mid-write, and Snakemake's
    retry (with more runtime) resumes from that checkpoint. Without the batch-shell-only ``B:``
    prefix, because the rule runs inside the ``srun`` step the plugin starts, not in the batch shell.
    The warning time is capped at half of ``runtime_min`` (the job's time limit), so a short job
    still trains before it is told to stop.
    """
    parts = [str(resources["slurm_extra"])] if resources.get("slurm_extra") else []
    term = int(resources.get("term_before_end_s") or 0)
    if runtime_min is not None:
        term = min(term, int(runtime_min) * 30)
    if term > 0:
        parts.append(f"--signal=TERM@{term}")
    return " ".join(parts) or None


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
