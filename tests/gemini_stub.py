"""A loopback Gemini REST server for tests, driven through the real ``google-genai`` client.

It answers ``POST /{v1,v1beta}/models/<model>:generateContent`` with the real response shape
(``candidates[0].content.parts[0].text`` + ``usageMetadata``) and records every request (path,
headers, JSON body). Faults are programmed per request, in order, with :meth:`GeminiStub.push`: those of
:mod:`stub_server`, ``http429`` / ``http500`` / ``http503`` (an error status with Google's error body;
``http429:<s>`` adds ``retry-after: <s>``) and ``max_tokens`` (an answer cut off, ``finishReason:
MAX_TOKENS``).
The number of logits follows the request's ``responseSchema`` (``minItems`` of ``action_prior.logits``),
else ``num_actions``; also ``text:<text>`` (``<text>`` as the model's answer) and
``error:<code>:<message>`` (an error status with ``<message>`` in Google's error body).

``GET /{v1,v1beta}/models/<model>`` (the client's model lookup) answers the model's metadata, 404 for a
model in ``unknown_models``, and 400 ``API_KEY_INVALID`` when ``valid_key`` is set and the request's key is
another; lookups are recorded in ``lookups``, apart from ``requests``.
"""

from __future__ import annotations

import re
from http.server import BaseHTTPRequestHandler

from stub_server import LoopbackStub, answer_text

__all__ = ["GeminiStub", "answer_text"]

_PATH = re.compile(r"^/(v1|v1beta)/models/([^/:]+):generateContent$")
_MODEL_PATH = re.compile(r"^/(v1|v1beta)/models/([^/:]+)$")
_STATUS = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


class GeminiStub(LoopbackStub):
    thread_name = "gemini-stub"

    def __init__(self, num_actions: int = 7, best_action: int = 2):
        super().__init__(num_actions, best_action)
        self.unknown_models: set[str] = set()
        self.valid_key: str | None = None

    @property
    def base_url(self) -> str:
        return self.address

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        match = _MODEL_PATH.match(handler.path.split("?")[0])
        with self._lock:
            self.lookups.append(handler.path)
        key = handler.headers.get("x-goog-api-key")
        if self.valid_key is not None and key != self.valid_key:
            return self._send(handler, 400, {"error": {"code": 400, "message": "API key not valid.",
                                                       "status": "INVALID_ARGUMENT"}})
        if not match or match.group(2) in self.unknown_models:
            return self._send(handler, 404, {"error": {"code": 404, "message": "model not found",
                                                       "status": "NOT_FOUND"}})
        self._send(handler, 200, {"name": f"models/{match.group(2)}", "displayName": match.group(2)})

    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        body = self._record(handler)
        match = _PATH.match(handler.path.split("?")[0])
        if not match:
            return self._send(handler, 404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})
        fault = self._transport_fault(handler, self._next_fault())
        if fault is None:
            return
        if fault.startswith("error:"):
            code, message = fault.split(":", 2)[1:]
            return self._send(handler, int(code), {"error": {"code": int(code), "message": message,
                                                             "status": _STATUS.get(int(code), "UNKNOWN")}})
        if fault.startswith("http"):
            code_text, _, retry_after = fault[4:].partition(":")
            code = int(code_text)
            return self._send(handler, code, {"error": {"code": code, "message": f"stub fault {code}",
                                                        "status": _STATUS.get(code, "UNKNOWN")}},
                              {"retry-after": retry_after} if retry_after else None)
        n = self._schema_actions(body) or self.num_actions
        if fault.startswith("text:"):
            text = fault[5:]
        else:
            text = answer_text(n, self.best_action, "ok" if fault == "max_tokens" else fault)
        if fault == "max_tokens":
            text = text[:40]
        payload = {
            "candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                            "finishReason": "MAX_TOKENS" if fault == "max_tokens" else "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 123, "candidatesTokenCount": 45, "totalTokenCount": 168},
            "modelVersion": match.group(2),
        }
        self._send(handler, 200, payload)

    @staticmethod
    def _schema_actions(body) -> int | None:
        try:
            schema = body["generationConfig"]["responseSchema"]
            logits = schema["properties"]["action_prior"]["properties"]["logits"]
            # the SDK sends proto field names (min_items); the REST docs write minItems: accept both
            return int(logits.get("minItems", logits.get("min_items")))
        except (KeyError, TypeError, ValueError):
            return None
