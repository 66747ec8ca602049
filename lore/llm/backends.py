"""LLM backends behind one interface: ``backend.complete(request) -> BackendResponse``.

* ``scripted`` — the offline advisor of :mod:`lore.llm.scripted` (no key, no network); the default.
* ``gemini`` — the real ``google-genai`` client, JSON mode with a response schema, temperature 0,
  our own retry loop (exponential backoff on 429 / 5xx / connection errors, attempts counted).
* ``openai`` — any OpenAI-compatible Chat Completions server (vLLM, llama.cpp, Ollama, SGLang) through the
  ``openai`` client: JSON constrained by a JSON schema where the server supports it, else the answer's text;
  the same retry loop.
* ``replay`` — answers recorded in an earlier run's ``llm_calls.jsonl``, matched by prompt hash
  (in order for repeated prompts), so a Gemini or open-model run re-executes without a key or a server.

Every call of an HTTP backend ends by one deadline, ``timeout_s × (retries + 1)`` (:class:`HTTPBackend`,
:mod:`lore.llm.transport`), whatever the server sends. Failures are typed (:class:`LLMError` subclasses,
each with a ``kind``); the controller counts them by kind and the step simply gets no prior. Start-up
problems (missing key, malformed base URL, a key bound for plain http to another machine, unusable ledger)
raise :class:`LLMConfigError` from :func:`make_backend`; before a gemini or openai run starts,
:func:`check_endpoint` looks the model up once, so an endpoint no call can succeed on fails there. An API
key is never put into a message, a file or a repr: every error text passes through
:func:`~lore.llm.secrets.redact_text` first.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any
from urllib.parse import urlsplit

from lore.config.sections import MAX_BACKOFF_S, MAX_LLM_RETRIES, MAX_LLM_TIMEOUT_S
from lore.llm.backend_base import (  # noqa: F401  (re-exported: lore.llm, tests)
    BACKEND_FAILURES,
    AdviceRequest,
    Backend,
    BackendResponse,
    LLMConfigError,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMRateLimited,
    LLMReplayMiss,
    LLMServerError,
    LLMTimeout,
)
from lore.llm.replay import ReplayBackend
from lore.llm.schema import DEFAULT_MAX_PLAN_LEN, gemini_response_schema, json_response_schema
from lore.llm.scripted import ScriptedAdvisor
from lore.llm.secrets import API_KEY_ENV, OPENAI_API_KEY_ENV, key_problem, redact_text
from lore.llm.transport import CallState, bounded_client, is_loopback, new_client
from lore.validation import shown_url, url_problem

log = logging.getLogger(__name__)

# the request, the response, the protocol and the failures: lore.llm.backend_base (re-exported here)


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
"""Backends that call a model server over HTTP (a key, an endpoint check, a deadline and retries)."""

CALL_SLACK_S = 2.0
"""How long after its deadline (``timeout_s × (retries + 1)``) a call may still take to return: the time to
raise, parse a response of at most ``MAX_RESPONSE_BYTES`` and hand it over. The controller gives a call this
long before it gives it up."""
RETRY_AFTER_MAX_S = 60.0
"""Longest ``Retry-After`` honoured: a server asking for longer is asked again after this long."""
UNSUPPORTED_FEATURE = re.compile(
    r"(response_format|json_schema|json schema|structured output|guided|grammar)[^.]{0,80}?"
    r"(not supported|unsupported|not implemented|not available|unknown|unrecognized|not recognized|"
    r"not allowed|not permitted)"
    r"|(not support|unsupported|not implemented|does not accept|doesn't accept|unknown|unrecognized)[^.]{0,80}?"
    r"(response_format|json_schema|json schema|structured output|guided|grammar)",
    re.IGNORECASE)
"""A server's error message saying that it cannot constrain answers to a JSON schema."""


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


