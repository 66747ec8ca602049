"""Persistent answer caches (SQLite): the run's own cache, and an optional read-only shared one.

Keyed by (backend, model, prompt hash, tag) — the tag holds what else changes the answer (for the
scripted advisor: mode, accuracy, confidence) — so an identical question is paid for once. Only
validated answers are stored; the first answer stored for a key wins (``INSERT OR IGNORE``).

Scope (explicit, and safe on the network filesystems of clusters):

* ``llm.cache_path`` is a *writable* cache. The workflow gives every run its own file inside the
  run directory, which only that run (one process: the run directory is locked) ever writes, so
  its hits do not depend on which other runs happened to finish first. It uses SQLite's classic
  rollback journal (``journal_mode=DELETE``), never WAL: WAL needs shared memory (``-shm``) that
  NFS/Lustre/GPFS do not provide coherently across nodes, and leaves ``-wal``/``-shm`` side files.
  A cache file inside the run directory belongs to the run: a resume rolls it back to the
  checkpoint (:meth:`AdviceCache.rollback`), as it does the call ledger.
* ``llm.shared_cache`` is a *read-only* cache consulted for hits after the run's own one (e.g. a
  finished run's ``llm_cache.sqlite``, or a merge of several). It is opened ``mode=ro`` and
  ``immutable=1`` (no locks, no journal: nothing is ever written, which is what makes concurrent
  readers on a shared filesystem safe), so it must not change while runs read it; the workflow
  declares it as an input of every run that uses it.

A cache file is checked like user input when it is opened, before anything is asked or written: it must
be a regular file (never followed through a link out of its folder, never a FIFO or a device) that is an
SQLite database passing ``PRAGMA quick_check`` whose ``answers`` table has exactly the columns of
:data:`_SCHEMA` (a writable cache may also be empty or new). Anything else is a one-line ``ValueError``
naming the file. A row that is damaged all the same (text that is not UTF-8, JSON that is not an object or
is nested too deeply, a value of the wrong type, an answer over the cap) is a miss, counted in
:attr:`AdviceCache.corrupt_rows`. Every answer is redacted and capped (``MAX_ANSWER_CHARS``) before it is
stored.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.parse
from pathlib import Path

from lore.llm.ledger import nesting_depth
from lore.llm.schema import MAX_ANSWER_CHARS
from lore.llm.secrets import redact, redact_value
from lore.utils.io import UnsafeFileError, check_state_file

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_hash TEXT NOT NULL,
    tag TEXT NOT NULL,
    answer TEXT NOT NULL,
    raw TEXT,
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    PRIMARY KEY (backend, model, prompt_hash, tag)
)
"""
COLUMNS = (("backend", "TEXT", 1, 1), ("model", "TEXT", 1, 2), ("prompt_hash", "TEXT", 1, 3), ("tag", "TEXT", 1, 4),
           ("answer", "TEXT", 1, 0), ("raw", "TEXT", 0, 0), ("tokens_in", "INTEGER", 1, 0),
           ("tokens_out", "INTEGER", 1, 0), ("created", "REAL", 1, 0))
"""``(name, type, not null, primary-key position)`` of each column of ``answers``, in order."""
SQLITE_MAGIC = b"SQLite format 3\x00"
MAX_ANSWER_DEPTH = 8
"""Deepest nesting of a cached answer (an answer is an object of lists and objects, 3 deep)."""


def check_cache_file(path: Path, readonly: bool) -> None:
    """Refuse (``ValueError``) a cache file that is not a regular file inside its folder, or not SQLite."""
    try:  # the shared cache is named by the user and may be a link; the run's own stays in its folder
        check_state_file(path, "/" if readonly else None)
    except UnsafeFileError as e:
        raise ValueError(str(e).removeprefix(f"{path} ")) from None
    if readonly and not path.exists():
        raise ValueError("no such file")
    if path.exists() and (readonly or path.stat().st_size > 0):
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
        if head != SQLITE_MAGIC:
            raise ValueError("not an LLM answer cache: not an SQLite database (truncated, or another kind of file)")


