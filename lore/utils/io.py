"""Atomic file writes (nothing already written is damaged by a crash mid-write) and the run-directory lock."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_NAME = ".lock"


class NoSpaceError(OSError):
    """The disk filled up while a file was written; the file's previous content (if any) is intact."""


class DirectoryLocked(OSError):
    """Another live process holds the directory's lock; the message names it."""


@contextlib.contextmanager
def exclusive_dir_lock(directory: str | Path) -> Iterator[Path]:
    """Hold an exclusive ``flock`` on ``<directory>/.lock`` for the ``with`` block.

    The kernel drops the lock when the holder exits in any way (SIGKILL and crashes included), so a
    lock left by a dead process is never stale: the next process simply takes it. A second live
    process gets :class:`DirectoryLocked` at once (no waiting), naming the holder's pid.
    """
    path = Path(directory) / LOCK_NAME
    fh = open(path, "a+")  # noqa: SIM115 - held for the whole block
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise DirectoryLocked(f"{directory} is in use by another process (pid {holder}); "
                                  f"wait for it to finish or stop it") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield path
    finally:
        fh.close()  # releases the lock


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` then rename onto ``path`` (same directory, so rename is atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceError(f"no space left on device writing {path}") from None
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    def _write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    atomic_write(path, _write)


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Delete the ``.<name>.*.tmp`` files an interrupted :func:`atomic_write` left in ``directory``.

    Call it only while holding the directory's lock: a live writer's temporary looks the same.
    """
    stale = [p for p in Path(directory).glob(".?*.*.tmp") if p.is_file() and not p.is_symlink()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def atomic_write_text(path: str | Path, text: str) -> None:
    def _write(tmp: str) -> None:
        with open(tmp, "w") as fh:
            fh.write(text)

    atomic_write(path, _write)


RUN_DIR = "{run_dir}"
"""Placeholder in a configured path for the run directory (e.g. the default ``llm.cache_path``)."""


def expand_run_dir(path: str | None, run_dir: str | Path | None) -> str | None:
    """``path`` with :data:`RUN_DIR` replaced by ``run_dir``; None when it needs a run directory but has none."""
    if path is None or RUN_DIR not in path:
        return path
    return None if run_dir is None else path.replace(RUN_DIR, str(run_dir))
