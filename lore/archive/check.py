"""Checking archive entries: layout, files, identity, and every number of ``done`` and the tables within bounds.

A retired entry (:mod:`lore.archive.identity`) is checked like any other entry; it is never reused for a new run
(:func:`index_archive` leaves it out) and cannot be reproduced at this commit (:func:`not_reproducible`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from lore.archive.files import ENTRY_FILES, read_file
from lore.archive.identity import read_identity, retired_text
from lore.archive.layout import (
    ARCHIVE_ROOT,
    KEY_PATTERN,
    SEED_PATTERN,
    TEMP_PREFIX,
    ArchiveError,
    archive_exists,
    archive_lock,
    entry_path,
    folders_on_the_way,
    lstat_or_none,
    not_a_folder,
    os_error_text,
)

REQUIRED_FILES = {"config.yaml": "its config", "done": "its done marker", "eval.csv": "its eval.csv"}
MAX_STEP = 10**12  # as lore.report.runs.MAX_STEP (not imported: it loads pandas)
MAX_SECONDS = 366 * 24 * 3600
"""A wall or CPU time above a year is not a run's."""
MAX_COUNT = 10**12
MAX_THREADS = 1 << 16
MAX_MAGNITUDE = 1e9
"""No number of ``eval.csv`` (returns, lengths, scores), of ``metrics.csv`` (gate, losses, speeds, counts) nor
``done``'s return is this large."""
DONE_NUMBERS = {
    "env_step": (0, MAX_STEP - 1, "a whole number of env steps"),
    "updates": (0, MAX_COUNT, "a count of updates"),
    "episodes": (0, MAX_COUNT, "a count of episodes"),
    "wall_s": (0, MAX_SECONDS, "a number of seconds (a year at most)"),
    "cpu_s": (0, MAX_SECONDS, "a number of seconds (a year at most)"),
    "final_success_rate": (0, 1, "a rate in [0, 1]"),
    "final_return_mean": (-MAX_MAGNITUDE, MAX_MAGNITUDE, f"a return within ±{MAX_MAGNITUDE:g}"),
}
"""The numbers of ``done`` the analysis and the ETA compute with: (lowest, highest, what), each optional but
``env_step`` (null reads as absent). Every ``llm_calls*`` counter is a count too, and ``provenance.threads``
a whole number in [1, :data:`MAX_THREADS`]; other fields are not read and not checked."""


@dataclass(frozen=True)
class Entry:
    env: str
    key: str
    seed: int
    path: Path
    retired: tuple[tuple[str, object], ...] = ()
    """The retired settings its config holds at a non-neutral value: empty unless a removed variant's run."""


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_summary(path: Path, summary: dict) -> None:
    """Every number of ``done`` the analysis computes with, within its bounds (:data:`DONE_NUMBERS`)."""
    bounds = dict(DONE_NUMBERS)
    bounds.update({k: (0, MAX_COUNT, "a count of calls") for k in summary if k.startswith("llm_calls")})
    for key, (low, high, what) in bounds.items():
        value = summary.get(key)
        if value is not None and not (_number(value) and low <= value <= high):
            raise ArchiveError(f"{path}: done's {key} is {str(value)[:40]}, not {what}")
    prov = summary.get("provenance")
    if prov is not None and not isinstance(prov, dict):
        raise ArchiveError(f"{path}: done's provenance is not an object")
    threads = (prov or {}).get("threads")
    if threads is not None and not (isinstance(threads, int) and not isinstance(threads, bool)
                                    and 1 <= threads <= MAX_THREADS):
        raise ArchiveError(f"{path}: done's provenance.threads is {str(threads)[:40]}, "
                           f"not a whole number in [1, {MAX_THREADS}]")


