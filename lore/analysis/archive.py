"""The archive of finished runs, tracked in git: ``runs/<env>/<run key>/seed<k>/``.

An entry holds what the comparisons, tables, figures and the paper read from a run, and nothing else:
``config.yaml`` (the resolved config) and ``done`` (the run's summary with its provenance: commit, dirty
tree, versions, threads, wall and CPU time) as written, ``eval.csv`` whole, and ``episodes.csv``,
``metrics.csv`` and ``llm_calls.jsonl`` cut to the columns and fields the analysis reads. An entry is a
run directory that :func:`lore.analysis.runs.load_run` reads like any other.

A run's key is ``<ablation>-<hash>``, the hash of its identity: the resolved settings that differ from the
defaults of the code reading it (seed and cache paths excluded). A setting added later with a default that
keeps the old behaviour leaves every key as it was; a changed default changes the keys of the runs it
touches.

An entry whose config holds a retired setting (:data:`lore.config.retired.RETIRED`) at another value than its
neutral one is a *retired entry*: the record of a variant that was removed. It is checked like any other entry,
its key computed from its saved settings as they are, with the retired ones kept (:func:`read_identity`); it is
never reused for a new run (:func:`index_archive` leaves it out) and cannot be reproduced at this commit.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import functools
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

ARCHIVE_ROOT = Path("runs")
IDENTITY_EXCLUDED = ("seed", "llm.cache_path", "llm.shared_cache")
IDENTITY_KEPT = ("ablation", "env.name")
"""Settings in every identity, at their default or not."""
KEY_PATTERN = re.compile(r"[A-Za-z0-9_]+-[0-9a-f]{10}")
SEED_PATTERN = re.compile(r"seed(0|[1-9][0-9]{0,9})")

ENTRY_FILES = ("config.yaml", "done", "eval.csv", "episodes.csv", "metrics.csv", "llm_calls.jsonl")
REQUIRED_FILES = {"config.yaml": "its config", "done": "its done marker", "eval.csv": "its eval.csv"}
MAX_FILE_BYTES = 16 << 20
"""A run file larger than this is not one ``lore train`` wrote at an archivable size."""

EPISODE_COLUMNS = ("env_step", "success")
LEDGER_FIELDS = ("env_step", "ok", "cache_hit", "failure", "source")
METRIC_COLUMNS = (
    "env_step", "beta_mean", "prior_mask_frac", "kl_mix_wm", "kl_mix_wm_train", "lambda_kl", "entropy_wm",
    "trust_llm", "trust_act_llm", "trust_plan",
    "beta_disagree", "beta_agree", "u_entropy_frac_disagree", "u_entropy_frac_agree", "u_value_ratio_disagree",
    "u_value_ratio_agree", "u_disagreement_ratio_disagree", "u_disagreement_ratio_agree",
    "steps_per_s", "update_ms", "update_time_frac", "llm_calls", "llm_cache_hits", "llm_failures",
)
"""The ``metrics.csv`` columns that the tables, figures and paper read (lore.analysis.aggregate, .figures)."""


class ArchiveError(ValueError):
    """A run that cannot be archived, or an archive entry that is not one; the message names the path."""


@dataclass(frozen=True)
class Entry:
    env: str
    key: str
    seed: int
    path: Path
    retired: tuple[tuple[str, object], ...] = ()
    """The retired settings its config holds at a non-neutral value: empty unless a removed variant's run."""


@dataclass(frozen=True)
class Identity:
    """A run's identity as its ``config.yaml`` gives it; ``retired`` as in :class:`Entry`."""

    env: str
    key: str
    seed: int
    retired: tuple[tuple[str, object], ...] = ()


# --------------------------------------------------------------------------- run identity


def _flat(value) -> dict:
    from lore.config import dotted

    return dotted(json.loads(json.dumps(value)))


@functools.lru_cache(maxsize=1)
def _defaults() -> dict:
    """The code's default settings, flat (built once per process; callers only read it)."""
    from lore.config import build_config, to_dict

    return _flat(to_dict(build_config(None, [], None)))


def _identity_flat(flat: dict) -> dict:
    defaults = _defaults()
    out = {k: v for k, v in flat.items() if k in IDENTITY_KEPT or k not in defaults or defaults[k] != v}
    for key in IDENTITY_EXCLUDED:
        out.pop(key, None)
    return out


def identity(config: dict) -> dict:
    """``{dotted key: value}`` of a resolved config (``to_dict``) that differ from the code's defaults,
    plus :data:`IDENTITY_KEPT`, minus :data:`IDENTITY_EXCLUDED`."""
    return _identity_flat(_flat(config))


