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
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.parse
from pathlib import Path

from lore.llm.secrets import redact

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


class AdviceCache:
    """``get``/``put`` of validated answers; thread-safe.

    ``readonly=True`` opens an existing file for lookups only (``put`` is refused); otherwise the
    file is created if needed and written with a rollback journal (never WAL).
    """

    def __init__(self, path: str | Path, timeout_s: float = 30.0, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        try:
            if readonly:
                self._conn = self._open_readonly(timeout_s)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None,
                                             check_same_thread=False)
                self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
                # A cache written before this version may be in WAL mode: switch it back (needs no reader).
                self._conn.execute("PRAGMA journal_mode = DELETE")
                self._conn.execute("PRAGMA synchronous = NORMAL")
                self._conn.execute(_SCHEMA)
        except (sqlite3.Error, OSError, ValueError) as e:
            raise ValueError(f"cannot open the {'read-only ' if readonly else ''}LLM cache {self.path}: {e}") from None

    def _open_readonly(self, timeout_s: float) -> sqlite3.Connection:
        if not self.path.is_file():
            raise ValueError("no such file")
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            # immutable=1 would ignore the answers still in the WAL file; refuse rather than miss them.
            raise ValueError(f"it has un-checkpointed WAL data ({wal}); run "
                             f"`sqlite3 {self.path} 'PRAGMA journal_mode=DELETE'` once, where it was written")
        uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro&immutable=1"
        conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("SELECT COUNT(*) FROM answers").fetchone()
        except sqlite3.Error as e:
            conn.close()
            raise ValueError(f"not an LLM answer cache ({e})") from None
        return conn

    def get(self, backend: str, model: str, prompt_hash: str, tag: str = "") -> dict | None:
        """``{"answer": dict, "raw": str | dict | None, "tokens_in", "tokens_out"}`` or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT answer, raw, tokens_in, tokens_out FROM answers "
                "WHERE backend = ? AND model = ? AND prompt_hash = ? AND tag = ?",
                (backend, model, prompt_hash, tag),
            ).fetchone()
        if row is None:
            return None
        try:
            answer = json.loads(row[0])
            raw = json.loads(row[1]) if row[1] is not None else None
        except json.JSONDecodeError:
            return None  # a damaged row is a miss, not a crash
        return {"answer": answer, "raw": raw, "tokens_in": row[2], "tokens_out": row[3]}

    def put(self, backend: str, model: str, prompt_hash: str, answer: dict, tag: str = "",
            raw: str | dict | None = None, tokens_in: int = 0, tokens_out: int = 0) -> bool:
        """Store a validated answer; False when the key already had one (the first one is kept)."""
        if self.readonly:
            raise ValueError(f"the LLM cache {self.path} is read-only")
        with self._lock:
            cursor = self._conn.execute(
                "INSERT OR IGNORE INTO answers "
                "(backend, model, prompt_hash, tag, answer, raw, tokens_in, tokens_out, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (backend, model, prompt_hash, tag, redact(json.dumps(answer)),
                 None if raw is None else redact(json.dumps(raw)), int(tokens_in), int(tokens_out), time.time()),
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
