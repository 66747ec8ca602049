"""``<run_dir>/llm_calls.jsonl``: one JSON line per LLM question, written and flushed as it resolves.

Fields of every line (:data:`LEDGER_FIELDS`):

``env_step`` (step the question was asked at), ``answered_step`` and ``answered_phase`` (when the answer
was applied: the env step, and 0 = before that step's ask decision, 1 = after it, 2 = at close),
``env_index``, ``backend``, ``model``, ``source`` (``backend`` | ``cache`` | ``surrogate``),
``prompt_hash``, ``state_key``, ``latency_ms``, ``ok``, ``failure`` (kind or null), ``error`` (short,
redacted message or null), ``cache_hit``, ``tokens_in``, ``tokens_out``, ``attempts``, ``answer`` (the
validated :class:`~lore.llm.schema.Advice` as a dict, or null), ``raw`` (the backend's raw answer —
text or dict — as received, with any API key masked, or null when no answer came back; ``replay``
re-validates it, so a replayed run sees the same answers *and* the same validation failures),
``prompt`` (the prompt text; null for surrogate answers), ``warning`` (what the run should know beyond the
call's outcome, e.g. that the server does not support ``response_format`` and was asked for plain text from
then on; null otherwise).

Every string of a record is redacted (:func:`~lore.llm.secrets.redact_value`) before the line is encoded,
and the encoded line once more. A ledger read back (:func:`read_ledger`, what ``replay`` uses) is checked
like user input: a regular file of at most :data:`MAX_LEDGER_BYTES`, lines of at most
:data:`MAX_LINE_BYTES`, each a JSON object nested at most :data:`MAX_DEPTH` deep whose known fields have
their types (:data:`FIELD_TYPES`).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from pathlib import Path
from typing import Any

from lore.llm.secrets import redact, redact_value
from lore.utils.io import UnsafeFileError, open_regular

LEDGER_NAME = "llm_calls.jsonl"
LEDGER_FIELDS = (
    "env_step", "answered_step", "answered_phase", "env_index", "backend", "model", "source", "prompt_hash", "state_key",
    "latency_ms", "ok", "failure", "error", "cache_hit", "tokens_in", "tokens_out", "attempts", "answer",
    "raw", "prompt", "warning",
)
MAX_LEDGER_BYTES = 1 << 32
"""Largest ledger read back (4 GiB: 10**5 calls of the largest line)."""
MAX_LINE_BYTES = 1 << 20
"""Longest ledger line read back: an answer is capped below this (``MAX_ANSWER_CHARS``)."""
MAX_DEPTH = 32
"""Deepest nesting of a ledger line (an answer is an object of lists and objects, 3 deep)."""
_INT = (int,)
_TEXT = (str,)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "env_step": _INT, "answered_step": _INT, "answered_phase": _INT, "env_index": _INT, "backend": _TEXT,
    "model": _TEXT, "source": _TEXT, "prompt_hash": _TEXT, "state_key": _TEXT, "latency_ms": (int, float),
    "ok": (bool,), "failure": _TEXT, "error": _TEXT, "cache_hit": (bool,), "tokens_in": _INT, "tokens_out": _INT,
    "attempts": _INT, "answer": (dict,), "raw": (str, dict), "prompt": _TEXT,
    "warning": _TEXT,
}
"""The JSON type of each field when it is not null (``bool`` is not an ``int`` here)."""


class LedgerError(ValueError):
    """A ledger file that cannot be read; the message names the file and line."""


class Ledger:
    """Append-only JSON Lines writer, flushed per line, safe to call from several threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, directory=self.path.parent)
        self._file = os.fdopen(fd, "a", encoding="utf-8")  # kept open for the run
        self._lock = threading.Lock()
        self.lines = 0

    def write(self, record: dict[str, Any]) -> None:
        """Write one record: missing fields become null; secrets are redacted from the line."""
        unknown = set(record) - set(LEDGER_FIELDS)
        if unknown:
            raise ValueError(f"unknown ledger field(s) {sorted(unknown)}; known: {list(LEDGER_FIELDS)}")
        line = json.dumps(redact_value({k: record.get(k) for k in LEDGER_FIELDS}), separators=(",", ":"))
        line = redact(line, encoded=True)
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

    Raises :class:`LedgerError` naming the file (and line) for a file that is not a regular file or is too
    large, a line that is too long, not UTF-8, not a JSON object, nested too deeply, or has a field of the
    wrong type, and for a file with no records at all.
    """
    path = Path(path)
    try:
        fd = open_regular(path)
    except UnsafeFileError as e:
        raise LedgerError(str(e)) from None
    records = []
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > MAX_LEDGER_BYTES:
            raise LedgerError(f"{path} is larger than {MAX_LEDGER_BYTES:,} bytes; not a ledger of one run")
        for lineno in itertools.count(1):
            line = fh.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > MAX_LINE_BYTES:
                raise LedgerError(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES:,} bytes")
            if line.strip():
                records.append((lineno, _ledger_record(path, lineno, line)))
    if not records:
        raise LedgerError(f"{path} is empty (no recorded calls)")
    return records


def _ledger_record(path: Path, lineno: int, line: bytes) -> dict:
    """One ledger line, checked (:func:`read_ledger`)."""
    where = f"{path}:{lineno}"
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise LedgerError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise LedgerError(f"{where}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise LedgerError(f"{where}: nested too deeply") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise LedgerError(f"{where}: not a ledger line ({' '.join(str(e).split())[:120]})") from None
    if not isinstance(record, dict):
        raise LedgerError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if nesting_depth(record) > MAX_DEPTH:
        raise LedgerError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    for name, types in FIELD_TYPES.items():
        value = record.get(name)
        if value is None:
            continue
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            expected = " or ".join(t.__name__ for t in types)
            raise LedgerError(f"{where}: field {name!r} must be {expected} or null, got {type(value).__name__}")
    return record


def nesting_depth(value: object) -> int:
    """How deep lists and dicts nest in ``value`` (0 for a scalar), counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
    return deepest
