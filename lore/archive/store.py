"""Writing the archive: a finished run archived as an entry (:func:`archive_run`), an entry restored into a
run directory (:func:`restore_run`).

Writers hold the archive's exclusive lock (:func:`lore.archive.layout.archive_lock`); an entry is written under a
hidden temporary name (``.seed<k>.*``) and renamed, and the temporaries of killed writers are removed.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import os
import shutil
import signal
import stat
import tempfile
import threading
from pathlib import Path

from lore.archive.check import check_done, check_entry
from lore.archive.files import cut_columns, cut_ledger, entry_files, is_live, read_file
from lore.archive.identity import read_identity, run_key
from lore.archive.layout import (
    ARCHIVE_ROOT,
    TEMP_PREFIX,
    ArchiveError,
    ArchiveTargetError,
    archive_exists,
    archive_lock,
    entry_path,
    folders_on_the_way,
    lstat_or_none,
    not_a_folder,
    os_error_text,
)


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
        info = lstat_or_none(folder)
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise not_a_folder(folder, info) if info else ArchiveTargetError(f"{folder}: vanished while written")
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
    return present == sorted(files) and all(read_file(path / name) == data for name, data in files.items())


def restored_from(entry: Path, run_dir: Path) -> bool:
    """Whether ``run_dir`` holds ``entry``'s run: each of the entry's files byte for byte, or cut as the entry
    was cut (its own columns and ledger fields, whatever today's cut keeps). A run restored from the entry and
    a run the entry was archived from before the cut changed both hold it; an entry is never re-cut."""
    try:
        return all(os.path.lexists(run_dir / p.name) and _matches_entry(p, read_file(run_dir / p.name))
                   for p in entry.iterdir())
    except (ArchiveError, OSError, ValueError, RecursionError):
        return False


def _ledger_records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _matches_entry(entry_file: Path, data: bytes) -> bool:
    """Whether a run file's bytes, cut as ``entry_file`` (an archived copy of it) was cut, equal it."""
    own = read_file(entry_file)
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
    check_done(run_dir, files)
    dest = entry_path(root, env, key, seed)
    folders_on_the_way(root, dest)  # a link or a FIFO on the way is refused, never followed
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
    if not archive_exists(root, create=False) or not folders_on_the_way(root, entry):
        return None
    try:
        if run_dir.is_dir() and any(p.name != "train.log" for p in run_dir.iterdir()):
            return None
    except OSError as e:
        raise ArchiveError(os_error_text(e, run_dir, "list it")) from None
    check_entry(entry, root)
    files = {name: read_file(entry / name) for name in sorted(os.listdir(entry))}
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
