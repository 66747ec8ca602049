"""The status of a grid of training runs (``lore status``), read from their run directories only.

A run directory's state comes from what ``lore train`` leaves there: ``done`` (finished), a live holder
of ``.lock`` (running), rows in ``metrics.csv``/``eval.csv`` or a ``checkpoint.pt`` (progress), and the end
of ``train.log`` (the error a failed run stopped on, or the line of a run interrupted at a checkpoint, which
resumes when run again). Nothing here writes to a run directory, so it works the
same for laptop and SLURM runs, while they run.

Whatever a results tree holds, ``lore status`` finishes: every file is opened without blocking and read only
if it is a regular file, up to a size bound (:data:`MAX_TABLE_BYTES`, :data:`MAX_SMALL_BYTES`), and parsed
with bounded depth and number size; a run whose files are not what ``lore train`` writes is a row whose
note says why (a FIFO, a device, too large, nested too deeply, ...).
"""

from __future__ import annotations

import csv
import fcntl
import json
import math
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from lore.train.progress import eta_seconds, format_duration, log_points, number_or_nan, training_rate

STATES = ("done", "running", "waiting", "failed")
INTERRUPTED = "interrupted"
"""The state of a run stopped cleanly at a checkpoint (SIGTERM, preemption): it resumes when run again. The
summary line counts it only when there is one."""
NOTE_WIDTH = 60
LOG_TAIL_BYTES = 4096
_SEED_DIR = re.compile(r"^seed(\d+)$")
_ERROR_LINE = re.compile(r"^(lore: error:|lore: interrupted|Traceback|Killed|\w+(Error|Exception|Interrupt)\b)")
_MAX_DEPTH = 6
MAX_TABLE_BYTES = 32 << 20
"""Largest ``metrics.csv``/``eval.csv`` read (a long run's tables are a few MB)."""
MAX_SMALL_BYTES = 1 << 20
"""Largest ``config.yaml``, ``done`` or ``.grid.json`` read (each is a few KB)."""
_MAX_INT = 2**63
MAIN_WORKFLOW_CONFIG = "config/config.yaml"
"""The workflow's default config (relative to the repository root, where the workflow runs)."""


def _read(path: Path, limit: int) -> bytes | None:
    """The bytes of a regular file of at most ``limit`` bytes; None when it does not exist.

    ``OSError`` (an :class:`~lore.utils.io.UnsafeFileError` for a FIFO, a device, a folder or a file that is
    too large) says why it cannot be read; nothing ever blocks."""
    from lore.utils.io import read_bounded

    try:
        return read_bounded(path, limit, directory="/")
    except FileNotFoundError:
        return None


def _why(path: Path, e: OSError) -> str:
    """Why ``path`` cannot be read, for a note: what it is rather than where it is."""
    from lore.utils.io import UnsafeFileError

    if isinstance(e, UnsafeFileError):
        return f"{path.name} {str(e).removeprefix(str(path)).strip().split(';')[0]}"
    return f"{path.name} unreadable ({e.strerror or e})"


# ---------------------------------------------------------------- one run directory


@dataclass
class RunStatus:
    """One row of ``lore status``."""

    path: str
    env: str
    arm: str
    seed: str
    state: str = "waiting"
    step: int | None = None
    total: int | None = None
    steps_per_s: float = math.nan
    eval_sr: float = math.nan
    eta_s: float = math.nan
    note: str = ""


def read_csv_rows(path: Path) -> tuple[list[dict], str]:
    """The rows of a CSV table that parse, and what is wrong with the rest ('' when nothing is)."""
    try:
        data = _read(path, MAX_TABLE_BYTES)
        if data is None:
            return [], ""
        text = data.decode("utf-8")
    except OSError as e:
        return [], _why(path, e)
    except UnicodeDecodeError:
        return [], f"{path.name} corrupt (not UTF-8 text)"
    if not text.strip():
        return [], f"{path.name} corrupt (empty)"
    try:
        records = list(csv.reader(text.splitlines()))
    except csv.Error as e:
        return [], f"{path.name} corrupt ({e})"
    header, body = records[0], [r for r in records[1:] if r]
    if "env_step" not in header:
        return [], f"{path.name} corrupt (no env_step column)"
    cut = not text.endswith("\n") and bool(body)  # a copy or a write stopped mid-line (lore's own are atomic)
    body = body[:-1] if cut else body
    rows = [dict(zip(header, r, strict=True)) for r in body if len(r) == len(header)]
    rows = [row for row in rows if math.isfinite(number_or_nan(row["env_step"]))]
    if cut:
        return rows, f"{path.name} half-written (last line cut off)"
    bad = len(body) - len(rows)
    return rows, f"{path.name} corrupt ({bad} of {len(body)} rows unparsable)" if bad else ""


