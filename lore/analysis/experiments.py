"""Declared experiments: load and check a declaration, plan its runs, compare them paired by seed, decide.

A declaration is ``config/experiments/<name>.yaml`` (schema: ``workflow/schemas/experiment.schema.yaml``).
Every run is identified by its resolved configuration and seed (:func:`run_key`), so a run shared with the
baseline or another experiment is trained once and found wherever it finished (:func:`index_runs`).

    python -m lore.analysis.experiments check [NAME ...]     # validate declarations (exit 2 on the first error)
    python -m lore.analysis.experiments plan NAME             # the runs it needs, and which exist
    python -m lore.analysis.experiments compare NAME          # comparison + verdict -> results/experiments/NAME
    python -m lore.analysis.experiments note NAME TEXT        # what was done with its verdict
    python -m lore.analysis.experiments log                   # docs/experiments.md from declarations + records
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lore.analysis.archive import (
    ARCHIVE_ROOT,
    ArchiveError,
    commit_counts,
    finished_run_dirs,
    index_archive,
    run_key,
    saved_identity,
)

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS_DIR = Path("config/experiments")
SCHEMA = REPO / "workflow" / "schemas" / "experiment.schema.yaml"
RESULTS_DIR = Path("results/experiments")
"""Where experiment runs (``runs/<env>/<key>/seed<k>``) and comparisons (``<name>/``) are written."""
RECORDS_DIR = Path("docs/experiments/records")
"""One JSON record per experiment that ran: the numbers the log is written from (tracked)."""
IMPORTED = Path("docs/experiments/imported.yaml")
"""Experiments run before declarations existed, imported once from their reports (tracked)."""
LOG = Path("docs/experiments.md")
BENCHMARK = "benchmark"
"""The baseline name that means the grid of ``config/benchmark.yaml``."""
BENCHMARK_CONFIG = Path("config/benchmark.yaml")
METRICS = {"auc": "AUC", "final_sr": "final SR", "crafter_score": "Crafter score",
           "distinct": "distinct achievements"}
"""Per-run metrics an experiment can be judged on -> their label."""
TESTS = ("above", "not_below", "ratio_at_least")
"""``above``: paired CI entirely above 0; ``not_below``: paired CI upper end >= 0;
``ratio_at_least``: the arm's mean >= ``value`` x the other's mean."""
CONFIDENCE, RESAMPLES = 0.95, 2000


class ExperimentError(ValueError):
    """A declaration that cannot run; the message names the file and the key."""


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Arm:
    name: str
    ablation: str
    settings: dict
    envs: tuple[str, ...]


@dataclass
class Declaration:
    name: str
    path: Path
    question: str
    base: str
    settings: dict
    envs: list[str]
    seeds: list[int]
    steps: int | None
    arms: dict[str, Arm]
    baseline: str | None
    metrics: list[str]
    compare: list[dict]
    decision: dict
    data: dict = field(repr=False, default_factory=dict)


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
"""An experiment name: an identifier of ASCII letters, digits and ``_`` (it names files, never a path)."""
MAX_RECORD_BYTES = 1 << 20
"""Largest experiment record or imported log read (each is a few KB)."""
MAX_RECORD_DEPTH = 8
"""Deepest nesting of a record (an object of a list of flat objects is 3 deep)."""


def check_name(name: object, what: str = "experiment") -> str:
    """``name`` when it is an experiment name (:data:`NAME`); :class:`ExperimentError` otherwise."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        from lore.validation import show

        raise ExperimentError(f"{what} {show(name)}: not an experiment name (ASCII letters, digits and _, "
                              f"not starting with a digit, at most 64 characters)")
    return name


def declaration_path(name: str, root: Path = Path(".")) -> Path:
    return root / EXPERIMENTS_DIR / f"{check_name(name)}.yaml"


def record_path(name: str, root: Path = Path(".")) -> Path:
    """``docs/experiments/records/<name>.json`` of an experiment name (:func:`check_name`)."""
    return root / RECORDS_DIR / f"{check_name(name)}.json"


def _read_checked(path: Path, what: str, parse):
    """``parse(text)`` of a tracked file of at most :data:`MAX_RECORD_BYTES`; ExperimentError naming it."""
    from lore.utils.io import read_bounded

    try:
        text = read_bounded(path, MAX_RECORD_BYTES).decode("utf-8")
    except OSError as e:  # not a regular file, too large, unreadable
        raise ExperimentError(f"{path}: {what} cannot be read ({str(e).removeprefix(str(path)).strip()})") from None
    except UnicodeDecodeError:
        raise ExperimentError(f"{path}: {what} is not UTF-8 text") from None
    try:
        return parse(text)
    except (ValueError, RecursionError) as e:
        raise ExperimentError(f"{path}: not a valid {what} ({' '.join(str(e).split())[:160] or 'nested too deeply'})"
                              ) from None


RECORD_FIELDS = {"name": (str,), "verdict": (str,), "reason": (str,), "commit": (str, type(None)),
                 "comparison": (list,), "note": (str,)}
"""The fields of an experiment record and their JSON types (``note`` may be absent)."""