MAX_REPORTED_TOKENS = 10**9
"""Largest token count of one answer believed (a server may report anything)."""
MAX_MODEL_NAME_CHARS = 200
"""Longest model name kept from an answer."""


def reported_count(value: Any) -> int:
    """A token count as a server reported it; 0 when it is not a count in ``[0, MAX_REPORTED_TOKENS]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return int(value) if 0 <= value <= MAX_REPORTED_TOKENS else 0


def reported_name(value: Any, default: str) -> str:
    """A model name as a server reported it, shortened to :data:`MAX_MODEL_NAME_CHARS`; ``default`` when
    there is none."""
    return str(value)[:MAX_MODEL_NAME_CHARS] if isinstance(value, str) and value else default


def call_budget_s(timeout_s: float, retries: int) -> float:
    """The deadline of one call, in seconds from its start: every attempt, every pause between attempts and the
    ``response_format`` fallback together."""
    return float(timeout_s) * (max(int(retries), 0) + 1)


def longest_call_s(llm) -> float:
    """The longest one call of an ``llm`` section may take: its deadline plus :data:`CALL_SLACK_S`."""
    return call_budget_s(llm.timeout_s, llm.retries) + CALL_SLACK_S


def retry_after_s(error: BaseException) -> float:
    """Seconds a failed HTTP answer asks the client to wait (``retry-after-ms`` / ``retry-after``), at most
    :data:`RETRY_AFTER_MAX_S`; 0 when it says nothing usable."""
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
            except (TypeError, ValueError, OverflowError):
                continue
        if seconds == seconds and seconds > 0:  # not NaN
            return min(seconds, RETRY_AFTER_MAX_S)
    return 0.0


def _plain_http_problem(base_url: str, key_env: str, allowed: bool) -> str | None:
    """Why a key may not be sent to ``base_url`` (plain http to another machine), None when it may."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or allowed or is_loopback(parts.hostname):
        return None
    return (f"plain http to another machine, so {key_env} would travel unencrypted; use https, or set "
            f"llm.allow_plain_http=true")