def read_run_config(run_dir: Path) -> tuple[dict, str]:
    """The saved run config as a mapping, and what is wrong with it ('' when nothing is)."""
    from lore.config import ConfigError, parse_yaml

    path = run_dir / "config.yaml"
    try:
        raw = _read(path, MAX_SMALL_BYTES)
        if raw is None:
            return {}, ""
        data = parse_yaml(raw.decode("utf-8"))
    except OSError as e:
        return {}, _why(path, e)
    except UnicodeDecodeError:
        return {}, "config.yaml corrupt (not UTF-8 text)"
    except ConfigError as e:
        return {}, f"config.yaml corrupt ({' '.join(str(e).split())[:80]})"
    return (data, "") if isinstance(data, dict) else ({}, "config.yaml corrupt (not a mapping)")


def lock_held(run_dir: Path) -> bool:
    """Whether a live process holds ``<run_dir>/.lock`` (a non-blocking flock attempt, released at once);
    False for a ``.lock`` that is not a regular file (:func:`lock_problem` says so)."""
    try:
        fd = os.open(run_dir / ".lock", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing the descriptor also drops the lock it may have taken
    return False


def lock_problem(run_dir: Path) -> str:
    """What is wrong with ``<run_dir>/.lock`` ('' when it is absent or a regular file); nothing is opened."""
    from lore.utils.io import file_kind

    try:
        mode = os.lstat(run_dir / ".lock").st_mode
    except OSError:
        return ""
    if stat.S_ISLNK(mode):
        return ".lock is a symbolic link (a run refuses it)"
    return "" if stat.S_ISREG(mode) else f".lock is {file_kind(mode)} (a run refuses it)"


def log_error(run_dir: Path) -> str:
    """The error ``train.log`` ends on ('' when its last line is not one, or it is not a regular file)."""
    from lore.utils.io import open_regular

    try:
        with open(open_regular(run_dir / "train.log", directory="/"), "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(fh.tell() - LOG_TAIL_BYTES, 0))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    if not lines:
        return ""
    last = lines[-1]
    return last if _ERROR_LINE.match(last) else ""


def _done_summary(run_dir: Path) -> tuple[dict, str]:
    path = run_dir / "done"
    try:
        summary = json.loads((_read(path, MAX_SMALL_BYTES) or b"").decode("utf-8"))
    except OSError as e:
        return {}, f"done marker unreadable: {_why(path, e)}"
    except (UnicodeDecodeError, ValueError, RecursionError):  # ValueError: JSON, or a 5000-digit number
        return {}, "done marker unreadable"
    return (summary, "") if isinstance(summary, dict) else ({}, "done marker unreadable")


def _identity(run_dir: Path, root: Path, cfg: dict) -> tuple[str, str, str]:
    """(env, arm, seed) from the saved config, else from the ``<env>/<ablation>/seed<k>`` layout (an
    experiment's ``<env>/<ablation>-<key>/seed<k>`` folder is shown as its arm)."""
    parts = run_dir.relative_to(root).parts if run_dir.is_relative_to(root) else ()
    layout = parts if len(parts) == 3 and _SEED_DIR.match(parts[2]) else ("?", "?", "seed?")
    env = cfg.get("env", {}).get("name") if isinstance(cfg.get("env"), dict) else None
    arm, seed = cfg.get("ablation"), cfg.get("seed")
    if arm and str(layout[1]).startswith(f"{arm}-"):  # an experiment's run: its folder names the configuration
        arm = layout[1]
    return (_short(env or layout[0]), _short(arm or layout[1]),
            _short(seed) if seed is not None else _SEED_DIR.sub(r"\1", layout[2]))


def _short(value: object, width: int = 40) -> str:
    """A config value as a table cell: one line of at most ``width`` characters (``?`` for a deep value)."""
    try:
        text = " ".join(str(value).split()) if isinstance(value, (str, int, float)) else "?"
    except ValueError:  # an integer too long to print
        text = "?"
    return text if len(text) <= width else text[: width - 3] + "..."


def _total_steps(cfg: dict) -> int | None:
    steps = number_or_nan(cfg.get("train", {}).get("steps")) if isinstance(cfg.get("train"), dict) else math.nan
    return int(steps) if math.isfinite(steps) and 0 < steps < _MAX_INT else None


def _prefill(cfg: dict) -> int | None:
    """A run's prefill steps from its saved config; None when the config does not say."""
    train = cfg.get("train")
    steps = number_or_nan(train.get("prefill")) if isinstance(train, dict) else math.nan
    return int(steps) if math.isfinite(steps) and 0 <= steps < _MAX_INT else None


def _trains(cfg: dict) -> bool:
    """Whether a run's saved config updates a policy (the random baseline does not)."""
    train = cfg.get("train")
    return not (isinstance(train, dict) and train.get("policy") == "random")


def run_status(run_dir: Path, root: Path) -> RunStatus:
    """The state, progress, speed, latest eval SR and time left of one run directory."""
    cfg, cfg_problem = read_run_config(run_dir)
    env, arm, seed = _identity(run_dir, root, cfg)
    metrics, metrics_problem = read_csv_rows(run_dir / "metrics.csv")
    evals, eval_problem = read_csv_rows(run_dir / "eval.csv")
    steps = [int(number_or_nan(r["env_step"])) for r in metrics + evals]
    status = RunStatus(path=str(run_dir), env=env, arm=arm, seed=seed, total=_total_steps(cfg),
                       step=max(steps) if steps else None,
                       steps_per_s=training_rate(log_points(metrics), trains=_trains(cfg), prefill=_prefill(cfg)),
                       eval_sr=number_or_nan(evals[-1].get("success_rate")) if evals else math.nan)
    notes = [p for p in (cfg_problem, metrics_problem, eval_problem, lock_problem(run_dir)) if p]
    if (run_dir / "done").exists():
        status.state = "done"
        summary, problem = _done_summary(run_dir)
        notes.append(problem or f"wall {format_duration(number_or_nan(summary.get('wall_s')))}")
        recorded = summary.get("env_step")
        status.step = recorded if isinstance(recorded, int) and 0 <= recorded < _MAX_INT else status.step
    elif lock_held(run_dir):
        status.state = "running"
        if status.step is not None and status.total is not None:
            status.eta_s = eta_seconds(status.step, status.total, status.steps_per_s)
    else:
        error = log_error(run_dir)
        if error.startswith("lore: interrupted") and (run_dir / "checkpoint.pt").exists():
            status.state = INTERRUPTED
            notes.append(error.removeprefix("lore: "))
        elif steps or error or (run_dir / "checkpoint.pt").exists():
            status.state = "failed"
            notes.append(error or "stopped without an error in train.log (killed?)")
    status.note = "; ".join(notes)
    return status


# ---------------------------------------------------------------- the grid


def find_run_dirs(root: Path) -> list[Path]:
    """Run directories under ``root``: ``<env>/<ablation>/seed<k>`` folders and any folder with a config.yaml."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        path = Path(dirpath)
        depth = len(path.relative_to(root).parts)
        if "config.yaml" in filenames or (depth == 3 and _SEED_DIR.match(path.name)):
            found.append(path)
            dirnames[:] = []  # a run's own folders (tb, replay_memmap) hold no runs
        elif depth >= _MAX_DEPTH:
            dirnames[:] = []
        dirnames.sort()
    return found


def waiting_run(root: Path, env: str, arm: str, seed: int, total: int | None) -> RunStatus:
    """A run of the workflow's grid with no directory yet."""
    return RunStatus(path=str(root / env / arm / f"seed{seed}"), env=env, arm=arm, seed=str(seed), total=total)


def grid_status(root: Path, planned: Sequence[RunStatus] = (), others: bool = True) -> list[RunStatus]:
    """The ``planned`` runs (a row each, directory or not), then every other run directory under ``root``."""
    seen = set()
    runs = []
    for plan in planned:
        path = Path(plan.path)
        runs.append(run_status(path, root) if path.is_dir() else plan)
        seen.add(path.resolve())
    found = find_run_dirs(root) if others and root.is_dir() else []
    extra = [run_status(d, root) for d in found if d.resolve() not in seen]
    extra.sort(key=lambda r: (r.env, r.arm, int(r.seed) if r.seed.isdigit() else math.inf, r.seed))
    return runs + extra


def workflow_lines(root: str, jobs: Iterable) -> list[str]:
    """For the workflow's console: the grid's summary line, then one line per failed run with its log."""
    root_path = Path(root)
    planned = [waiting_run(root_path, job.env, job.ablation, job.seed, None) for job in jobs]
    runs = grid_status(root_path, planned, others=False)
    failed = [f"  failed: {r.env} {r.arm} seed {r.seed}: {r.note} (log: {r.path}/train.log)"
              for r in runs if r.state == "failed"]
    failed += [f"  interrupted: {r.env} {r.arm} seed {r.seed}: resumes from its checkpoint when run again "
               f"(log: {r.path}/train.log)" for r in runs if r.state == INTERRUPTED]
    return [f"lore: {summary_line(summarize(runs))}", *failed]


def summarize(runs: Sequence[RunStatus]) -> dict:
    """Counts per state and the time until every run not yet done is, at the current parallelism."""
    counts = {state: sum(r.state == state for r in runs) for state in (*STATES, INTERRUPTED)}
    rates: dict[str, list[float]] = {}
    for r in runs:
        if math.isfinite(r.steps_per_s):
            rates.setdefault(r.env, []).append(r.steps_per_s)
    every = [v for values in rates.values() for v in values]
    work = 0.0
    for r in runs:
        if r.state == "running":
            work += r.eta_s
        elif r.state != "done":
            rate = _mean(rates.get(r.env) or every)
            work += eta_seconds(r.step or 0, r.total, rate) if r.total is not None else math.nan
    running = [r.eta_s for r in runs if r.state == "running"]
    eta = max(work / len(running), *running) if running and math.isfinite(work) else math.nan
    return {"runs": len(runs), **counts, "eta_s": eta}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summary_line(summary: dict) -> str:
    shown = [*STATES[:3], *([INTERRUPTED] if summary.get(INTERRUPTED) else []), STATES[3]]
    counts = ", ".join(f"{summary[s]} {s}" for s in shown)
    when = (f"ETA {format_duration(summary['eta_s'])} at {summary['running']} in parallel" if summary["running"]
            else "nothing running")
    return f"{summary['runs']} run{'' if summary['runs'] == 1 else 's'}: {counts}; {when}"


def format_table(runs: Sequence[RunStatus]) -> str:
    """A plain-text table, one row per run, columns aligned."""
    header = ("ENV", "ARM", "SEED", "STEP", "STEPS/S", "EVAL SR", "ETA", "STATE", "NOTE")
    rows = [header] + [_cells(r) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join([c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)] + [row[-1]]).rstrip() for row in rows)


def _cells(r: RunStatus) -> tuple[str, ...]:
    step = "-" if r.step is None else str(r.step)
    progress = f"{step}/{r.total}" if r.total is not None else step
    note = r.note if len(r.note) <= NOTE_WIDTH else r.note[: NOTE_WIDTH - 3] + "..."
    return (r.env, r.arm, r.seed, progress, _fixed(r.steps_per_s, 1), _fixed(r.eval_sr, 2),
            format_duration(r.eta_s), r.state, note)


def _fixed(value: float, digits: int) -> str:
    return f"{value:.{digits}f}" if math.isfinite(value) else "-"


def to_json(root: Path, runs: Sequence[RunStatus], summary: dict) -> str:
    """The table and the summary as JSON (NaN as null)."""
    clean = lambda d: {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}  # noqa: E731
    return json.dumps({"root": str(root), "runs": [clean(asdict(r)) for r in runs], "summary": clean(summary)},
                      indent=2)


def finished_line(run_dir: Path) -> str:
    """One line for a finished run: env, arm, seed, final eval SR and wall time (from ``done``)."""
    cfg, _ = read_run_config(run_dir)
    env, arm, seed = _identity(run_dir, run_dir, cfg)
    summary, _ = _done_summary(run_dir)
    sr = _fixed(number_or_nan(summary.get("final_success_rate")), 2)
    return (f"lore: {env} {arm} seed {seed} finished: eval SR {sr}, {summary.get('env_step', '?')} steps "
            f"in {format_duration(number_or_nan(summary.get('wall_s')))}")


# ---------------------------------------------------------------- the command


def resolve_root(root: str | None, config: dict | None) -> Path:
    """The runs root: ``ROOT/runs`` for a results root, ``ROOT`` itself otherwise; by default the workflow's."""
    from lore.grid.workflow import RUNS_ROOT, runs_root

    if root is None:
        return Path(runs_root(config) if config is not None else RUNS_ROOT)
    path = Path(root)
    return path / "runs" if (path / "runs").is_dir() else path


def planned_runs(config: dict, config_path: str, root: Path) -> list[RunStatus]:
    """The training runs of a workflow config, as waiting rows under ``root``; ConfigError naming the file if bad."""
    from lore.config import ConfigError, load_config
    from lore.grid.workflow import GridError, check_workflow_config, run_overrides

    try:
        jobs = check_workflow_config(config)
    except (GridError, TypeError, KeyError, AttributeError) as e:
        raise ConfigError(f"--config {config_path}: {e}") from None
    totals: dict[tuple[str, str], int | None] = {}
    for job in jobs:
        if (job.env, job.ablation) not in totals:
            overrides = [f"{k}={json.dumps(v)}" for k, v in run_overrides(config, job.env, job.ablation).items()]
            totals[job.env, job.ablation] = load_config(config.get("run_config"), overrides, job.ablation).train.steps
    return [waiting_run(root, job.env, job.ablation, job.seed, totals[job.env, job.ablation]) for job in jobs]


def load_workflow_config(path: str) -> dict:
    """A workflow config file as Snakemake would read it; ConfigError naming the file if it is not one."""
    from lore.config import ConfigError
    from lore.grid.workflow import default_results_root, normalise_cli_config

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"--config {path}: cannot read a workflow config ({type(e).__name__}: "
                          f"{getattr(e, 'strerror', None) or e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: a workflow config is a mapping, got {type(data).__name__}")
    data.setdefault("results_root", default_results_root([path], MAIN_WORKFLOW_CONFIG))  # as the Snakefile does
    return normalise_cli_config(data)


