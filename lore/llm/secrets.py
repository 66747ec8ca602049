"""The Gemini API key's name and its removal from anything written to disk.

A leaf module: the backends read the key, and the ledger and the cache redact it from what they write,
without either depending on the other (no import cycles).
"""

from __future__ import annotations

import os

API_KEY_ENV = "GEMINI_API_KEY"


def redact(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """``text`` with every secret (default: the current ``GEMINI_API_KEY``) replaced by ``***``."""
    if secrets is None:
        key = os.environ.get(API_KEY_ENV, "").strip()
        secrets = (key,) if key else ()
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text
