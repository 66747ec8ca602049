"""The gemini backend through the real google-genai client against a loopback stub server:
request shape, retries, every fault mapped to a counted failure kind, and the key never leaking."""

import json
import logging
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gemini_stub import GeminiStub  # noqa: E402

from lore.config import build_config  # noqa: E402
from lore.llm.backends import AdviceRequest, GeminiBackend, LLMConfigError, make_backend  # noqa: E402
from lore.llm.controller import EnvQuery, LLMController  # noqa: E402

KEY = "AIzaTEST-secret-key-0123456789"
ACTIONS = ["left", "right", "forward", "pickup", "drop", "toggle", "done"]


@pytest.fixture
def stub():
    with GeminiStub(num_actions=len(ACTIONS), best_action=2) as server:
        yield server


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    return KEY


def gemini_cfg(stub, *overrides):
    return build_config(overrides=["llm.backend=gemini", f"llm.base_url={stub.base_url}", "llm.timeout_s=1.0",
                                   "llm.retries=2", "llm.backoff_s=0.01", "llm.cache_path=null",
                                   "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                                   "llm.max_wait_ms=5000", *overrides])


def request(prompt: str = "state: nothing", n: int = len(ACTIONS)) -> AdviceRequest:
    return AdviceRequest(prompt=prompt, prompt_hash="h", num_actions=n, action_names=ACTIONS[:n],
                         env_family="minigrid")


def test_missing_api_key_is_a_startup_error(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    cfg = build_config(overrides=["llm.backend=gemini", "llm.cache_path=null"])
    with pytest.raises(LLMConfigError, match="backend 'gemini' needs the GEMINI_API_KEY environment variable"):
        make_backend(cfg)
    with pytest.raises(LLMConfigError, match="GEMINI_API_KEY"):
        LLMController(cfg, None, ACTIONS, "minigrid")


def test_request_shape_and_answer(stub, api_key):
    backend = make_backend(gemini_cfg(stub))
    response = backend.complete(request())
    assert json.loads(response.text)["action_prior"]["logits"][2] == 3.0
    assert response.tokens_in == 123 and response.tokens_out == 45 and response.attempts == 1
    sent = stub.requests[-1]
    assert sent["path"] == "/v1/models/gemini-2.5-flash-lite:generateContent"  # the SDK's default api version
    headers = {k.lower(): v for k, v in sent["headers"].items()}
    assert headers["x-goog-api-key"] == KEY
    generation = sent["body"]["generationConfig"]
    assert generation["responseMimeType"] == "application/json"
    assert generation["temperature"] == 0.0
    assert "action_prior" in generation["responseSchema"]["properties"]
    assert sent["body"]["contents"][0]["parts"][0]["text"] == "state: nothing"
    assert KEY not in repr(backend)
    backend.close()


def test_api_version_and_base_url_from_the_environment(stub, api_key, monkeypatch):
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", stub.base_url)
    backend = GeminiBackend("gemini-x", api_version="v1beta", timeout_s=2.0)
    backend.complete(request())
    assert stub.requests[-1]["path"] == "/v1beta/models/gemini-x:generateContent"


def test_retries_with_backoff_then_success_or_give_up(stub, api_key):
    sleeps = []
    backend = GeminiBackend("m", base_url=stub.base_url, timeout_s=2.0, retries=3, backoff_s=0.5,
                            sleep=sleeps.append)
    stub.push("http429", "http503", "http500")
    response = backend.complete(request())
    assert response.attempts == 4 and sleeps == [0.5, 1.0, 2.0]  # exponential backoff
    stub.push("http429", "http429", "http429", "http429")
    with pytest.raises(Exception) as info:
        backend.complete(request())
    assert info.value.kind == "rate_limited" and info.value.attempts == 4
    n = len(stub.requests)
    stub.push("http404")
    with pytest.raises(Exception) as info:
        backend.complete(request())
    assert info.value.kind == "http_error" and len(stub.requests) == n + 1  # 4xx: no retry


FAULTS = [
    (["malformed"], "malformed_json"),
    (["wrong_length"], "wrong_length"),
    (["nan"], "nonfinite"),
    (["missing"], "missing_field"),
    (["http429"] * 3, "rate_limited"),
    (["http500"] * 3, "server_error"),
    (["http503"] * 3, "server_error"),
    (["delay:1.6"], "timeout"),
    (["hang"], "timeout"),
    (["bad_body"], "backend_error"),
]


def test_every_fault_gives_no_prior_is_counted_and_training_goes_on(stub, api_key, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    cfg = gemini_cfg(stub, f"llm.cache_path={tmp_path / 'cache.sqlite'}")
    ctl = LLMController(cfg, tmp_path, ACTIONS, "minigrid")
    expected: dict[str, int] = {}
    step = 0
    for faults, kind in FAULTS:
        stub.push(*faults)
        key = f"state-{step}"
        start = time.perf_counter()
        ctl.maybe_request(step, [EnvQuery(0, key, lambda k=key: f"description of {k}", None, 1.0)])
        deadline = time.perf_counter() + 5.0
        while ctl.counters()["llm_inflight"] and time.perf_counter() < deadline:
            time.sleep(0.02)
            ctl.poll(step)
        assert time.perf_counter() - start < 5.0
        expected[kind] = expected.get(kind, 0) + 1
        counters = ctl.counters()
        assert counters[f"llm_failures_{kind}"] == expected[kind], (faults, counters)
        assert ctl.current(0, key, step) is None  # no prior this step (mask 0)
        step += 1
    # training goes on: the next good answer applies
    ctl.maybe_request(step, [EnvQuery(0, "good", lambda: "description of good", None, 1.0)])
    advice = ctl.current(0, "good", step)
    assert advice is not None and int(advice.prior_logits.argmax()) == 2
    counters = ctl.counters()
    assert counters["llm_failures"] == len(FAULTS) and counters["llm_calls"] == len(FAULTS) + 1
    assert counters["llm_calls_ok"] == 1
    ctl.close()

    # the key is never written anywhere: ledger, cache, logs, config dump
    ledger = (tmp_path / "llm_calls.jsonl").read_text()
    records = [json.loads(line) for line in ledger.splitlines()]
    assert [r["failure"] for r in records] == [kind for _, kind in FAULTS] + [None]
    retried = [r for r in records if r["failure"] in ("rate_limited", "server_error")]
    assert all(r["attempts"] == 3 for r in retried)
    assert records[-1]["tokens_in"] == 123 and records[-1]["answer"]["confidence"] == 0.7
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"API key written to {path}"
    assert KEY not in caplog.text
    from lore.config import save_config

    save_config(cfg, tmp_path / "config.yaml")
    assert KEY not in (tmp_path / "config.yaml").read_text()


def test_error_messages_never_contain_the_key(stub, api_key):
    backend = GeminiBackend("m", base_url=stub.base_url, timeout_s=0.5, retries=0)
    for fault in ("http500", "hang", "bad_body", "http404"):
        stub.push(fault)
        with pytest.raises(Exception) as info:
            backend.complete(request())
        assert KEY not in str(info.value) and KEY not in repr(info.value)
