"""The API keys' names and their removal from anything written to disk or shown in a message.

A leaf module (it needs only :mod:`lore.validation`): the backends read the keys, and the controller, the
ledger, the cache, the config writer and the command line redact them from what they keep or show, without
either depending on the other (no import cycles).

A key is removed in every form it can take in text: as it is, JSON-escaped (with and without ``\\uXXXX``
escapes), as a Python ``repr`` of the text or of its UTF-8 bytes, and URL-quoted; a key spread over lines is
also removed line by line. A key of any length is removed: one shorter than :data:`MIN_SECRET_LEN` wherever it
stands apart from letters and digits. Values (answers, records) are redacted string by string *before* they
are serialised, and the serialised text once more after (there only keys of :data:`MIN_SECRET_LEN` or more:
a short key could match a number of the encoding).

:func:`redact_text` is what every message the toolkit prints or writes passes through: the keys, and in any
URL in the text its user-info, query, fragment and key-like path segments (:func:`lore.validation.masked_url`).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any
from urllib.parse import quote, quote_plus

from lore.validation import masked_url

API_KEY_ENV = "GEMINI_API_KEY"
OPENAI_API_KEY_ENV = "OPENAI_API_KEY"
"""The key of an OpenAI-compatible server (``llm.backend: openai``); a local server often needs none."""
SECRET_ENVS: tuple[str, ...] = (API_KEY_ENV, OPENAI_API_KEY_ENV)
"""Environment variables whose values are secrets (a backend reading another key adds its name here)."""
MASK = "***"
MIN_SECRET_LEN = 4
"""Keys of this length or more are masked wherever they occur; shorter ones only where they stand apart from
letters and digits (inside words they would mask ordinary text)."""
MIN_FRAGMENT_LEN = 8
"""A line of a multi-line key is masked on its own from this length on."""


def current_secrets() -> tuple[str, ...]:
    """The secrets set in the environment now (each variable of :data:`SECRET_ENVS`, stripped)."""
    values = (os.environ.get(name, "").strip() for name in SECRET_ENVS)
    return tuple(v for v in values if v)


def secret_forms(secret: str) -> list[str]:
    """Every text form of ``secret`` that :func:`redact` masks, longest first."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1],
             ascii(secret)[1:-1], repr(secret.encode("utf-8", "surrogatepass"))[2:-1],
             secret.encode("unicode_escape").decode("ascii"), quote(secret, safe=""), quote_plus(secret, safe="")}
    forms = {f for f in forms if len(f) >= MIN_SECRET_LEN}
    for line in secret.splitlines():  # a key spread over lines may be shown one line at a time
        if len(line.strip()) >= MIN_FRAGMENT_LEN:
            forms.add(line.strip())
    return sorted(forms, key=len, reverse=True)


def _forms(secrets: tuple[str, ...] | None) -> list[str]:
    secrets = current_secrets() if secrets is None else secrets
    return [form for secret in secrets if secret and len(secret) >= MIN_SECRET_LEN for form in secret_forms(secret)]


def _short(secrets: tuple[str, ...] | None) -> re.Pattern | None:
    """The pattern of the keys shorter than :data:`MIN_SECRET_LEN`, standing apart from letters and digits."""
    secrets = current_secrets() if secrets is None else secrets
    short = sorted({s for s in secrets if s and len(s) < MIN_SECRET_LEN}, key=len, reverse=True)
    if not short:
        return None
    return re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(re.escape(s) for s in short) + r")(?![A-Za-z0-9])")


def _masked(text: str, forms: list[str], short: re.Pattern | None) -> str:
    for form in forms:
        if form in text:
            text = text.replace(form, MASK)
    return short.sub(MASK, text) if short is not None else text


def redact(text: str, secrets: tuple[str, ...] | None = None, encoded: bool = False) -> str:
    """``text`` with every form of every secret (default: :func:`current_secrets`) replaced by ``***``;
    ``encoded``: ``text`` is a serialised value whose strings were redacted already, so keys shorter than
    :data:`MIN_SECRET_LEN` are left alone."""
    return _masked(text, _forms(secrets), None if encoded else _short(secrets))


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()]+")


def redact_text(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """A message as it may be shown or written: :func:`redact`, and every URL in it masked
    (:func:`~lore.validation.masked_url`)."""
    return redact(_URL.sub(lambda m: masked_url(m.group(0)), str(text)), secrets)


def redact_value(value: Any, secrets: tuple[str, ...] | None = None) -> Any:
    """``value`` (strings, lists, tuples, dicts, keys included, to any depth) with every string redacted;
    the value itself when no secret is set or none occurs in it."""
    forms, short = _forms(secrets), _short(secrets)
    if not forms and short is None:
        return value

    def scrub(v: Any) -> Any:
        if isinstance(v, str):
            return _masked(v, forms, short)
        if isinstance(v, dict):
            return {scrub(k): scrub(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(scrub(x) for x in v)
        return v

    stack_limit = 200  # deeper values are never kept (the answer cap and the validators refuse them)
    try:
        return scrub(value) if _depth_at_most(value, stack_limit) else MASK
    except RecursionError:
        return MASK


def _depth_at_most(value: Any, limit: int) -> bool:
    """Whether ``value`` nests no deeper than ``limit`` (iteratively: never a RecursionError)."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in (*v.keys(), *v.values()))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, depth + 1) for x in v)
    return True


def scrub_answer(raw: Any, secrets: tuple[str, ...] | None = None) -> Any:
    """A backend's raw answer (text or dict) with every secret removed, also where JSON text spells the key
    with escapes of its own choosing: such text is decoded, redacted and encoded again."""
    forms, short = _forms(secrets), _short(secrets)
    if (not forms and short is None) or raw is None:
        return raw
    if not isinstance(raw, str):
        return redact_value(raw, secrets)
    text = redact(raw, secrets)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return json.dumps(redact_value(data, secrets)) if _mentions(data, forms, short) else text


def _mentions(value: Any, forms: list[str], short: re.Pattern | None = None) -> bool:
    """Whether a string anywhere in ``value`` (keys included) holds one of ``forms`` (or a short key)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if any(form in v for form in forms) or (short is not None and short.search(v)):
                return True
        elif isinstance(v, dict):
            stack.extend((*v.keys(), *v.values()))
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return False


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be sent in an HTTP header (None when it can); the key itself is never in the text."""
    if any(not (" " <= ch <= "~") for ch in key):
        return ("it contains a character that cannot be sent in an HTTP header (a line break, a control or a "
                "non-ASCII character); the value is not shown")
    return None
