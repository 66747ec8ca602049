"""A loopback Gemini REST server for tests, driven through the real ``google-genai`` client.

It answers ``POST /{v1,v1beta}/models/<model>:generateContent`` with the real response shape
(``candidates[0].content.parts[0].text`` + ``usageMetadata``) and records every request (path,
headers, JSON body). Faults are programmed per request, in order, with :meth:`GeminiStub.push`:

``ok`` (a valid answer), ``malformed`` (text that is not JSON), ``wrong_length`` (one logit too
many), ``nan`` (a NaN logit), ``missing`` (no ``confidence``), ``http429`` / ``http500`` /
``http503`` (an error status with Google's error body), ``bad_body`` (HTTP 200, body not JSON),
``delay:<seconds>`` (a valid answer after a pause), ``hang`` (never answers until the stub stops),
``text:<text>`` (``<text>`` as the model's answer), ``error:<code>:<message>`` (an error status with
``<message>`` in Google's error body).
With no fault queued the stub answers ``ok``. The number of logits follows the request's
``responseSchema`` (``minItems`` of ``action_prior.logits``), else ``num_actions``.

``GET /{v1,v1beta}/models/<model>`` (the client's model lookup) answers the model's metadata, 404 for a
model in ``unknown_models``, and 400 ``API_KEY_INVALID`` when ``valid_key`` is set and the request's key is
another; lookups are recorded in ``lookups``, apart from ``requests``.

Threaded on purpose: a single-threaded server hangs on keep-alive connections.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_PATH = re.compile(r"^/(v1|v1beta)/models/([^/:]+):generateContent$")
_MODEL_PATH = re.compile(r"^/(v1|v1beta)/models/([^/:]+)$")
_STATUS = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def answer_text(num_actions: int, best: int = 0, kind: str = "ok") -> str:
    """The model's JSON text for one fault kind (``ok`` is a valid answer favouring ``best``)."""
    logits = [0.0] * num_actions
    logits[best % num_actions] = 3.0
    answer: dict = {"action_prior": {"logits": logits}, "confidence": 0.7, "plan": [best % num_actions],
                    "subgoal": "test", "notes": ""}
    if kind == "malformed":
        return '{"action_prior": {"logits": [0.0, 1.0'  # truncated JSON
    if kind == "wrong_length":
        answer["action_prior"]["logits"] = logits + [0.0]
    elif kind == "missing":
        del answer["confidence"]
    elif kind == "nan":
        return json.dumps(answer).replace("3.0", "NaN", 1)
    return json.dumps(answer)


class GeminiStub:
    def __init__(self, num_actions: int = 7, best_action: int = 2):
        self.num_actions = num_actions
        self.best_action = best_action
        self.requests: list[dict] = []
        self.lookups: list[str] = []
        self.unknown_models: set[str] = set()
        self.valid_key: str | None = None
        self._faults: deque[str] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                stub._handle(self)

            def do_GET(self):
                stub._lookup(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="gemini-stub", daemon=True)

    # ------------------------------------------------------------------ control

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def push(self, *faults: str) -> None:
        with self._lock:
            self._faults.extend(faults)

    def start(self) -> GeminiStub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # releases hung handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> GeminiStub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ serving

    def _next_fault(self) -> str:
        with self._lock:
            return self._faults.popleft() if self._faults else "ok"

    def _lookup(self, handler: BaseHTTPRequestHandler) -> None:
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

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = None
        match = _PATH.match(handler.path.split("?")[0])
        with self._lock:
            self.requests.append({"path": handler.path, "headers": dict(handler.headers.items()), "body": body})
        if not match:
            return self._send(handler, 404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})
        fault = self._next_fault()
        if fault == "hang":
            self._stop.wait()
            return
        if fault.startswith("delay:"):
            time.sleep(float(fault.split(":", 1)[1]))
            fault = "ok"
        if fault.startswith("error:"):
            code, message = fault.split(":", 2)[1:]
            return self._send(handler, int(code), {"error": {"code": int(code), "message": message,
                                                             "status": _STATUS.get(int(code), "UNKNOWN")}})
        if fault.startswith("http"):
            code = int(fault[4:])
            return self._send(handler, code, {"error": {"code": code, "message": f"stub fault {code}",
                                                        "status": _STATUS.get(code, "UNKNOWN")}})
        if fault == "bad_body":
            return self._send_raw(handler, 200, b"<html>not json</html>")
        n = self._schema_actions(body) or self.num_actions
        text = fault[5:] if fault.startswith("text:") else answer_text(n, self.best_action, fault)
        payload = {
            "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP",
                            "index": 0}],
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

    def _send(self, handler, code: int, payload: dict) -> None:
        self._send_raw(handler, code, json.dumps(payload).encode())

    @staticmethod
    def _send_raw(handler, code: int, data: bytes) -> None:
        try:
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass
