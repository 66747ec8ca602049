"""The LLM answer format (:class:`Advice`) and its validation.

An answer is one JSON object::

    {"action_prior": {"logits": [l_0, ..., l_{A-1}]},   # one per env action id
     "confidence": 0.8,                                 # in [0, 1]
     "plan": [2, 2, 5],                                 # optional: action ids, at most H of them
     "subgoal": "pick up the yellow key",               # optional
     "features_code": "def compute_features(obs): ...", # optional (features enabled)
     "notes": ""}

:func:`validate_advice` never raises on a bad answer: it returns ``(None, failure_kind)`` where the
kind is one of :data:`VALIDATION_FAILURES`. Logits are clipped to ``[-logit_clip, logit_clip]``
after the finiteness check (a huge but finite logit is not an error, it is just saturated).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

VALIDATION_FAILURES = (
    "malformed_json",  # not parseable as one JSON object
    "wrong_type",  # a field has the wrong JSON type (e.g. logits not numbers, top level a list)
    "missing_field",  # action_prior / action_prior.logits / confidence absent
    "wrong_length",  # len(logits) != number of env actions
    "nonfinite",  # NaN or +-inf in logits or confidence
    "out_of_range",  # confidence outside [0, 1]
    "bad_plan",  # plan not a list of in-range action ids, or longer than the horizon
)
"""Failure kinds produced by :func:`validate_advice`."""

MAX_ANSWER_CHARS = 65_536
"""Longest answer kept (its JSON text, in characters): a longer one is refused as ``too_large`` before
it is validated, ledgered or cached, so no stored answer, ledger line or cache row is ever larger."""

DEFAULT_MAX_PLAN_LEN = 32
"""Longest accepted ``plan`` unless the caller says otherwise (see ``llm.plan_max_len``)."""

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


class ActionPrior(BaseModel):
    model_config = ConfigDict(extra="ignore")
    logits: list[float]


class Advice(BaseModel):
    """A validated LLM answer (built only by :func:`validate_advice` or from trusted code)."""

    model_config = ConfigDict(extra="ignore")
    action_prior: ActionPrior
    confidence: float = Field(ge=0.0, le=1.0)
    plan: list[int] | None = None
    subgoal: str | None = None
    features_code: str | None = None
    notes: str = ""


def _parse_json_object(raw: str | bytes | dict) -> tuple[dict | None, str | None]:
    if isinstance(raw, dict):
        return raw, None
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None, "malformed_json"
    if not isinstance(raw, str):
        return None, "wrong_type"
    text = raw.strip()
    fenced = _FENCE.match(text)
    if fenced:  # models sometimes wrap JSON in a markdown fence despite the mime type
        text = fenced.group(1).strip()
    if not text:
        return None, "malformed_json"
    try:
        data = json.loads(text)  # accepts NaN/Infinity literals: reported as "nonfinite" below
    except (ValueError, RecursionError, MemoryError):  # ValueError: also an integer of more than 4300 digits
        return None, "malformed_json"
    if not isinstance(data, dict):
        return None, "wrong_type"
    return data, None


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def validate_advice(
    raw: str | bytes | dict,
    num_actions: int,
    logit_clip: float = 10.0,
    max_plan_len: int = DEFAULT_MAX_PLAN_LEN,
) -> tuple[Advice | None, str | None]:
    """Check one answer against the schema: ``(Advice, None)`` or ``(None, failure_kind)``.

    Logits are clipped to ``[-logit_clip, logit_clip]``. Never raises on a bad answer (an exception while
    reading one is ``malformed_json`` while parsing, ``wrong_type`` after); raises ``ValueError`` only for bad
    *arguments* (``num_actions < 1``, ``logit_clip <= 0``).
    """
    if num_actions < 1:
        raise ValueError(f"validate_advice: num_actions must be >= 1, got {num_actions}")
    if not logit_clip > 0:
        raise ValueError(f"validate_advice: logit_clip must be > 0, got {logit_clip}")
    try:
        data, failure = _parse_json_object(raw)
    except Exception:  # anything a hostile text can make the parser raise
        return None, "malformed_json"
    if failure:
        return None, failure
    assert data is not None
    try:
        return _checked(data, num_actions, logit_clip, max_plan_len)
    except Exception:  # e.g. a value no float can hold
        return None, "wrong_type"


def _as_float(x: int | float) -> float:
    """``x`` as a float; an integer beyond the float range becomes an infinity of its sign."""
    try:
        return float(x)
    except OverflowError:
        return math.copysign(math.inf, x)


def _checked(data: dict, num_actions: int, logit_clip: float, max_plan_len: int) -> tuple[Advice | None, str | None]:
    """:func:`validate_advice` of a parsed answer."""
    prior = data.get("action_prior")
    if prior is None or "confidence" not in data or data["confidence"] is None:
        return None, "missing_field"
    if not isinstance(prior, dict):
        return None, "wrong_type"
    logits = prior.get("logits")
    if logits is None:
        return None, "missing_field"
    if not isinstance(logits, list) or not all(_is_number(v) for v in logits):
        return None, "wrong_type"
    if len(logits) != num_actions:
        return None, "wrong_length"
    confidence = data["confidence"]
    if not _is_number(confidence):
        return None, "wrong_type"
    if isinstance(confidence, int):
        confidence = _as_float(confidence)
    # an integer too large for a float is a huge finite logit: saturated by the clip like any other
    logits = [v if isinstance(v, float) else max(min(_as_float(v), 1e308), -1e308) for v in logits]
    if not all(math.isfinite(v) for v in logits) or not math.isfinite(confidence):
        return None, "nonfinite"
    if not 0.0 <= confidence <= 1.0:
        return None, "out_of_range"

    plan = data.get("plan")
    if plan is not None:
        if not isinstance(plan, list) or not all(
            isinstance(a, int) and not isinstance(a, bool) or (isinstance(a, float) and a.is_integer())
            for a in plan
        ):
            return None, "bad_plan"
        plan = [int(a) for a in plan]
        if len(plan) > max_plan_len or any(not 0 <= a < num_actions for a in plan):
            return None, "bad_plan"
        plan = plan or None

    texts = {}
    for name in ("subgoal", "features_code", "notes"):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            return None, "wrong_type"
        texts[name] = value

    clipped = [float(min(max(v, -logit_clip), logit_clip)) for v in logits]
    advice = Advice(
        action_prior=ActionPrior(logits=clipped),
        confidence=float(confidence),
        plan=plan,
        subgoal=texts["subgoal"] or None,
        features_code=texts["features_code"] or None,
        notes=texts["notes"] or "",
    )
    return advice, None


def answer_size(raw: object) -> int:
    """Characters of a raw answer as it would be stored: the text itself, or a dict's JSON encoding."""
    if isinstance(raw, (str, bytes)):
        return len(raw)
    try:
        return len(json.dumps(raw))
    except (TypeError, ValueError, RecursionError):
        return MAX_ANSWER_CHARS + 1


