"""The archive of finished runs, tracked in git: ``runs/<env>/<run key>/seed<k>/``.

An entry holds what the comparisons, tables, figures and the paper read from a run, and nothing else:
``config.yaml`` (the resolved config) and ``done`` (the run's summary with its provenance: commit, dirty
tree, versions, threads, wall and CPU time) as written, ``eval.csv`` whole, and ``episodes.csv``,
``metrics.csv`` and ``llm_calls.jsonl`` cut to the columns and fields the analysis reads. An entry is a
run directory that :func:`lore.report.runs.load_run` reads like any other.

A run's key is ``<ablation>-<hash>``, the hash of its identity: the resolved settings that differ from the
defaults of the code reading it (seed and cache paths excluded). A setting added later with a default that
keeps the old behaviour leaves every key as it was; a changed default changes the keys of the runs it
touches.

An entry whose config holds a retired setting (:data:`lore.config.retired.RETIRED`) at another value than its
neutral one is a *retired entry*: the record of a variant that was removed. It is checked like any other entry,
its key computed from its saved settings as they are, with the retired ones kept (:func:`read_identity`); it is
never reused for a new run (:func:`index_archive` leaves it out) and cannot be reproduced at this commit.

Nothing inside the archive is reached through a symbolic link, writing or reading: an env, key or entry folder
that is a link (or a FIFO, a file ...) is refused. Writers hold an exclusive ``flock`` on the archive's folder
itself (no lock file), checks a shared one; an entry is written under a hidden temporary name
(``.seed<k>.*``) and renamed, and a temporary left by an interrupted writer is never taken for an entry.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import functools
import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ARCHIVE_ROOT = Path("runs")
IDENTITY_EXCLUDED = ("seed", "llm.cache_path", "llm.shared_cache")
IDENTITY_KEPT = ("ablation", "env.name")
"""Settings in every identity, at their default or not."""
KEY_PATTERN = re.compile(r"[A-Za-z0-9_]+-[0-9a-f]{10}")
SEED_PATTERN = re.compile(r"seed(0|[1-9][0-9]{0,9})")

ENTRY_FILES = ("config.yaml", "done", "eval.csv", "episodes.csv", "metrics.csv", "llm_calls.jsonl")
REQUIRED_FILES = {"config.yaml": "its config", "done": "its done marker", "eval.csv": "its eval.csv"}
MAX_FILE_BYTES = 16 << 20
"""A run file larger than this is not one ``lore train`` wrote at an archivable size."""
TEMP_PREFIX = ".seed"
"""The start of the hidden name an entry is written under before it is renamed (``.seed<k>.<random>``)."""

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

EPISODE_COLUMNS = ("env_step", "success", "control")
LEDGER_FIELDS = ("env_step", "ok", "cache_hit", "failure", "source")
METRIC_COLUMNS = (
    "env_step", "beta_mean", "prior_mask_frac", "kl_mix_wm", "kl_mix_wm_train", "lambda_kl", "entropy_wm",
    "trust_llm", "trust_act_llm", "trust_plan", "trust_surrogate", "trust_episode_t",
    "trust_z_llm", "trust_z_plan", "trust_z_surrogate", "trust_step_z_llm", "trust_step_z_plan",
    "trust_step_z_surrogate", "advice_value_z", "advice_informative_frac", "advice_p_better",
    "advice_outcome_mean", "own_outcome_mean",
    "beta_disagree", "beta_agree", "u_entropy_frac_disagree", "u_entropy_frac_agree", "u_value_ratio_disagree",
    "u_value_ratio_agree", "u_disagreement_ratio_disagree", "u_disagreement_ratio_agree",
    "steps_per_s", "update_ms", "update_time_frac", "llm_calls", "llm_cache_hits", "llm_failures",
)
"""The ``metrics.csv`` columns that the tables, figures and paper read (lore.report.aggregate, .figures), and
the advice trust's evidence, so that the mechanism can be re-analysed without training again."""


class ArchiveError(ValueError):
    """A run that cannot be archived, or an archive entry that is not one; the message names the path."""


