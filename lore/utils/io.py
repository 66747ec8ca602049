"""Atomic file writes: nothing already written is damaged by a crash mid-write."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


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