class HTTPBackend:
    """What the HTTP backends share: the settings, one deadline per call (:class:`CallState`), the retry loop
    that turns client exceptions into counted :class:`LLMError` kinds, and the start-up lookup. Subclasses set
    the exception classes of their client and :meth:`_status`.

    A call starts its attempts while its deadline (:func:`call_budget_s`) has time left; each attempt may take
    ``timeout_s``, never past the deadline. 429, 5xx, 408 and connection errors are retried after a pause of
    ``backoff_s × 2^k`` (at most :data:`MAX_BACKOFF_S`), or the server's ``Retry-After`` where longer (at most
    :data:`RETRY_AFTER_MAX_S`); a pause that would pass the deadline ends the call at once. A ``Retry-After``
    also holds for the calls that start before it has passed. A timeout, another 4xx, a response larger than
    ``MAX_RESPONSE_BYTES`` and a cut-off answer are not retried."""

    needs_snapshot = False
    inline = False
    cache_tag = ""
    label = "HTTP"
    """How error messages name the server."""

    _status_errors: tuple[type, ...] = ()
    _timeouts: tuple[type, ...] = ()
    _connects: tuple[type, ...] = ()

    def __init__(self, timeout_s: float, retries: int, backoff_s: float, secrets: tuple[str, ...], sleep=None):
        if not (0 < timeout_s <= MAX_LLM_TIMEOUT_S and 0 <= retries <= MAX_LLM_RETRIES
                and 0 <= backoff_s <= MAX_BACKOFF_S):
            raise LLMConfigError(f"llm.timeout_s must be in (0, {MAX_LLM_TIMEOUT_S:g}], llm.retries in "
                                 f"[0, {MAX_LLM_RETRIES}] and llm.backoff_s in [0, {MAX_BACKOFF_S:g}] "
                                 f"(got {timeout_s}, {retries}, {backoff_s})")
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self._secrets = secrets
        self._sleep = sleep
        self._not_before = 0.0
        """Monotonic time before which the server asked not to be called again (``Retry-After``)."""

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
        return redact_text(str(getattr(error, "message", "") or error), self._secrets)

    def _described(self, error: BaseException) -> str:
        """``Type: message`` of a transport error, with its cause (e.g. the refused connection), redacted."""
        cause = error.__cause__
        cause = None if cause is None or str(cause) == str(error) else cause
        text = f"{type(error).__name__}: {error}" + (f" ({type(cause).__name__}: {cause})" if cause else "")
        return redact_text(text, self._secrets)

    def _new_call(self, request: AdviceRequest | None = None) -> CallState:
        """The :class:`CallState` of a call starting now (the request's own, which its caller may cancel)."""
        call = getattr(request, "call", None) or CallState()
        call.begin(call_budget_s(self.timeout_s, self.retries))
        return call

    def _pause(self, call: CallState, seconds: float) -> bool:
        """Wait ``seconds`` before the next attempt; False (without waiting) when that would pass the call's
        deadline, or when the call is cancelled meanwhile."""
        if seconds >= call.remaining():
            return False
        if self._sleep is None:
            return call.wait(seconds)
        self._sleep(seconds)
        return not call.cancelled

    def _error(self, call: CallState, e: BaseException) -> tuple[LLMError, bool, float]:
        """``(error, retry, retry_after_s)`` for an exception of one attempt of ``call``."""
        attempts = call.attempts
        if call.cancelled:
            return LLMTimeout("no answer: the call was given up", attempts), False, 0.0
        if call.fault is not None:  # what the transport refused (too large, an unknown encoding)
            kind, message = call.fault
            return LLMError(message, attempts, kind=kind), False, 0.0
        if isinstance(e, self._status_errors):
            code, detail = self._status(e), self._detail(e)
            message = f"{self.label} HTTP {code}: {detail}"[:500]
            if code == 429:
                error: LLMError = LLMRateLimited(message, attempts)
            elif code >= 500 or code == 408:
                error = LLMServerError(message, attempts)
            else:  # 4xx: retrying will not help
                error = LLMHTTPError(message, attempts)
            error.status, error.detail = code, detail
            wait = retry_after_s(e)
            if wait:
                self._not_before = max(self._not_before, time.monotonic() + wait)
            return error, not isinstance(error, LLMHTTPError), wait
        if isinstance(e, self._timeouts) or time.monotonic() >= call.attempt_deadline:
            # No retry: a timed-out attempt has already cost timeout_s, and the env loop moved on.
            return LLMTimeout(f"no answer within {self.timeout_s:g} s, or by the call's deadline "
                              f"({type(e).__name__})", attempts), False, 0.0
        if isinstance(e, self._connects):
            return LLMConnectionError(self._described(e)[:500], attempts), True, 0.0
        return LLMError(redact_text(f"{type(e).__name__}: {e}", self._secrets)[:500], attempts), False, 0.0

    def _retrying(self, send, call: CallState, retry_status: bool = True) -> Any:
        """``send()`` within ``call``'s deadline, retried as the class says; raises the :class:`LLMError` of the
        last failure (its ``attempts``: every attempt of the call so far). ``retry_status`` false: an HTTP
        error status is raised at once."""
        wait = self._not_before - time.monotonic()
        if wait > 0 and not self._pause(call, wait):
            raise LLMRateLimited(f"{self.label} asked to be called again in {wait:.3g} s (Retry-After), after this "
                                 f"call's deadline", call.attempts)
        error: LLMError | None = None
        while True:
            if not call.start_attempt(self.timeout_s):
                if error is not None:
                    raise error
                raise LLMTimeout("no answer: the call was given up or its deadline had passed", call.attempts)
            try:
                with call.active():
                    return send()
            except Exception as e:
                error, retry, retry_after = self._error(call, e)
            if not retry or (isinstance(error, (LLMRateLimited, LLMServerError)) and not retry_status):
                raise error
            if call.attempts > self.retries:
                raise error
            backoff = min(self.backoff_s * 2 ** (call.attempts - 1), MAX_BACKOFF_S)
            if not self._pause(call, max(backoff, retry_after)):
                raise error

    def _lookup(self, lookup, where: str, fatal: dict[int, str]) -> Any:
        """``lookup()`` once at start-up, within one call's deadline; raises :class:`LLMConfigError` when no
        call can succeed: the endpoint is unreachable (after the configured retries) or answers a status of
        ``fatal`` (its message). None when the answer is left to the run's own retries (a rate limit, a server
        error, a timeout, an odd answer)."""
        try:
            return self._retrying(lookup, self._new_call(), retry_status=False)
        except LLMConnectionError as e:
            raise LLMConfigError(f"llm.base_url: cannot reach {where} ({str(e)[:200]})") from None
        except LLMError as e:
            code = getattr(e, "status", None)
            if code in fatal:
                raise LLMConfigError(f"{fatal[code]} (HTTP {code}: {e.detail[:200]})") from None
            return None