def read_record(path: Path) -> dict:
    """The experiment record at ``path``, checked: a JSON object with :data:`RECORD_FIELDS` of their types,
    comparison rows that are objects, nested at most :data:`MAX_RECORD_DEPTH`; ExperimentError naming it."""
    from lore.llm.ledger import nesting_depth

    rec = _read_checked(path, "experiment record", json.loads)
    if not isinstance(rec, dict):
        raise ExperimentError(f"{path}: an experiment record is a JSON object, got {type(rec).__name__}")
    if nesting_depth(rec) > MAX_RECORD_DEPTH:
        raise ExperimentError(f"{path}: an experiment record nested deeper than {MAX_RECORD_DEPTH} levels")
    for key, types in RECORD_FIELDS.items():
        if key not in rec and key != "note":
            raise ExperimentError(f"{path}: {key}: missing from the experiment record")
        if key in rec and not isinstance(rec[key], types):
            raise ExperimentError(f"{path}: {key}: expected {' or '.join(t.__name__ for t in types)}, "
                                  f"got {type(rec[key]).__name__}")
    if not all(isinstance(row, dict) for row in rec["comparison"]):
        raise ExperimentError(f"{path}: comparison: every row must be an object")
    return rec


IMPORTED_FIELDS = ("name", "question", "change", "grid", "effect", "verdict")
"""The fields every entry of the imported log has (scalars)."""


def read_imported(path: Path) -> list[dict]:
    """The entries of ``docs/experiments/imported.yaml`` ([] when absent), checked: a list of mappings with
    :data:`IMPORTED_FIELDS` as scalars; ExperimentError naming the file."""
    from lore.config import ConfigError, _parse_yaml
    from lore.llm.ledger import nesting_depth

    if not path.exists() and not path.is_symlink():
        return []

    def parse(text: str):
        try:
            return _parse_yaml(text)
        except ConfigError as e:
            raise ValueError(str(e)) from None

    entries = _read_checked(path, "imported experiment log", parse)
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ExperimentError(f"{path}: the imported experiment log is a list of mappings, got "
                              f"{type(entries).__name__}")
    if nesting_depth(entries) > MAX_RECORD_DEPTH:
        raise ExperimentError(f"{path}: the imported experiment log is nested deeper than {MAX_RECORD_DEPTH} levels")
    for i, entry in enumerate(entries):
        for key in IMPORTED_FIELDS:
            if not isinstance(entry.get(key), (str, int, float)):
                raise ExperimentError(f"{path}: [{i}].{key}: missing or not a scalar")
    return entries


def declared_names(root: Path = Path(".")) -> list[str]:
    folder = root / EXPERIMENTS_DIR
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def _schema() -> dict:
    import yaml

    return yaml.safe_load(SCHEMA.read_text())


def _fail(path: Path, key: str, message: str) -> ExperimentError:
    return ExperimentError(f"{path}: {key}: {message}" if key else f"{path}: {message}")


def _schema_key(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


_LOADING: list[str] = []
"""The declarations being loaded, outermost first: a baseline chain that comes back to one of them is a cycle."""


def load_declaration(name: str, root: Path = Path(".")) -> Declaration:
    """The checked declaration ``config/experiments/<name>.yaml``; :class:`ExperimentError` names file and key."""
    path = declaration_path(name, root)
    if name in _LOADING:
        chain = " -> ".join([*_LOADING[_LOADING.index(name):], name])
        raise _fail(declaration_path(_LOADING[-1], root), "baseline", f"the baseline chain {chain} is a cycle; "
                    f"a chain must end (in 'benchmark', or an experiment with no baseline)")
    _LOADING.append(name)
    try:
        return _load_declaration(name, path, root)
    finally:
        _LOADING.pop()


def _load_declaration(name: str, path: Path, root: Path) -> Declaration:
    import jsonschema

    from lore.config import ConfigError, load_yaml

    if not path.is_file():
        known = ", ".join(declared_names(root)) or "none"
        raise ExperimentError(f"experiment {name!r}: no file {path} (declared: {known})")
    try:
        data = load_yaml(path)
    except ConfigError as e:
        raise ExperimentError(str(e) if str(path) in str(e) else f"{path}: {e}") from None
    err = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(_schema()).iter_errors(data))
    if err is not None:
        raise _fail(path, _schema_key(err), " ".join(err.message.split())[:200])
    grid = data["grid"]
    arms = {}
    for arm_name, spec in data["arms"].items():
        spec = spec or {}
        arms[arm_name] = Arm(arm_name, spec.get("ablation", arm_name),
                             {} if spec.get("reference") else {**data.get("settings", {}), **spec.get("settings", {})},
                             tuple(spec.get("envs", grid["envs"])))
    decl = Declaration(name=name, path=path, question=data["question"], base=data.get("base", str(BENCHMARK_CONFIG)),
                       settings=dict(data.get("settings", {})), envs=list(grid["envs"]), seeds=list(grid["seeds"]),
                       steps=grid.get("steps"), arms=arms, baseline=data.get("baseline"),
                       metrics=list(data["metrics"]), compare=list(data.get("compare", [])),
                       decision=dict(data["decision"]), data=data)
    _check_semantics(decl, root)
    return decl