def _table(data: bytes) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(header, [(line number, cells)]) of a CSV table; the rows of another length than the header left out."""
    rows = list(csv.reader(io.StringIO(data.decode("utf-8", "replace"))))
    header = rows[0] if rows else []
    return header, [(n, row) for n, row in enumerate(rows[1:], 2) if len(row) == len(header)]


def _float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None  # not a number: load_run names it


def _check_magnitudes(path: Path, name: str, header: list[str], rows) -> None:
    """Every number of a table finite and within ±MAX_MAGNITUDE (empty and NaN cells are no number)."""
    for line, row in rows:
        for column, cell in zip(header, row, strict=True):
            value = _float(cell)
            if value is not None and not abs(value) <= MAX_MAGNITUDE and not math.isnan(value):
                raise ArchiveError(f"{path}: {name} line {line}, column {column}: {cell[:40]} is beyond "
                                   f"±{MAX_MAGNITUDE:g}, not a run's value")


def _check_rows(path: Path, files: dict[str, bytes], done_step: int) -> None:
    """``eval.csv`` rows strictly increasing in env step up to done's; no row of ``episodes.csv``,
    ``metrics.csv`` or ``llm_calls.jsonl`` past done's env step; every number of ``eval.csv`` and
    ``metrics.csv`` (what the tables and figures average) finite and within ±MAX_MAGNITUDE."""
    header, rows = _table(files["eval.csv"])
    _check_magnitudes(path, "eval.csv", header, rows)
    column = header.index("env_step") if "env_step" in header else 0
    previous = None
    for line, row in rows:
        step = _float(row[column])
        if step is None or not math.isfinite(step):
            continue
        if step > done_step:
            raise ArchiveError(f"{path}: eval.csv line {line}: env step {row[column]} is past done's {done_step}")
        if previous is not None and step <= previous:
            raise ArchiveError(f"{path}: eval.csv line {line}: env step {row[column]} is not above the row "
                               f"before it ({previous:g}); evaluations go up strictly")
        previous = step
    for name in ("episodes.csv", "metrics.csv"):
        if name not in files:
            continue
        header, rows = _table(files[name])
        if name == "metrics.csv":
            _check_magnitudes(path, name, header, rows)
        if "env_step" not in header:
            continue
        column = header.index("env_step")
        for line, row in rows:
            step = _float(row[column])
            if step is not None and step > done_step:
                raise ArchiveError(f"{path}: {name} line {line}: env step {row[column]} is past done's {done_step}")
    for line, raw in enumerate(files.get("llm_calls.jsonl", b"").decode("utf-8", "replace").splitlines(), 1):
        try:
            step = json.loads(raw).get("env_step") if raw.strip() else None
        except (ValueError, RecursionError, AttributeError):
            continue  # load_run names it
        if _number(step) and step > done_step:
            raise ArchiveError(f"{path}: llm_calls.jsonl line {line}: env step {step} is past done's {done_step}")


def check_done(path: Path, files: dict[str, bytes]) -> dict:
    """The ``done`` summary, checked: its numbers within bounds, the last row of ``eval.csv`` at its env step
    (a truncated table shows there), and every row of the other tables against it (:func:`_check_rows`)."""
    try:
        summary = json.loads(files["done"].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ArchiveError(f"{path}: done is not a run summary (not JSON)") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("env_step"), int) \
            or isinstance(summary["env_step"], bool):
        raise ArchiveError(f"{path}: done is not a run summary (no env_step)")
    _check_summary(path, summary)
    step = summary["env_step"]
    rows = list(csv.reader(io.StringIO(files["eval.csv"].decode("utf-8", "replace"))))
    last = rows[-1][0] if len(rows) > 1 and rows[-1] else ""
    past = _float(last)
    if last != str(step) and not (past is not None and math.isfinite(past) and past > step):
        raise ArchiveError(f"{path}: eval.csv ends at env step {last or 'none'}, done at {step}: "
                           "the table is truncated")
    _check_rows(path, files, step)
    return summary


def check_entry(path: Path, root: Path) -> Entry:
    """One archive entry, checked: layout, required files, identity, done against every table's rows, numbers
    within bounds, readable tables (a retired entry as fully as any other; :attr:`Entry.retired` says it is
    one). The entry folder itself must be a folder, not a link."""
    from lore.report.runs import RunDataError, load_run

    parts = path.relative_to(root).parts
    if parts and parts[-1].startswith(TEMP_PREFIX):
        raise ArchiveError(f"{path}: the remains of an interrupted lore archive, not an entry; safe to delete")
    if len(parts) != 3 or not KEY_PATTERN.fullmatch(parts[1]) or not SEED_PATTERN.fullmatch(parts[2]):
        raise ArchiveError(f"{path}: not an archive entry (expected {root}/<env>/<ablation>-<hash>/seed<k>)")
    if not folders_on_the_way(root, path):
        raise ArchiveError(f"{path}: missing")
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "list it")) from None
    stray = [n for n in names if n not in ENTRY_FILES]
    if stray:
        raise ArchiveError(f"{path}: holds {stray[0]}, which an archive entry never holds")
    for name, what in REQUIRED_FILES.items():
        if name not in names:
            raise ArchiveError(f"{path}: lacks {what} ({name})")
    files = {name: read_file(path / name) for name in names}  # each a regular file, no link
    ident = read_identity(path)
    env, key, seed = ident.env, ident.key, ident.seed
    if (env, key, seed) != (parts[0], parts[1], int(parts[2][4:])):
        right = entry_path(root, env, key, seed)
        if right.is_dir():
            raise ArchiveError(f"{path}: duplicates {right} (the same run under another key)")
        raise ArchiveError(f"{path}: its config is {env}/{key}/seed{seed}, not the entry's "
                           f"{'/'.join(parts)} (the config does not hash to its key)")
    check_done(path, files)
    try:
        load_run(path)
    except RunDataError as e:
        raise ArchiveError(f"{path}: {' '.join(str(e).split())[:300]}") from None
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "read it")) from None
    return Entry(env, key, seed, path, ident.retired)


def entry_dirs(root: Path) -> list[Path]:
    """Every path at the entry level of the archive (``<env>/<key>/<seed>``), leftovers of interrupted writes
    included (:func:`check_entry` refuses them); a file or a link at the env or key level is an error."""
    out = []
    for env_path in _children(root) if archive_exists(root, create=False) else []:
        for key_path in _children(env_path):
            out += _children(key_path)
    return out


def _children(path: Path) -> list[Path]:
    info = lstat_or_none(path)
    if info is None:
        raise ArchiveError(f"{path}: vanished while the archive was read")
    if not stat.S_ISDIR(info.st_mode):
        raise not_a_folder(path, info)
    try:
        return [path / name for name in sorted(os.listdir(path))]
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "list it")) from None


def check_archive(root: str | Path = ARCHIVE_ROOT) -> list[Entry]:
    """Every entry of the archive, checked (retired ones included) under a shared lock; the first bad or
    duplicated entry, or the remains of an interrupted write, is an ArchiveError."""
    root = Path(root)
    found: dict[tuple[str, int], Entry] = {}
    with archive_lock(root, exclusive=False):  # a writer's temporary is not a leftover
        for path in entry_dirs(root):
            entry = check_entry(path, root)
            other = found.get((entry.key, entry.seed))
            if other is not None:
                raise ArchiveError(f"{path}: duplicates {other.path} (the same run twice)")
            found[(entry.key, entry.seed)] = entry
    return list(found.values())


def index_archive(root: str | Path = ARCHIVE_ROOT) -> dict[tuple[str, int], Path]:
    """``(run key, seed) -> entry`` of every entry a new run may reuse: every entry but the retired ones
    (:func:`check_archive`; the first bad or duplicated entry is an ArchiveError)."""
    return {(e.key, e.seed): e.path for e in check_archive(root) if not e.retired}


def run_commit(run_dir: Path) -> str:
    """The commit a finished run trained at (``+dirty`` when its tree had uncommitted changes; several joined by
    ``>`` when it was resumed at another commit; ``unknown`` when its summary does not say)."""
    try:
        prov = json.loads(read_file(run_dir / "done").decode("utf-8")).get("provenance") or {}
        versions = prov.get("code_versions") or [prov]
        names = [f"{v['commit'][:10]}{'+dirty' if v.get('dirty') else ''}" for v in versions if v.get("commit")]
    except (ArchiveError, OSError, ValueError, AttributeError, TypeError, KeyError):
        return "unknown"
    return ">".join(names) or "unknown"


def commit_counts(folders: list[Path]) -> dict[str, int]:
    """How many of ``folders`` each commit produced (see :func:`run_commit`)."""
    counts: dict[str, int] = {}
    for folder in folders:
        name = run_commit(folder)
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def size_line(root: Path, entries: list[Path], retired: int = 0) -> str:
    """``N entries (M of removed variants, kept as the record), all valid; bytes per run ...`` of the archive."""
    sizes = sorted(sum(f.stat().st_size for f in p.iterdir()) for p in entries)
    if not sizes:
        return f"lore: archive {root}: no entries"
    median = sizes[len(sizes) // 2] if len(sizes) % 2 else (sizes[len(sizes) // 2 - 1] + sizes[len(sizes) // 2]) / 2
    kept = f" ({retired} of removed variants, kept as the record)" if retired else ""
    return (f"lore: archive {root}: {len(sizes)} entries{kept}, all valid; bytes per run: median {median:.0f}, "
            f"max {sizes[-1]}; total {sum(sizes)}")


def not_reproducible(entry: Path, retired) -> str:
    """The line that says a retired entry cannot be reproduced here: its setting and its run's commit."""
    return (f"{entry}: trained at {run_commit(entry)} with {retired_text(retired)}; "
            "it cannot be reproduced at this commit")