# ----------------------------------------------------------------------------- gemini


class GeminiBackend(HTTPBackend):
    """``google-genai`` ``generate_content`` in JSON mode, through a connection pool that enforces the call's
    deadline and size cap (:mod:`lore.llm.transport`); the retries are ours (:class:`HTTPBackend`)."""

    name = "gemini"
    label = "Gemini"

    def __init__(self, model: str, base_url: str | None = None, api_version: str | None = None,
                 timeout_s: float = 20.0, retries: int = 3, backoff_s: float = 0.5,
                 max_plan_len: int = DEFAULT_MAX_PLAN_LEN, sleep=None, allow_plain_http: bool = False):
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
            problem = url_problem(base_url) or _plain_http_problem(base_url, API_KEY_ENV, allow_plain_http)
            if problem:
                raise LLMConfigError(f"llm.base_url (or GOOGLE_GEMINI_BASE_URL): {shown_url(base_url)}: {problem}")
            options["base_url"] = base_url
        if api_version:
            options["api_version"] = api_version
        self.base_url = base_url
        try:
            options["httpx_client"] = new_client(timeout=self.timeout_s)
            self._client = genai.Client(api_key=key, http_options=types.HttpOptions(**options))
        except Exception as e:  # SDK start-up problems become a config error
            raise LLMConfigError(redact_text(f"could not create the Gemini client: {e}", self._secrets)) from None
        self._status_errors = (errors.APIError,)
        self._timeouts, self._connects = _transport_exceptions()

    def __repr__(self) -> str:
        return f"GeminiBackend(model={self.model!r}, base_url={shown_url(self.base_url) if self.base_url else None})"

    @staticmethod
    def _status(error: BaseException) -> int:
        return int(getattr(error, "code", 0) or 0)

    def check_endpoint(self) -> None:
        """Look the model up once (``models.get``: no tokens) and raise :class:`LLMConfigError` when no call can
        succeed: the endpoint is unreachable (after the configured retries), rejects the key, or does not know
        the model. A rate limit, a server error or a timeout is left to the run's own retries."""
        where = shown_url(self.base_url) if self.base_url else "the Gemini API"
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
        call = self._new_call(request)
        response = self._retrying(lambda: self._client.models.generate_content(
            model=self.model, contents=request.prompt, config=config), call)
        try:
            reason = response.candidates[0].finish_reason
        except (AttributeError, IndexError, TypeError):
            reason = None
        if str(getattr(reason, "name", reason)) == "MAX_TOKENS":
            raise LLMError("the answer was cut off at the model's token limit (finishReason MAX_TOKENS)",
                           call.attempts, kind="truncated")
        usage = getattr(response, "usage_metadata", None)
        try:
            text = response.text or ""
        except Exception:  # .text raises on some blocked/odd candidates
            text = ""
        return BackendResponse(
            text=text,
            tokens_in=reported_count(getattr(usage, "prompt_token_count", 0)),
            tokens_out=reported_count(getattr(usage, "candidates_token_count", 0)),
            model=reported_name(getattr(response, "model_version", None), self.model),
            attempts=call.attempts,
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
"""Statuses with which a server refuses a request's ``response_format``; the backend asks without it only when
the error's message says so (:data:`UNSUPPORTED_FEATURE`)."""

_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


def json_part(text: str) -> str:
    """The JSON object in a free-text answer: without a leading ``<think>...</think>`` block, from the first
    ``{`` to the last ``}``; ``text`` itself when it holds no such span."""
    text = _THINK.sub("", text, count=1)
    first, last = text.find("{"), text.rfind("}")
    return text[first:last + 1] if 0 <= first < last else text


class OpenAIBackend(HTTPBackend):
    """Chat Completions of an OpenAI-compatible server (vLLM, llama.cpp's ``llama-server``, Ollama, SGLang)
    through the ``openai`` client, temperature 0, over a connection pool that enforces the call's deadline and
    size cap (:mod:`lore.llm.transport`); the retries are ours (:class:`HTTPBackend`).

    Each call asks for JSON constrained by :func:`~lore.llm.schema.json_response_schema` (``response_format``
    of type ``json_schema``). A server that refuses it (HTTP 400 / 422 with a message saying the feature is not
    supported) is asked again without it within the same call, and from then on for the rest of the run; the
    answer's JSON object is then cut out of the text (:func:`json_part`). The switch is logged as a warning
    and travels with the call (``warning``: the ledger line, the ``llm_schema_dropped`` counter). An answer
    cut off at the token limit (``finish_reason: length``) is a ``truncated`` failure. The key
    (``OPENAI_API_KEY``, optional) is redacted from every message, and is sent over plain http only to this
    machine unless ``allow_plain_http``.
    """

    name = "openai"

    def __init__(self, model: str, base_url: str | None = None, timeout_s: float = 20.0, retries: int = 3,
                 backoff_s: float = 0.5, max_plan_len: int = DEFAULT_MAX_PLAN_LEN, sleep=None,
                 allow_plain_http: bool = False):
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        if not base_url:
            raise LLMConfigError("llm.base_url: backend 'openai' needs the server's endpoint, "
                                 "e.g. http://127.0.0.1:8000/v1 (or set OPENAI_BASE_URL)")
        key = os.environ.get(OPENAI_API_KEY_ENV, "").strip()
        problem = url_problem(base_url) or (key and _plain_http_problem(base_url, OPENAI_API_KEY_ENV, allow_plain_http))
        if problem:
            raise LLMConfigError(f"llm.base_url (or OPENAI_BASE_URL): {shown_url(base_url)}: {problem}")
        if not str(model).strip():
            raise LLMConfigError("llm.model: backend 'openai' needs the name the server serves the model under")
        if key and key_problem(key):
            raise LLMConfigError(f"{OPENAI_API_KEY_ENV}: {key_problem(key)}")
        super().__init__(timeout_s, retries, backoff_s, (key,) if key else (), sleep)
        import openai

        self.model = str(model)
        self.base_url = base_url
        self.label = f"server {shown_url(base_url)}"
        self.max_plan_len = max_plan_len
        self.schema_constrained = True
        """False once the server said it does not support ``response_format``: later calls ask for plain text."""
        try:
            http_client = bounded_client(openai.DefaultHttpxClient(timeout=self.timeout_s))
            self._client = openai.OpenAI(api_key=key or NO_KEY, base_url=base_url, timeout=self.timeout_s,
                                         max_retries=0, http_client=http_client)
        except Exception as e:  # client start-up problems become a config error
            raise LLMConfigError(redact_text(f"could not create the OpenAI client: {e}", self._secrets)) from None
        self._status_errors = (openai.APIStatusError,)
        self._timeouts = (openai.APITimeoutError,)
        self._connects = (openai.APIConnectionError,)

    def __repr__(self) -> str:
        return f"OpenAIBackend(model={self.model!r}, base_url={shown_url(self.base_url)})"

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

    def _ask(self, request: AdviceRequest, constrained: bool, call: CallState) -> Any:
        kwargs: dict[str, Any] = {"model": self.model, "temperature": 0.0,
                                  "messages": [{"role": "user", "content": request.prompt}]}
        if constrained:
            schema = json_response_schema(request.num_actions, request.max_plan_len, request.with_features)
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "advice", "schema": schema}}
        return self._retrying(lambda: self._client.chat.completions.create(**kwargs), call)

    def complete(self, request: AdviceRequest) -> BackendResponse:
        call = self._new_call(request)
        constrained = self.schema_constrained
        warning = None
        try:
            response = self._ask(request, constrained, call)
        except LLMHTTPError as e:
            if not (constrained and getattr(e, "status", None) in SCHEMA_REJECTED
                    and UNSUPPORTED_FEATURE.search(str(e))):
                raise
            self.schema_constrained = constrained = False
            warning = (f"{self.label} does not support response_format ({str(e)[:200]}); asking for plain JSON "
                       f"text from now on")
            log.warning("%s", warning)
            try:
                response = self._ask(request, False, call)
            except LLMError as again:
                again.warning = warning
                raise
        try:
            choice = response.choices[0]
            text = choice.message.content or ""
        except (AttributeError, IndexError, TypeError):  # no choice, or not a chat completion
            choice, text = None, ""
        if getattr(choice, "finish_reason", None) == "length":
            error = LLMError("the answer was cut off at the token limit (finish_reason: length)", call.attempts,
                             kind="truncated")
            error.warning = warning
            raise error
        if not constrained:
            text = json_part(text)
        usage = getattr(response, "usage", None)
        return BackendResponse(
            text=text,
            tokens_in=reported_count(getattr(usage, "prompt_tokens", 0)),
            tokens_out=reported_count(getattr(usage, "completion_tokens", 0)),
            model=reported_name(getattr(response, "model", None), self.model),
            attempts=call.attempts,
            extra={"warning": warning} if warning else {},
        )


