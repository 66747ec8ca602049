"""LLM backends behind one interface: ``backend.complete(request) -> BackendResponse``.

* ``scripted`` — the offline advisor of :mod:`lore.llm.scripted` (no key, no network); the default.
* ``gemini`` — the real ``google-genai`` client, JSON mode with a response schema, temperature 0,
  our own retry loop (exponential backoff on 429 / 5xx / connection errors, attempts counted).
* ``openai`` — any OpenAI-compatible Chat Completions server (vLLM, llama.cpp, Ollama, SGLang) through the
  ``openai`` client: JSON constrained by a JSON schema where the server supports it, else the answer's text;
  the same retry loop.
* ``replay`` — answers recorded in an earlier run's ``llm_calls.jsonl``, matched by prompt hash
  (in order for repeated prompts), so a Gemini or open-model run re-executes without a key or a server.

Failures are typed (:class:`LLMError` subclasses, each with a ``kind``); the controller counts them
by kind and the step simply gets no prior. Start-up problems (missing key, malformed base URL, unusable
ledger) raise :class:`LLMConfigError` from :func:`make_backend`; before a gemini or openai run starts,
:func:`check_endpoint` looks the model up once, so an endpoint no call can succeed on fails there. An API
key is never put into a message, a file or a repr: every error text passes through :func:`redact` first.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lore.llm.schema import DEFAULT_MAX_PLAN_LEN, gemini_response_schema, json_response_schema
from lore.llm.scripted import ScriptedAdvisor
from lore.llm.secrets import API_KEY_ENV, OPENAI_API_KEY_ENV, key_problem, redact
from lore.validation import shown_url, url_problem

log = logging.getLogger(__name__)

BACKEND_FAILURES = (
    "timeout", "rate_limited", "server_error", "http_error", "connection_error", "replay_miss",
    "backend_error",
)
"""Failure kinds raised by backends (validation kinds are in :data:`lore.llm.schema.VALIDATION_FAILURES`)."""


# ----------------------------------------------------------------------------- errors


class LLMConfigError(ValueError):
    """A start-up problem (missing key, unusable replay ledger, unknown backend)."""


class LLMError(Exception):
    """A failed call; ``kind`` names the failure, ``attempts`` the HTTP attempts made."""

    kind = "backend_error"

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


# ----------------------------------------------------------------------------- scripted


class ScriptedBackend:
    """The offline advisor as a backend (``llm.simulated_latency_ms`` makes it sleep per call)."""

    name = "scripted"
    needs_snapshot = True

    def __init__(self, mode: str = "good", accuracy: float = 1.0, confidence: float = 0.9, seed: int = 0,
                 max_plan_len: int = DEFAULT_MAX_PLAN_LEN, n_features: int | None = None,
                 simulated_latency_ms: float = 0.0):
        if simulated_latency_ms < 0:
            raise LLMConfigError(f"llm.simulated_latency_ms must be >= 0, got {simulated_latency_ms}")
        self.advisor = ScriptedAdvisor(mode, accuracy, confidence, seed, max_plan_len, n_features)
        self.model = f"scripted-{mode}"
        self.cache_tag = f"mode={mode};accuracy={accuracy:g};confidence={confidence:g}"
        self.simulated_latency_ms = float(simulated_latency_ms)
        self.inline = self.simulated_latency_ms == 0.0

    def complete(self, request: AdviceRequest) -> BackendResponse:
        if self.simulated_latency_ms:
            time.sleep(self.simulated_latency_ms / 1000.0)
        answer = self.advisor.advise(request.snapshot, request.env_family, request.action_names,
                                     with_features=request.with_features)
        return BackendResponse(text=answer, model=self.model)

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------- HTTP backends


REMOTE_BACKENDS = ("gemini", "openai")
"""Backends that call a model server over HTTP (a key, an endpoint check, timeouts and retries)."""


def _transport_exceptions() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(timeout exception classes, connection exception classes) of httpx and httpx2."""
    timeouts: list[type] = []
    connects: list[type] = []
    for module_name in ("httpx", "httpx2"):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        connects.append(module.TransportError)  # ConnectError, RemoteProtocolError, ...
    return tuple(timeouts), tuple(connects)


def longest_call_s(llm) -> float:
    """The longest one call of an ``llm`` section may take: every attempt timing out, and the longest wait
    before each retry (the backoff, or a server's ``retry-after`` up to ``timeout_s``)."""
    retries = max(int(llm.retries), 0)
    timeout = float(llm.timeout_s)
    return timeout * (retries + 1) + sum(max(float(llm.backoff_s) * 2 ** i, timeout) for i in range(retries))