class ArchiveTargetError(ArchiveError):
    """The archive itself cannot be written (not a folder, read-only, full, ...): no run can be archived there."""


def os_error_text(e: OSError, path: object = None, doing: str = "") -> str:
    """``<path>: [cannot <doing>: ]<what the system says>`` of an OSError (``path``: default its file name)."""
    if e.strerror is None and path is None:  # raised with a message of its own (lore.utils.io's), not by the system
        return str(e)
    where = path if path is not None else (e.filename if e.filename is not None else "(no file name)")
    what = e.strerror or str(e) or type(e).__name__
    what = what[:1].lower() + what[1:]
    return f"{where}: {'cannot ' + doing + ': ' if doing else ''}{what}"


@dataclass(frozen=True)
class Entry:
    env: str
    key: str
    seed: int
    path: Path
    retired: tuple[tuple[str, object], ...] = ()
    """The retired settings its config holds at a non-neutral value: empty unless a removed variant's run."""


@dataclass(frozen=True)
class Identity:
    """A run's identity as its ``config.yaml`` gives it; ``retired`` as in :class:`Entry`."""

    env: str
    key: str
    seed: int
    retired: tuple[tuple[str, object], ...] = ()


# --------------------------------------------------------------------------- run identity


def _flat(value) -> dict:
    from lore.config import dotted

    return dotted(json.loads(json.dumps(value)))


@functools.lru_cache(maxsize=1)
def _defaults() -> dict:
    """The code's default settings, flat (built once per process; callers only read it)."""
    from lore.config import build_config, to_dict

    return _flat(to_dict(build_config(None, [], None)))


def _identity_flat(flat: dict) -> dict:
    defaults = _defaults()
    out = {k: v for k, v in flat.items() if k in IDENTITY_KEPT or k not in defaults or defaults[k] != v}
    for key in IDENTITY_EXCLUDED:
        out.pop(key, None)
    return out


def identity(config: dict) -> dict:
    """``{dotted key: value}`` of a resolved config (``to_dict``) that differ from the code's defaults,
    plus :data:`IDENTITY_KEPT`, minus :data:`IDENTITY_EXCLUDED`."""
    return _identity_flat(_flat(config))


def _key(ablation: str, ident: dict) -> str:
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return f"{ablation}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def run_key(ablation: str, config: dict) -> str:
    """``<ablation>-<10 hex digits of the identity's hash>``: the run's folder name, the same wherever it runs."""
    return _key(ablation, identity(config))


def read_identity(run_dir: Path) -> Identity:
    """The identity of a run directory from its ``config.yaml`` (ArchiveError naming it if unreadable).

    A config the code reads (:func:`lore.config.config_from_saved`) hashes as :func:`run_key` hashes it. One
    that holds retired settings at non-neutral values is a removed variant's run: its identity is its saved
    settings as written (renamed values translated, neutral retired keys dropped) with those retired settings
    kept, each other setting compared with the current defaults as :func:`identity` compares it.
    """
    from lore.config import ConfigError, config_from_saved, load_yaml, to_dict
    from lore.config.retired import drop_retired, retired_values, without_keys

    path = run_dir / "config.yaml"
    _regular(path)

    def unreadable(e: object) -> ArchiveError:
        return ArchiveError(f"{path}: not a readable run config ({' '.join(str(e).split())[:200]})")

    try:
        data = load_yaml(path)
        retired = retired_values(data, changed_only=True) if isinstance(data, dict) else {}
        if not retired:
            cfg = config_from_saved(path)
            return Identity(cfg.env.name, run_key(cfg.ablation, to_dict(cfg)), int(cfg.seed))
        flat = {**_flat(drop_retired(without_keys(data, retired))), **retired}
    except (ConfigError, OSError, TypeError, ValueError, RecursionError) as e:
        raise unreadable(e) from None
    env, ablation, seed = flat.get("env.name"), flat.get("ablation"), flat.get("seed")
    if not (isinstance(env, str) and env and isinstance(ablation, str) and ablation
            and isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise unreadable(f"env.name {env!r}, ablation {ablation!r}, seed {seed!r}: not a run's identity")
    return Identity(env, _key(ablation, _identity_flat(flat)), seed, tuple(sorted(retired.items())))


def saved_identity(run_dir: Path) -> tuple[str, str, int]:
    """(env, key, seed) of a run the code can run again: a removed variant's run (:func:`read_identity`) is an
    ArchiveError naming its retired setting, as is an unreadable config."""
    ident = read_identity(run_dir)
    if ident.retired:
        raise ArchiveError(f"{run_dir / 'config.yaml'}: {retired_text(ident.retired)}")
    return ident.env, ident.key, ident.seed


def retired_text(retired) -> str:
    """``prior.align_temperature: true, a retired setting (the variant was removed)``."""
    from lore.config.retired import _yaml_text

    names = ", ".join(f"{key}: {_yaml_text(value)}" for key, value in retired)
    return f"{names}, {'a retired setting' if len(retired) == 1 else 'retired settings'} (the variant was removed)"


# --------------------------------------------------------------------------- reading a run's files


def _regular(path: Path) -> os.stat_result:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ArchiveError(f"{path}: missing") from None
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "inspect it")) from None
    if stat.S_ISLNK(info.st_mode):
        raise ArchiveError(f"{path}: a symbolic link, not a file lore train wrote")
    if not stat.S_ISREG(info.st_mode):
        raise ArchiveError(f"{path}: not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise ArchiveError(f"{path}: {info.st_size} bytes, more than a run file holds ({MAX_FILE_BYTES})")
    return info


def _read(path: Path) -> bytes:
    _regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            return fh.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "read it")) from None


