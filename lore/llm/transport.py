"""One deadline and one size cap per LLM call, enforced at the socket, for the ``openai`` and ``google-genai``
clients alike.

Both clients send their requests through an ``httpx2`` client; :func:`bounded_client` gives them one whose
connection pools open their connections through :class:`DeadlineBackend`. Every socket operation of a call
(name lookup, connect, TLS handshake, each write and each read) then waits at most until the current
attempt's deadline, however the server trickles its answer, and the bytes received are counted as they
arrive: a response of more than :data:`MAX_RESPONSE_BYTES` stops being read at that size. A compressed body
(gzip or deflate, although the client asks for none) is inflated under the same cap, another encoding is
refused, and redirects are not followed (each request an attempt counts; no key travels to another host).
The call those limits belong to is the :class:`CallState` the calling thread has made current with
:meth:`CallState.active`; a socket used outside any call gets the client's own per-operation timeout.

A :class:`CallState` is shared with the thread that waits for the call: :meth:`CallState.cancel` stops it
from another thread (no further attempt starts, a wait is cut short, and the socket of a transfer in progress
is shut down) and returns the number of attempts it made.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

MAX_RESPONSE_BYTES = 1 << 20
"""Most bytes read for one attempt's response (headers included): an answer of the longest accepted length
(``MAX_ANSWER_CHARS``), every character JSON-escaped, fits six times over."""


class ResponseTooLarge(Exception):
    """The response passed :data:`MAX_RESPONSE_BYTES`; reading stopped there."""


class CallCancelled(Exception):
    """The call was cancelled (:meth:`CallState.cancel`) while it ran."""


_current = threading.local()


def current_call() -> CallState | None:
    """The call the calling thread runs now (:meth:`CallState.active`), or None."""
    return getattr(_current, "call", None)


class CallState:
    """The limits and the progress of one call: its deadline, the current attempt's deadline, the attempts
    started, the bytes received in this attempt, and the sockets in use. Thread-safe."""

    def __init__(self) -> None:
        self.deadline = float("inf")
        self.begun = False
        """Whether a backend has started the clock (one that does not count its attempts never does)."""
        self.attempt_deadline = float("inf")
        self.attempts = 0
        self.received = 0
        self.fault: tuple[str, str] | None = None
        """``(failure kind, message)`` of what the transport refused in this attempt (a body too large, an
        unknown encoding), None when it refused nothing."""
        self.cancelled = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._busy: set[Any] = set()

    def begin(self, budget_s: float) -> None:
        """Start the clock: the call must end within ``budget_s`` seconds from now."""
        self.deadline = time.monotonic() + budget_s
        self.begun = True

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def start_attempt(self, timeout_s: float) -> bool:
        """Count one more attempt, which may take ``timeout_s`` seconds (never past the call's deadline);
        False, and nothing counted, once the call is cancelled or its deadline has passed."""
        with self._lock:
            now = time.monotonic()
            if self.cancelled or now >= self.deadline:
                return False
            self.attempts += 1
            self.received = 0
            self.fault = None
            self.attempt_deadline = min(now + timeout_s, self.deadline)
            return True

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` (cut short by :meth:`cancel`); False when the call was cancelled."""
        self._wake.wait(max(seconds, 0.0))
        return not self.cancelled

    def cancel(self) -> int:
        """Stop the call: no attempt starts after this, a wait ends, and the socket of a transfer in progress
        is shut down. Returns the attempts made."""
        with self._lock:
            self.cancelled = True
            busy = list(self._busy)
            attempts = self.attempts
        self._wake.set()
        for sock in busy:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's: also under TLS
        return attempts

    def io_timeout(self, timeout: float | None) -> float:
        """The timeout of one socket operation now: the client's ``timeout``, at most what is left of the
        attempt; raises ``TimeoutError`` when nothing is left."""
        left = self.attempt_deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the call's deadline has passed")
        return left if timeout is None else min(timeout, left)

    @contextlib.contextmanager
    def using(self, sock: Any):
        """Mark ``sock`` as in use by this call for one operation (so that :meth:`cancel` can end it)."""
        with self._lock:
            if self.cancelled:
                raise CallCancelled("the call was cancelled")
            if sock is not None:
                self._busy.add(sock)
        try:
            yield
        finally:
            if sock is not None:
                with self._lock:
                    self._busy.discard(sock)

    @contextlib.contextmanager
    def active(self):
        """Make this call the calling thread's current call (what :class:`DeadlineBackend` bounds)."""
        previous = current_call()
        _current.call = self
        try:
            yield self
        finally:
            _current.call = previous


# ----------------------------------------------------------------------------- the network layer


def _httpcore():
    import httpcore2

    return httpcore2


class DeadlineStream:
    """A connection (an ``httpcore2`` network stream) whose operations respect the current call's limits."""

    def __init__(self, inner: Any):
        self._inner = inner
        self._sock = inner.get_extra_info("socket")

    def _op(self, timeout: float | None, kind: str):
        call = current_call()
        if call is None:
            return None, timeout
        try:
            return call, call.io_timeout(timeout)
        except TimeoutError:
            raise getattr(_httpcore(), kind)("the call's deadline has passed") from None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        call, timeout = self._op(timeout, "ReadTimeout")
        if call is None:
            return self._inner.read(max_bytes, timeout)
        left = MAX_RESPONSE_BYTES - call.received
        with call.using(self._sock):
            data = self._inner.read(max(1, min(max_bytes, left + 1)), timeout)
        call.received += len(data)
        if call.received > MAX_RESPONSE_BYTES:
            raise _httpcore().ReadError(_refuse("too_large", TOO_LARGE))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        call, timeout = self._op(timeout, "WriteTimeout")
        if call is None:
            return self._inner.write(buffer, timeout)
        with call.using(self._sock):
            self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname: str | None = None, timeout: float | None = None):
        call, timeout = self._op(timeout, "ConnectTimeout")
        if call is None:
            return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, timeout))
        with call.using(self._sock):
            return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def _literal_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolve(host: str, port: int, timeout: float) -> list[str]:
    """``host``'s addresses in the resolver's order, looked up on a helper thread so that a slow name server
    cannot hold the call past ``timeout``."""
    result: list = []
    done = threading.Event()

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            result.append(list(dict.fromkeys(str(info[4][0]) for info in infos)))
        except Exception as e:  # delivered to the caller
            result.append(e)
        done.set()

    threading.Thread(target=lookup, name="lore-llm-dns", daemon=True).start()
    if not done.wait(timeout):
        raise _httpcore().ConnectTimeout(f"no address for {host!r} within {timeout:.3g} s")
    if isinstance(result[0], Exception):
        raise _httpcore().ConnectError(str(result[0]))
    return result[0]


