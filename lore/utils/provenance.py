"""What produced a run: the code's commit (and whether its tree had uncommitted changes), the versions of
lore, torch and Python, and the number of threads. Written into every run's ``done`` summary."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import torch

import lore

_ROOT = Path(lore.__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    """stdout of ``git <args>`` in the checkout lore was imported from; None outside a checkout."""
    try:
        out = subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version() -> dict:
    """``{"commit": full sha or None, "dirty": bool or None}`` of the code now running.

    ``dirty`` is true when tracked files differ from the commit (untracked files and ``results/`` are
    ignored); both are None when lore was not imported from a git checkout.
    """
    commit = _git("rev-parse", "--verify", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def run_provenance(threads: int) -> dict:
    """The code version plus the versions and the thread count a run trained with."""
    return {**code_version(), "lore": lore.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "threads": int(threads)}