def _text(path: Path) -> str:
    try:
        return _read(path).decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveError(f"{path}: not UTF-8 text") from None


def cut_columns(text: str, keep: tuple[str, ...]) -> str:
    """A CSV table with only the columns in ``keep`` (in the table's order), values as written."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return ""
    header = rows[0]
    index = [i for i, name in enumerate(header) if name in keep]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        if len(row) != len(header):  # a line cut by a kill mid-write; lore train rewrites it on resume
            continue
        writer.writerow([row[i] for i in index])
    return out.getvalue()


def cut_ledger(text: str, fields: tuple[str, ...] = LEDGER_FIELDS) -> str:
    """The call ledger with only ``fields`` (those the analysis reads); a truncated last line is dropped."""
    lines = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            break
        if isinstance(record, dict):  # a null field reads as an absent one
            kept = {k: record[k] for k in fields if record.get(k) is not None}
            lines.append(json.dumps(kept, separators=(",", ":")))
    return "".join(line + "\n" for line in lines)


def entry_files(run_dir: Path) -> dict[str, bytes]:
    """The bytes of each file of ``run_dir``'s archive entry."""
    files = {name: _read(run_dir / name) for name in ("config.yaml", "done", "eval.csv")}
    cuts = {"episodes.csv": lambda t: cut_columns(t, EPISODE_COLUMNS),
            "metrics.csv": lambda t: cut_columns(t, METRIC_COLUMNS), "llm_calls.jsonl": cut_ledger}
    for name, cut in cuts.items():
        if os.path.lexists(run_dir / name):
            text = cut(_text(run_dir / name))
            if text:
                files[name] = text.encode("utf-8")
    return files


def is_live(run_dir: Path) -> bool:
    """Whether a live process holds the run directory's lock (a training writing it)."""
    path = run_dir / ".lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # no lock, or not a lock lore wrote: nobody holds it
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- writing entries


def entry_path(root: Path, env: str, key: str, seed: int) -> Path:
    return root / env / key / f"seed{seed}"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "inspect it")) from None


def _not_a_folder(path: Path, info: os.stat_result) -> ArchiveError:
    if stat.S_ISLNK(info.st_mode):
        return ArchiveError(f"{path}: a symbolic link where the archive has folders; links inside the archive "
                            "are never followed")
    from lore.utils.io import file_kind

    return ArchiveError(f"{path}: {file_kind(info.st_mode)} where the archive has folders")


