"""A loopback OpenAI-compatible server for tests and benchmarks, driven through the real ``openai`` client.

It speaks the part of the API that vLLM, llama.cpp's ``llama-server`` and Ollama serve: ``GET /v1/models``
(the served models, ``models``) and ``POST /v1/chat/completions`` with the real response shape
(``choices[0].message.content`` + ``usage``). Every completion request is recorded (path, headers, JSON
body) in ``requests``, every listing in ``lookups``, and the time the server spent on each completion (from
its request line parsed to its answer written) in ``handling_s``.

Faults are programmed per request, in order, with :meth:`OpenAIStub.push`: those of :mod:`stub_server`,
``http<code>`` (an error status with the OpenAI error body; ``http429:<s>`` adds ``retry-after: <s>``),
``length`` (an answer cut off, ``finish_reason: length``), ``echo_key`` (a valid answer whose notes repeat
the request's bearer key, as a server echoing its input would) and ``odd_usage`` (a valid answer with a token
count of 400 digits and a model name of 100,000 characters).
A request for a model not in ``models`` gets 404 (as vLLM answers); with ``schema_support`` false a request
with a ``response_format`` gets 400 (as a server without guided decoding); with ``valid_key`` set a request
with another bearer key gets 401. ``latency_s`` delays every completion (a model's own time). The number
of logits follows the request's JSON schema (``minItems`` of ``action_prior.logits``), else ``num_actions``.
"""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

from stub_server import LoopbackStub, answer_text

MODEL = "stub/open-model-7b"


def error_body(code: int, message: str) -> dict:
    return {"error": {"message": message, "type": "BadRequestError" if code == 400 else "APIError",
                      "param": None, "code": code}}


class OpenAIStub(LoopbackStub):
    thread_name = "openai-stub"

    def __init__(self, num_actions: int = 7, best_action: int = 2, models: tuple[str, ...] = (MODEL,)):
        super().__init__(num_actions, best_action)
        self.models = list(models)
        self.schema_support = True
        self.valid_key: str | None = None
        self.latency_s = 0.0
        self.handling_s: list[float] = []

    @property
    def base_url(self) -> str:
        return f"{self.address}/v1"

    def _key_refused(self, handler: BaseHTTPRequestHandler) -> bool:
        if self.valid_key is None or handler.headers.get("Authorization") == f"Bearer {self.valid_key}":
            return False
        self._send(handler, 401, error_body(401, "Invalid API key"))
        return True

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.lookups.append(handler.path)
        if self._key_refused(handler):
            return
        if handler.path.split("?")[0] != "/v1/models":
            return self._send(handler, 404, error_body(404, "Not Found"))
        self._send(handler, 200, {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "stub"} for name in self.models]})

    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        start = time.perf_counter()
        body = self._record(handler) or {}
        if self._key_refused(handler):
            return
        if handler.path.split("?")[0] != "/v1/chat/completions":
            return self._send(handler, 404, error_body(404, "Not Found"))
        model = body.get("model")
        if model not in self.models:
            return self._send(handler, 404, error_body(404, f"The model `{model}` does not exist."))
        if body.get("response_format") and not self.schema_support:
            return self._send(handler, 400, error_body(400, "response_format is not supported"))
        fault = self._transport_fault(handler, self._next_fault())
        if fault is None:
            return
        if fault.startswith("http"):
            code, _, retry_after = fault[4:].partition(":")
            headers = {"retry-after": retry_after} if retry_after else None
            return self._send(handler, int(code), error_body(int(code), f"stub fault {code}"), headers)
        if self.latency_s:
            time.sleep(self.latency_s)
        n = self._schema_actions(body) or self.num_actions
        text = answer_text(n, self.best_action, "ok" if fault in ("length", "echo_key", "odd_usage") else fault)
        if fault == "length":
            text = text[:40]
        elif fault == "echo_key":
            key = (handler.headers.get("Authorization") or "").removeprefix("Bearer ")
            text = text.replace('"notes": ""', f'"notes": "you sent {key}"')
        usage = {"prompt_tokens": 123, "completion_tokens": 45, "total_tokens": 168}
        if fault == "odd_usage":
            usage, model = {"prompt_tokens": 10**400, "completion_tokens": -5, "total_tokens": 0}, "m" * 100_000
        self._send(handler, 200, {
            "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "length" if fault == "length" else "stop"}],
            "usage": usage,
        })
        with self._lock:
            self.handling_s.append(time.perf_counter() - start)

    @staticmethod
    def _schema_actions(body: dict) -> int | None:
        try:
            schema = body["response_format"]["json_schema"]["schema"]
            return int(schema["properties"]["action_prior"]["properties"]["logits"]["minItems"])
        except (KeyError, TypeError, ValueError):
            return None
