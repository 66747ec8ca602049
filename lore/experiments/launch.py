"""An experiment before it runs: each planned run's state, the order its missing runs train in, and the cost.

States: ``archived`` (an entry in the run archive), ``finished`` (a finished run under ``results/``),
``running`` (a live training holds its folder) and ``missing``. Missing runs train seed by seed: every run
that the decision rule reads for seed 0, on every env and arm, then seed 1, and so on; the runs that the rule
does not read (reported comparisons only) come last, seed by seed too. A grid stopped half-way is thus
balanced across arms and envs.

The estimate of a run's wall time is the median of the finished runs of the same env, ablation, size preset
and budget, else the speed of the live runs of that profile (their env steps per second so far), else the
finished runs of the same ablation, preset and budget, else of the same preset and budget; with none,
:data:`ASSUMED_S_PER_STEP` per env step, and the summary says so. A live run counts for the steps it has
left at its own speed (half its estimate while it has logged none).
"""

from __future__ import annotations

import heapq
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from lore.archive import ARCHIVE_ROOT, MAX_SECONDS, is_live

ASSUMED_S_PER_STEP = 0.033
"""Seconds per env step assumed when no finished run has the same preset and budget (one thread)."""
JOB_START_S = 5.0
"""Seconds a ``lore train`` job spends before its first env step (interpreter, imports, env and model set-up),
added to every estimate that is not a finished run's whole time."""
STATES = ("archived", "finished", "running", "missing")


@dataclass(frozen=True)
class RunState:
    run: object  # lore.experiments.plan.PlannedRun
    folder: Path
    state: str
    feeds_decision: bool


def decision_arms(decl) -> set[str]:
    """The arms the decision rule reads (candidates' roles, required arms and what they are compared with);
    every arm when the rule names none."""
    rule = decl.decision or {}
    arms: set[str] = set()
    for roles in (rule.get("candidates") or {}).values():
        arms |= {v for k, v in roles.items() if k != "mechanisms" and isinstance(v, str)}
    for req in [*(rule.get("require") or []), rule]:
        arms |= {req[k] for k in ("arm", "vs") if isinstance(req.get(k), str)}
    return {a.removeprefix("baseline:") for a in arms} or set(decl.arms) | {"baseline"}


def run_states(decl, pairs, root: Path = Path(".")) -> list[RunState]:
    """Every planned run with its state, in launch order (see the module's docstring)."""
    archive = (root / ARCHIVE_ROOT).resolve()
    fed = decision_arms(decl)
    out = []
    for run, folder in pairs:
        done = (folder / "done").is_file()
        if done and archive in folder.resolve().parents:
            state = "archived"
        elif done:
            state = "finished"
        elif is_live(folder):
            state = "running"
        else:
            state = "missing"
        out.append(RunState(run, folder, state, run.arm.removeprefix("baseline:") in fed or
                            (run.arm.startswith("baseline:") and "baseline" in fed)))
    envs = list(decl.envs)
    arms = list(decl.arms)

    def order(s: RunState):
        arm = s.run.arm.removeprefix("baseline:")
        return (not s.feeds_decision, s.run.seed, envs.index(s.run.env) if s.run.env in envs else len(envs),
                arms.index(arm) if arm in arms else len(arms))

    return sorted(out, key=order)


def launch_ranks(states: list[RunState]) -> list[list[RunState]]:
    """The runs still to train, grouped by launch rank: (decision runs first, then the others) × seed."""
    groups: dict[tuple[bool, int], list[RunState]] = {}
    for s in states:
        if s.state in ("missing", "running"):
            groups.setdefault((not s.feeds_decision, s.run.seed), []).append(s)
    return [groups[k] for k in sorted(groups)]


DEFAULT_POLICY = "dreamer"
"""``train.policy`` where a config does not set it: a run that learns (a random-policy run is timed apart)."""