def _folders_on_the_way(root: Path, path: Path) -> bool:
    """Whether ``path`` (under ``root``) is a folder, every folder from ``root`` down checked with ``lstat``: a
    link, FIFO or file on the way is an ArchiveError naming it, nothing is followed; False when one is missing."""
    folder = root
    for part in ("", *path.relative_to(root).parts):
        folder = folder / part if part else folder
        info = _lstat(folder)
        if info is None:
            return False
        if not stat.S_ISDIR(info.st_mode):
            raise _not_a_folder(folder, info)
    return True


def _target(root: Path, create: bool) -> bool:
    """Whether the archive folder ``root`` exists (created when ``create``); a link, a file or a folder that
    cannot be created is an :class:`ArchiveTargetError` naming it."""
    info = _lstat(root)
    if info is None and create:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArchiveTargetError(os_error_text(e, root, "create the archive folder")) from None
        info = _lstat(root)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        if stat.S_ISLNK(info.st_mode) and not os.path.exists(root):
            raise ArchiveTargetError(f"{root}: a symbolic link to nothing, not the archive's folder")
        raise ArchiveTargetError(str(_not_a_folder(root, info)).replace("where the archive has folders",
                                                                        "where the archive's folder should be"))
    return info is not None


def archive_target(root: Path) -> None:
    """Refuse (:class:`ArchiveTargetError`, one line) an archive folder that is a file, a FIFO or a link, before
    any run is read; a missing one is created when the first run is archived."""
    _target(root, create=False)