def _check_semantics(decl: Declaration, root: Path) -> None:
    """What the schema cannot check: names against the ablation table, envs, the baseline, pairing, metrics."""
    from lore.ablations import ABLATIONS
    from lore.analysis.grid import known_env

    path = decl.path
    for i, env in enumerate(decl.envs):
        if not known_env(env):
            raise _fail(path, f"grid.envs[{i}]", f"unknown environment {env!r}")
    for arm in decl.arms.values():
        if arm.ablation not in ABLATIONS:
            raise _fail(path, f"arms.{arm.name}.ablation" if arm.ablation != arm.name else f"arms.{arm.name}",
                        f"unknown arm {arm.ablation!r} (ablations: {', '.join(ABLATIONS)})")
        for env in arm.envs:
            if env not in decl.envs:
                raise _fail(path, f"arms.{arm.name}.envs", f"{env!r} is not in grid.envs")
    base = root / decl.base
    if not base.is_file():
        raise _fail(path, "base", f"no workflow config {decl.base}")
    if decl.baseline is not None:
        _check_baseline(decl, root)
    for i, item in enumerate(decl.compare):
        _check_reference(decl, f"compare[{i}]", item)
    _check_decision(decl)
    # every (env, arm) resolves to a valid run config (unknown settings keys, wrong types): the experiment's
    # settings first, named as such, then each arm's own
    changed = [a for a in decl.arms.values() if a.settings]
    if decl.settings and changed:
        arm = changed[0]
        try:
            resolved_config(decl, Arm(arm.name, arm.ablation, dict(decl.settings), arm.envs), arm.envs[0], root)
        except Exception as e:  # noqa: BLE001 - ConfigError or GridError
            raise _fail(path, "settings", " ".join(str(e).split())[:300]) from None
    for arm in decl.arms.values():
        try:
            resolved_config(decl, arm, arm.envs[0], root)
        except Exception as e:  # noqa: BLE001 - ConfigError or GridError, named by the arm
            key = f"arms.{arm.name}.settings" if arm.settings else "settings"
            raise _fail(path, key, " ".join(str(e).split())[:300]) from None


def _check_baseline(decl: Declaration, root: Path) -> None:
    path = decl.path
    try:
        check_name(decl.baseline, "baseline")
    except ExperimentError as e:
        raise _fail(path, "baseline", str(e)) from None
    if decl.baseline == decl.name:
        raise _fail(path, "baseline", "an experiment cannot be its own baseline")
    if decl.baseline == BENCHMARK:
        runs = {(j.env, j.ablation, j.seed) for j in _benchmark_jobs(root)}
        envs = {env for env, _, _ in runs}
        seeds = {seed for _, _, seed in runs}
    else:
        if not declaration_path(decl.baseline, root).is_file():
            raise _fail(path, "baseline", f"no experiment {decl.baseline!r} (declared: "
                                          f"{', '.join(declared_names(root))}; or 'benchmark')")
        other = load_declaration(decl.baseline, root)
        envs, seeds = set(other.envs), set(other.seeds)
    missing_envs = [e for e in decl.envs if e not in envs]
    if missing_envs:
        raise _fail(path, "grid.envs", f"{missing_envs[0]!r} is not in baseline {decl.baseline!r}: nothing to pair with")
    unpaired = [s for s in decl.seeds if s not in seeds]
    if unpaired:
        raise _fail(path, "grid.seeds", f"seed {unpaired[0]} is not a seed of baseline {decl.baseline!r} "
                                        f"({sorted(seeds)}): runs would not pair")


def _check_reference(decl: Declaration, where: str, item: dict) -> None:
    path = decl.path
    for key in ("arm", "vs"):
        ref = item.get(key)
        if ref is None:
            continue
        name = ref.split(":", 1)[1] if ref.startswith("baseline:") else ref
        if ref == "baseline" or ref.startswith("baseline:"):
            if decl.baseline is None:
                raise _fail(path, f"{where}.{key}", f"{ref!r} needs a `baseline:`")
            if ref.startswith("baseline:"):
                from lore.ablations import ABLATIONS

                if name not in ABLATIONS:
                    raise _fail(path, f"{where}.{key}", f"unknown arm {name!r}")
            continue
        if name not in decl.arms:
            raise _fail(path, f"{where}.{key}", f"unknown arm {name!r} (arms: {', '.join(decl.arms)})")
    metric = item.get("metric")
    if metric is not None and metric not in decl.metrics:
        raise _fail(path, f"{where}.metric", f"unknown metric {metric!r} (this experiment's metrics: "
                                             f"{', '.join(decl.metrics)})")


def _check_decision(decl: Declaration) -> None:
    path, rule = decl.path, decl.decision
    for i, req in enumerate(rule.get("require", [])):
        if rule["rule"] == "select":
            for key in ("role", "vs"):
                if key == "role" and req.get("role") not in _roles(rule):
                    raise _fail(path, f"decision.require[{i}].role",
                                f"unknown role {req.get('role')!r} (roles: {', '.join(sorted(_roles(rule)))})")
            _check_reference(decl, f"decision.require[{i}]", {"vs": req["vs"], "metric": req["metric"]})
        else:
            _check_reference(decl, f"decision.require[{i}]", req)
        if req["test"] == "ratio_at_least" and "value" not in req:
            raise _fail(path, f"decision.require[{i}].value", "ratio_at_least needs a value")
    if rule["rule"] == "select":
        for cand, roles in rule["candidates"].items():
            for role, arm in roles.items():
                if role != "mechanisms" and arm not in decl.arms:
                    raise _fail(path, f"decision.candidates.{cand}.{role}", f"unknown arm {arm!r}")
        score = rule["score"]
        if score["role"] not in _roles(rule):
            raise _fail(path, "decision.score.role", f"unknown role {score['role']!r}")
        if score["metric"] not in decl.metrics:
            raise _fail(path, "decision.score.metric", f"unknown metric {score['metric']!r} (this experiment's "
                                                       f"metrics: {', '.join(decl.metrics)})")


def _roles(rule: dict) -> set[str]:
    return {role for roles in rule.get("candidates", {}).values() for role in roles if role != "mechanisms"}


# --------------------------------------------------------------------------- run identity and planning


@dataclass(frozen=True)
class PlannedRun:
    env: str
    arm: str
    seed: int
    ablation: str
    overrides: tuple[tuple[str, object], ...]
    key: str
    per_run_cache: bool = True

    def default_dir(self, root: Path = Path(".")) -> Path:
        return root / RESULTS_DIR / "runs" / self.env / self.key / f"seed{self.seed}"


