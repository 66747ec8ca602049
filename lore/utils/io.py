"""Atomic file writes (nothing already written is damaged by a crash mid-write) and the run-directory lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_NAME = ".lock"


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
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    def _write(tmp: str) -> None:
        with open(tmp, "w") as fh:
            fh.write(text)

    atomic_write(path, _write)
