"""The archive's folders: where an entry lives, its errors, the folders on an entry's way and the lock.

Nothing inside the archive is reached through a symbolic link, writing or reading: an env, key or entry folder
that is a link (or a FIFO, a file ...) is refused. Writers hold an exclusive ``flock`` on the archive's folder
itself (no lock file), checks a shared one; an entry is written under a hidden temporary name
(``.seed<k>.*``) and renamed, and a temporary left by an interrupted writer is never taken for an entry.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from pathlib import Path

ARCHIVE_ROOT = Path("runs")
KEY_PATTERN = re.compile(r"[A-Za-z0-9_]+-[0-9a-f]{10}")
SEED_PATTERN = re.compile(r"seed(0|[1-9][0-9]{0,9})")
TEMP_PREFIX = ".seed"
"""The start of the hidden name an entry is written under before it is renamed (``.seed<k>.<random>``)."""


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


def entry_path(root: Path, env: str, key: str, seed: int) -> Path:
    """The folder of the entry of run (``env``, ``key``, ``seed``) in the archive ``root``."""
    return root / env / key / f"seed{seed}"


def lstat_or_none(path: Path) -> os.stat_result | None:
    """``os.lstat`` of ``path`` (links not followed), or None when nothing is there; another OSError is an
    ArchiveError naming the path."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "inspect it")) from None


def not_a_folder(path: Path, info: os.stat_result) -> ArchiveError:
    """The ArchiveError that says ``path`` (``info``: its ``lstat``) is a link or another non-folder where the
    archive has folders."""
    if stat.S_ISLNK(info.st_mode):
        return ArchiveError(f"{path}: a symbolic link where the archive has folders; links inside the archive "
                            "are never followed")
    from lore.utils.io import file_kind

    return ArchiveError(f"{path}: {file_kind(info.st_mode)} where the archive has folders")


def folders_on_the_way(root: Path, path: Path) -> bool:
    """Whether ``path`` (under ``root``) is a folder, every folder from ``root`` down checked with ``lstat``: a
    link, FIFO or file on the way is an ArchiveError naming it, nothing is followed; False when one is missing."""
    folder = root
    for part in ("", *path.relative_to(root).parts):
        folder = folder / part if part else folder
        info = lstat_or_none(folder)
        if info is None:
            return False
        if not stat.S_ISDIR(info.st_mode):
            raise not_a_folder(folder, info)
    return True


def archive_exists(root: Path, create: bool) -> bool:
    """Whether the archive folder ``root`` exists (created when ``create``); a link, a file or a folder that
    cannot be created is an :class:`ArchiveTargetError` naming it."""
    info = lstat_or_none(root)
    if info is None and create:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArchiveTargetError(os_error_text(e, root, "create the archive folder")) from None
        info = lstat_or_none(root)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        if stat.S_ISLNK(info.st_mode) and not os.path.exists(root):
            raise ArchiveTargetError(f"{root}: a symbolic link to nothing, not the archive's folder")
        raise ArchiveTargetError(str(not_a_folder(root, info)).replace("where the archive has folders",
                                                                        "where the archive's folder should be"))
    return info is not None


def archive_target(root: Path) -> None:
    """Refuse (:class:`ArchiveTargetError`, one line) an archive folder that is a file, a FIFO or a link, before
    any run is read; a missing one is created when the first run is archived."""
    archive_exists(root, create=False)


@contextlib.contextmanager
def archive_lock(root: Path, exclusive: bool):
    """Hold a ``flock`` on the archive folder itself for the block: exclusive to write (the folder is created
    if missing), shared to check (waits for a writer). Yields the time the lock was taken, or None when there
    is no archive yet (shared) or its file system has no locks (then it is not held)."""
    if not archive_exists(root, create=exclusive):
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
