"""The gemini backend through the real google-genai client against a loopback stub server:
request shape, retries, every fault mapped to a counted failure kind, and the key never leaking."""

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gemini_stub import GeminiStub  # noqa: E402
from stub_server import ask_through_faults, assert_key_nowhere  # noqa: E402

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
    advice = ask_through_faults(ctl, stub, FAULTS)
    assert advice is not None and int(advice.prior_logits.argmax()) == 2  # training goes on
    counters = ctl.counters()
    assert counters["llm_failures"] == len(FAULTS) and counters["llm_calls"] == len(FAULTS) + 1
    assert counters["llm_calls_ok"] == 1
    ctl.close()

    ledger = (tmp_path / "llm_calls.jsonl").read_text()
    records = [json.loads(line) for line in ledger.splitlines()]
    assert [r["failure"] for r in records] == [kind for _, kind in FAULTS] + [None]
    retried = [r for r in records if r["failure"] in ("rate_limited", "server_error")]
    assert all(r["attempts"] == 3 for r in retried)
    assert records[-1]["tokens_in"] == 123 and records[-1]["answer"]["confidence"] == 0.7
    assert_key_nowhere(KEY, tmp_path, caplog.text, cfg)  # ledger, cache, logs, config dump


def test_error_messages_never_contain_the_key(stub, api_key):
    backend = GeminiBackend("m", base_url=stub.base_url, timeout_s=0.5, retries=0)
    for fault in ("http500", "hang", "bad_body", "http404"):
        stub.push(fault)
        with pytest.raises(Exception) as info:
            backend.complete(request())
        assert KEY not in str(info.value) and KEY not in repr(info.value)


# --------------------------------------------------------------------------- Crafter through the same path


def _wait(ctl, step: int, timeout_s: float = 5.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while ctl.counters()["llm_inflight"] and time.perf_counter() < deadline:
        time.sleep(0.02)
        ctl.poll(step)


def test_crafter_advice_goes_through_the_same_schema_cache_and_ledger(stub, api_key, tmp_path):
    """A Crafter state's prompt (built from the symbolic state) reaches Gemini; the answer is checked
    against the 17-action schema, applied, ledgered and cached, and the cache answers the same state later."""
    from lore.envs import make_env

    env = make_env("crafter", seed=5)
    env.reset()
    for action in (1, 3, 5, 2):
        env.step(action)
    cfg = gemini_cfg(stub, "env.name=crafter", f"llm.cache_path={tmp_path / 'cache.sqlite'}")
    n = len(env.action_names)
    ctl = LLMController(cfg, tmp_path / "a", env.action_names, env.family)
    key = env.state_key()
    ctl.maybe_request(0, [EnvQuery(0, key, env.describe, env.state_snapshot, 1.0)])
    _wait(ctl, 0)
    advice = ctl.current(0, key, 0)
    assert advice is not None and advice.prior_logits.shape == (n,) and int(advice.prior_logits.argmax()) == 2
    sent = stub.requests[-1]["body"]
    prompt = sent["contents"][0]["parts"][0]["text"]
    assert prompt.startswith("You advise a reinforcement-learning agent in Crafter") and env.describe() in prompt
    assert f"exactly {n} numbers" in prompt and f"{n - 1}: make_iron_sword" in prompt
    logits_schema = sent["generationConfig"]["responseSchema"]["properties"]["action_prior"]["properties"]["logits"]
    assert int(logits_schema.get("minItems", logits_schema.get("min_items"))) == n
    ctl.close()
    record = json.loads((tmp_path / "a" / "llm_calls.jsonl").read_text().splitlines()[-1])
    assert (record["backend"], record["ok"], record["state_key"], record["prompt"]) == ("gemini", True, key, prompt)
    assert len(record["answer"]["action_prior"]["logits"]) == n

    # a later run with the same cache: answered from it, no request
    before = len(stub.requests)
    again = LLMController(cfg, tmp_path / "b", env.action_names, env.family)
    again.maybe_request(0, [EnvQuery(0, key, env.describe, env.state_snapshot, 1.0)])
    _wait(again, 0)
    assert len(stub.requests) == before and again.counters()["llm_cache_hits_persistent"] == 1
    assert np.array_equal(again.current(0, key, 0).prior_logits, advice.prior_logits)
    again.close()
    cached = json.loads((tmp_path / "b" / "llm_calls.jsonl").read_text().splitlines()[-1])
    assert cached["cache_hit"] is True and cached["prompt"] == prompt


def test_a_crafter_run_trains_with_gemini_advice(stub, api_key, tmp_path):
    """`lore train` on Crafter with the gemini backend: every call is answered through the stub and
    ledgered, and the evaluation records Crafter's achievement columns."""
    from lore.train.trainer import train

    base = gemini_cfg(stub)  # the same backend settings, under the prior_only ablation
    overrides = [f"llm.{k}={json.dumps(getattr(base.llm, k))}" for k in
                 ("backend", "base_url", "timeout_s", "retries", "backoff_s", "max_wait_ms")]
    cfg = build_config(overrides=[*overrides, "llm.cache_path=null", "env.name=crafter", "model.preset=debug",
                                  "train.steps=120", "train.prefill=40", "train.batch_length=8",
                                  "train.train_ratio=32", "train.tensorboard=false", "train.checkpoint_every=1000",
                                  "eval.every=60", "eval.episodes=1", "env.max_episode_steps=30",
                                  "llm.controller.budget=4", "llm.controller.cooldown=10", "device=cpu"],
                       ablation="prior_only")
    summary = train(cfg, tmp_path / "run", show_progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "llm_calls.jsonl").read_text().splitlines()]
    assert 1 <= len(records) <= 4 and summary["llm_calls"] == len(records)
    assert all(r["backend"] == "gemini" and r["ok"] and "Crafter" in r["prompt"] for r in records)
    assert len(stub.requests) == len(records)
    import pandas as pd

    ev = pd.read_csv(tmp_path / "run" / "eval.csv")
    assert ev["env_step"].tolist() == [0, 60, 120]
    assert sum(c.startswith("ach_") for c in ev.columns) == 22 and ev["crafter_score"].notna().all()