class DeadlineBackend:
    """An ``httpcore2`` network backend whose connections are :class:`DeadlineStream` s; a connection opened
    within a call looks its host up and connects by the attempt's deadline."""

    def __init__(self, inner: Any):
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options=None):
        call = current_call()
        if call is not None:
            try:
                timeout = call.io_timeout(timeout)
            except TimeoutError:
                raise _httpcore().ConnectTimeout("the call's deadline has passed") from None
            if call.cancelled:
                raise CallCancelled("the call was cancelled")
            if not _literal_ip(host):  # each address in turn, as the socket module's own connect does
                error: Exception | None = None
                for address in _resolve(host, port, timeout):
                    try:
                        return DeadlineStream(self._inner.connect_tcp(address, port, call.io_timeout(timeout),
                                                                      local_address, socket_options))
                    except TimeoutError:
                        raise _httpcore().ConnectTimeout("the call's deadline has passed") from None
                    except Exception as e:  # the next address may answer
                        error = e
                raise error or _httpcore().ConnectError(f"no address for {host!r}")
        return DeadlineStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        return DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


TOO_LARGE = f"response larger than {MAX_RESPONSE_BYTES:,} bytes: reading stopped there"


def _refuse(kind: str, message: str) -> str:
    """Record on the current call that the transport refused its response as ``kind``; returns ``message``."""
    call = current_call()
    if call is not None:
        call.fault = (kind, message)
    return message


