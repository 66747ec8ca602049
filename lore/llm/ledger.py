"""``<run_dir>/llm_calls.jsonl``: one JSON line per LLM question, written and flushed as it resolves.

Fields of every line (:data:`LEDGER_FIELDS`):

``env_step`` (step the question was asked at), ``answered_step`` and ``answered_phase`` (when the answer
was applied: the env step, and 0 = before that step's ask decision, 1 = after it, 2 = at close),
``env_index``, ``backend``, ``model``, ``source`` (``backend`` | ``cache`` | ``surrogate``),
``prompt_hash``, ``state_key``, ``latency_ms``, ``ok``, ``failure`` (kind or null), ``error`` (short,
redacted message or null), ``cache_hit``, ``tokens_in``, ``tokens_out``, ``attempts``, ``answer`` (the
validated :class:`~lore.llm.schema.Advice` as a dict, or null), ``raw`` (the backend's raw answer —
text or dict — exactly as received, or null when no answer came back; ``replay`` re-validates it, so
a replayed run sees the same answers *and* the same validation failures), ``prompt`` (the prompt
text; null for surrogate answers).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from lore.llm.secrets import redact

LEDGER_NAME = "llm_calls.jsonl"
LEDGER_FIELDS = (
    "env_step", "answered_step", "answered_phase", "env_index", "backend", "model", "source", "prompt_hash", "state_key",
    "latency_ms", "ok", "failure", "error", "cache_hit", "tokens_in", "tokens_out", "attempts", "answer",
    "raw", "prompt",
)


class LedgerError(ValueError):
    """A ledger file that cannot be read; the message names the file and line."""


class Ledger:
    """Append-only JSON Lines writer, flushed per line, safe to call from several threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
        self._lock = threading.Lock()
        self.lines = 0

    def write(self, record: dict[str, Any]) -> None:
        """Write one record: missing fields become null; secrets are redacted from the line."""
        unknown = set(record) - set(LEDGER_FIELDS)
        if unknown:
            raise ValueError(f"unknown ledger field(s) {sorted(unknown)}; known: {list(LEDGER_FIELDS)}")
        line = json.dumps({k: record.get(k) for k in LEDGER_FIELDS}, separators=(",", ":"))
        line = redact(line)
        with self._lock:
            if self._file.closed:
                raise ValueError(f"ledger {self.path} is closed")
            self._file.write(line + "\n")
            self._file.flush()
            self.lines += 1

    def size(self) -> int:
        """Bytes written so far (what a checkpoint records, so a resume can cut what came after it)."""
        with self._lock:
            if not self._file.closed:
                self._file.flush()
            return self.path.stat().st_size

    def truncate(self, size: int) -> int:
        """Cut the file back to ``size`` bytes (lines written after a checkpoint that a resume replays);
        returns the number of bytes removed. A file already shorter is left alone."""
        with self._lock:
            self._file.flush()
            current = os.fstat(self._file.fileno()).st_size
            if size < 0 or size >= current:
                return 0
            os.ftruncate(self._file.fileno(), size)
            return current - size

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_ledger(path: str | Path) -> list[tuple[int, dict]]:
    """``[(line_number, record), ...]`` of a ledger; blank lines are skipped.

    Raises :class:`LedgerError` naming the file and line for a line that is not a JSON object,
    and for a file with no records at all.
    """
    path = Path(path)
    records = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise LedgerError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise LedgerError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            records.append((lineno, record))
    if not records:
        raise LedgerError(f"{path} is empty (no recorded calls)")
    return records