def _remote_backend(llm, max_plan_len: int = DEFAULT_MAX_PLAN_LEN) -> GeminiBackend | OpenAIBackend:
    """The HTTP backend of an ``llm`` section whose backend is one of :data:`REMOTE_BACKENDS`."""
    plain = bool(getattr(llm, "allow_plain_http", False))
    if llm.backend == "openai":
        return OpenAIBackend(llm.model, llm.base_url, llm.timeout_s, llm.retries, llm.backoff_s, max_plan_len,
                             allow_plain_http=plain)
    return GeminiBackend(llm.model, llm.base_url, llm.api_version, llm.timeout_s, llm.retries, llm.backoff_s,
                         max_plan_len, allow_plain_http=plain)


def endpoint(llm) -> str | None:
    """The endpoint a remote backend of ``llm`` calls: ``llm.base_url``, else the environment's
    (``OPENAI_BASE_URL`` / ``GOOGLE_GEMINI_BASE_URL``); None for Google's own Gemini endpoint or another
    backend."""
    if llm.backend not in REMOTE_BACKENDS:
        return llm.base_url
    env = "OPENAI_BASE_URL" if llm.backend == "openai" else "GOOGLE_GEMINI_BASE_URL"
    return llm.base_url or os.environ.get(env) or None


def check_endpoint(llm) -> None:
    """The start-up check of a ``gemini`` or ``openai`` run's ``llm`` section (the backend's
    ``check_endpoint``): raises :class:`LLMConfigError` when no call of the run can succeed."""
    backend = _remote_backend(llm)
    try:
        backend.check_endpoint()
    finally:
        backend.close()



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

