"""The runs an experiment needs: its arms and the baseline's arms it is compared with, each identified
by its resolved configuration and seed (:func:`lore.archive.run_key`), so a run shared with the
baseline or another experiment is trained once and found wherever it finished (:func:`index_runs`).

A decided experiment (:func:`lore.experiments.log.check_open`) is not planned again: its plan
(:func:`experiment_cost`) and its selection in the workflow (:func:`selected`) are refused in one line, and
``experiment=all`` leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lore.archive import (
    ARCHIVE_ROOT,
    ArchiveError,
    finished_run_dirs,
    index_archive,
    run_key,
    saved_identity,
)
from lore.experiments.declaration import (
    BENCHMARK,
    BENCHMARK_CONFIG,
    Arm,
    Declaration,
    ExperimentError,
    base_config,
    declaration_path,
    declared_names,
    load_declaration,
    removed_variant_arms,
    resolve_overrides,
    run_overrides,
)
from lore.experiments.log import RECORDS_DIR, check_open, decided_record

RESULTS_DIR = Path("results/experiments")
"""Where experiment runs (``runs/<env>/<key>/seed<k>``) and comparisons (``<name>/``) are written."""
TRIAL_DIR = RESULTS_DIR / "trial"
"""Where a trial (``snakemake --config experiment=NAME trial=True``) writes its comparisons."""


@dataclass(frozen=True)
class PlannedRun:
    env: str
    arm: str
    seed: int
    ablation: str
    overrides: tuple[tuple[str, object], ...]
    key: str
    per_run_cache: bool = True
    terms: tuple[tuple[str, object], ...] = field(default=(), compare=False)
    """The settings a comparison needs equal on both sides (:func:`comparison_terms`)."""

    def default_dir(self, root: Path = Path(".")) -> Path:
        return root / RESULTS_DIR / "runs" / self.env / self.key / f"seed{self.seed}"


def _plan_arm(decl: Declaration, arm: Arm, envs, seeds, root: Path, label: str | None = None) -> list[PlannedRun]:
    from lore.config import to_dict

    base = base_config(decl.base, root)
    per_run = bool((base.get("llm_cache") or {}).get("per_run", True))
    runs = []
    for env in envs:
        overrides = run_overrides(decl, arm, env, root, base)
        resolved = to_dict(resolve_overrides(overrides, arm.ablation))
        key, terms = run_key(arm.ablation, resolved), comparison_terms(resolved)
        frozen = tuple(sorted(overrides.items()))
        runs += [PlannedRun(env, label or arm.name, int(s), arm.ablation, frozen, key, per_run, terms) for s in seeds]
    return runs


COMPARED_SETTINGS = ("train.steps",)
COMPARED_PREFIXES = ("eval.",)
"""The budget and the evaluation: the settings two arms compared paired by seed must share."""


def comparison_terms(config: dict) -> tuple[tuple[str, object], ...]:
    """``(dotted key, value)`` of a resolved config's budget and evaluation settings."""
    from lore.config import dotted

    flat = dotted(config)
    return tuple(sorted((k, v) for k, v in flat.items()
                        if k in COMPARED_SETTINGS or k.startswith(COMPARED_PREFIXES)))


def check_comparable(decl: Declaration, runs: list[PlannedRun]) -> None:
    """ExperimentError naming the first comparison whose two arms differ in budget or evaluation settings
    (:data:`COMPARED_SETTINGS`): their paired differences would compare unlike runs."""
    terms = {(r.env, r.arm): dict(r.terms) for r in runs}
    for c in comparisons(decl):
        vs = f"baseline:{c['arm']}" if c["vs"] == "baseline" else c["vs"]
        for env in decl.envs:
            a, b = terms.get((env, c["arm"])), terms.get((env, vs))
            if a is None or b is None:
                continue
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    raise ExperimentError(
                        f"{decl.path}: compare: {c['arm']} vs {vs} on {env}: {key} is {a.get(key)!r} against "
                        f"{b.get(key)!r}; a paired comparison needs the same budget and evaluation on both sides")


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
    """Every run the experiment reads: its arms, and the baseline's arms it is compared with. An arm of a removed
    variant (:func:`lore.experiments.declaration.removed_variant_arms`) is left out of a decided experiment's plan
    and refused in an open one."""
    runs = []
    removed = removed_variant_arms(decl)
    if removed and decided_record(decl.name, root) is None:
        arm, why = next(iter(removed.items()))
        raise ExperimentError(f"{decl.path}: arms.{arm}: {why}; an open experiment cannot run it")
    for arm in decl.arms.values():
        if arm.name in removed:  # a decided experiment's arm of a removed variant: its record names its runs
            continue
        runs += _plan_arm(decl, arm, arm.envs, list(arm.seeds or decl.seeds), root)
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
    check_comparable(decl, list(unique.values()))
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
    from lore.grid.workflow import RUN_CACHE_NAME, set_args

    overrides = dict(run.overrides)
    if "llm.cache_path" not in overrides:
        overrides["llm.cache_path"] = f"{run_dir}/{RUN_CACHE_NAME}" if run.per_run_cache else None
    return ["--ablation", run.ablation, "--seed", str(run.seed), *set_args(overrides)]


def selected(value: object, root: Path = Path("."), report=None) -> list[str]:
    """The experiments ``--config experiment=...`` names: one name, a comma-separated list, or ``all``.

    A decided experiment named is an ExperimentDecided; ``all`` is every undecided one (``report`` gets one
    line naming the decided ones it leaves out)."""
    if value in (None, ""):
        return []
    if value == "all":
        names = declared_names(root)
        closed = [name for name in names if decided_record(name, root) is not None]
        if closed and report is not None:
            report(f"lore: experiment=all leaves out the decided {', '.join(closed)} (records in "
                   f"{RECORDS_DIR}/)")
        return [name for name in names if name not in closed]
    names = [n.strip() for n in str(value).split(",") if n.strip()]
    for name in names:
        if not declaration_path(name, root).is_file():
            raise ExperimentError(f"experiment {name!r}: no file {declaration_path(name, root)} "
                                  f"(declared: {', '.join(declared_names(root)) or 'none'})")
    for name in names:
        check_open(name, root)
    return names


def experiment_cost(name: str, root: Path = Path("."), cores: int = 1):
    """(run states in launch order, cost summary) of a declared, undecided experiment (lore.experiments.launch)."""
    from lore.experiments.launch import cost_summary, measured_times, run_states

    decl = load_declaration(name, root)
    check_open(name, root)
    states = run_states(decl, run_dirs(decl, root), root)
    finished = list(index_archive(root / ARCHIVE_ROOT).values()) + list(index_runs(root / "results").values())
    return states, cost_summary(decl, states, measured_times(finished), cores)