def _base_config(decl_base: str, root: Path) -> dict:
    from lore.config import load_yaml

    return load_yaml(root / decl_base)


def run_overrides(decl: Declaration, arm: Arm, env: str, root: Path, base: dict | None = None) -> dict[str, object]:
    """Dotted overrides of one (arm, env): the base config's run settings <- the budget <- the arm's settings
    (``base``: the base workflow config, when the caller has read it already)."""
    from lore.analysis.grid import run_overrides as workflow_overrides
    from lore.config import dotted, load_yaml

    base = base if base is not None else _base_config(decl.base, root)
    # the base's run_config file first, as `lore train --config` would read it
    overrides = dotted(load_yaml(root / base["run_config"])) if base.get("run_config") else {}
    overrides.update(workflow_overrides(base, env, arm.ablation))
    if decl.steps is not None:
        overrides["train.steps"] = int(decl.steps)
    overrides.update(arm.settings)
    return overrides


def _resolve(overrides: dict[str, object], ablation: str):
    from lore.config import build_config

    return build_config(None, [f"{k}={json.dumps(v)}" for k, v in overrides.items()], ablation)


def resolved_config(decl: Declaration, arm: Arm, env: str, root: Path):
    return _resolve(run_overrides(decl, arm, env, root), arm.ablation)


def _plan_arm(decl: Declaration, arm: Arm, envs, seeds, root: Path, label: str | None = None) -> list[PlannedRun]:
    from lore.config import to_dict

    base = _base_config(decl.base, root)
    per_run = bool((base.get("llm_cache") or {}).get("per_run", True))
    runs = []
    for env in envs:
        overrides = run_overrides(decl, arm, env, root, base)
        key = run_key(arm.ablation, to_dict(_resolve(overrides, arm.ablation)))
        frozen = tuple(sorted(overrides.items()))
        runs += [PlannedRun(env, label or arm.name, int(s), arm.ablation, frozen, key, per_run) for s in seeds]
    return runs


def _benchmark_jobs(root: Path):
    from lore.analysis.grid import grid_jobs
    from lore.config import load_yaml

    return grid_jobs(load_yaml(root / BENCHMARK_CONFIG))


def baseline_arm(decl: Declaration, name: str, root: Path) -> tuple[Declaration, Arm]:
    """The baseline's declaration and its arm ``name`` (the benchmark: its ablation with its run settings)."""
    if decl.baseline == BENCHMARK:
        bench = Declaration(name=BENCHMARK, path=root / BENCHMARK_CONFIG, question="", base=str(BENCHMARK_CONFIG),
                            settings={}, envs=decl.envs, seeds=decl.seeds, steps=None, arms={}, baseline=None,
                            metrics=decl.metrics, compare=[], decision={})
        return bench, Arm(name, name, {}, tuple(decl.envs))
    other = load_declaration(decl.baseline, root)
    if name in other.arms:
        return other, other.arms[name]
    return other, Arm(name, name, {}, tuple(other.envs))


def comparisons(decl: Declaration) -> list[dict]:
    """Every (arm, vs, metric) the experiment reports: ``compare:`` and each arm of a decision rule."""
    items = [dict(c) for c in decl.compare]
    if not items and decl.baseline is not None:
        items = [{"arm": a, "vs": "baseline"} for a, spec in decl.data["arms"].items()
                 if not (spec or {}).get("reference")]
    rule = decl.decision
    if rule.get("rule") == "select":
        for roles in rule["candidates"].values():
            for req in rule.get("require", []):
                items.append({"arm": roles[req["role"]], "vs": req["vs"]})
    else:
        items += [{"arm": r["arm"], "vs": r["vs"]} for r in rule.get("require", [])]
    out, seen = [], set()
    for item in items:
        for metric in ([item["metric"]] if item.get("metric") else decl.metrics):
            key = (item["arm"], item["vs"], metric)
            if key not in seen:
                seen.add(key)
                out.append({"arm": item["arm"], "vs": item["vs"], "metric": metric})
    return out


def plan(decl: Declaration, root: Path = Path(".")) -> list[PlannedRun]:
    """Every run the experiment reads: its arms, and the baseline's arms it is compared with."""
    runs = []
    for arm in decl.arms.values():
        runs += _plan_arm(decl, arm, arm.envs, decl.seeds, root)
    needed = []
    for c in comparisons(decl):
        for ref in (c["arm"], c["vs"]):
            if ref == "baseline" or ref.startswith("baseline:"):
                name = c["arm"] if ref == "baseline" else ref.split(":", 1)[1]
                needed += [name] if name not in needed else []
    for name in needed:
        base_decl, arm = baseline_arm(decl, name, root)
        envs = [e for e in decl.envs if e in base_decl.envs]
        runs += _plan_arm(base_decl, arm, envs, decl.seeds, root, label=f"baseline:{name}")
    unique: dict[tuple, PlannedRun] = {}
    for run in runs:
        unique.setdefault((run.env, run.arm, run.seed), run)
    return list(unique.values())


def index_runs(results_root: Path) -> dict[tuple[str, int], Path]:
    """``(run key, seed) -> run dir`` of every finished run (``done`` and ``config.yaml``) under ``results_root``
    (walked without following links; a run of an older, incompatible config is not reusable and left out)."""
    found: dict[tuple[str, int], Path] = {}
    if not results_root.is_dir():
        return found
    for folder in finished_run_dirs(results_root):
        try:
            _, key, seed = saved_identity(folder)
        except ArchiveError:
            continue
        found.setdefault((key, seed), folder)
    return found