def _key(ablation: str, ident: dict) -> str:
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return f"{ablation}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def run_key(ablation: str, config: dict) -> str:
    """``<ablation>-<10 hex digits of the identity's hash>``: the run's folder name, the same wherever it runs."""
    return _key(ablation, identity(config))


def read_identity(run_dir: Path) -> Identity:
    """The identity of a run directory from its ``config.yaml`` (ArchiveError naming it if unreadable).

    A config the code reads (:func:`lore.config.config_from_saved`) hashes as :func:`run_key` hashes it. One
    that holds retired settings at non-neutral values is a removed variant's run: its identity is its saved
    settings as written (renamed values translated, neutral retired keys dropped) with those retired settings
    kept, each other setting compared with the current defaults as :func:`identity` compares it.
    """
    from lore.config import ConfigError, config_from_saved, load_yaml, to_dict
    from lore.config.retired import drop_retired, retired_values, without_keys

    path = run_dir / "config.yaml"
    _regular(path)

    def unreadable(e: object) -> ArchiveError:
        return ArchiveError(f"{path}: not a readable run config ({' '.join(str(e).split())[:200]})")

    try:
        data = load_yaml(path)
        retired = retired_values(data, changed_only=True) if isinstance(data, dict) else {}
        if not retired:
            cfg = config_from_saved(path)
            return Identity(cfg.env.name, run_key(cfg.ablation, to_dict(cfg)), int(cfg.seed))
        flat = {**_flat(drop_retired(without_keys(data, retired))), **retired}
    except (ConfigError, OSError, TypeError, ValueError, RecursionError) as e:
        raise unreadable(e) from None
    env, ablation, seed = flat.get("env.name"), flat.get("ablation"), flat.get("seed")
    if not (isinstance(env, str) and env and isinstance(ablation, str) and ablation
            and isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise unreadable(f"env.name {env!r}, ablation {ablation!r}, seed {seed!r}: not a run's identity")
    return Identity(env, _key(ablation, _identity_flat(flat)), seed, tuple(sorted(retired.items())))


def saved_identity(run_dir: Path) -> tuple[str, str, int]:
    """(env, key, seed) of a run the code can run again: a removed variant's run (:func:`read_identity`) is an
    ArchiveError naming its retired setting, as is an unreadable config."""
    ident = read_identity(run_dir)
    if ident.retired:
        raise ArchiveError(f"{run_dir / 'config.yaml'}: {retired_text(ident.retired)}")
    return ident.env, ident.key, ident.seed


def retired_text(retired) -> str:
    """``prior.align_temperature: true, a retired setting (the variant was removed)``."""
    from lore.config.retired import _yaml_text

    names = ", ".join(f"{key}: {_yaml_text(value)}" for key, value in retired)
    return f"{names}, {'a retired setting' if len(retired) == 1 else 'retired settings'} (the variant was removed)"


# --------------------------------------------------------------------------- reading a run's files


def _regular(path: Path) -> os.stat_result:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ArchiveError(f"{path}: missing") from None
    if stat.S_ISLNK(info.st_mode):
        raise ArchiveError(f"{path}: a symbolic link, not a file lore train wrote")
    if not stat.S_ISREG(info.st_mode):
        raise ArchiveError(f"{path}: not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise ArchiveError(f"{path}: {info.st_size} bytes, more than a run file holds ({MAX_FILE_BYTES})")
    return info


def _read(path: Path) -> bytes:
    _regular(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        return fh.read(MAX_FILE_BYTES + 1)


def _text(path: Path) -> str:
    try:
        return _read(path).decode("utf-8")
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


def cut_ledger(text: str) -> str:
    """The call ledger with only the fields the analysis reads; a truncated last line is dropped."""
    lines = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            break
        if isinstance(record, dict):  # a null field reads as an absent one
            kept = {k: record[k] for k in LEDGER_FIELDS if record.get(k) is not None}
            lines.append(json.dumps(kept, separators=(",", ":")))
    return "".join(line + "\n" for line in lines)


def entry_files(run_dir: Path) -> dict[str, bytes]:
    """The bytes of each file of ``run_dir``'s archive entry."""
    files = {name: _read(run_dir / name) for name in ("config.yaml", "done", "eval.csv")}
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


# --------------------------------------------------------------------------- writing entries


def entry_path(root: Path, env: str, key: str, seed: int) -> Path:
    return root / env / key / f"seed{seed}"


def _same(path: Path, files: dict[str, bytes]) -> bool:
    present = sorted(p.name for p in path.iterdir())
    return present == sorted(files) and all(_read(path / name) == data for name, data in files.items())


def restored_from(entry: Path, run_dir: Path) -> bool:
    """Whether ``run_dir`` holds ``entry`` as restored from the archive: each of the entry's files byte for
    byte, whatever format the entry was written in (an entry is never re-cut to today's columns)."""
    try:
        return all(os.path.lexists(run_dir / p.name) and _read(run_dir / p.name) == _read(p)
                   for p in entry.iterdir())
    except (ArchiveError, OSError):
        return False


def archive_run(run_dir: str | Path, root: str | Path = ARCHIVE_ROOT) -> tuple[Path, bool]:
    """Copy a finished run into the archive; returns (entry, whether it was written now).

    Refused with :class:`ArchiveError` (nothing written): a run without ``done`` or ``config.yaml``, a run a
    live training holds, a run whose archived files would differ from an entry already there. A run restored
    from its entry (:func:`restored_from`) is that entry: nothing is written, whatever format the entry has. A
    removed variant's run is archived under its key like any other (:func:`read_identity`).
    """
    run_dir, root = Path(run_dir), Path(root)
    if is_live(run_dir):
        raise ArchiveError(f"{run_dir}: a live training is writing it; archive it once it has finished")
    for name in ("done", "config.yaml"):
        if not os.path.lexists(run_dir / name):
            raise ArchiveError(f"{run_dir}: not a finished run (no {name})")
    ident = read_identity(run_dir)
    env, key, seed = ident.env, ident.key, ident.seed
    files = entry_files(run_dir)
    _check_done(run_dir, files["done"], files["eval.csv"])
    dest = entry_path(root, env, key, seed)
    if dest.exists() or dest.is_symlink():
        if dest.is_dir() and not dest.is_symlink() and (_same(dest, files) or restored_from(dest, run_dir)):
            return dest, False
        raise ArchiveError(f"{dest}: already archived with other content than {run_dir}; the entry is the "
                           f"record and stays as it is (the two runs differ: keep {run_dir} outside the archive, "
                           "and `lore reproduce --match` compares the entry with this commit)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".seed{seed}.", dir=dest.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest, True


def finished_run_dirs(results_root: Path) -> list[Path]:
    """Every run directory (``config.yaml`` and ``done``) under ``results_root``, without following links."""
    found = []
    for folder, subfolders, files in os.walk(results_root):
        subfolders.sort()
        if "config.yaml" in files:
            subfolders.clear()
            if "done" in files:
                found.append(Path(folder))
    return found


# --------------------------------------------------------------------------- checking entries


def _check_done(path: Path, done: bytes, eval_csv: bytes) -> dict:
    """The ``done`` summary, checked against the last row of ``eval.csv`` (a truncated table shows there)."""
    try:
        summary = json.loads(done.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ArchiveError(f"{path}: done is not a run summary (not JSON)") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("env_step"), int):
        raise ArchiveError(f"{path}: done is not a run summary (no env_step)")
    rows = list(csv.reader(io.StringIO(eval_csv.decode("utf-8", "replace"))))
    last = rows[-1][0] if len(rows) > 1 and rows[-1] else ""
    if last != str(summary["env_step"]):
        raise ArchiveError(f"{path}: eval.csv ends at env step {last or 'none'}, done at {summary['env_step']}: "
                           "the table is truncated")
    return summary


def check_entry(path: Path, root: Path) -> Entry:
    """One archive entry, checked: layout, required files, identity, done against eval.csv, readable tables
    (a retired entry as fully as any other; :attr:`Entry.retired` says it is one)."""
    from lore.analysis.runs import RunDataError, load_run

    parts = path.relative_to(root).parts
    if len(parts) != 3 or not KEY_PATTERN.fullmatch(parts[1]) or not SEED_PATTERN.fullmatch(parts[2]):
        raise ArchiveError(f"{path}: not an archive entry (expected {root}/<env>/<ablation>-<hash>/seed<k>)")
    names = sorted(os.listdir(path))
    stray = [n for n in names if n not in ENTRY_FILES]
    if stray:
        raise ArchiveError(f"{path}: holds {stray[0]}, which an archive entry never holds")
    for name, what in REQUIRED_FILES.items():
        if name not in names:
            raise ArchiveError(f"{path}: lacks {what} ({name})")
    ident = read_identity(path)
    env, key, seed = ident.env, ident.key, ident.seed
    if (env, key, seed) != (parts[0], parts[1], int(parts[2][4:])):
        right = entry_path(root, env, key, seed)
        if right.is_dir():
            raise ArchiveError(f"{path}: duplicates {right} (the same run under another key)")
        raise ArchiveError(f"{path}: its config is {env}/{key}/seed{seed}, not the entry's "
                           f"{'/'.join(parts)} (the config does not hash to its key)")
    _check_done(path, _read(path / "done"), _read(path / "eval.csv"))
    try:
        load_run(path)
    except RunDataError as e:
        raise ArchiveError(f"{path}: {' '.join(str(e).split())[:300]}") from None
    return Entry(env, key, seed, path, ident.retired)


def entry_dirs(root: Path) -> list[Path]:
    """Every folder at the entry level of the archive (``<env>/<key>/<seed>``); a stray file is an error."""
    out = []
    for depth_path in sorted(root.iterdir()) if root.is_dir() else []:
        for key_path in _children(depth_path):
            out += _children(key_path)
    return out


def _children(path: Path) -> list[Path]:
    if path.is_symlink() or not path.is_dir():
        raise ArchiveError(f"{path}: not an archive folder (a file or a link where the archive has folders)")
    return [p for p in sorted(path.iterdir()) if not p.name.startswith(".seed")]


def check_archive(root: str | Path = ARCHIVE_ROOT) -> list[Entry]:
    """Every entry of the archive, checked (retired ones included); the first bad or duplicated entry is an
    ArchiveError."""
    root = Path(root)
    found: dict[tuple[str, int], Entry] = {}
    for path in entry_dirs(root):
        entry = check_entry(path, root)
        other = found.get((entry.key, entry.seed))
        if other is not None:
            raise ArchiveError(f"{path}: duplicates {other.path} (the same run twice)")
        found[(entry.key, entry.seed)] = entry
    return list(found.values())


def index_archive(root: str | Path = ARCHIVE_ROOT) -> dict[tuple[str, int], Path]:
    """``(run key, seed) -> entry`` of every entry a new run may reuse: every entry but the retired ones
    (:func:`check_archive`; the first bad or duplicated entry is an ArchiveError)."""
    return {(e.key, e.seed): e.path for e in check_archive(root) if not e.retired}


def run_commit(run_dir: Path) -> str:
    """The commit a finished run trained at (``+dirty`` when its tree had uncommitted changes; several joined by
    ``>`` when it was resumed at another commit; ``unknown`` when its summary does not say)."""
    try:
        prov = json.loads(_read(run_dir / "done").decode("utf-8")).get("provenance") or {}
        versions = prov.get("code_versions") or [prov]
        names = [f"{v['commit'][:10]}{'+dirty' if v.get('dirty') else ''}" for v in versions if v.get("commit")]
    except (ArchiveError, OSError, ValueError, AttributeError, TypeError, KeyError):
        return "unknown"
    return ">".join(names) or "unknown"


def commit_counts(folders: list[Path]) -> dict[str, int]:
    """How many of ``folders`` each commit produced (see :func:`run_commit`)."""
    counts: dict[str, int] = {}
    for folder in folders:
        name = run_commit(folder)
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def size_line(root: Path, entries: list[Path], retired: int = 0) -> str:
    """``N entries (M of removed variants, kept as the record), all valid; bytes per run ...`` of the archive."""
    sizes = sorted(sum(f.stat().st_size for f in p.iterdir()) for p in entries)
    if not sizes:
        return f"lore: archive {root}: no entries"
    median = sizes[len(sizes) // 2] if len(sizes) % 2 else (sizes[len(sizes) // 2 - 1] + sizes[len(sizes) // 2]) / 2
    kept = f" ({retired} of removed variants, kept as the record)" if retired else ""
    return (f"lore: archive {root}: {len(sizes)} entries{kept}, all valid; bytes per run: median {median:.0f}, "
            f"max {sizes[-1]}; total {sum(sizes)}")


def restore_run(config: dict, run_dir: str | Path, root: str | Path = ARCHIVE_ROOT) -> Path | None:
    """Copy the archive's entry of the run ``config`` (a resolved config, ``to_dict``) describes into ``run_dir``,
    so that a run archived anywhere is not trained again; returns the entry, or None when the archive does not
    hold this run or ``run_dir`` already holds a run of its own (finished or to be resumed).

    The entry is checked first (ArchiveError naming it); ``done`` is written last, as ``lore train`` does.
    """
    root, run_dir = Path(root), Path(run_dir)
    entry = entry_path(root, config["env"]["name"], run_key(config["ablation"], config), int(config["seed"]))
    if not entry.is_dir() or entry.is_symlink():
        return None
    if run_dir.is_dir() and any(p.name != "train.log" for p in run_dir.iterdir()):
        return None
    check_entry(entry, root)
    run_dir.mkdir(parents=True, exist_ok=True)
    names = sorted(n for n in os.listdir(entry) if n != "done") + ["done"]
    for name in names:
        tmp = run_dir / f".{name}.restoring"
        tmp.write_bytes(_read(entry / name))
        os.replace(tmp, run_dir / name)
    return entry


def not_reproducible(entry: Path, retired) -> str:
    """The line that says a retired entry cannot be reproduced here: its setting and its run's commit."""
    return (f"{entry}: trained at {run_commit(entry)} with {retired_text(retired)}; "
            "it cannot be reproduced at this commit")
