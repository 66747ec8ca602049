"""The wire protocol between the parent and a worker: framing, message layout, size caps.

Both directions: a 4-byte little-endian length, then the payload. Parent -> worker is a pickle (the
parent is trusted): one request ``{"code_id", "source", "obs", "n_features", "timeout_s"}`` per batch
share, its observations packed by :func:`pack_observations`. Worker -> parent is JSON, because the
parent must never unpickle anything a possibly-compromised worker wrote: first the handshake (the
isolation report, with ``"ready": true``), then one ``{"results": [entry per observation], "cpu_s"}``
per request (entries: :mod:`lore.sandbox.results`). Standard library and numpy only: the worker
process loads this module.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from lore.sandbox.results import MAX_MESSAGE_CHARS, MAX_NAME_CHARS

FRAME_HEADER = struct.Struct("<I")
MAX_REQUEST_BYTES = 256 * 1024 * 1024
MIN_REPLY_CAP = 64 * 1024
"""The size cap of the handshake, and the part of every reply's cap that does not grow with it."""
# Reply size cap: a float (<= 24 chars), a key (<= 4 UTF-8 bytes per character), JSON punctuation.
_REPLY_BYTES_PER_FEATURE = 32 + 4 * MAX_NAME_CHARS + 8
_REPLY_BYTES_PER_OBS = 4 * MAX_MESSAGE_CHARS + 64


def reply_cap(n_observations: int, n_features: int) -> int:
    """The most bytes the reply to a request of ``n_observations`` may announce."""
    return MIN_REPLY_CAP + n_observations * (n_features * _REPLY_BYTES_PER_FEATURE + _REPLY_BYTES_PER_OBS)


def framed(payload: bytes) -> bytes:
    """``payload`` behind its length header."""
    return FRAME_HEADER.pack(len(payload)) + payload


def take_frame(buffer: bytearray, cap: int) -> bytes | str | None:
    """The first complete frame in ``buffer``, removed from it; None while it is incomplete, or
    ``"too_large"`` as soon as its header announces more than ``cap`` bytes."""
    if len(buffer) < FRAME_HEADER.size:
        return None
    (length,) = FRAME_HEADER.unpack_from(buffer)
    if length > cap:
        return "too_large"
    end = FRAME_HEADER.size + length
    if len(buffer) < end:
        return None
    payload = bytes(buffer[FRAME_HEADER.size:end])
    del buffer[:end]
    return payload


# --------------------------------------------------------------------------- the worker's blocking I/O


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> bytes | None:
    """The next request's payload; None when the parent closed the pipe."""
    header = _read_exact(fd, FRAME_HEADER.size)
    if header is None:
        return None
    (length,) = FRAME_HEADER.unpack(header)
    if length > MAX_REQUEST_BYTES:
        raise ValueError(f"request of {length} bytes")
    return _read_exact(fd, length)


def write_frame(fd: int, payload: bytes) -> None:
    """Write one frame, however many writes it takes."""
    data = memoryview(framed(payload))
    while data:
        written = os.write(fd, data)
        data = data[written:]


# --------------------------------------------------------------------------- observations


def pack_observations(observations: list[dict]) -> dict:
    """Observations with one layout (same keys, shapes, dtypes) travel as one stacked array per key:
    pickling a few arrays instead of thousands is most of the cost of a batch."""
    first = observations[0]
    layout = [(k, v.shape, v.dtype) for k, v in first.items()]
    if all(len(obs) == len(layout) and all(k in obs and obs[k].shape == shape and obs[k].dtype == dtype
                                           for k, shape, dtype in layout) for obs in observations):
        return {"stacked": {k: np.stack([obs[k] for obs in observations]) for k in first},  # [n, ...]
                "n": len(observations)}
    return {"list": observations}


def unpack_observations(packed: dict) -> list[dict]:
    """Inverse of :func:`pack_observations`: a list of observation dicts (views into stacked arrays;
    :func:`lore.sandbox.worker.private_copy` each one before feature code sees it)."""
    if "list" in packed:
        return packed["list"]
    stacked = packed["stacked"]
    # `[i, ...]` keeps 0-d entries as 0-d arrays, exactly what the parent sent.
    return [{k: v[i, ...] for k, v in stacked.items()} for i in range(packed["n"])]
