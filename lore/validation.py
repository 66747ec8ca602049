"""The configuration error, the value display and the numeric ranges every validator shares.

A leaf module: :mod:`lore.config`, :mod:`lore.presets` and :mod:`lore.ablations` all raise
:class:`ConfigError`, and none of them may import another's validator for it (no import cycles).
A numeric setting declares its accepted range in its own dataclass field (:func:`ranged`), which
:mod:`lore.config.validate` reads.
"""

from __future__ import annotations

import dataclasses
import re
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


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an ``http(s)://host[:port][/path]`` endpoint (None when it is one). The text never
    repeats a part of ``url``: a key may hide in any of them (show it with :func:`shown_url`)."""
    from urllib.parse import urlsplit

    if not url or url != url.strip() or any(not ch.isprintable() or ch.isspace() for ch in url):
        return "expected http(s)://host[:port][/path] without blanks or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number in 0..65535
    except ValueError:
        return "not a URL (its host or port cannot be read)"
    if parts.scheme not in ("http", "https"):
        return "the scheme must be http or https"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "credentials in the URL (the API key goes in GEMINI_API_KEY or OPENAI_API_KEY)"
    if not parts.hostname:
        return "no host name (expected http(s)://host[:port][/path])"
    if ":" not in parts.hostname and not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", parts.hostname):
        return "the host name must be letters, digits, dots and hyphens"
    if port == 0:
        return "port 0 is not a port to connect to"
    if parts.query or parts.fragment:
        return "a query or fragment (?... or #...) is not part of an endpoint"
    return None


_KEY_PREFIXES = ("sk-", "sk_", "aiza", "hf_", "gsk_", "key-", "key_", "pk-", "xai-", "ghp_", "glpat-", "bearer")
_TOKEN = re.compile(r"[A-Za-z0-9_]{20,}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _key_like(segment: str) -> bool:
    """Whether a URL path segment looks like an API key: a known key prefix, a UUID, or a run of 20 or more
    letters and digits, both (a model name like ``gpt-4o-mini-2024-07-18`` is not one)."""
    if segment.lower().startswith(_KEY_PREFIXES) and len(segment) > 6:
        return True
    if _UUID.search(segment):
        return True
    return any(any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
               for run in _TOKEN.findall(segment))


def masked_url(url: str) -> str:
    """``url`` with what may hold a key replaced by ``***``: the user-info part whole (up to the last ``@``,
    so a password containing ``@`` goes too), the query and the fragment, and every path segment that looks
    like a key."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    rest, hash_, fragment = rest.partition("#")
    rest, query_, query = rest.partition("?")
    host, slash, path = rest.partition("/")
    path = "/".join("***" if _key_like(segment) else segment for segment in path.split("/"))
    return (f"{scheme}{sep}{host}{slash}{path}" + ("?***" if query_ else "") + ("#***" if hash_ else ""))


def shown_url(url: str) -> str:
    """``url`` for a message: :func:`masked_url`, shortened."""
    return show(masked_url(url))


@dataclasses.dataclass(frozen=True)
class Limit:
    """The accepted range of one numeric key (ends open or closed)."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, x: float) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below

    def __str__(self) -> str:
        return (f"{'(' if self.lo_open else '['}{_number(self.lo)}, {_number(self.hi)}"
                f"{')' if self.hi_open else ']'}")


def _number(x: float) -> str:
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:_}" if abs(x) >= 100_000 else str(x)
    return f"{x:g}"


RANGE = "range"
"""The key of a dataclass field's metadata that holds its :class:`Limit`."""


def ranged(default: Any, limit: Limit) -> Any:
    """A dataclass field with ``default`` whose value must lie in ``limit`` (None, "not set", always passes)."""
    return dataclasses.field(default=default, metadata={RANGE: limit})
