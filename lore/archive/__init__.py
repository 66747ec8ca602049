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

The modules: :mod:`.layout` (the folders, the errors, the lock), :mod:`.files` (a run's files as an entry holds
them), :mod:`.identity` (a run's key), :mod:`.check` (an entry and the whole archive checked), :mod:`.store`
(archiving and restoring runs) and :mod:`.reproduce` (archived runs re-run at this commit, imported on demand).
The names below are the archive's public interface.
"""

from lore.archive.check import (
    MAX_SECONDS,
    Entry,
    check_archive,
    commit_counts,
    index_archive,
    not_reproducible,
    run_commit,
    size_line,
)
from lore.archive.files import is_live
from lore.archive.identity import Identity, read_identity, run_key, saved_identity
from lore.archive.layout import (
    ARCHIVE_ROOT,
    KEY_PATTERN,
    ArchiveError,
    ArchiveTargetError,
    archive_target,
    entry_path,
    os_error_text,
)
from lore.archive.store import archive_run, finished_run_dirs, restore_run

__all__ = [
    "ARCHIVE_ROOT", "KEY_PATTERN", "MAX_SECONDS", "ArchiveError", "ArchiveTargetError", "Entry", "Identity",
    "archive_run", "archive_target", "check_archive", "commit_counts", "entry_path", "finished_run_dirs",
    "index_archive", "is_live", "not_reproducible", "os_error_text", "read_identity", "restore_run", "run_commit", "run_key",
    "saved_identity", "size_line",
]
