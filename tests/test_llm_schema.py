"""The answer schema: every bad answer maps to the right failure kind, never an exception."""

import json
import math

import pytest

from lore.llm.schema import (
    VALIDATION_FAILURES,
    Advice,
    advice_to_dict,
    gemini_response_schema,
    validate_advice,
)

A = 7


def good(**changes) -> dict:
    answer = {"action_prior": {"logits": [0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0]}, "confidence": 0.8,
              "plan": [2, 2, 5], "subgoal": "go", "notes": "n"}
    answer.update(changes)
    return answer


def test_valid_answer_from_text_and_dict():
    for raw in (good(), json.dumps(good()), json.dumps(good()).encode()):
        advice, failure = validate_advice(raw, A)
        assert failure is None
        assert isinstance(advice, Advice)
        assert advice.action_prior.logits[2] == 4.0
        assert advice.plan == [2, 2, 5]
        assert advice.confidence == 0.8


def test_markdown_fenced_json_is_accepted():
    advice, failure = validate_advice("```json\n" + json.dumps(good()) + "\n```", A)
    assert failure is None and advice is not None


@pytest.mark.parametrize("raw, kind", [
    ("", "malformed_json"),
    ("not json at all", "malformed_json"),
    ('{"action_prior": {"logits": [0, 1', "malformed_json"),
    (b"\xff\xfe", "malformed_json"),
    ("[1, 2, 3]", "wrong_type"),
    (42, "wrong_type"),
    (good(action_prior={"logits": [0.0] * (A + 1)}), "wrong_length"),
    (good(action_prior={"logits": [0.0] * (A - 1)}), "wrong_length"),
    (good(action_prior={"logits": []}), "wrong_length"),
    ('{"action_prior": {"logits": [NaN, 0, 0, 0, 0, 0, 0]}, "confidence": 0.5}', "nonfinite"),
    ('{"action_prior": {"logits": [Infinity, 0, 0, 0, 0, 0, 0]}, "confidence": 0.5}', "nonfinite"),
    (good(confidence=float("nan")), "nonfinite"),
    ({"confidence": 0.5}, "missing_field"),
    ({"action_prior": {"logits": [0.0] * A}}, "missing_field"),
    ({"action_prior": {}, "confidence": 0.5}, "missing_field"),
    (good(confidence=None), "missing_field"),
    (good(action_prior=[0.0] * A), "wrong_type"),
    (good(action_prior={"logits": ["a"] * A}), "wrong_type"),
    (good(action_prior={"logits": [True] * A}), "wrong_type"),
    (good(confidence="high"), "wrong_type"),
    (good(subgoal=3), "wrong_type"),
    (good(features_code=["x"]), "wrong_type"),
    (good(confidence=1.5), "out_of_range"),
    (good(confidence=-0.1), "out_of_range"),
    (good(plan=[0, 7]), "bad_plan"),
    (good(plan=[-1]), "bad_plan"),
    (good(plan="2,2"), "bad_plan"),
    (good(plan=[2.5]), "bad_plan"),
    (good(plan=[True]), "bad_plan"),
    (good(plan=[0] * 33), "bad_plan"),
])
def test_bad_answers_map_to_failure_kinds(raw, kind):
    advice, failure = validate_advice(raw, A)
    assert advice is None
    assert failure == kind
    assert failure in VALIDATION_FAILURES


def test_logits_are_clipped_and_plan_limit_is_a_parameter():
    advice, failure = validate_advice(good(action_prior={"logits": [1e9, -1e9, 3, 0, 0, 0, 0]}), A, logit_clip=5.0)
    assert failure is None
    assert advice.action_prior.logits[:3] == [5.0, -5.0, 3.0]
    assert validate_advice(good(plan=[0] * 5), A, max_plan_len=4)[1] == "bad_plan"
    assert validate_advice(good(plan=[0] * 4), A, max_plan_len=4)[1] is None
    # integral floats are accepted as action ids (JSON has one number type)
    advice, _ = validate_advice(good(plan=[2.0, 3]), A)
    assert advice.plan == [2, 3]


def test_optional_fields_default_and_round_trip():
    advice, failure = validate_advice({"action_prior": {"logits": [0] * A}, "confidence": 0, "extra": 1}, A)
    assert failure is None
    assert advice.plan is None and advice.subgoal is None and advice.features_code is None and advice.notes == ""
    again, failure = validate_advice(advice_to_dict(advice), A)
    assert failure is None and again == advice


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="num_actions"):
        validate_advice(good(), 0)
    with pytest.raises(ValueError, match="logit_clip"):
        validate_advice(good(), A, logit_clip=0)


def test_gemini_schema_is_accepted_by_the_sdk_and_has_no_additional_properties():
    from google.genai import _transformers, types

    schema = gemini_response_schema(A, 8, with_features=True)
    assert "additionalProperties" not in json.dumps(schema)
    parsed = _transformers.t_schema(None, schema)
    assert isinstance(parsed, types.Schema)
    logits = parsed.properties["action_prior"].properties["logits"]
    assert logits.min_items == A and logits.max_items == A
    assert parsed.properties["plan"].max_items == 8
    assert "features_code" in parsed.properties
    assert "features_code" not in gemini_response_schema(A)["properties"]
    # the example in the schema matches what validate_advice accepts
    assert validate_advice(good(), A)[1] is None
    assert not math.isnan(parsed.properties["confidence"].maximum)