def run_dirs(decl: Declaration, root: Path = Path("."), results_root: Path | None = None,
             archive_root: Path | None = None) -> list[tuple[PlannedRun, Path]]:
    """Each planned run with its folder: a finished run of the same identity anywhere under ``results_root``
    (default ``results``), else its entry in the archive (default ``runs``), else the experiment's own
    ``results/experiments/runs/<env>/<key>/seed<k>`` (to be trained)."""
    index = index_runs(results_root if results_root is not None else root / "results")
    try:
        archived = index_archive(archive_root if archive_root is not None else root / ARCHIVE_ROOT)
    except ArchiveError as e:
        raise ExperimentError(f"run archive: {e}") from None
    return [(run, index.get((run.key, run.seed)) or archived.get((run.key, run.seed)) or run.default_dir(root))
            for run in plan(decl, root)]


def train_args(run: PlannedRun, run_dir: Path | str) -> list[str]:
    """``lore train`` arguments after ``--run-dir`` for a planned run (its LLM cache inside its run dir)."""
    from lore.analysis.grid import RUN_CACHE_NAME, set_args

    overrides = dict(run.overrides)
    if "llm.cache_path" not in overrides:
        overrides["llm.cache_path"] = f"{run_dir}/{RUN_CACHE_NAME}" if run.per_run_cache else None
    return ["--ablation", run.ablation, "--seed", str(run.seed), *set_args(overrides)]


def selected(value: object, root: Path = Path(".")) -> list[str]:
    """The experiments ``--config experiment=...`` names: one name, a comma-separated list, or ``all``."""
    if value in (None, ""):
        return []
    names = declared_names(root) if value == "all" else [n.strip() for n in str(value).split(",") if n.strip()]
    for name in names:
        if not declaration_path(name, root).is_file():
            raise ExperimentError(f"experiment {name!r}: no file {declaration_path(name, root)} "
                                  f"(declared: {', '.join(declared_names(root)) or 'none'})")
    return names


def experiment_cost(name: str, root: Path = Path("."), cores: int = 1):
    """(run states in launch order, cost summary) of a declared experiment (lore.analysis.launch)."""
    from lore.analysis.launch import cost_summary, measured_times, run_states

    decl = load_declaration(name, root)
    states = run_states(decl, run_dirs(decl, root), root)
    finished = list(index_archive(root / ARCHIVE_ROOT).values()) + list(index_runs(root / "results").values())
    return states, cost_summary(decl, states, measured_times(finished), cores)


# --------------------------------------------------------------------------- metrics and comparison


def run_metrics_table(pairs: list[tuple[PlannedRun, Path]]):
    """One row per finished planned run: env, arm, seed and every metric of :data:`METRICS` it has."""
    import pandas as pd

    from lore.analysis.aggregate import run_table
    from lore.analysis.runs import ACHIEVEMENT_PREFIX, load_run
    from lore.analysis.settings import AnalysisSettings

    rows = []
    for run, folder in pairs:
        if not (folder / "done").is_file():
            continue
        loaded = load_run(folder)
        steps = int(loaded.eval["env_step"].max())
        table = run_table([loaded], AnalysisSettings(budgets=(steps,)))
        row = {"env": run.env, "arm": run.arm, "seed": run.seed,
               **{m: float(table[m].iloc[0]) for m in ("auc", "final_sr", "crafter_score") if m in table}}
        if any(c.startswith(ACHIEVEMENT_PREFIX) for c in loaded.eval.columns):
            row["distinct"] = distinct_at_last_eval(loaded.eval)
        rows.append(row)
    return pd.DataFrame(rows, columns=["env", "arm", "seed", *METRICS]) if not rows else pd.DataFrame(rows)


def experiment_figure(decl: Declaration, pairs: list[tuple[PlannedRun, Path]], out: Path) -> list[Path]:
    """``fig_success.png``: eval SR over env steps of each arm against the arm most comparisons use as ``vs``
    (mean over seeds with its 95% bootstrap band), one panel per env and arm."""
    import pandas as pd

    from lore.analysis.figures import plot_success_curves
    from lore.analysis.runs import load_run
    from lore.analysis.settings import AnalysisSettings

    frames = []
    for run, folder in pairs:
        if (folder / "done").is_file():
            ev = load_run(folder).eval[["env_step", "success_rate"]].copy()
            ev.insert(0, "seed", run.seed)
            ev.insert(0, "ablation", run.arm)
            ev.insert(0, "env", run.env)
            frames.append(ev)
    if not frames:
        return []
    vs = [c["vs"] for c in comparisons(decl)]
    base = max(vs, key=vs.count) if vs else "rl_only"
    base = f"baseline:{base}" if base == "baseline" else base
    paths = plot_success_curves(pd.concat(frames, ignore_index=True), AnalysisSettings(baseline=base), out)
    keep = [p for p in paths if p.suffix == ".png"]
    for p in paths:
        if p.suffix != ".png":
            p.unlink()
    return [p.rename(p.with_name("fig_success.png")) for p in keep]


def distinct_at_last_eval(eval_points) -> float:
    """How many Crafter achievements the last evaluation of one run unlocked (in any of its episodes)."""
    from lore.analysis.runs import ACHIEVEMENT_PREFIX

    ach = [c for c in eval_points.columns if c.startswith(ACHIEVEMENT_PREFIX)]
    last = eval_points.loc[eval_points["env_step"].idxmax(), ach]
    return float((last.astype(float) > 0).sum())