def advice_to_dict(advice: Advice) -> dict:
    """JSON-ready dict of a validated answer (what the ledger, cache and replay store)."""
    return advice.model_dump(mode="json")


def gemini_response_schema(num_actions: int, max_plan_len: int = DEFAULT_MAX_PLAN_LEN,
                           with_features: bool = False) -> dict:
    """The answer schema in Gemini's ``response_schema`` subset (an OpenAPI 3.0 Schema object).

    Gemini accepts ``type``, ``properties``, ``required``, ``items``, ``minItems``/``maxItems``,
    ``minimum``/``maximum``, ``propertyOrdering``, ``nullable``, ``enum`` — but not
    ``additionalProperties``, ``$ref`` or ``anyOf`` over objects, so the schema is written by hand
    instead of being derived from :class:`Advice`. :func:`validate_advice` re-checks everything.
    """
    properties: dict[str, Any] = {
        "action_prior": {
            "type": "OBJECT",
            "properties": {
                "logits": {
                    "type": "ARRAY",
                    "items": {"type": "NUMBER"},
                    "minItems": num_actions,
                    "maxItems": num_actions,
                    "description": f"one score per action id 0..{num_actions - 1}; higher = better",
                }
            },
            "required": ["logits"],
        },
        "confidence": {"type": "NUMBER", "minimum": 0.0, "maximum": 1.0},
        "plan": {
            "type": "ARRAY",
            "items": {"type": "INTEGER", "minimum": 0, "maximum": num_actions - 1},
            "maxItems": max_plan_len,
        },
        "subgoal": {"type": "STRING"},
        "notes": {"type": "STRING"},
    }
    order = ["action_prior", "confidence", "plan", "subgoal", "notes"]
    if with_features:
        properties["features_code"] = {"type": "STRING"}
        order.insert(4, "features_code")
    return {
        "type": "OBJECT",
        "properties": properties,
        "required": ["action_prior", "confidence"],
        "propertyOrdering": order,
    }


def json_response_schema(num_actions: int, max_plan_len: int = DEFAULT_MAX_PLAN_LEN,
                         with_features: bool = False) -> dict:
    """The answer schema as standard JSON Schema (OpenAI ``response_format``, vLLM / llama.cpp / Ollama
    guided decoding): :func:`gemini_response_schema` with lower-case type names, no ``propertyOrdering``,
    and no properties beyond those listed."""

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key == "propertyOrdering":
                continue
            if key == "properties":
                out[key] = {name: convert(sub) for name, sub in value.items()}
            else:
                out[key] = value.lower() if key == "type" else convert(value)
        if out.get("type") == "object":
            out["additionalProperties"] = False
        return out

    return convert(gemini_response_schema(num_actions, max_plan_len, with_features))
