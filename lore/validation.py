"""The configuration error and the value display every validator shares.

A leaf module: :mod:`lore.config`, :mod:`lore.presets` and :mod:`lore.ablations` all raise
:class:`ConfigError`, and none of them may import another's validator for it (no import cycles).
"""

from __future__ import annotations

import reprlib
from typing import Any


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlong = 40
_REPR.maxlevel = 3


def show(value: Any) -> str:
    """A short ``repr`` for error messages: bounded length and depth (a value may be a 10,000-deep list
    or a YAML alias bomb of 10**9 elements)."""
    return _REPR.repr(value)