def retry_after_s(error: BaseException) -> float:
    """Seconds a failed HTTP answer asks the client to wait (``retry-after-ms`` / ``retry-after``; 0 when
    it says nothing usable)."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        return 0.0
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            value = headers.get(name)
        except Exception:  # headers of an unexpected type
            return 0.0
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            from email.utils import parsedate_to_datetime

            try:  # an HTTP date
                seconds = parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                continue
        if seconds == seconds and seconds > 0:  # not NaN
            return min(seconds, 3600.0)
    return 0.0


class HTTPBackend:
    """What the HTTP backends share: retry settings, the retry loop that turns client exceptions into
    counted :class:`LLMError` kinds, and the start-up lookup. Subclasses set the exception classes of
    their client and :meth:`_status`."""

    needs_snapshot = False
    inline = False
    cache_tag = ""
    label = "HTTP"
    """How error messages name the server."""

    _status_errors: tuple[type, ...] = ()
    _timeouts: tuple[type, ...] = ()
    _connects: tuple[type, ...] = ()

    def __init__(self, timeout_s: float, retries: int, backoff_s: float, secrets: tuple[str, ...], sleep):
        if timeout_s <= 0 or retries < 0 or backoff_s < 0:
            raise LLMConfigError(f"llm.timeout_s must be > 0, llm.retries and llm.backoff_s >= 0 "
                                 f"(got {timeout_s}, {retries}, {backoff_s})")
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self._secrets = secrets
        self._sleep = sleep

    @staticmethod
    def _status(error: BaseException) -> int:
        """The HTTP status of one of :attr:`_status_errors`."""
        raise NotImplementedError

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:  # closing is best effort
            pass

    def _detail(self, error: BaseException) -> str:
        return redact(str(getattr(error, "message", "") or error), self._secrets)

    def _described(self, error: BaseException) -> str:
        """``Type: message`` of a transport error, with its cause (e.g. the refused connection), redacted."""
        cause = error.__cause__
        text = f"{type(error).__name__}: {error}" + (f" ({type(cause).__name__}: {cause})" if cause else "")
        return redact(text, self._secrets)

    def _retrying(self, send) -> tuple[Any, int]:
        """``(send(), attempts)``: retries 429, 5xx, 408 and connection errors with exponential backoff (at
        least the server's ``retry-after``, up to ``timeout_s``); raises the :class:`LLMError` of the last
        failure. A timeout or another 4xx is not retried."""
        attempts = 0
        while True:
            attempts += 1
            wait = 0.0
            try:
                return send(), attempts
            except self._status_errors as e:
                code = self._status(e)
                message = f"{self.label} HTTP {code}: {self._detail(e)}"[:500]
                if code == 429:
                    error: LLMError = LLMRateLimited(message, attempts)
                elif code >= 500 or code == 408:
                    error = LLMServerError(message, attempts)
                else:  # 4xx: retrying will not help
                    http_error = LLMHTTPError(message, attempts)
                    http_error.status = code
                    raise http_error from None
                wait = min(retry_after_s(e), self.timeout_s)
            except self._timeouts as e:
                # No retry: a timed-out call has already cost timeout_s, and the env loop moved on.
                raise LLMTimeout(redact(f"no answer within {self.timeout_s:g} s ({type(e).__name__})",
                                        self._secrets), attempts) from None
            except self._connects as e:
                error = LLMConnectionError(self._described(e)[:500], attempts)
            except Exception as e:  # unexpected client errors (bad response body, ...)
                raise LLMError(redact(f"{type(e).__name__}: {e}", self._secrets)[:500], attempts) from None
            if attempts > self.retries:
                raise error
            self._sleep(max(self.backoff_s * (2 ** (attempts - 1)), wait))

    def _lookup(self, lookup, where: str, fatal: dict[int, str]) -> Any:
        """``lookup()`` once at start-up; raises :class:`LLMConfigError` when no call can succeed: the
        endpoint is unreachable (after the configured retries) or answers a status of ``fatal`` (its
        message). None when the answer is left to the run's own retries (a rate limit, a server error, a
        timeout, an odd answer)."""
        for attempt in range(self.retries + 1):
            try:
                return lookup()
            except self._status_errors as e:
                code = self._status(e)
                if code in fatal:
                    raise LLMConfigError(f"{fatal[code]} (HTTP {code}: {self._detail(e)[:200]})") from None
                return None
            except self._timeouts:
                return None
            except self._connects as e:
                if attempt == self.retries:
                    raise LLMConfigError(f"llm.base_url: cannot reach {where} ({self._described(e)[:200]})") from None
                self._sleep(self.backoff_s * (2 ** attempt))
            except Exception:  # an odd answer to the lookup: the calls themselves will tell
                return None
        return None


# ----------------------------------------------------------------------------- gemini


class GeminiBackend(HTTPBackend):
    """``google-genai`` ``generate_content`` in JSON mode; retries 429/5xx with exponential backoff."""

    name = "gemini"
    label = "Gemini"

    def __init__(self, model: str, base_url: str | None = None, api_version: str | None = None,
                 timeout_s: float = 20.0, retries: int = 3, backoff_s: float = 0.5,
                 max_plan_len: int = DEFAULT_MAX_PLAN_LEN, sleep=time.sleep):
        key = os.environ.get(API_KEY_ENV, "").strip()
        if not key:
            raise LLMConfigError(f"backend 'gemini' needs the {API_KEY_ENV} environment variable")
        if key_problem(key):
            raise LLMConfigError(f"{API_KEY_ENV}: {key_problem(key)}")
        super().__init__(timeout_s, retries, backoff_s, (key,), sleep)
        from google import genai
        from google.genai import errors, types

        self._types = types
        self.model = model
        self.max_plan_len = max_plan_len
        options: dict[str, Any] = {"timeout": max(1, int(round(timeout_s * 1000)))}
        base_url = base_url or os.environ.get("GOOGLE_GEMINI_BASE_URL") or None
        if base_url:
            problem = url_problem(base_url)
            if problem:
                raise LLMConfigError(f"llm.base_url (or GOOGLE_GEMINI_BASE_URL): {shown_url(base_url)}: {problem}")
            options["base_url"] = base_url
        if api_version:
            options["api_version"] = api_version
        self.base_url = base_url
        try:
            self._client = genai.Client(api_key=key, http_options=types.HttpOptions(**options))
        except Exception as e:  # SDK start-up problems become a config error
            raise LLMConfigError(redact(f"could not create the Gemini client: {e}", self._secrets)) from None
        self._status_errors = (errors.APIError,)
        self._timeouts, self._connects = _transport_exceptions()

    def __repr__(self) -> str:
        return f"GeminiBackend(model={self.model!r}, base_url={self.base_url!r})"

    @staticmethod
    def _status(error: BaseException) -> int:
        return int(getattr(error, "code", 0) or 0)

    def check_endpoint(self) -> None:
        """Look the model up once (``models.get``: no tokens) and raise :class:`LLMConfigError` when no call can
        succeed: the endpoint is unreachable (after the configured retries), rejects the key, or does not know
        the model. A rate limit, a server error or a timeout is left to the run's own retries."""
        where = self.base_url or "the Gemini API"
        fatal = {code: text.format(model=self.model, where=where) for code, text in PROBE_FATAL.items()}
        self._lookup(lambda: self._client.models.get(model=self.model), where, fatal)

    def _config(self, request: AdviceRequest):
        return self._types.GenerateContentConfig(
            response_mime_type="application/json",
            response_schema=gemini_response_schema(request.num_actions, request.max_plan_len,
                                                   request.with_features),
            temperature=0.0,
        )

    def complete(self, request: AdviceRequest) -> BackendResponse:
        config = self._config(request)
        response, attempts = self._retrying(lambda: self._client.models.generate_content(
            model=self.model, contents=request.prompt, config=config))
        usage = getattr(response, "usage_metadata", None)
        try:
            text = response.text or ""
        except Exception:  # .text raises on some blocked/odd candidates
            text = ""
        return BackendResponse(
            text=text,
            tokens_in=int(getattr(usage, "prompt_token_count", 0) or 0),
            tokens_out=int(getattr(usage, "candidates_token_count", 0) or 0),
            model=getattr(response, "model_version", None) or self.model,
            attempts=attempts,
        )