def recorded_runs(runs_dir: Path) -> list[RunStatus]:
    """The grid the workflow recorded beside ``runs_dir`` (``<results_root>/.grid.json``), as waiting rows;
    [] when there is no readable record."""
    from lore.grid.workflow import GRID_RECORD

    try:
        record = json.loads((_read(runs_dir.parent / GRID_RECORD, MAX_SMALL_BYTES) or b"").decode("utf-8"))
        settings = record.get("settings") or {}
        rows = []
        for env, ablation, seed in record["runs"]:
            steps = (settings.get(f"{env} / {ablation}") or {}).get("train.steps")
            rows.append(waiting_run(runs_dir, str(env), str(ablation), int(seed),
                                    int(steps) if isinstance(steps, int) else None))
        return rows
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return []


def status_command(root: str | None, config_path: str | None, as_json: bool) -> int:
    """``lore status``: print the grid's table (or JSON) and a summary line; ConfigError for a missing root."""
    from lore.config import ConfigError

    config = load_workflow_config(config_path) if config_path else None
    runs_dir = resolve_root(root, config)
    if runs_dir.exists() and not runs_dir.is_dir():
        raise ConfigError(f"status: {runs_dir} is not a directory")
    if not runs_dir.exists() and config_path is None:
        raise ConfigError(f"status: {runs_dir}: no such directory (give a runs or results root)")
    planned = planned_runs(config, config_path, runs_dir) if config is not None else recorded_runs(runs_dir)
    runs = grid_status(runs_dir, planned)
    summary = summarize(runs)
    if as_json:
        print(to_json(runs_dir, runs, summary))
        return 0
    print(format_table(runs) if runs else f"no run directories under {runs_dir}")
    print(summary_line(summary))
    return 0


def write_finished_line(run_dir: str | Path, target: str) -> None:
    """Append :func:`finished_line` to ``target``; a target that cannot be written is skipped (the run is done).

    ``/dev/fd/N`` is written through descriptor N itself, sharing its offset with the other writers of that
    file (a console redirected with ``>`` would otherwise overwrite the line).
    """
    data = (finished_line(Path(run_dir)) + "\n").encode("utf-8")
    inherited = re.fullmatch(r"/dev/fd/(\d+)", target)
    try:
        if inherited:
            os.write(int(inherited.group(1)), data)
        else:
            with open(target, "ab") as fh:
                fh.write(data)
    except OSError:
        pass
