"""The ``replay`` backend: the answers recorded in an earlier run's ``llm_calls.jsonl``, matched by prompt hash,
so a Gemini or open-model run re-executes without a key or a server."""

from __future__ import annotations

from collections import deque
from pathlib import Path

from lore.llm.backend_base import AdviceRequest, BackendResponse, LLMConfigError, LLMError, LLMReplayMiss


class ReplayBackend:
    """Answers from a recorded ``llm_calls.jsonl``: by prompt hash, in recorded order.

    A prompt recorded k times is answered with its k recorded answers in order, then with the last
    one again. Recorded failures are re-raised with their kind. Only lines that came from a backend
    or the persistent cache are used (surrogate answers are recomputed by the controller).
    """

    name = "replay"
    needs_snapshot = False
    inline = True
    cache_tag = ""

    def __init__(self, ledger_path: str | Path):
        from lore.llm.ledger import LedgerError, read_ledger

        path = Path(ledger_path)
        if not path.is_file():
            raise LLMConfigError(f"replay ledger not found: {path}")
        try:
            records = read_ledger(path)
        except LedgerError as e:
            raise LLMConfigError(f"replay ledger unusable: {e}") from None
        self.path = path
        self._answers: dict[str, deque] = {}
        self._last: dict[str, dict] = {}
        for lineno, record in records:
            missing = [k for k in ("prompt_hash", "ok") if k not in record]
            if missing:
                raise LLMConfigError(f"replay ledger unusable: {path}:{lineno}: missing field(s) {missing}")
            if record.get("source", "backend") not in ("backend", "cache"):
                continue
            self._answers.setdefault(record["prompt_hash"], deque()).append(record)
        if not self._answers:
            raise LLMConfigError(f"replay ledger unusable: {path} has no recorded answers")
        models = {r.get("model") for q in self._answers.values() for r in q}
        self.model = "replay:" + ",".join(sorted(str(m) for m in models))

    def next_is_cache_hit(self, prompt_hash: str) -> bool:
        """Whether the next recorded answer to this prompt came from the original run's cache."""
        queue = self._answers.get(prompt_hash)
        record = queue[0] if queue else self._last.get(prompt_hash)
        return bool(record and record.get("cache_hit"))

    def complete(self, request: AdviceRequest) -> BackendResponse:
        queue = self._answers.get(request.prompt_hash)
        if queue is None:
            raise LLMReplayMiss(f"prompt {request.prompt_hash} is not in {self.path}")
        record = queue.popleft() if queue else self._last[request.prompt_hash]
        self._last[request.prompt_hash] = record
        deliver = None
        if record.get("answered_step") is not None:
            deliver = (int(record["answered_step"]), int(record.get("answered_phase") or 0))
        warning = record.get("warning")
        if not record.get("ok") and record.get("raw") is None:
            attempts = record.get("attempts")
            error = LLMError(f"replayed failure: {record.get('failure')}", 1 if attempts is None else int(attempts),
                             kind=str(record.get("failure") or "backend_error"), deliver_at=deliver)
            error.warning = warning
            raise error
        raw = record.get("raw")
        if raw is None:
            raw = record.get("answer")
        return BackendResponse(
            text=raw, tokens_in=int(record.get("tokens_in") or 0), tokens_out=int(record.get("tokens_out") or 0),
            model=str(record.get("model") or ""), attempts=int(record.get("attempts") or 1),
            deliver_at=deliver,
            replayed_cache_hit=bool(record.get("cache_hit")),
            extra={"warning": warning} if warning else {},
        )

    def close(self) -> None:
        pass