PROBE_FATAL = {
    400: "GEMINI_API_KEY: rejected by {where}",
    401: "GEMINI_API_KEY: rejected by {where}",
    403: "GEMINI_API_KEY: not allowed to use {where}",
    404: "llm.model: {model!r} not found at {where} (or llm.base_url / llm.api_version is not a Gemini endpoint)",
}
"""Answers to the start-up model lookup after which no call of the run can succeed, by HTTP status."""


# ----------------------------------------------------------------------------- openai


NO_KEY = "no-key"
"""The key sent to a server when ``OPENAI_API_KEY`` is unset (local servers started without one ignore it)."""

SCHEMA_REJECTED = (400, 422)
"""Statuses with which a server refuses a request's ``response_format`` (the backend then asks without it)."""

_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


def json_part(text: str) -> str:
    """The JSON object in a free-text answer: without a leading ``<think>...</think>`` block, from the first
    ``{`` to the last ``}``; ``text`` itself when it holds no such span."""
    text = _THINK.sub("", text, count=1)
    first, last = text.find("{"), text.rfind("}")
    return text[first:last + 1] if 0 <= first < last else text


class OpenAIBackend(HTTPBackend):
    """Chat Completions of an OpenAI-compatible server (vLLM, llama.cpp's ``llama-server``, Ollama, SGLang)
    through the ``openai`` client, temperature 0.

    Each call asks for JSON constrained by :func:`~lore.llm.schema.json_response_schema` (``response_format``
    of type ``json_schema``). A server that refuses it (HTTP 400 / 422) is asked again without it at once,
    and from then on for the rest of the run; the answer's JSON object is then cut out of the text
    (:func:`json_part`). The controller validates every answer either way. The key (``OPENAI_API_KEY``,
    optional) is redacted from every message.
    """

    name = "openai"

    def __init__(self, model: str, base_url: str | None = None, timeout_s: float = 20.0, retries: int = 3,
                 backoff_s: float = 0.5, max_plan_len: int = DEFAULT_MAX_PLAN_LEN, sleep=time.sleep):
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        if not base_url:
            raise LLMConfigError("llm.base_url: backend 'openai' needs the server's endpoint, "
                                 "e.g. http://127.0.0.1:8000/v1 (or set OPENAI_BASE_URL)")
        problem = url_problem(base_url)
        if problem:
            raise LLMConfigError(f"llm.base_url (or OPENAI_BASE_URL): {shown_url(base_url)}: {problem}")
        if not str(model).strip():
            raise LLMConfigError("llm.model: backend 'openai' needs the name the server serves the model under")
        key = os.environ.get(OPENAI_API_KEY_ENV, "").strip()
        if key and key_problem(key):
            raise LLMConfigError(f"{OPENAI_API_KEY_ENV}: {key_problem(key)}")
        super().__init__(timeout_s, retries, backoff_s, (key,) if key else (), sleep)
        import openai

        self.model = str(model)
        self.base_url = base_url
        self.label = f"server {shown_url(base_url)}"
        self.max_plan_len = max_plan_len
        self.schema_constrained = True
        """False once the server refused ``response_format``: later calls ask for plain text."""
        try:
            self._client = openai.OpenAI(api_key=key or NO_KEY, base_url=base_url, timeout=self.timeout_s,
                                         max_retries=0)
        except Exception as e:  # client start-up problems become a config error
            raise LLMConfigError(redact(f"could not create the OpenAI client: {e}", self._secrets)) from None
        self._status_errors = (openai.APIStatusError,)
        self._timeouts = (openai.APITimeoutError,)
        self._connects = (openai.APIConnectionError,)

    def __repr__(self) -> str:
        return f"OpenAIBackend(model={self.model!r}, base_url={self.base_url!r})"

    @staticmethod
    def _status(error: BaseException) -> int:
        return int(getattr(error, "status_code", 0) or 0)

    def served_models(self) -> list[str] | None:
        """The model names the server lists (``GET /models``), None when the lookup is left to the run; raises
        :class:`LLMConfigError` when the server is unreachable, rejects the key or has no ``/models``."""
        where = shown_url(self.base_url)
        fatal = {
            401: f"{OPENAI_API_KEY_ENV}: rejected by {where}",
            403: f"{OPENAI_API_KEY_ENV}: not allowed to use {where}",
            404: f"llm.base_url: {where} has no /models, so it is not an OpenAI-compatible endpoint "
                 f"(such endpoints usually end in /v1)",
        }
        page = self._lookup(lambda: self._client.models.list(), where, fatal)
        if page is None:
            return None
        try:
            return [str(m.id) for m in page.data]
        except Exception:  # an odd listing: the calls themselves will tell
            return None

    def check_endpoint(self) -> None:
        """List the served models once (no tokens) and raise :class:`LLMConfigError` when no call can succeed:
        the server is unreachable, rejects the key, is not an OpenAI-compatible endpoint, or does not serve
        ``llm.model``. A rate limit, a server error or a timeout is left to the run's own retries."""
        models = self.served_models()
        if models is not None and self.model not in models:
            served = ", ".join(repr(m) for m in models[:10]) or "none"
            raise LLMConfigError(f"llm.model: {self.model!r} is not served at {shown_url(self.base_url)} "
                                 f"(it serves {served})")

    def _ask(self, request: AdviceRequest, constrained: bool) -> tuple[Any, int]:
        kwargs: dict[str, Any] = {"model": self.model, "temperature": 0.0,
                                  "messages": [{"role": "user", "content": request.prompt}]}
        if constrained:
            schema = json_response_schema(request.num_actions, request.max_plan_len, request.with_features)
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "advice", "schema": schema}}
        return self._retrying(lambda: self._client.chat.completions.create(**kwargs))

    def complete(self, request: AdviceRequest) -> BackendResponse:
        constrained = self.schema_constrained
        try:
            response, attempts = self._ask(request, constrained)
        except LLMHTTPError as e:
            if not constrained or getattr(e, "status", None) not in SCHEMA_REJECTED:
                raise
            try:
                response, attempts = self._ask(request, False)
            except LLMError as again:
                again.attempts += e.attempts
                raise
            attempts += e.attempts
            self.schema_constrained = constrained = False
            log.info("%s refused response_format (%s); asking for plain JSON text from now on",
                     self.label, str(e)[:200])
        try:
            text = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):  # no choice, or not a chat completion
            text = ""
        if not constrained:
            text = json_part(text)
        usage = getattr(response, "usage", None)
        return BackendResponse(
            text=text,
            tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0),
            tokens_out=int(getattr(usage, "completion_tokens", 0) or 0),
            model=str(getattr(response, "model", "") or self.model),
            attempts=attempts,
        )


