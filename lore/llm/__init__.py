"""The LLM layer: answer schema, prompts, backends (scripted / gemini / openai / replay), ledger, cache and
the non-blocking controller that decides when to ask (docs/CONTRACTS.md, "LLM").

The feature-code sandbox is its own package, :mod:`lore.sandbox` (imported on demand, not here).
"""

from lore.llm.backends import (
    AdviceRequest,
    BackendResponse,
    GeminiBackend,
    LLMConfigError,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMRateLimited,
    LLMReplayMiss,
    LLMServerError,
    LLMTimeout,
    OpenAIBackend,
    ReplayBackend,
    ScriptedBackend,
    make_backend,
)
from lore.llm.cache import AdviceCache
from lore.llm.controller import FAILURE_KINDS, AppliedAdvice, EnvQuery, LLMController
from lore.llm.ledger import LEDGER_FIELDS, LEDGER_NAME, Ledger, LedgerError, read_ledger
from lore.llm.prompt import build_prompt, default_features_spec, features_spec, prompt_hash
from lore.llm.schema import (
    Advice,
    advice_to_dict,
    gemini_response_schema,
    json_response_schema,
    validate_advice,
)
from lore.llm.scripted import ScriptedAdvisor

__all__ = [
    "FAILURE_KINDS",
    "LEDGER_FIELDS",
    "LEDGER_NAME",
    "Advice",
    "AdviceCache",
    "AdviceRequest",
    "AppliedAdvice",
    "BackendResponse",
    "EnvQuery",
    "GeminiBackend",
    "LLMConfigError",
    "LLMConnectionError",
    "LLMController",
    "LLMError",
    "LLMHTTPError",
    "LLMRateLimited",
    "LLMReplayMiss",
    "LLMServerError",
    "LLMTimeout",
    "Ledger",
    "OpenAIBackend",
    "LedgerError",
    "ReplayBackend",
    "ScriptedAdvisor",
    "ScriptedBackend",
    "advice_to_dict",
    "build_prompt",
    "default_features_spec",
    "features_spec",
    "gemini_response_schema",
    "json_response_schema",
    "make_backend",
    "prompt_hash",
    "read_ledger",
    "validate_advice",
]
