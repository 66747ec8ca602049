"""An experiment's declaration: ``config/experiments/<name>.yaml`` loaded and checked, and the run
configuration each of its arms resolves to.

The schema is ``workflow/schemas/experiment.schema.yaml``; what it cannot check (arm names against the
ablation table, environments, the baseline chain, pairing by seed, the decision rule's references, each
arm's resolved config) is checked here. Every error names the file and the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS_DIR = Path("config/experiments")
SCHEMA = REPO / "workflow" / "schemas" / "experiment.schema.yaml"
BENCHMARK = "benchmark"
"""The baseline name that means the grid of ``config/benchmark.yaml``."""
BENCHMARK_CONFIG = Path("config/benchmark.yaml")
METRICS = {"auc": "AUC", "final_sr": "final SR", "crafter_score": "Crafter score",
           "distinct": "distinct achievements"}
"""Per-run metrics an experiment can be judged on -> their label."""
TESTS = ("above", "not_below", "lower_at_least", "ratio_at_least")
"""``above``: paired CI entirely above 0; ``not_below``: paired CI upper end >= 0; ``lower_at_least``: paired CI
lower end >= ``value`` (a bound on how far below the arm may be); ``ratio_at_least``: the arm's mean >= ``value``
x the other's mean."""


class ExperimentError(ValueError):
    """A declaration that cannot run; the message names the file and the key."""


@dataclass(frozen=True)
class Arm:
    name: str
    ablation: str
    settings: dict
    envs: tuple[str, ...]
    seeds: tuple[int, ...] = ()
    """The arm's own seeds (a subset of ``grid.seeds``); empty: every seed of the grid."""


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


def check_name(name: object, what: str = "experiment") -> str:
    """``name`` when it is an experiment name (:data:`NAME`); :class:`ExperimentError` otherwise."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        from lore.validation import show

        raise ExperimentError(f"{what} {show(name)}: not an experiment name (ASCII letters, digits and _, "
                              f"not starting with a digit, at most 64 characters)")
    return name


def declaration_path(name: str, root: Path = Path(".")) -> Path:
    return root / EXPERIMENTS_DIR / f"{check_name(name)}.yaml"


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
                             tuple(spec.get("envs", grid["envs"])), tuple(spec.get("seeds", ())))
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
    from lore.grid.workflow import known_env

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
        for seed in arm.seeds:
            if seed not in decl.seeds:
                raise _fail(path, f"arms.{arm.name}.seeds", f"seed {seed} is not in grid.seeds")
    base = root / decl.base
    if not base.is_file():
        raise _fail(path, "base", f"no workflow config {decl.base}")
    if decl.baseline is not None:
        _check_baseline(decl, root)
    for i, item in enumerate(decl.compare):
        _check_reference(decl, f"compare[{i}]", item)
    _check_decision(decl)
    # every (env, arm) resolves to a valid run config (unknown settings keys, wrong types): the experiment's
    # settings first, named as such, then each arm's own; an arm of a removed variant (only a decided experiment
    # may keep one: lore.experiments.plan refuses it in an open one) resolves to nothing
    removed = removed_variant_arms(decl)
    changed = [a for a in decl.arms.values() if a.settings and a.name not in removed]
    if decl.settings and changed:
        arm = changed[0]
        try:
            resolved_config(decl, Arm(arm.name, arm.ablation, dict(decl.settings), arm.envs), arm.envs[0], root)
        except Exception as e:  # noqa: BLE001 - ConfigError or GridError
            raise _fail(path, "settings", " ".join(str(e).split())[:300]) from None
    for arm in decl.arms.values():
        if arm.name in removed:
            continue
        try:
            resolved_config(decl, arm, arm.envs[0], root)
        except Exception as e:  # noqa: BLE001 - ConfigError or GridError, named by the arm
            key = f"arms.{arm.name}.settings" if arm.settings else "settings"
            raise _fail(path, key, " ".join(str(e).split())[:300]) from None


def removed_variant_arms(decl: Declaration) -> dict[str, str]:
    """``{arm: why}`` for the arms whose settings choose a removed variant (a retired setting away from its
    neutral value, or a retired value: :mod:`lore.config.retired`). Such an arm cannot run any more; a decided
    experiment keeps it, since its record names the runs' keys, and an open one is refused."""
    from lore.archive.identity import retired_text
    from lore.config import nested_from_dotted
    from lore.config.retired import retired_values

    out = {}
    for arm in decl.arms.values():
        gone = retired_values(nested_from_dotted(dict(arm.settings)), changed_only=True)
        if gone:
            out[arm.name] = retired_text(tuple(sorted(gone.items())))
    return out


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