def _remote_backend(llm, max_plan_len: int = DEFAULT_MAX_PLAN_LEN) -> GeminiBackend | OpenAIBackend:
    """The HTTP backend of an ``llm`` section whose backend is one of :data:`REMOTE_BACKENDS`."""
    if llm.backend == "openai":
        return OpenAIBackend(llm.model, llm.base_url, llm.timeout_s, llm.retries, llm.backoff_s, max_plan_len)
    return GeminiBackend(llm.model, llm.base_url, llm.api_version, llm.timeout_s, llm.retries, llm.backoff_s,
                         max_plan_len)


def check_endpoint(llm) -> None:
    """The start-up check of a ``gemini`` or ``openai`` run's ``llm`` section (the backend's
    ``check_endpoint``): raises :class:`LLMConfigError` when no call of the run can succeed."""
    backend = _remote_backend(llm)
    try:
        backend.check_endpoint()
    finally:
        backend.close()


# ----------------------------------------------------------------------------- replay


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
        if not record.get("ok") and record.get("raw") is None:
            raise LLMError(f"replayed failure: {record.get('failure')}", int(record.get("attempts") or 1),
                           kind=str(record.get("failure") or "backend_error"),
                           deliver_at=deliver)
        raw = record.get("raw")
        if raw is None:
            raw = record.get("answer")
        return BackendResponse(
            text=raw, tokens_in=int(record.get("tokens_in") or 0), tokens_out=int(record.get("tokens_out") or 0),
            model=str(record.get("model") or ""), attempts=int(record.get("attempts") or 1),
            deliver_at=deliver,
            replayed_cache_hit=bool(record.get("cache_hit")),
        )

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------- factory