def _positive(x) -> bool:
    """``x`` is a finite number above zero (booleans excluded)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _profile(folder: Path) -> tuple[tuple, float] | None:
    """((env, ablation, preset, policy, steps), seconds) of a finished run, None if its files do not say. The seconds
    are its time on its own cores: its wall time, or its CPU time over its threads where that is shorter (a
    run paused or sharing a core)."""
    from lore.config import load_yaml

    try:
        cfg = load_yaml(folder / "config.yaml")
        done = json.loads((folder / "done").read_text(encoding="utf-8"))
        wall = done["wall_s"]
        profile = (cfg["env"]["name"], cfg["ablation"], cfg["model"]["preset"],
                   cfg["train"].get("policy", DEFAULT_POLICY), int(cfg["train"]["steps"]))
    except Exception:  # noqa: BLE001 - any unreadable run simply gives no measurement
        return None
    if not _positive(wall) or wall > MAX_SECONDS:  # no run takes a year: such a time is not measured
        return None
    cpu, threads = done.get("cpu_s"), (done.get("provenance") or {}).get("threads")
    if _positive(cpu) and cpu <= MAX_SECONDS and isinstance(threads, int) and _positive(threads):
        wall = min(wall, cpu / threads)
    return profile, float(wall)


def measured_times(folders: list[Path]) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = {}
    for folder in folders:
        found = _profile(folder)
        if found:
            out.setdefault(found[0], []).append(found[1])
    return out


def _profile_of(run) -> tuple:
    """(env, ablation, preset, policy, budget) of one planned run."""
    from lore.ablations import ABLATIONS

    overrides = {**ABLATIONS.get(run.ablation, {}), **dict(run.overrides)}
    return (run.env, run.ablation, overrides.get("model.preset", "xs"), overrides.get("train.policy", DEFAULT_POLICY),
            int(overrides.get("train.steps", 50_000)))


def estimate_seconds(run, times: dict[tuple, list[float]],
                     live: dict[tuple, list[float]] | None = None) -> tuple[float, bool]:
    """(estimated wall seconds, whether measured runs back it) of one planned run; ``live`` maps a profile
    to the seconds per env step of its live runs."""
    profile = _profile_of(run)
    steps = profile[-1]
    if times.get(profile):
        return statistics.median(times[profile]), True
    if live and live.get(profile):
        return JOB_START_S + steps * statistics.median(live[profile]), True
    for match in (profile[1:], profile[2:]):
        values = [v for key, vs in times.items() if key[-len(match):] == match for v in vs]
        if values:
            return statistics.median(values), True
    return JOB_START_S + steps * ASSUMED_S_PER_STEP, False


def live_progress(states: list[RunState]) -> dict[Path, tuple[int, int, float]]:
    """(env step, budget, env steps per second) of every running run whose logs already give a speed."""
    from lore.grid.status import run_status

    out = {}
    for s in states:
        if s.state != "running":
            continue
        st = run_status(s.folder, s.folder.parent)
        if st.step is not None and st.total and st.steps_per_s > 0:
            out[s.folder] = (st.step, st.total, st.steps_per_s)
    return out


def makespan(durations: list[float], cores: int) -> float:
    """Wall seconds to run single-thread jobs of ``durations`` on ``cores`` (longest first, greedy)."""
    loads = [0.0] * max(1, min(cores, len(durations)))  # more cores than jobs: the extra ones stay idle
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + d)
    return max(loads)


def cost_summary(decl, states: list[RunState], times: dict[tuple, list[float]], cores: int,
                 live: dict[Path, tuple[int, int, float]] | None = None) -> dict:
    """Counts by state and the ETA on ``cores`` of the runs still to train; ``live``: live_progress(states)."""
    counts = {k: sum(s.state == k for s in states) for k in STATES}
    todo = [s for s in states if s.state in ("missing", "running")]
    live = live if live is not None else live_progress(states)
    speeds: dict[tuple, list[float]] = {}
    for s in todo:
        if s.folder in live:
            speeds.setdefault(_profile_of(s.run), []).append(1.0 / live[s.folder][2])
    seconds, assumed = [], 0
    for s in todo:
        if s.folder in live:
            step, total, rate = live[s.folder]
            seconds.append(max(total - step, 0) / rate)
            continue
        estimate, measured = estimate_seconds(s.run, times, speeds)
        assumed += not measured
        seconds.append(estimate / 2 if s.state == "running" else estimate)
    return {"name": decl.name, "total": len(states), **counts, "cores": cores,
            "eta_s": makespan(seconds, cores) if seconds else 0.0, "assumed": assumed}


def format_duration(seconds: float) -> str:
    """``45 s``, ``2 min 25 s`` under ten minutes, then ``17 min``, ``1 h 05 min``; any work above 0 s shows."""
    if seconds < 600:
        whole = math.ceil(seconds)
        return f"{whole // 60} min {whole % 60:02d} s" if whole >= 60 else f"{whole} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def cost_line(summary: dict) -> str:
    basis = (f"; {summary['assumed']} run(s) estimated at {ASSUMED_S_PER_STEP} s per env step, no finished run "
             "of their preset and budget" if summary["assumed"] else "; from the measured times of finished and live runs")
    return (f"lore: experiment {summary['name']}: {summary['total']} runs: {summary['archived']} archived, "
            f"{summary['finished']} finished, {summary['running']} running, {summary['missing']} missing; "
            f"ETA {format_duration(summary['eta_s'])} on {summary['cores']} core(s){basis}")