def decision_envs(decl: Declaration) -> list[str]:
    """The envs the decision rule reads: ``decision.envs``, else every env of the grid (the others are reported)."""
    return list(decl.decision.get("envs") or decl.envs)


def decided_arms(rule: dict) -> list[str]:
    """The arms of this experiment a decision rule reads (its requirements and candidates; not ``vs``)."""
    if rule["rule"] == "select":
        return [arm for roles in rule["candidates"].values() for role, arm in roles.items() if role != "mechanisms"]
    if rule["rule"] == "power":
        return [rule["arm"]]
    return [req["arm"] for req in rule.get("require", [])]


def _check_decision_envs(decl: Declaration) -> None:
    """``decision.envs`` are envs of the grid, and every arm the rule reads runs on each of them."""
    path, rule = decl.path, decl.decision
    for i, env in enumerate(rule.get("envs") or []):
        if env not in decl.envs:
            raise _fail(path, f"decision.envs[{i}]", f"{env!r} is not in grid.envs")
    refs = decided_arms(rule) + [req["vs"] for req in rule.get("require", [])]
    for arm in refs:
        spec = decl.arms.get(arm)
        missing = [e for e in decision_envs(decl) if spec is not None and e not in spec.envs]
        if missing:
            raise _fail(path, "decision.envs", f"arm {arm!r} does not run on {missing[0]!r}, which the rule reads")


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
        if req["test"] in ("ratio_at_least", "lower_at_least") and "value" not in req:
            raise _fail(path, f"decision.require[{i}].value", f"{req['test']} needs a value")
    if rule["rule"] == "power":
        _check_reference(decl, "decision", {"arm": rule["arm"], "metric": rule["metric"]})
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
    _check_decision_envs(decl)


def _roles(rule: dict) -> set[str]:
    return {role for roles in rule.get("candidates", {}).values() for role in roles if role != "mechanisms"}



# --------------------------------------------------------------------------- resolved run configs


def base_config(decl_base: str, root: Path) -> dict:
    from lore.config import load_yaml

    return load_yaml(root / decl_base)


def run_overrides(decl: Declaration, arm: Arm, env: str, root: Path, base: dict | None = None) -> dict[str, object]:
    """Dotted overrides of one (arm, env): the base config's run settings <- the budget <- the arm's settings
    (``base``: the base workflow config, when the caller has read it already)."""
    from lore.config import dotted, load_yaml
    from lore.grid.workflow import run_overrides as workflow_overrides

    base = base if base is not None else base_config(decl.base, root)
    # the base's run_config file first, as `lore train --config` would read it
    overrides = dotted(load_yaml(root / base["run_config"])) if base.get("run_config") else {}
    overrides.update(workflow_overrides(base, env, arm.ablation))
    if decl.steps is not None:
        overrides["train.steps"] = int(decl.steps)
    overrides.update(arm.settings)
    return overrides


def resolve_overrides(overrides: dict[str, object], ablation: str):
    from lore.config import build_config

    return build_config(None, [f"{k}={json.dumps(v)}" for k, v in overrides.items()], ablation)


def resolved_config(decl: Declaration, arm: Arm, env: str, root: Path):
    return resolve_overrides(run_overrides(decl, arm, env, root), arm.ablation)


def _benchmark_jobs(root: Path):
    from lore.config import load_yaml
    from lore.grid.workflow import grid_jobs

    return grid_jobs(load_yaml(root / BENCHMARK_CONFIG))
