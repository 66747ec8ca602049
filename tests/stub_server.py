"""What the loopback model servers of the tests share: a threaded HTTP server on 127.0.0.1, a queue of faults
programmed per request, request recording, and the answers' JSON text.

Faults every stub understands: ``ok``, the bad answers of :func:`answer_text`, ``delay:<seconds>`` (a valid
answer after a pause), ``hang`` (never answers until the stub stops), ``reset`` (the connection is reset
before any answer), ``bad_body`` (HTTP 200, body not JSON), ``trickle:<seconds>:<pieces>`` (a valid answer
whose body is written in ``pieces`` parts spread over ``seconds``, each pause far shorter than a timeout) and
``oversize:<bytes>`` (a valid answer padded with white space to ``bytes``, a valid JSON body of that size),
``gzip:<bytes>`` (the same, sent gzip-compressed: a small body that inflates to ``bytes``), ``encoding:<name>``
(a valid answer declared in the content encoding ``name``) and ``redirect`` (307 to another path).
With no fault queued a stub answers ``ok``. ``max_active`` is the most requests handled at once.

Threaded on purpose: a single-threaded server hangs on keep-alive connections.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BAD_ANSWERS = ("malformed", "wrong_length", "missing", "nan", "inf", "bad_action", "negative", "huge", "prose",
               "digits")


def answer_text(num_actions: int, best: int = 0, kind: str = "ok") -> str:
    """The model's JSON text for one answer kind (``ok`` is a valid answer favouring ``best``):
    ``malformed`` (truncated JSON), ``wrong_length`` (one logit too many), ``missing`` (no confidence),
    ``nan`` (a NaN logit), ``inf`` (a logit that overflows to infinity), ``bad_action`` (a plan naming an
    action that does not exist), ``negative`` / ``huge`` (confidence -0.5 / 1e6), ``prose`` (a valid answer
    inside a ``<think>`` block and sentences), ``digits`` (a logit written with 5,000 digits, more than Python's
    ``json`` reads as an integer)."""
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
    elif kind == "inf":
        return json.dumps(answer).replace("3.0", "1e999", 1)
    elif kind == "bad_action":
        answer["plan"] = [num_actions + 3]
    elif kind == "negative":
        answer["confidence"] = -0.5
    elif kind == "huge":
        answer["confidence"] = 1e6
    elif kind == "prose":
        return f"<think>The key {{is}} near.</think>Here is my advice:\n{json.dumps(answer)}\nGood luck!"
    elif kind == "digits":
        return json.dumps(answer).replace("3.0", "9" * 5000, 1)
    return json.dumps(answer)


class LoopbackStub:
    """The server, the fault queue and the recording; subclasses answer in :meth:`_post` and :meth:`_get`."""

    thread_name = "loopback-stub"

    def __init__(self, num_actions: int = 7, best_action: int = 2):
        self.num_actions = num_actions
        self.best_action = best_action
        self.requests: list[dict] = []
        self.lookups: list[str] = []
        self.active = 0
        self.max_active = 0
        self._faults: deque[str] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers
            disable_nagle_algorithm = True  # TCP_NODELAY, as real servers: no 40 ms delayed-ACK stalls

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                with stub._lock:
                    stub.active += 1
                    stub.max_active = max(stub.max_active, stub.active)
                try:
                    stub._post(self)
                finally:
                    with stub._lock:
                        stub.active -= 1

            def do_GET(self):
                stub._get(self)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a reset or abandoned connection: expected
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)

    # ------------------------------------------------------------------ control

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def push(self, *faults: str) -> None:
        with self._lock:
            self._faults.extend(faults)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # releases hung handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ serving

    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def _next_fault(self) -> str:
        with self._lock:
            return self._faults.popleft() if self._faults else "ok"

    def _record(self, handler: BaseHTTPRequestHandler) -> dict | None:
        """Read and record one request; its JSON body (None when not JSON)."""
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = None
        with self._lock:
            self.requests.append({"path": handler.path, "headers": dict(handler.headers.items()), "body": body})
        return body

    def _transport_fault(self, handler: BaseHTTPRequestHandler, fault: str) -> str | None:
        """Act out ``hang``, ``delay:<s>``, ``reset`` and ``bad_body``; the fault left to answer (``delay``
        leaves ``ok``), None when the request is dealt with."""
        if fault == "hang":
            self._stop.wait()
            handler.close_connection = True
            return None
        if fault.startswith("delay:"):
            time.sleep(float(fault.split(":", 1)[1]))
            return "ok"
        if fault == "reset":  # RST instead of an answer: SO_LINGER 0, then close
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            handler.connection.close()
            handler.close_connection = True
            return None
        if fault == "bad_body":
            self._send_raw(handler, 200, b"<html>not json</html>")
            return None
        if fault == "redirect":
            self._send_raw(handler, 307, b"{}", {"Location": "/elsewhere"})
            return None
        if fault.startswith(("trickle:", "oversize:", "gzip:", "encoding:")):  # the body is written its way
            handler.body_fault = fault
            return "ok"
        return fault

    def _send(self, handler, code: int, payload: dict, headers: dict | None = None) -> None:
        self._send_raw(handler, code, json.dumps(payload).encode(), headers)

    def _send_raw(self, handler, code: int, data: bytes, headers: dict | None = None) -> None:
        fault = getattr(handler, "body_fault", "")
        headers = dict(headers or {})
        if fault.startswith("gzip:"):
            data = gzip.compress(data + b" " * (int(fault.split(":")[1]) - len(data)), compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        elif fault.startswith("encoding:"):
            headers["Content-Encoding"] = fault.split(":")[1]
        size = int(fault.split(":")[1]) if fault.startswith("oversize:") else len(data)
        try:
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(size))
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            if fault.startswith("trickle:"):
                seconds, pieces = float(fault.split(":")[1]), int(fault.split(":")[2])
                step = -(-len(data) // pieces)
                for i in range(0, len(data), step):
                    handler.wfile.write(data[i:i + step])
                    handler.wfile.flush()
                    if self._stop.wait(seconds / pieces):
                        break
            elif fault.startswith("oversize:"):
                handler.wfile.write(data)
                padding = b" " * 65536
                for sent in range(len(data), size, len(padding)):
                    handler.wfile.write(padding[:size - sent])
            else:
                handler.wfile.write(data)
        except OSError:  # the client gave up (timeout) or the connection is gone
            handler.close_connection = True


def ask_through_faults(ctl, stub: LoopbackStub, faults: list[tuple[list[str], str]]):
    """Drive an :class:`~lore.llm.controller.LLMController` through ``faults``: for each ``(queued faults,
    failure kind)``, queue them, ask about a fresh state and wait (< 5 s) for the call; the kind's counter
    must have grown by one and the state must have no prior. Then ask about one more state (answered ``ok``)
    and return its advice (None when it got none)."""
    from lore.llm.controller import EnvQuery

    expected: dict[str, int] = {}
    for step, (queued, kind) in enumerate(faults):
        stub.push(*queued)
        key = f"state-{step}"
        start = time.perf_counter()
        ctl.maybe_request(step, [EnvQuery(0, key, lambda k=key: f"description of {k}", None, 1.0)])
        while ctl.counters()["llm_inflight"] and time.perf_counter() < start + 5.0:
            time.sleep(0.02)
            ctl.poll(step)
        assert time.perf_counter() - start < 5.0
        expected[kind] = expected.get(kind, 0) + 1
        counters = ctl.counters()
        assert counters[f"llm_failures_{kind}"] == expected[kind], (queued, counters)
        assert ctl.current(0, key, step) is None  # no prior for this state
    step = len(faults)
    ctl.maybe_request(step, [EnvQuery(0, "good", lambda: "description of good", None, 1.0)])
    return ctl.current(0, "good", step)


def assert_key_nowhere(key: str, run_dir, log_text: str, cfg) -> None:
    """``key`` is in no file under ``run_dir``, not in ``log_text``, and not in ``cfg``'s saved config."""
    from lore.config import save_config

    save_config(cfg, run_dir / "config-dump.yaml")
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), f"API key written to {path}"
    assert key not in log_text