def compare_pair(x: dict[int, float], y: dict[int, float], seed: int = 0) -> dict:
    """``x`` against ``y`` (seed -> value): paired mean difference with its 95% CI, P(x > y), n per side."""
    import numpy as np

    from lore.analysis import stats as st

    xs = {s: v for s, v in x.items() if v is not None and math.isfinite(v)}
    ys = {s: v for s, v in y.items() if v is not None and math.isfinite(v)}
    both = sorted(set(xs) & set(ys))
    out = {"n_arm": len(xs), "n_vs": len(ys), "n_paired": len(both),
           "mean_arm": float(np.mean(list(xs.values()))) if xs else math.nan,
           "mean_vs": float(np.mean(list(ys.values()))) if ys else math.nan,
           "difference": math.nan, "low": math.nan, "high": math.nan, "p_improvement": math.nan}
    if len(both) >= 2:
        a, b = np.array([xs[s] for s in both]), np.array([ys[s] for s in both])
        d = st.paired_difference(a, b, confidence=CONFIDENCE, resamples=RESAMPLES, seed=seed)
        c = st.compare(a, b, confidence=CONFIDENCE, resamples=RESAMPLES, seed=seed)
        out.update(difference=d.estimate, low=d.low, high=d.high, p_improvement=c.p_improve.estimate)
    return out


def comparison_table(decl: Declaration, metrics_table):
    """One row per (env, arm, vs, metric) of :func:`comparisons`, paired by seed."""
    import pandas as pd

    rows = []
    for item in comparisons(decl):
        arm, vs = item["arm"], item["vs"]
        vs_label = f"baseline:{arm}" if vs == "baseline" else vs
        for env in decl.envs:
            if item["metric"] not in metrics_table:
                continue
            pick = metrics_table[metrics_table["env"] == env]
            x = dict(zip(pick[pick["arm"] == arm]["seed"], pick[pick["arm"] == arm][item["metric"]], strict=True))
            y = dict(zip(pick[pick["arm"] == vs_label]["seed"], pick[pick["arm"] == vs_label][item["metric"]],
                         strict=True))
            if not x and not y:
                continue
            rows.append({"env": env, "arm": arm, "vs": vs_label, "metric": item["metric"], **compare_pair(x, y)})
    return pd.DataFrame(rows)


def _holds(row, test: str, value: float | None) -> bool | None:
    """Whether one comparison row passes ``test``; None when it has too few paired seeds to say."""
    if test == "ratio_at_least":
        if not (math.isfinite(row["mean_arm"]) and math.isfinite(row["mean_vs"])):
            return None
        return bool(row["mean_arm"] >= value * row["mean_vs"])
    if row["n_paired"] < 2:
        return None
    return bool(row["low"] > 0) if test == "above" else bool(row["high"] >= 0)


def _requirement(table, arm: str, vs: str, metric: str, test: str, value: float | None) -> bool | None:
    vs_label = f"baseline:{arm}" if vs == "baseline" else vs
    rows = table[(table["arm"] == arm) & (table["vs"] == vs_label) & (table["metric"] == metric)] if len(table) else []
    if len(rows) == 0:
        return None
    results = [_holds(row, test, value) for _, row in rows.iterrows()]
    if any(r is False for r in results):
        return False
    return None if any(r is None for r in results) else True


def verdict(decl: Declaration, table, metrics_table) -> dict:
    """The decision rule applied to the comparison: ``{"verdict": ..., "reason": ...}``."""
    rule = decl.decision
    if rule["rule"] == "adopt":
        results = [(_requirement(table, r["arm"], r["vs"], r["metric"], r["test"], r.get("value")), r)
                   for r in rule["require"]]
        failed = [r for ok, r in results if ok is False]
        if failed:
            r = failed[0]
            return {"verdict": "reject", "reason": f"{r['arm']} vs {r['vs']}: {r['metric']} not {r['test']} "
                                                   f"on every env"}
        if any(ok is None for ok, _ in results):
            return {"verdict": "incomplete", "reason": "some runs have not finished"}
        return {"verdict": "adopt", "reason": "every requirement holds on every env"}
    scores, eligible, pending = {}, [], False
    for cand, roles in rule["candidates"].items():
        oks = [_requirement(table, roles[r["role"]], r["vs"], r["metric"], r["test"], r.get("value"))
               for r in rule.get("require", [])]
        pending |= any(ok is None for ok in oks)
        arm = roles[rule["score"]["role"]]
        values = metrics_table[metrics_table["arm"] == arm] if len(metrics_table) else []
        if len(values):
            per_env = values.groupby("env")[rule["score"]["metric"]].mean()
            scores[cand] = float(per_env.mean()) if len(per_env) == len(decl.arms[arm].envs) else math.nan
        if all(ok is True for ok in oks):
            eligible.append(cand)
    if pending or any(not math.isfinite(scores.get(c, math.nan)) for c in rule["candidates"]):
        return {"verdict": "incomplete", "reason": "some runs have not finished", "scores": scores}
    if not eligible:
        return {"verdict": "none", "reason": "no candidate meets every requirement", "scores": scores}
    best = max(scores[c] for c in eligible)
    tied = [c for c in eligible if scores[c] >= best - float(rule.get("tie", 0.0))]
    winner = min(tied, key=lambda c: (rule["candidates"][c]["mechanisms"], -scores[c]))
    return {"verdict": f"select {winner}", "reason": f"highest mean {rule['score']['metric']} among "
                                                     f"{', '.join(eligible)} (ties within {rule.get('tie', 0)} "
                                                     f"go to fewer mechanisms)", "scores": scores}