@contextlib.contextmanager
def archive_lock(root: Path, exclusive: bool):
    """Hold a ``flock`` on the archive folder itself for the block: exclusive to write (the folder is created
    if missing), shared to check (waits for a writer). Yields the time the lock was taken, or None when there
    is no archive yet (shared) or its file system has no locks (then it is not held)."""
    if not _target(root, create=exclusive):
        yield None
        return
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise ArchiveTargetError(os_error_text(e, root, "open the archive folder")) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            since = time.time()
        except OSError as e:
            if e.errno not in (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise ArchiveTargetError(os_error_text(e, root, "lock the archive folder")) from None
            since = None  # a file system without directory locks (some NFS): the rename keeps entries whole
        yield since
    finally:
        os.close(fd)


def _remove_stale_temporaries(root: Path, since: float) -> None:
    """Delete the ``.seed<k>.*`` folders that writers killed before ``since`` left (call it holding the
    exclusive lock: a live writer's temporary looks the same). Links and anything odd are left alone."""
    def folders(path: Path) -> list[tuple[Path, float]]:
        try:
            found = [(path / n, os.lstat(path / n)) for n in os.listdir(path)]
        except OSError:
            return []
        return [(p, info.st_mtime) for p, info in found if stat.S_ISDIR(info.st_mode)]

    for key_folder, _ in (k for env, _ in folders(root) for k in folders(env)):
        for path, mtime in folders(key_folder):
            if path.name.startswith(TEMP_PREFIX) and mtime < since:
                shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _sigterm_raises():
    """A SIGTERM raises SystemExit(143) during the block, so a half-written entry is removed before exit (the
    main thread only; another thread cannot set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    stopped = []

    def stop(signum, _frame):
        if not stopped:  # a second SIGTERM does not cut the clean-up short
            stopped.append(signum)
            raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _write_entry(root: Path, dest: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` as the entry ``dest``: its env and key folders created one at a time (a link or
    another thing there is refused), the files in a hidden temporary folder renamed into place at the end,
    which is removed on any failure, SIGTERM included. A failure to write is an :class:`ArchiveTargetError`."""
    folder = root
    for part in dest.relative_to(root).parts[:-1]:
        folder = folder / part
        try:
            os.mkdir(folder)
        except FileExistsError:
            pass
        except OSError as e:
            raise ArchiveTargetError(os_error_text(e, folder, "create the folder")) from None
        info = _lstat(folder)
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise _not_a_folder(folder, info) if info else ArchiveTargetError(f"{folder}: vanished while written")
    tmp = None
    with _sigterm_raises():
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{dest.name[4:]}.", dir=folder))
            for name, data in files.items():
                fd = os.open(tmp / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            os.rename(tmp, dest)
        except BaseException as e:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError):
                raise ArchiveTargetError(os_error_text(e, dest, "write the entry") + "; nothing archived") from None
            raise


def _holding_the_archive(archive):
    """:func:`archive_run` under the archive's exclusive lock, after removing the temporaries of writers killed
    before it took the lock. Refused besides (ArchiveError): a run whose rows or numbers :func:`check_entry`
    would refuse, a link or a non-folder on the entry's way. An archive that cannot be written, any OSError
    that escapes included (the run's own files are read with their errors named), is an
    :class:`ArchiveTargetError` naming the path."""
    @functools.wraps(archive)
    def locked(run_dir: str | Path, root: str | Path = ARCHIVE_ROOT) -> tuple[Path, bool]:
        created = not os.path.lexists(root)
        try:
            with archive_lock(Path(root), exclusive=True) as since:
                if since is not None:
                    _remove_stale_temporaries(Path(root), since)
                return archive(run_dir, root)
        except BaseException as e:
            if created:  # a refused run leaves no empty archive behind
                with contextlib.suppress(OSError):
                    os.rmdir(root)
            if isinstance(e, OSError):
                raise ArchiveTargetError(os_error_text(e)) from None
            raise
    return locked


def _same(path: Path, files: dict[str, bytes]) -> bool:
    present = sorted(p.name for p in path.iterdir())
    return present == sorted(files) and all(_read(path / name) == data for name, data in files.items())


def restored_from(entry: Path, run_dir: Path) -> bool:
    """Whether ``run_dir`` holds ``entry``'s run: each of the entry's files byte for byte, or cut as the entry
    was cut (its own columns and ledger fields, whatever today's cut keeps). A run restored from the entry and
    a run the entry was archived from before the cut changed both hold it; an entry is never re-cut."""
    try:
        return all(os.path.lexists(run_dir / p.name) and _matches_entry(p, _read(run_dir / p.name))
                   for p in entry.iterdir())
    except (ArchiveError, OSError, ValueError, RecursionError):
        return False


def _ledger_records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _matches_entry(entry_file: Path, data: bytes) -> bool:
    """Whether a run file's bytes, cut as ``entry_file`` (an archived copy of it) was cut, equal it."""
    own = _read(entry_file)
    if data == own or entry_file.name not in ("episodes.csv", "metrics.csv", "llm_calls.jsonl"):
        return data == own
    text, own_text = data.decode("utf-8"), own.decode("utf-8")
    if entry_file.name == "llm_calls.jsonl":
        records = _ledger_records(own_text)
        fields = tuple(dict.fromkeys(k for record in records for k in record))
        return _ledger_records(cut_ledger(text, fields)) == records
    header = next(csv.reader(io.StringIO(own_text)), [])
    return cut_columns(text, tuple(header)) == own_text


def archive_run(run_dir: str | Path, root: str | Path = ARCHIVE_ROOT) -> tuple[Path, bool]:
    """Copy a finished run into the archive; returns (entry, whether it was written now).

    Refused with :class:`ArchiveError` (nothing written): a run without ``done`` or ``config.yaml``, a run a
    live training holds, a run whose archived files would differ from an entry already there. A run restored
    from its entry (:func:`restored_from`) is that entry: nothing is written, whatever format the entry has. A
    removed variant's run is archived under its key like any other (:func:`read_identity`).
    """
    run_dir, root = Path(run_dir), Path(root)
    if is_live(run_dir):
        raise ArchiveError(f"{run_dir}: a live training is writing it; archive it once it has finished")
    for name in ("done", "config.yaml"):
        if not os.path.lexists(run_dir / name):
            raise ArchiveError(f"{run_dir}: not a finished run (no {name})")
    ident = read_identity(run_dir)
    env, key, seed = ident.env, ident.key, ident.seed
    files = entry_files(run_dir)
    _check_done(run_dir, files)
    dest = entry_path(root, env, key, seed)
    _folders_on_the_way(root, dest)  # a link or a FIFO on the way is refused, never followed
    if dest.exists() or dest.is_symlink():
        if dest.is_dir() and not dest.is_symlink() and (_same(dest, files) or restored_from(dest, run_dir)):
            return dest, False
        raise ArchiveError(f"{dest}: already archived with other content than {run_dir}; the entry is the "
                           f"record and stays as it is (the two runs differ: keep {run_dir} outside the archive, "
                           "and `lore reproduce --match` compares the entry with this commit)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _write_entry(root, dest, files)
    return dest, True


archive_run = _holding_the_archive(archive_run)  # under the archive's lock (see there)


def finished_run_dirs(results_root: Path) -> list[Path]:
    """Every run directory (``config.yaml`` and ``done``) under ``results_root``, without following links."""
    found = []
    for folder, subfolders, files in os.walk(results_root):
        subfolders.sort()
        if "config.yaml" in files:
            subfolders.clear()
            if "done" in files:
                found.append(Path(folder))
    return found


# --------------------------------------------------------------------------- checking entries


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


def _check_done(path: Path, files: dict[str, bytes]) -> dict:
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
    if not _folders_on_the_way(root, path):
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
    files = {name: _read(path / name) for name in names}  # each a regular file, no link
    ident = read_identity(path)
    env, key, seed = ident.env, ident.key, ident.seed
    if (env, key, seed) != (parts[0], parts[1], int(parts[2][4:])):
        right = entry_path(root, env, key, seed)
        if right.is_dir():
            raise ArchiveError(f"{path}: duplicates {right} (the same run under another key)")
        raise ArchiveError(f"{path}: its config is {env}/{key}/seed{seed}, not the entry's "
                           f"{'/'.join(parts)} (the config does not hash to its key)")
    _check_done(path, files)
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
    for env_path in _children(root) if _target(root, create=False) else []:
        for key_path in _children(env_path):
            out += _children(key_path)
    return out


def _children(path: Path) -> list[Path]:
    info = _lstat(path)
    if info is None:
        raise ArchiveError(f"{path}: vanished while the archive was read")
    if not stat.S_ISDIR(info.st_mode):
        raise _not_a_folder(path, info)
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
        prov = json.loads(_read(run_dir / "done").decode("utf-8")).get("provenance") or {}
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


def restore_run(config: dict, run_dir: str | Path, root: str | Path = ARCHIVE_ROOT) -> Path | None:
    """Copy the archive's entry of the run ``config`` (a resolved config, ``to_dict``) describes into ``run_dir``,
    so that a run archived anywhere is not trained again; returns the entry, or None when the archive does not
    hold this run or ``run_dir`` already holds a run of its own (finished or to be resumed).

    The entry is checked first (ArchiveError naming it; a link or another non-folder on its way is refused,
    never followed); ``done`` is written last, as ``lore train`` does. A failure to write is an ArchiveError
    naming the file.
    """
    root, run_dir = Path(root), Path(run_dir)
    entry = entry_path(root, config["env"]["name"], run_key(config["ablation"], config), int(config["seed"]))
    if not _target(root, create=False) or not _folders_on_the_way(root, entry):
        return None
    try:
        if run_dir.is_dir() and any(p.name != "train.log" for p in run_dir.iterdir()):
            return None
    except OSError as e:
        raise ArchiveError(os_error_text(e, run_dir, "list it")) from None
    check_entry(entry, root)
    files = {name: _read(entry / name) for name in sorted(os.listdir(entry))}
    where = run_dir
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in [*(n for n in files if n != "done"), "done"]:
            where = run_dir / name
            tmp = run_dir / f".{name}.restoring"
            tmp.write_bytes(files[name])
            os.replace(tmp, where)
    except OSError as e:
        raise ArchiveError(os_error_text(e, where, "restore it from the archive")) from None
    return entry


def not_reproducible(entry: Path, retired) -> str:
    """The line that says a retired entry cannot be reproduced here: its setting and its run's commit."""
    return (f"{entry}: trained at {run_commit(entry)} with {retired_text(retired)}; "
            "it cannot be reproduced at this commit")
