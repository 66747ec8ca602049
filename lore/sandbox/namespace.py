"""The restricted namespace feature code runs in: allow-listed builtins and read-only modules.

A fresh globals dict per execution, whose ``__builtins__`` hold only the names of
:mod:`lore.sandbox.rules` (plus the address-free ``repr``/``str`` and formatting hooks of
:mod:`lore.sandbox.addresses`), and whose ``math`` and ``numpy`` are read-only stand-ins with the
allowed names alone: the allow-lists hold at run time too, not only in the static check. Standard
library and numpy only: the worker process loads this module.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from lore.sandbox.addresses import address_free_builtins
from lore.sandbox.rules import (
    NUMPY_ALLOWED,
    NUMPY_LINALG_ALLOWED,
    SAFE_BUILTIN_NAMES,
    SAFE_EXCEPTION_NAMES,
    math_public_names,
)


class _ReadOnlyNamespace:
    """Module stand-in exposing only allow-listed attributes; assignment to it fails."""

    __slots__ = ("_label", "_attrs")

    def __init__(self, label: str, attrs: dict) -> None:
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_attrs", dict(attrs))

    def __getattr__(self, name: str):
        try:
            return self._attrs[name]
        except KeyError:
            raise AttributeError(f"{self._label}.{name} is not available in the feature sandbox") from None

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"{self._label} is read-only in the feature sandbox")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self._label} is read-only in the feature sandbox")

    def __repr__(self) -> str:
        return f"<sandboxed module {self._label}>"


def build_restricted_globals_factory():
    """-> a function returning a fresh globals dict for one execution of feature code."""
    import builtins

    numpy_attrs = {name: getattr(np, name) for name in NUMPY_ALLOWED if name != "linalg" and hasattr(np, name)}
    numpy_attrs["linalg"] = _ReadOnlyNamespace(
        "numpy.linalg", {name: getattr(np.linalg, name) for name in NUMPY_LINALG_ALLOWED})
    numpy_ns = _ReadOnlyNamespace("numpy", numpy_attrs)
    math_ns = _ReadOnlyNamespace("math", {name: getattr(math, name) for name in math_public_names()})
    # loaded already: this very module starts with `from __future__ import annotations`
    future_ns = _ReadOnlyNamespace("__future__", {"annotations": sys.modules["__future__"].annotations})
    modules = {"math": math_ns, "numpy": numpy_ns, "__future__": future_ns}

    def safe_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        # Feature code can only write `import math` / `import numpy` (static check), which get the
        # stand-ins. numpy's C code also imports its own submodules lazily through the *calling
        # frame's* __import__ (e.g. ndarray.sum -> numpy._core._methods): those, already loaded, pass.
        if level == 0 and name in modules:
            return modules[name]
        if level == 0 and name.startswith("numpy.") and name in sys.modules:
            return sys.modules[name]
        raise ImportError(f"import of '{name}' is not allowed in the feature sandbox")

    safe_builtins = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES + SAFE_EXCEPTION_NAMES}
    safe_builtins.update({"__import__": safe_import, **address_free_builtins()})

    def fresh_globals() -> dict:
        return {"__builtins__": safe_builtins, "__name__": "lore_features", "np": numpy_ns, "math": math_ns}

    return fresh_globals