def _fmt(x: float, signed: bool = False) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def arm_table(decl: Declaration, metrics_table):
    """One row per (env, arm, metric): n and the mean over seeds with its 95% bootstrap CI."""
    import numpy as np
    import pandas as pd

    from lore.analysis import stats as st

    rows = []
    for env in decl.envs:
        for arm in sorted(set(metrics_table["arm"]) if len(metrics_table) else [], key=_arm_order(decl)):
            pick = metrics_table[(metrics_table["env"] == env) & (metrics_table["arm"] == arm)]
            for metric in decl.metrics:
                values = pick[metric].to_numpy(float) if metric in pick else np.array([])
                values = values[np.isfinite(values)]
                if not values.size:
                    continue
                ci = st.stratified_bootstrap_ci([values], "mean", confidence=CONFIDENCE, resamples=RESAMPLES, seed=0)
                rows.append({"env": env, "arm": arm, "metric": metric, "n": int(values.size),
                             "mean": float(values.mean()), "low": ci.low, "high": ci.high})
    return pd.DataFrame(rows)


def _arm_order(decl: Declaration):
    names = list(decl.arms)
    return lambda arm: (names.index(arm) if arm in names else len(names), arm)


def arm_markdown(arms) -> list[str]:
    if not len(arms):
        return []
    lines = ["Each arm: mean over seeds [95% bootstrap CI], n seeds.", "",
             "| env | arm | " + " | ".join(METRICS[m] for m in arms["metric"].unique()) + " |",
             "|---|---|" + "---|" * arms["metric"].nunique()]
    for (env, arm), group in arms.groupby(["env", "arm"], sort=False):
        cells = [f"{_fmt(r['mean'])} [{_fmt(r['low'])}, {_fmt(r['high'])}] (n = {r['n']})"
                 for _, r in group.iterrows()]
        lines.append(f"| {env} | {arm} | " + " | ".join(cells) + " |")
    return lines + [""]


def comparison_markdown(decl: Declaration, table, decided: dict, run_commits: dict[str, int], arms=None) -> str:
    lines = [f"# {decl.name}", "", decl.question, "",
             f"Verdict: **{decided['verdict']}** ({decided['reason']}).", "",
             f"Code: {commits_text(run_commits)}.", "",
             *(arm_markdown(arms) if arms is not None else []),
             "Paired by seed: mean of per-seed differences (arm − vs) with its 95% bootstrap CI; P(arm > vs) over "
             "runs; n per side and paired.", "",
             "| env | arm | vs | metric | n (arm / vs / paired) | arm | vs | difference [95% CI] | P(improvement) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['env']} | {r['arm']} | {r['vs']} | {METRICS[r['metric']]} | {r['n_arm']} / {r['n_vs']} / "
                     f"{r['n_paired']} | {_fmt(r['mean_arm'])} | {_fmt(r['mean_vs'])} | {_fmt(r['difference'], True)} "
                     f"[{_fmt(r['low'], True)}, {_fmt(r['high'], True)}] | {_fmt(r['p_improvement'])} |")
    return "\n".join(lines) + "\n"


def current_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def record(decl: Declaration, table, decided: dict, commit: str | None, run_commits: dict[str, int]) -> dict:
    """What the log keeps of a finished comparison (tracked under ``docs/experiments/records``)."""
    rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
            for r in table.to_dict("records")]
    return {"name": decl.name, "commit": commit, "run_commits": run_commits, "verdict": decided["verdict"],
            "reason": decided["reason"], "scores": decided.get("scores"), "comparison": rows}


def commits_text(run_commits: dict[str, int]) -> str:
    """``runs from commit abc (155)`` or ``runs from 2 commits: abc (100), def (55)``."""
    items = ", ".join(f"{c} ({n})" for c, n in run_commits.items())
    return f"runs from commit {items}" if len(run_commits) == 1 else f"runs from {len(run_commits)} commits: {items}"


