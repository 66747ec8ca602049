"""Persistent answer cache shared across runs (SQLite at ``llm.cache_path``).

Keyed by (backend, model, prompt hash, tag) — the tag holds what else changes the answer (for the
scripted advisor: mode, accuracy, confidence) — so an identical question is paid for once. Only
validated answers are stored; the first answer stored for a key wins (``INSERT OR IGNORE``), which
keeps concurrent runs consistent. Several processes may share the file: WAL journal, a busy
timeout, and autocommit statements (no long transactions).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from lore.llm.backends import redact

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
    """``get``/``put`` of validated answers; thread-safe, process-safe."""

    def __init__(self, path: str | Path, timeout_s: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None,
                                         check_same_thread=False)
            self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(_SCHEMA)
        except sqlite3.Error as e:
            raise ValueError(f"cannot open the LLM cache {self.path}: {e}") from None

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
        with self._lock:
            cursor = self._conn.execute(
                "INSERT OR IGNORE INTO answers "
                "(backend, model, prompt_hash, tag, answer, raw, tokens_in, tokens_out, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (backend, model, prompt_hash, tag, redact(json.dumps(answer)),
                 None if raw is None else redact(json.dumps(raw)), int(tokens_in), int(tokens_out), time.time()),
            )
        return cursor.rowcount == 1

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
