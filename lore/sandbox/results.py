"""What feature code returned, as the worker reports it to the parent.

Each observation's outcome travels as an entry ``[kind, message, values, names]``: kind ``"ok"`` or
one of :data:`FAILURE_KINDS`. Here are the kinds, the text limits both sides apply to messages and
names, and the worker's conversion of a ``compute_features`` return value into such an entry.
Standard library and numpy only: the worker process loads this module.
"""

from __future__ import annotations

import math

import numpy as np

MAX_MESSAGE_CHARS = 200
"""Error messages from the worker are cut to this length."""
MAX_NAME_CHARS = 64
"""Dict-result keys are cut to this length."""

FAILURE_KINDS = (
    "rejected",
    "exception",
    "timeout",
    "memory",
    "nonfinite",
    "wrong_length",
    "wrong_type",
    "output_too_large",
    "worker_crashed",
    "disabled",
)
"""``disabled`` is given by the parent only: code dropped after too many failures in a row."""


def clean_text(text: str, limit: int) -> str:
    """One line, at most ``limit`` characters, valid UTF-8 (lone surrogates replaced)."""
    text = " ".join(text[: 4 * limit].split())
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def max_output_items(n_features: int) -> int:
    """Results with more items than this are ``output_too_large`` (not merely ``wrong_length``)."""
    return 4 * n_features + 64


def _to_float(value, index: int) -> tuple[float | None, str | None]:
    if isinstance(value, (bool, np.bool_)):
        return float(value), None
    if isinstance(value, int):
        try:
            return float(value), None
        except OverflowError:
            return (math.inf if value > 0 else -math.inf), None
    if isinstance(value, float):
        return float(value), None
    if isinstance(value, (np.generic, np.ndarray)) and value.dtype.kind in "biuf" and value.size == 1 \
            and value.ndim == 0:
        return float(value), None
    return None, f"feature {index} is {type(value).__name__}, expected a number"


def convert_result(result, n_features: int) -> tuple[str, str, list[float] | None, list[str] | None]:
    """What ``compute_features`` returned -> ``(kind, message, values, names)``; kind "ok" or a failure.

    Accepts a list/tuple of numbers, a 1-D numeric ndarray, or a dict of str -> number (taken in
    insertion order). Finiteness is judged by the parent, which also re-checks the length.
    """
    limit = max_output_items(n_features)
    names: list[str] | None = None
    if isinstance(result, dict):
        if len(result) > limit:
            return "output_too_large", f"dict with {len(result)} entries (expected {n_features})", None, None
        if not all(isinstance(k, str) for k in result):
            return "wrong_type", "dict keys must be strings", None, None
        names = [clean_text(k, MAX_NAME_CHARS) for k in result]
        items = list(result.values())
    elif isinstance(result, (list, tuple)):
        if len(result) > limit:
            return "output_too_large", f"{len(result)} values (expected {n_features})", None, None
        items = list(result)
    elif isinstance(result, np.ndarray):
        if result.ndim != 1:
            return "wrong_type", f"array of shape {result.shape}, expected 1-D", None, None
        if result.size > limit:
            return "output_too_large", f"{result.size} values (expected {n_features})", None, None
        if result.dtype.kind not in "biuf":
            return "wrong_type", f"array of dtype {result.dtype}, expected numbers", None, None
        items = result.astype(np.float64).tolist()
    else:
        return ("wrong_type", f"compute_features returned {type(result).__name__}; expected a list, "
                "tuple, 1-D array or dict of numbers", None, None)
    if len(items) != n_features:
        return "wrong_length", f"{len(items)} values, expected {n_features}", None, None
    values = []
    for i, item in enumerate(items):
        number, error = _to_float(item, i)
        if error:
            return "wrong_type", error, None, None
        values.append(number)
    return "ok", "", values, names

