"""Where the analysis commands write: output paths checked up front, every file written atomically.

Every output goes through :func:`lore.utils.io.atomic_write` (a temporary ``.<name>.<random>.tmp`` in the
same folder, fsync, rename), so a kill or a full disk leaves each file at its previous version or its new
one, never half written. A killed command leaves its temporary behind; :func:`remove_stale_temporaries`
deletes those of the files a command writes when it next starts writing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from lore.utils.io import atomic_write

CSV_FLOAT_FORMAT = "%.6g"


class OutputError(OSError):
    """An output could not be written (disk full, permissions); the message names the file."""


def write_file(path: str | Path, write: Callable[[str], None]) -> Path:
    """``write(tmp)`` then rename onto ``path``; a failure is one :class:`OutputError` naming ``path``."""
    path = Path(path)
    try:
        atomic_write(path, write)
    except OSError as e:
        reason = e.strerror or str(e)
        message = reason if str(path) in reason else f"{path}: cannot write it ({reason})"
        raise OutputError(f"{message}; the previous version is kept") from None
    return path


def write_text(path: str | Path, text: str) -> Path:
    def _write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return write_file(path, _write)


def write_bytes(path: str | Path, data: bytes) -> Path:
    def _write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return write_file(path, _write)


def write_csv(path: str | Path, frame: pd.DataFrame) -> Path:
    return write_text(path, frame.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))


def copy_file(source: str | Path, path: str | Path) -> Path:
    return write_bytes(path, Path(source).read_bytes())


def remove_stale_temporaries(paths: Iterable[str | Path]) -> list[Path]:
    """Delete the ``.<name>.*.tmp`` files a killed writer of these ``paths`` left; returns them."""
    removed = []
    for path in map(Path, paths):
        if not path.parent.is_dir():
            continue
        for tmp in path.parent.glob(f".{path.name}.*.tmp"):
            if tmp.is_file() and not tmp.is_symlink():
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
    return removed


def check_folder(path: str | Path, flag: str) -> None:
    """An output folder must be a folder or not exist yet, and must not lie below a file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path}: {flag} must be a folder, but it is a file")
    _check_below_a_file(path, flag)


def check_file(path: str | Path, flag: str) -> None:
    """An output file must be a file or not exist yet, and must not lie below a file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: {flag} must be a file, but it is a folder")
    _check_below_a_file(path, flag)


def _check_below_a_file(path: Path, flag: str) -> None:
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{path}: {flag} lies below {parent}, which is a file")
            return


def _same(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_apart(outputs: Iterable[str | Path], inputs: Iterable[str | Path]) -> None:
    """No output may be one of the inputs (the command would overwrite what it reads)."""
    inputs = [Path(p) for p in inputs]
    for out in map(Path, outputs):
        for src in inputs:
            if _same(out, src):
                raise ValueError(f"{out}: an output of this command is also one of its inputs ({src}); "
                                 f"choose another output folder")