def compare_experiment(name: str, root: Path = Path("."), out: Path | None = None, record_dir: Path | None = None,
                       results_root: Path | None = None) -> dict:
    """Compare an experiment's runs, write ``comparison.csv``/``comparison.md``/``verdict.json`` and its record."""
    from lore.utils.io import atomic_write_text

    decl = load_declaration(name, root)
    pairs = run_dirs(decl, root, results_root)
    metrics_table = run_metrics_table(pairs)
    table = comparison_table(decl, metrics_table)
    decided = verdict(decl, table, metrics_table)
    missing = sum(not (folder / "done").is_file() for _, folder in pairs)
    if missing:  # a rule applied to part of its grid decides nothing
        decided = {"verdict": "incomplete", "reason": f"{missing} of {len(pairs)} runs have not finished",
                   "scores": decided.get("scores")}
    out = out or root / RESULTS_DIR / name
    run_commits = commit_counts([folder for _, folder in pairs if (folder / "done").is_file()])
    rec = record(decl, table, decided, current_commit(root), run_commits)
    previous = record_dir / f"{name}.json" if record_dir is not None else None
    if previous is not None and (previous.exists() or previous.is_symlink()):  # read before anything is written
        old = read_record(previous)
        if old.get("note") and old.get("verdict") == rec["verdict"]:  # a note on the same verdict stays with it
            rec["note"] = old["note"]
    atomic_write_text(out / "comparison.csv", table.to_csv(index=False, float_format="%.6g"))
    experiment_figure(decl, pairs, out)
    arms = arm_table(decl, metrics_table)
    atomic_write_text(out / "arms.csv", arms.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(out / "comparison.md", comparison_markdown(decl, table, decided, run_commits, arms))
    atomic_write_text(out / "verdict.json", json.dumps(rec, indent=1) + "\n")
    if previous is not None:
        atomic_write_text(previous, json.dumps(rec, indent=1) + "\n")
    return rec


# --------------------------------------------------------------------------- the experiment log


def _grid_text(decl: Declaration) -> str:
    envs = ", ".join(e.removeprefix("MiniGrid-").removesuffix("-v0") for e in decl.envs)
    steps = f", {decl.steps:,} env steps" if decl.steps else ""
    return f"{envs} × {', '.join(decl.arms)} × {len(decl.seeds)} seeds{steps}"


def _effect_text(rec: dict) -> str:
    parts = []
    for r in rec.get("comparison", []):
        if r.get("difference") is None:
            continue
        env = r["env"].removeprefix("MiniGrid-").removesuffix("-v0")
        parts.append(f"{r['arm']} − {r['vs']} {METRICS[r['metric']]} on {env}: {r['difference']:+.3f} "
                     f"[{r['low']:+.3f}, {r['high']:+.3f}] (n = {r['n_paired']} paired)")
    return "; ".join(parts) or "no paired result yet"


def log_markdown(root: Path = Path(".")) -> str:
    """The experiment log: declared experiments (with their records) first, then the imported ones."""

    lines = ["# Experiment log", "",
             "Written by `python -m lore.analysis.experiments log` from `config/experiments/*.yaml`, their records "
             "in `docs/experiments/records/` and the imported entries in `docs/experiments/imported.yaml`; "
             "do not edit. Effects are paired by seed, 95% bootstrap CIs.", "", "## Declared experiments", ""]
    entries = read_imported(root / IMPORTED)
    declared = [(load_declaration(name, root), record_path(name, root)) for name in declared_names(root)]
    records = {p: read_record(p) for _, p in declared if p.exists() or p.is_symlink()}
    for decl, rec_path in declared:
        name = decl.name
        rec = records.get(rec_path)
        change = ", ".join(f"{k}={json.dumps(v)}" for k, v in decl.settings.items()) or "see arms"
        lines += [f"### {name}", "", f"- Question: {decl.question}", f"- Change: {change}",
                  f"- Grid: {_grid_text(decl)}; baseline: {decl.baseline or 'none'}"]
        if rec is None:
            lines += ["- Status: declared, not run yet", ""]
            continue
        lines += [f"- Effect: {_effect_text(rec)}", f"- Verdict: {rec['verdict']} ({rec['reason']})"]
        lines += [f"- Decision: {rec['note']}"] if rec.get("note") else []
        commits = rec.get("run_commits") or {}
        mixed = " (the runs of this comparison come from more than one commit)" if len(commits) > 1 else ""
        lines += [f"- Compared at commit {rec['commit'] or 'unknown'}; "
                  f"{commits_text(commits) if commits else 'run commits not recorded'}{mixed}", ""]
    if entries:
        lines += ["## Imported experiments", "",
                  "Run before experiments were declared; numbers copied once from their reports (named in each "
                  "entry), not rerun.", ""]
        for e in entries:
            lines += [f"### {e['name']}", "", f"- Question: {e['question']}", f"- Change: {e['change']}",
                      f"- Grid: {e['grid']} (n = {e['n'] if e.get('n') is not None else '—'}); "
                      f"baseline: {e.get('baseline') or 'none'}",
                      f"- Effect: {e['effect']}", f"- Verdict: {e['verdict']}; {e.get('outcome', '')}".rstrip("; "),
                      f"- Commit {e.get('commit') or '—'}; imported from `{e.get('source', '—')}`", ""]
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lore.analysis.experiments", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="validate declarations (default: all)")
    c.add_argument("names", nargs="*")
    pl = sub.add_parser("plan", help="list an experiment's runs in launch order, their states and the ETA")
    pl.add_argument("name")
    pl.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores for the ETA (default: this machine's)")
    cm = sub.add_parser("compare", help="compare an experiment's runs and apply its decision rule")
    cm.add_argument("name")
    cm.add_argument("--out", type=Path, help=f"output folder (default: {RESULTS_DIR}/<name>)")
    cm.add_argument("--record", action="store_true", help=f"also write {RECORDS_DIR}/<name>.json for the log")
    nt = sub.add_parser("note", help="record what was done with a verdict (shown in the log)")
    nt.add_argument("name")
    nt.add_argument("text")
    lg = sub.add_parser("log", help=f"write {LOG}")
    lg.add_argument("--out", type=Path, default=LOG)
    args = p.parse_args(argv)
    try:
        if args.command == "check":
            for name in args.names or declared_names():
                load_declaration(name)
            print(f"{len(args.names or declared_names())} declaration(s) valid")
        elif args.command == "plan":
            if args.cores < 1:
                raise ExperimentError(f"--cores {args.cores}: must be at least 1")
            from lore.analysis.launch import cost_line

            states, summary = experiment_cost(args.name, cores=args.cores)
            for s in states:
                print(f"{s.run.env}\t{s.run.arm}\tseed{s.run.seed}\t{s.state}\t{s.folder}")
            print(cost_line(summary))
        elif args.command == "note":
            from lore.utils.io import atomic_write_text

            path = record_path(args.name)
            if not path.exists() and not path.is_symlink():
                raise ExperimentError(f"experiment {args.name!r}: no record {path} (run it first)")
            rec = read_record(path)
            log_markdown()  # every file the log is written from is read and checked before anything is written
            rec["note"] = " ".join(args.text.split())
            atomic_write_text(path, json.dumps(rec, indent=1) + "\n")
            atomic_write_text(LOG, log_markdown())
            print(f"noted {args.name}; wrote {LOG}")
        elif args.command == "compare":
            rec = compare_experiment(args.name, out=args.out, record_dir=RECORDS_DIR if args.record else None)
            print(f"{args.name}: {rec['verdict']} ({rec['reason']})")
        else:
            from lore.utils.io import atomic_write_text

            atomic_write_text(args.out, log_markdown())
            print(f"wrote {args.out}")
    except ExperimentError as e:
        print(f"lore: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