def _inflated(stream: Any, encoding: str):
    """The chunks of a gzip / deflate ``stream`` inflated, at most :data:`MAX_RESPONSE_BYTES` in all."""
    import httpx2

    inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a zlib or a gzip header
    total = 0
    try:
        for chunk in stream:
            data = inflate.decompress(chunk, MAX_RESPONSE_BYTES + 1 - total)
            total += len(data)
            if total > MAX_RESPONSE_BYTES or inflate.unconsumed_tail:
                raise httpx2.DecodingError(_refuse("too_large", TOO_LARGE))
            yield data
        yield inflate.flush()
    except zlib.error as e:
        raise httpx2.DecodingError(_refuse("backend_error", f"a {encoding} body that does not inflate ({e})")) from None


def _bounded_transport(inner: Any) -> Any:
    """``inner`` (an ``httpx2`` transport) inflating a compressed response body under the size cap itself and
    refusing an encoding other than gzip and deflate."""
    import httpx2

    class Inflated(httpx2.SyncByteStream):
        def __init__(self, stream: Any, encoding: str):
            self._stream, self._encoding = stream, encoding

        def __iter__(self):
            yield from _inflated(self._stream, self._encoding)

        def close(self) -> None:
            self._stream.close()

    class BoundedTransport(httpx2.BaseTransport):
        def __init__(self) -> None:
            self.inner = inner

        def handle_request(self, request: Any) -> Any:
            response = self.inner.handle_request(request)
            encoding = response.headers.get("content-encoding", "").strip().lower()
            if encoding in ("", "identity"):
                return response
            if encoding not in ("gzip", "x-gzip", "deflate"):
                response.close()
                raise httpx2.DecodingError(_refuse("backend_error", f"a body in the {encoding[:40]!r} encoding"))
            headers = [(k, v) for k, v in response.headers.raw
                       if k.lower() not in (b"content-encoding", b"content-length")]
            return httpx2.Response(response.status_code, headers=headers, stream=Inflated(response.stream, encoding),
                                   extensions=response.extensions)

        def close(self) -> None:
            self.inner.close()

    return BoundedTransport()


def bounded_client(client: Any) -> Any:
    """``client`` (an ``httpx2.Client``) with every connection pool it holds (proxies included) opening its
    connections through :class:`DeadlineBackend`, its responses through the size cap whatever their encoding,
    asking for no encoding and following no redirect."""
    client.follow_redirects = False
    client.headers["Accept-Encoding"] = "identity"
    for transport in (client._transport, *client._mounts.values()):
        pool = getattr(transport, "_pool", None)
        if pool is not None and not isinstance(pool._network_backend, DeadlineBackend):
            pool._network_backend = DeadlineBackend(pool._network_backend)
    client._transport = _bounded_transport(client._transport)
    client._mounts = {pattern: None if transport is None else _bounded_transport(transport)
                      for pattern, transport in client._mounts.items()}
    return client


def new_client(**kwargs: Any) -> Any:
    """A fresh ``httpx2.Client`` (``kwargs`` as httpx2 takes them) through :func:`bounded_client`."""
    import httpx2

    return bounded_client(httpx2.Client(**kwargs))


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names this machine (``localhost``, 127.0.0.0/8, ``::1``, or the unspecified address,
    which connects here) without a name lookup."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
        return address.is_loopback or address.is_unspecified
    except ValueError:
        return False


def spawn_call(fn: Callable, *args) -> Future:
    """Run ``fn(*args)`` on a fresh daemon thread: a hung call can never block shutdown."""
    future: Future = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # delivered to the controller, never lost
            future.set_exception(e)

    threading.Thread(target=run, name="lore-llm-call", daemon=True).start()
    return future
