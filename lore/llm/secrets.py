"""The API keys' environment variables and their removal from anything written to disk.

A leaf module: the backends read the keys, and the ledger and the cache redact them from what they write,
without either depending on the other (no import cycles).
"""

from __future__ import annotations

import os

API_KEY_ENV = "GEMINI_API_KEY"
OPENAI_API_KEY_ENV = "OPENAI_API_KEY"
"""The key of an OpenAI-compatible server (``llm.backend: openai``); a local server often needs none."""
KEY_ENVS = (API_KEY_ENV, OPENAI_API_KEY_ENV)


def env_secrets() -> tuple[str, ...]:
    """The keys currently set in the environment (:data:`KEY_ENVS`)."""
    return tuple(key for key in (os.environ.get(name, "").strip() for name in KEY_ENVS) if key)


def redact(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """``text`` with every secret (default: the current keys of :data:`KEY_ENVS`) replaced by ``***``."""
    if secrets is None:
        secrets = env_secrets()
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text
