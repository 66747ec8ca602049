"""Re-run archived runs at the current commit and compare each new ``eval.csv`` with the archived one, byte
for byte: training is deterministic on one machine, so a change that alters no number reproduces every run.

A retired entry (a removed variant's run, :mod:`lore.archive`) cannot be trained at this commit: it is
never drawn, and asking for it is one line naming its retired setting and the commit it was trained at."""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lore.archive import (
    ARCHIVE_ROOT,
    ArchiveError,
    check_archive,
    not_reproducible,
    read_identity,
    run_commit,
)


@dataclass(frozen=True)
class Reproduction:
    entry: Path
    commit: str
    identical: bool
    detail: str


def sample_entries(root: Path, count: int, seed: int = 0, match: str | None = None, report=None) -> list[Path]:
    """``count`` entries drawn at random (``seed``), one per ablation first so a sample covers the arms;
    ``match``: only entries whose ``<env>/<key>`` path contains it. Retired entries are left out (``report``
    gets one line saying how many); when only retired entries match, an ArchiveError says why."""
    checked = check_archive(root)
    if match:
        checked = [e for e in checked if match in str(e.path.relative_to(root))]
    if not checked:
        raise ArchiveError(f"{root}: no archived run{' matches ' + repr(match) if match else ''}")
    retired = sorted((e for e in checked if e.retired), key=lambda e: e.path)
    entries = sorted(e.path for e in checked if not e.retired)
    if not entries:
        others = len(retired) - 1
        more = f" (as {'is' if others == 1 else 'are'} {others} other matching {'entry' if others == 1 else 'entries'})"
        more = more if others else ""
        raise ArchiveError(not_reproducible(retired[0].path, retired[0].retired) + more)
    if retired and report is not None:
        settings = sorted({key for e in retired for key, _ in e.retired})
        report(f"lore: {len(retired)} {'matching ' if match else ''}{'entry' if len(retired) == 1 else 'entries'} "
               "of removed variants "
               f"({', '.join(settings)}) cannot be reproduced at this commit; drawing from the other {len(entries)}")
    rng = random.Random(seed)
    rng.shuffle(entries)
    by_ablation: dict[str, list[Path]] = {}
    for p in entries:
        by_ablation.setdefault(p.parent.name.rsplit("-", 1)[0], []).append(p)
    picked: list[Path] = []
    while len(picked) < min(count, len(entries)):
        for group in by_ablation.values():
            if group and len(picked) < count:
                picked.append(group.pop(0))
    return picked


def first_difference(a: bytes, b: bytes) -> str:
    lines_a, lines_b = a.decode("utf-8", "replace").splitlines(), b.decode("utf-8", "replace").splitlines()
    for i, (x, y) in enumerate(zip(lines_a, lines_b, strict=False), 1):
        if x != y:
            return f"line {i}: archived {x[:80]!r}, now {y[:80]!r}"
    return f"archived has {len(lines_a)} lines, now {len(lines_b)}"


def reproduce(entry: Path, work: Path) -> Reproduction:
    """Train the entry's config afresh in ``work`` and compare the two ``eval.csv`` (a retired entry is an
    ArchiveError, nothing trained)."""
    from lore.config import config_from_saved
    from lore.train.trainer import train

    retired = read_identity(entry).retired
    if retired:
        raise ArchiveError(not_reproducible(entry, retired))
    cfg = config_from_saved(entry / "config.yaml")
    if cfg.llm.cache_path is not None:
        cfg.llm.cache_path = str(work / "llm_cache.sqlite")
    train(cfg, work, show_progress=False)
    archived, now = (entry / "eval.csv").read_bytes(), (work / "eval.csv").read_bytes()
    same = archived == now
    return Reproduction(entry, run_commit(entry), same, "identical" if same else first_difference(archived, now))


def reproduce_sample(root: Path = ARCHIVE_ROOT, count: int = 2, seed: int = 0, match: str | None = None,
                     keep: Path | None = None, report=print) -> list[Reproduction]:
    """Reproduce a sample of the archive (each run in a fresh folder under ``keep``, or a temporary one)."""
    out = []
    for entry in sample_entries(root, count, seed, match, report):
        work = Path(tempfile.mkdtemp(prefix="lore-reproduce-", dir=keep))
        try:
            result = reproduce(entry, work)
        finally:
            if keep is None:
                shutil.rmtree(work, ignore_errors=True)
        report(f"{'identical' if result.identical else 'DIFFERS  '} {entry} (archived at {result.commit})"
               + ("" if result.identical else f": eval.csv {result.detail}"))
        out.append(result)
    return out
