"""What every LLM backend shares: the request, the raw response, the backend protocol and the typed failures.

:mod:`lore.llm.backends` holds the backends themselves and :func:`~lore.llm.backends.make_backend`, and
re-exports the names here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from lore.llm.schema import DEFAULT_MAX_PLAN_LEN
from lore.llm.transport import CallState

BACKEND_FAILURES = (
    "timeout", "rate_limited", "server_error", "http_error", "connection_error", "replay_miss",
    "backend_error", "too_large", "truncated",
)
"""Failure kinds raised by backends (validation kinds are in :data:`lore.llm.schema.VALIDATION_FAILURES`)."""


# ----------------------------------------------------------------------------- errors


class LLMConfigError(ValueError):
    """A start-up problem (missing key, unusable replay ledger, unknown backend)."""


class LLMError(Exception):
    """A failed call; ``kind`` names the failure, ``attempts`` the HTTP attempts made."""

    kind = "backend_error"

    status: int | None = None
    """The HTTP status of a failure the server answered."""
    detail: str = ""
    """The server's own message of a failure it answered (redacted)."""
    warning: str | None = None
    """Something the run should know beyond the failure (the server dropped ``response_format``)."""

    def __init__(self, message: str, attempts: int = 1, kind: str | None = None,
                 deliver_at: tuple[int, int] | None = None):
        super().__init__(message)
        self.attempts = attempts
        self.deliver_at = deliver_at  # replay: (step, phase) at which the original run saw this failure
        if kind is not None:
            self.kind = kind


class LLMTimeout(LLMError):
    kind = "timeout"


class LLMRateLimited(LLMError):
    kind = "rate_limited"


class LLMServerError(LLMError):
    kind = "server_error"


class LLMHTTPError(LLMError):
    kind = "http_error"


class LLMConnectionError(LLMError):
    kind = "connection_error"


class LLMReplayMiss(LLMError):
    kind = "replay_miss"


# ----------------------------------------------------------------------------- request / response


@dataclass
class AdviceRequest:
    """One question to a backend. ``snapshot`` is the env's ``state_snapshot()`` (scripted only)."""

    prompt: str
    prompt_hash: str
    num_actions: int
    action_names: list[str]
    env_family: str
    snapshot: dict | None = None
    state_key: str = ""
    env_step: int = 0
    env_index: int = 0
    with_features: bool = False
    max_plan_len: int = DEFAULT_MAX_PLAN_LEN
    call: CallState | None = None
    """HTTP backends: the call's deadline and progress, which the caller may cancel (a fresh one if None)."""


@dataclass
class BackendResponse:
    """A raw answer (JSON text or an already-parsed dict) before validation."""

    text: str | dict
    tokens_in: int = 0
    tokens_out: int = 0
    model: str = ""
    attempts: int = 1
    deliver_at: tuple[int, int] | None = None
    """Replay only: (env step, phase) at which the original run applied this answer (see the controller)."""
    replayed_cache_hit: bool = False
    """Replay only: the original run answered this from its persistent cache (free of budget)."""
    extra: dict = field(default_factory=dict)


class Backend(Protocol):
    name: str
    model: str
    cache_tag: str
    """Extra part of the persistent-cache key (scripted: advisor mode/accuracy/confidence)."""
    needs_snapshot: bool
    inline: bool
    """True when ``complete`` is instant and deterministic: the controller calls it in-line."""

    def complete(self, request: AdviceRequest) -> BackendResponse: ...

    def close(self) -> None: ...
