"""Layer 3: the parent's checks of a worker's reply, and the :class:`FeatureResult` built from it.

A worker may be compromised, so its reply is untrusted: JSON (never unpickled), one entry per
observation, of a known kind, with a flat list of numbers; anything malformed is refused whole.
Then per observation: the length, finiteness, and clipping to ``[-clip, clip]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from lore.sandbox.results import FAILURE_KINDS, MAX_MESSAGE_CHARS, MAX_NAME_CHARS, clean_text

_WORKER_FAILURE_KINDS = tuple(kind for kind in FAILURE_KINDS if kind != "disabled")  # "disabled" is the parent's


@dataclass
class FeatureResult:
    """The features of one observation, or why there are none."""

    features: np.ndarray
    """float32 ``[n_features]``; zeros when ``ok`` is False."""
    ok: bool
    error: str | None
    """``"<kind>: <short message>"``, kind in :data:`FAILURE_KINDS`; None when ok."""
    code_id: str
    names: tuple[str, ...] | None = None
    """The keys, in order, when the code returned a dict."""


def parse_reply(frame: bytes, n: int) -> tuple[list[list], int | float]:
    """A worker's reply to a request of ``n`` observations -> (checked entries, its CPU seconds so far).

    Raises ValueError, KeyError or TypeError when the reply is malformed.
    """
    reply = json.loads(frame)
    entries = reply["results"]
    cpu = reply.get("cpu_s", 0.0)
    if not isinstance(entries, list) or len(entries) != n or not isinstance(cpu, (int, float)):
        raise ValueError("wrong number of results")
    return [validate_entry(e) for e in entries], cpu


def validate_entry(entry) -> list:
    """Structure check of one untrusted result entry (raises ValueError when malformed)."""
    if not (isinstance(entry, list) and len(entry) == 4):
        raise ValueError("result entry is not a 4-list")
    kind, message, values, names = entry
    if kind != "ok" and kind not in _WORKER_FAILURE_KINDS or not isinstance(message, str):
        raise ValueError(f"unknown result kind {str(kind)[:20]!r}")
    if kind != "ok":
        values = names = None
    else:
        if not isinstance(values, list):
            raise ValueError("ok result without a list of numbers")
        try:
            values = np.asarray(values, dtype=np.float64)  # [n_values]
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueError("ok result without a list of numbers") from e
        if values.ndim != 1:
            raise ValueError("ok result values are not a flat list")
        if names is not None and not (isinstance(names, list) and len(names) == len(values)
                                      and all(isinstance(s, str) for s in names)):
            raise ValueError("malformed names")
    if names is not None:
        names = [clean_text(name, MAX_NAME_CHARS) for name in names]
    return [kind, clean_text(message, MAX_MESSAGE_CHARS), values, names]


def feature_results(entries: list[list], cid: str, n_features: int, clip: float) -> list[FeatureResult]:
    """Validated entries -> FeatureResults: length, finiteness, clipping, whole batch at once."""
    n, f = len(entries), n_features
    matrix = np.zeros((n, f), np.float64)  # [n, F]; rows of failed entries stay zero
    errors: list[str | None] = [None] * n
    for i, (kind, message, values, _) in enumerate(entries):
        if kind != "ok":
            errors[i] = f"{kind}: {message}"
        elif len(values) != f:
            errors[i] = f"wrong_length: {len(values)} values, expected {f}"
        else:
            matrix[i] = values
    finite, features = finite_and_clipped(matrix, clip)  # [n], [n, F] float32
    results = []
    for i, (_, _, _, names) in enumerate(entries):
        if errors[i] is None and not finite[i]:
            bad = int(np.flatnonzero(~np.isfinite(matrix[i]))[0])
            label = names[bad] if names else f"feature {bad}"
            errors[i] = f"nonfinite: {label} is {matrix[i, bad]}"
        if errors[i] is None:
            results.append(FeatureResult(features[i], True, None, cid, tuple(names) if names else None))
        else:
            results.append(FeatureResult(np.zeros(f, np.float32), False, errors[i], cid))
    return results


def finite_and_clipped(values: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """``values [n, F]`` float64 -> (row is all finite ``[n]`` bool, values clipped to ±clip ``[n, F]``
    float32). Clipping comes after the finiteness check, so inf is a failure, not ``clip``."""
    finite = np.isfinite(values).all(axis=1)  # [n]
    clipped = np.clip(np.nan_to_num(values), -clip, clip).astype(np.float32)  # [n, F]
    return finite, clipped
