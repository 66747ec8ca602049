"""Atomic file writes (nothing already written is damaged by a crash mid-write), the run-directory lock, and
the safe opening of the state files a run keeps (regular files inside their directory, read with a size bound)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_NAME = ".lock"


class NoSpaceError(OSError):
    """The disk filled up while a file was written; the file's previous content (if any) is intact."""


class DirectoryLocked(OSError):
    """Another live process holds the directory's lock; the message names it."""


class UnsafeFileError(OSError):
    """A state file that is not a regular file inside its directory, or too large to be one; the message
    names it on one line."""


_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """``"a regular file"``, ``"a FIFO (named pipe)"``, ``"a character device"``, ... for an ``st_mode``."""
    for test, name in _NOT_REGULAR:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def check_state_file(path: str | Path, directory: str | Path | None = None) -> None:
    """Refuse ``path`` (:class:`UnsafeFileError`) unless it is absent or a regular file, reached through no
    symbolic link that leads out of ``directory`` (default: the folder it is named in).

    Nothing is opened, so a FIFO or a device is never blocked on or read.
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as e:
        raise UnsafeFileError(f"{path}: cannot inspect it ({getattr(e, 'strerror', None) or e})") from None
    if stat.S_ISLNK(st.st_mode):
        base = Path(directory if directory is not None else path.parent).resolve()
        target = path.resolve()
        if not target.is_relative_to(base):
            raise UnsafeFileError(f"{path} is a symbolic link out of {base} (to {target}); state files are "
                                  f"never followed out of their folder: remove the link")
        try:
            st = os.stat(path)
        except OSError as e:
            raise UnsafeFileError(f"{path} is a symbolic link that leads nowhere ({e.strerror or e}); "
                                  f"remove the link") from None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFileError(f"{path} is {file_kind(st.st_mode)}, not a regular file; move it away")


def open_regular(path: str | Path, flags: int = os.O_RDONLY, *, directory: str | Path | None = None,
                 follow: bool = True, mode: int = 0o644) -> int:
    """A descriptor of ``path`` opened without blocking (a FIFO never waits for a writer), refused with
    :class:`UnsafeFileError` unless what was opened is a regular file (and, see :func:`check_state_file`,
    reached through no link out of ``directory``); ``follow=False`` refuses every symbolic link."""
    path = Path(path)
    if follow:
        check_state_file(path, directory)
    extra = os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags | extra, mode)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise UnsafeFileError(f"{path} is a symbolic link; it must be a regular file: remove the link") from None
        if e.errno in (errno.ENXIO, errno.ENODEV, errno.EISDIR):
            raise UnsafeFileError(f"{path} is not a regular file ({e.strerror}); move it away") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeFileError(f"{path} is {file_kind(st.st_mode)}, not a regular file; move it away")
    os.set_blocking(fd, True)
    return fd


def read_bounded(path: str | Path, max_bytes: int, *, directory: str | Path | None = None) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`); :class:`UnsafeFileError` when it holds
    more than ``max_bytes``. ``FileNotFoundError`` passes through."""
    fd = open_regular(path, directory=directory)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"{path} is larger than {max_bytes:,} bytes, more than such a file ever holds; "
                              f"move it away")
    return data


@contextlib.contextmanager
def exclusive_dir_lock(directory: str | Path) -> Iterator[Path]:
    """Hold an exclusive ``flock`` on ``<directory>/.lock`` for the ``with`` block.

    The kernel drops the lock when the holder exits in any way (SIGKILL and crashes included), so a
    lock left by a dead process is never stale: the next process simply takes it. A second live
    process gets :class:`DirectoryLocked` at once (no waiting), naming the holder's pid. A ``.lock`` that
    is a symbolic link, a FIFO, a device or a folder is refused (:class:`UnsafeFileError`) and left as it is.
    """
    path = Path(directory) / LOCK_NAME
    fd = open_regular(path, os.O_RDWR | os.O_CREAT, follow=False)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            holder = holder if holder.isdigit() else "unknown"
            raise DirectoryLocked(f"{directory} is in use by another process (pid {holder}); "
                                  f"wait for it to finish or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


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