def check_cache_schema(conn: sqlite3.Connection, readonly: bool) -> None:
    """Refuse (``ValueError``) a database that fails ``quick_check`` or whose ``answers`` table has other
    columns than :data:`COLUMNS`; a writable cache may also have no tables yet."""
    problems = [_text(row[0]) for row in conn.execute("PRAGMA quick_check(3)").fetchall()]
    if problems != ["ok"]:
        raise ValueError(f"damaged database ({'; '.join(problems)[:200]})")
    tables = [_text(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if "answers" not in tables:
        if tables or readonly:
            raise ValueError(f"not an LLM answer cache (tables: {', '.join(tables[:5]) or 'none'})")
        return
    columns = tuple((_text(name), _text(kind).upper(), int(notnull), int(pk))
                    for _, name, kind, notnull, _, pk in conn.execute("PRAGMA table_info(answers)"))
    if columns != COLUMNS:
        raise ValueError(f"not an LLM answer cache of this version (table answers has columns "
                         f"{', '.join(c[0] for c in columns)[:200]})")


def _text(value: object) -> str:
    """A value SQLite returned, as one printable line."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return " ".join(text.split())


class AdviceCache:
    """``get``/``put`` of validated answers; thread-safe.

    ``readonly=True`` opens an existing file for lookups only (``put`` is refused); otherwise the
    file is created if needed and written with a rollback journal (never WAL).
    """

    def __init__(self, path: str | Path, timeout_s: float = 30.0, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        self.corrupt_rows = 0
        """Rows found damaged by :meth:`get` (each one a miss)."""
        self._conn: sqlite3.Connection | None = None
        try:
            if readonly:
                self._conn = self._open_readonly(timeout_s)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                check_cache_file(self.path, readonly=False)
                self._conn = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None,
                                             check_same_thread=False)
                self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
                check_cache_schema(self._conn, readonly=False)
                # A cache written before this version may be in WAL mode: switch it back (needs no reader).
                self._conn.execute("PRAGMA journal_mode = DELETE")
                self._conn.execute("PRAGMA synchronous = NORMAL")
                self._conn.execute(_SCHEMA)
        except (sqlite3.Error, OSError, ValueError) as e:
            if getattr(self, "_conn", None) is not None:
                self._conn.close()
            raise ValueError(f"cannot open the {'read-only ' if readonly else ''}LLM cache {self.path}: {e}") from None

    def _open_readonly(self, timeout_s: float) -> sqlite3.Connection:
        check_cache_file(self.path, readonly=True)
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            # immutable=1 would ignore the answers still in the WAL file; refuse rather than miss them.
            raise ValueError(f"it has un-checkpointed WAL data ({wal}); run "
                             f"`sqlite3 {self.path} 'PRAGMA journal_mode=DELETE'` once, where it was written")
        uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro&immutable=1"
        conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        try:
            check_cache_schema(conn, readonly=True)
        except (sqlite3.Error, ValueError) as e:
            conn.close()
            raise ValueError(str(e) if isinstance(e, ValueError) else f"not an LLM answer cache ({e})") from None
        return conn

    def get(self, backend: str, model: str, prompt_hash: str, tag: str = "") -> dict | None:
        """``{"answer": dict, "raw": str | dict | None, "tokens_in", "tokens_out"}`` or None; a damaged row
        (or a database error) is a miss, counted in :attr:`corrupt_rows`."""
        try:
            with self._lock:
                row = self._conn.execute(
                    # as bytes, decoded here: text that is not UTF-8 is a miss, not an error from sqlite3
                    "SELECT typeof(answer), CAST(answer AS BLOB), typeof(raw), CAST(raw AS BLOB), tokens_in, "
                    "tokens_out FROM answers "
                    "WHERE backend = ? AND model = ? AND prompt_hash = ? AND tag = ?",
                    (backend, model, prompt_hash, tag),
                ).fetchone()
        except sqlite3.Error:
            row = ()
        if row is None:
            return None
        hit = _checked_row(row)
        if hit is None:
            self.corrupt_rows += 1
        return hit

    def put(self, backend: str, model: str, prompt_hash: str, answer: dict, tag: str = "",
            raw: str | dict | None = None, tokens_in: int = 0, tokens_out: int = 0) -> bool:
        """Store a validated answer; False when the key already had one (the first one is kept) or when the
        answer, redacted, is longer than ``MAX_ANSWER_CHARS``."""
        if self.readonly:
            raise ValueError(f"the LLM cache {self.path} is read-only")
        if any(len(v) > MAX_ANSWER_CHARS for v in (_stored(answer), _stored(raw))):
            return False
        with self._lock:
            cursor = self._conn.execute(
                "INSERT OR IGNORE INTO answers "
                "(backend, model, prompt_hash, tag, answer, raw, tokens_in, tokens_out, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (backend, model, prompt_hash, tag, _stored(answer), None if raw is None else _stored(raw),
                 int(tokens_in), int(tokens_out), time.time()),
            )
        return cursor.rowcount == 1

    def high_water(self) -> int:
        """The largest row id so far: what a checkpoint records, so a resume can drop later rows."""
        with self._lock:
            return int(self._conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM answers").fetchone()[0])

    def rollback(self, high_water: int) -> int:
        """Delete the rows stored after :meth:`high_water` returned ``high_water``; returns how many."""
        if self.readonly:
            raise ValueError(f"the LLM cache {self.path} is read-only")
        with self._lock:
            return self._conn.execute("DELETE FROM answers WHERE rowid > ?", (int(high_water),)).rowcount

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _stored(value: object) -> str:
    """The text a cache row keeps for ``value``: redacted before and after JSON encoding."""
    return redact(json.dumps(redact_value(value)), encoded=True)


def _checked_row(row: tuple) -> dict | None:
    """A cache row ``(typeof(answer), answer, typeof(raw), raw, tokens_in, tokens_out)`` as a hit, or None
    when any part is damaged."""
    if len(row) != 6:
        return None
    answer_type, answer_text, raw_type, raw_text, tokens_in, tokens_out = row
    if answer_type != "text" or raw_type not in ("text", "null"):
        return None
    if not all(isinstance(t, int) and 0 <= t < 2**63 for t in (tokens_in, tokens_out)):
        return None
    if len(answer_text) > 4 * MAX_ANSWER_CHARS or len(raw_text or b"") > 4 * MAX_ANSWER_CHARS:
        return None
    try:
        answer = json.loads(answer_text.decode("utf-8"))
        raw = json.loads(raw_text.decode("utf-8")) if raw_text is not None else None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, a 5000-digit number, nested too deeply
        return None
    if not isinstance(answer, dict) or not (raw is None or isinstance(raw, (str, dict))):
        return None
    if nesting_depth(answer) > MAX_ANSWER_DEPTH or nesting_depth(raw) > MAX_ANSWER_DEPTH:
        return None
    return {"answer": answer, "raw": raw, "tokens_in": tokens_in, "tokens_out": tokens_out}


class TieredCache:
    """The run's writable cache (may be None) in front of a read-only shared one.

    ``get`` asks the run's cache, then the shared one; ``put`` writes the run's cache only (the
    shared file is never written). Same interface as :class:`AdviceCache`.
    """

    def __init__(self, own: AdviceCache | None, shared: AdviceCache):
        if not shared.readonly:
            raise ValueError("TieredCache: the shared cache must be opened read-only")
        self.own = own
        self.shared = shared
        self.path = own.path if own is not None else shared.path
        self.readonly = own is None

    @property
    def corrupt_rows(self) -> int:
        return (self.own.corrupt_rows if self.own is not None else 0) + self.shared.corrupt_rows

    def get(self, backend: str, model: str, prompt_hash: str, tag: str = "") -> dict | None:
        hit = self.own.get(backend, model, prompt_hash, tag) if self.own is not None else None
        return hit if hit is not None else self.shared.get(backend, model, prompt_hash, tag)

    def put(self, *args, **kwargs) -> bool:
        return self.own.put(*args, **kwargs) if self.own is not None else False

    def high_water(self) -> int:
        return self.own.high_water() if self.own is not None else 0

    def rollback(self, high_water: int) -> int:
        return self.own.rollback(high_water) if self.own is not None else 0

    def __len__(self) -> int:
        return len(self.own) if self.own is not None else 0

    def close(self) -> None:
        if self.own is not None:
            self.own.close()
        self.shared.close()


def check_cache(path: str | Path) -> None:
    """The checks of opening ``path`` as a writable cache, made read-only (nothing is created or written):
    ``ValueError`` naming the file when it is not a cache (an absent or empty file is a new one)."""
    path = Path(path)
    try:
        check_cache_file(path, readonly=False)
        if not path.exists() or path.stat().st_size == 0:
            return
        conn = sqlite3.connect(f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            check_cache_schema(conn, readonly=False)
        finally:
            conn.close()
    except (sqlite3.Error, OSError, ValueError) as e:
        raise ValueError(f"cannot open the LLM cache {path}: {e}") from None


def open_cache(cache_path: str | None, shared_path: str | None = None) -> AdviceCache | TieredCache | None:
    """The cache a run uses: its own (``llm.cache_path``), the shared read-only one
    (``llm.shared_cache``) behind it, both, or None."""
    own = AdviceCache(cache_path) if cache_path else None
    if not shared_path:
        return own
    try:
        shared = AdviceCache(shared_path, readonly=True)
    except ValueError:
        if own is not None:
            own.close()
        raise
    return TieredCache(own, shared)