def make_backend(cfg) -> Backend | None:
    """The backend named by ``cfg.llm.backend`` (a :class:`~lore.config.RunConfig`); None for ``none``.

    Raises :class:`LLMConfigError` at start-up for a missing ``GEMINI_API_KEY`` (gemini), a missing or
    malformed ``llm.base_url`` (openai) or an empty / corrupt / missing ``llm.replay_ledger`` (replay).
    """
    llm = cfg.llm
    max_plan_len = int(getattr(llm, "plan_max_len", DEFAULT_MAX_PLAN_LEN))
    if llm.backend == "none":
        return None
    if llm.backend == "scripted":
        adv = cfg.advisor
        n_features = cfg.features.n_features if cfg.features.enabled else None
        return ScriptedBackend(adv.mode, adv.accuracy, adv.confidence, cfg.seed, max_plan_len, n_features,
                               llm.simulated_latency_ms)
    if llm.backend in REMOTE_BACKENDS:
        return _remote_backend(llm, max_plan_len)
    if llm.backend == "replay":
        if not llm.replay_ledger:
            raise LLMConfigError("llm.backend=replay needs llm.replay_ledger (an earlier run's llm_calls.jsonl)")
        return ReplayBackend(llm.replay_ledger)
    raise LLMConfigError(f"unknown llm.backend {llm.backend!r}; expected none, scripted, gemini, openai or replay")

