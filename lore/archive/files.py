"""A run's files as an archive entry holds them: read without following links, cut to what the analysis reads.

An entry holds what the comparisons, tables, figures and the paper read from a run, and nothing else:
``config.yaml`` (the resolved config) and ``done`` (the run's summary with its provenance: commit, dirty
tree, versions, threads, wall and CPU time) as written, ``eval.csv`` whole, and ``episodes.csv``,
``metrics.csv`` and ``llm_calls.jsonl`` cut to the columns and fields the analysis reads. An entry is a
run directory that :func:`lore.report.runs.load_run` reads like any other.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import io
import json
import os
import stat
from pathlib import Path

from lore.archive.layout import ArchiveError, os_error_text

ENTRY_FILES = ("config.yaml", "done", "eval.csv", "episodes.csv", "metrics.csv", "llm_calls.jsonl")
MAX_FILE_BYTES = 16 << 20
"""A run file larger than this is not one ``lore train`` wrote at an archivable size."""
EPISODE_COLUMNS = ("env_step", "return", "length", "success", "failed", "control")
LEDGER_FIELDS = ("env_step", "ok", "cache_hit", "failure", "source")
METRIC_COLUMNS = (
    "env_step", "beta_mean", "prior_mask_frac", "kl_mix_wm", "kl_mix_wm_train", "lambda_kl", "entropy_wm",
    "trust_llm", "trust_act_llm", "trust_plan", "trust_surrogate", "trust_episode_t",
    "trust_z_llm", "trust_z_plan", "trust_z_surrogate", "trust_step_z_llm", "trust_step_z_plan",
    "trust_step_z_surrogate", "advice_value_z", "advice_informative_frac", "advice_p_better",
    "advice_outcome_mean", "own_outcome_mean", "filter_pass", "filter_informative_frac", "u_gate", "gate_open_frac",
    "value_mean",
    "beta_disagree", "beta_agree", "u_entropy_frac_disagree", "u_entropy_frac_agree", "u_value_ratio_disagree",
    "u_value_ratio_agree", "u_disagreement_ratio_disagree", "u_disagreement_ratio_agree",
    "steps_per_s", "update_ms", "update_time_frac", "llm_calls", "llm_cache_hits", "llm_failures",
)
"""The ``metrics.csv`` columns that the tables, figures and paper read (lore.report.aggregate, .figures), and
the advice trust's evidence, so that the mechanism can be re-analysed without training again."""


def regular_file(path: Path) -> os.stat_result:
    """``lstat`` of ``path``: a regular file of a run's size, or an ArchiveError naming it (missing, a link,
    not a regular file, too large)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ArchiveError(f"{path}: missing") from None
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "inspect it")) from None
    if stat.S_ISLNK(info.st_mode):
        raise ArchiveError(f"{path}: a symbolic link, not a file lore train wrote")
    if not stat.S_ISREG(info.st_mode):
        raise ArchiveError(f"{path}: not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise ArchiveError(f"{path}: {info.st_size} bytes, more than a run file holds ({MAX_FILE_BYTES})")
    return info


def read_file(path: Path) -> bytes:
    """The bytes of the run file ``path``, a regular file read without following a link (ArchiveError naming it
    otherwise)."""
    regular_file(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            return fh.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ArchiveError(os_error_text(e, path, "read it")) from None


def _text(path: Path) -> str:
    try:
        return read_file(path).decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveError(f"{path}: not UTF-8 text") from None


def cut_columns(text: str, keep: tuple[str, ...]) -> str:
    """A CSV table with only the columns in ``keep`` (in the table's order), values as written."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return ""
    header = rows[0]
    index = [i for i, name in enumerate(header) if name in keep]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        if len(row) != len(header):  # a line cut by a kill mid-write; lore train rewrites it on resume
            continue
        writer.writerow([row[i] for i in index])
    return out.getvalue()


def cut_ledger(text: str, fields: tuple[str, ...] = LEDGER_FIELDS) -> str:
    """The call ledger with only ``fields`` (those the analysis reads); a truncated last line is dropped."""
    lines = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            break
        if isinstance(record, dict):  # a null field reads as an absent one
            kept = {k: record[k] for k in fields if record.get(k) is not None}
            lines.append(json.dumps(kept, separators=(",", ":")))
    return "".join(line + "\n" for line in lines)


def entry_files(run_dir: Path) -> dict[str, bytes]:
    """The bytes of each file of ``run_dir``'s archive entry."""
    files = {name: read_file(run_dir / name) for name in ("config.yaml", "done", "eval.csv")}
    cuts = {"episodes.csv": lambda t: cut_columns(t, EPISODE_COLUMNS),
            "metrics.csv": lambda t: cut_columns(t, METRIC_COLUMNS), "llm_calls.jsonl": cut_ledger}
    for name, cut in cuts.items():
        if os.path.lexists(run_dir / name):
            text = cut(_text(run_dir / name))
            if text:
                files[name] = text.encode("utf-8")
    return files


def is_live(run_dir: Path) -> bool:
    """Whether a live process holds the run directory's lock (a training writing it)."""
    path = run_dir / ".lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # no lock, or not a lock lore wrote: nobody holds it
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
