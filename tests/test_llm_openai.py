"""The openai backend through the real ``openai`` client against a loopback OpenAI-compatible server
(tests/openai_stub.py, a real socket on 127.0.0.1): request shape, JSON-schema answers and the fallback to
text, retries (429 with retry-after, 5xx, resets), every fault mapped to a counted failure kind, the start-up
check, the key never leaking, and a `lore train` run that `replay` reproduces without the server."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from openai_stub import MODEL, OpenAIStub  # noqa: E402
from stub_server import ask_through_faults, assert_key_nowhere  # noqa: E402
from test_run_settings_refused import closed_port_url, refused  # noqa: E402

from lore import cli  # noqa: E402
from lore.config import ConfigError, build_config  # noqa: E402
from lore.llm.backends import AdviceRequest, LLMConfigError, OpenAIBackend, json_part, make_backend  # noqa: E402
from lore.llm.controller import LLMController  # noqa: E402

KEY = "sk-TEST-open-model-secret-0123456789"
ACTIONS = ["left", "right", "forward", "pickup", "drop", "toggle", "done"]


@pytest.fixture
def stub():
    with OpenAIStub(num_actions=len(ACTIONS), best_action=2) as server:
        yield server


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


def openai_cfg(stub, *overrides, ablation=None):
    return build_config(overrides=["llm.backend=openai", f"llm.base_url={stub.base_url}", f"llm.model={MODEL}",
                                   "llm.timeout_s=1.0", "llm.retries=2", "llm.backoff_s=0.01",
                                   "llm.cache_path=null", "llm.controller.cooldown=0",
                                   "llm.controller.cooldown_after_success=0", "llm.max_wait_ms=5000", *overrides],
                        ablation=ablation)


def backend(stub, **kwargs) -> OpenAIBackend:
    settings = {"timeout_s": 1.0, "retries": 2, "backoff_s": 0.01, **kwargs}
    return OpenAIBackend(MODEL, stub.base_url, **settings)


def request(prompt: str = "state: nothing", n: int = len(ACTIONS)) -> AdviceRequest:
    return AdviceRequest(prompt=prompt, prompt_hash="h", num_actions=n, action_names=ACTIONS[:n],
                         env_family="minigrid")


def headers_of(sent: dict) -> dict:
    return {k.lower(): v for k, v in sent["headers"].items()}


# --------------------------------------------------------------------------- answers


def test_request_shape_and_a_schema_constrained_answer(stub, api_key):
    b = make_backend(openai_cfg(stub))
    response = b.complete(request(n=5))
    assert json.loads(response.text)["action_prior"]["logits"] == [0.0, 0.0, 3.0, 0.0, 0.0]
    assert (response.tokens_in, response.tokens_out, response.attempts, response.model) == (123, 45, 1, MODEL)
    sent = stub.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert headers_of(sent)["authorization"] == f"Bearer {KEY}"
    body = sent["body"]
    assert (body["model"], body["temperature"]) == (MODEL, 0.0)
    assert body["messages"] == [{"role": "user", "content": "state: nothing"}]
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "advice"
    logits = fmt["json_schema"]["schema"]["properties"]["action_prior"]["properties"]["logits"]
    assert (logits["type"], logits["minItems"], logits["maxItems"]) == ("array", 5, 5)
    assert KEY not in repr(b)
    b.close()


def test_a_local_server_needs_no_key(stub):
    b = backend(stub)
    b.complete(request())
    assert headers_of(stub.requests[-1])["authorization"] == "Bearer no-key"


def test_a_server_without_json_schema_is_asked_for_text_from_then_on(stub):
    stub.schema_support = False
    b = backend(stub)
    stub.push("prose")
    response = b.complete(request())
    assert response.attempts == 2 and not b.schema_constrained
    assert json.loads(response.text)["confidence"] == 0.7  # cut out of the think block and the prose
    assert "response_format" in stub.requests[0]["body"] and "response_format" not in stub.requests[1]["body"]
    assert b.complete(request()).attempts == 1 and len(stub.requests) == 3
    assert "response_format" not in stub.requests[2]["body"]


def test_a_request_refused_for_another_reason_does_not_drop_the_schema(stub):
    b = backend(stub)
    stub.push("http400")  # a 400 whose message does not say response_format is unsupported
    with pytest.raises(Exception) as info:
        b.complete(request())
    assert info.value.kind == "http_error" and info.value.attempts == 1 and len(stub.requests) == 1
    assert b.schema_constrained and info.value.warning is None
    assert b.complete(request()).attempts == 1 and "response_format" in stub.requests[-1]["body"]


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": 1}', '{"a": 1}'),
    ('<think>so {x}</think>\nAnswer: {"a": {"b": 2}} done', '{"a": {"b": 2}}'),
    ('{"action_prior": {"logits": [0.0, 1.0', '{"action_prior": {"logits": [0.0, 1.0'),
    ("no json here", "no json here"),
])
def test_json_part(text, expected):
    assert json_part(text) == expected


# --------------------------------------------------------------------------- retries


def test_retries_honour_retry_after_and_back_off(stub):
    sleeps: list[float] = []
    b = backend(stub, retries=3, backoff_s=0.5, sleep=sleeps.append)
    stub.push("http429:0.1", "http429:1.7", "http503")
    response = b.complete(request())
    # backoff 0.5, 1.0, 2.0; a longer retry-after wins (the call's deadline, 4 s, leaves room for it)
    assert response.attempts == 4 and sleeps == [0.5, 1.7, 2.0]
    sleeps.clear()
    b = backend(stub, retries=2, backoff_s=0.01, timeout_s=5.0, sleep=sleeps.append)
    stub.push("http429:0.3", "http500", "ok")
    assert b.complete(request()).attempts == 3 and sleeps == [0.3, 0.02]


def test_a_real_retry_after_is_waited_for(stub):
    b = backend(stub, retries=1, backoff_s=0.0)
    stub.push("http429:0.4")
    start = time.perf_counter()
    assert b.complete(request()).attempts == 2
    assert time.perf_counter() - start >= 0.4


def test_give_up_after_the_retries_and_never_retry_a_4xx(stub):
    b = backend(stub, retries=2, sleep=lambda s: None)
    stub.push("http429", "http429", "http429")
    with pytest.raises(Exception) as info:
        b.complete(request())
    assert (info.value.kind, info.value.attempts) == ("rate_limited", 3)
    n = len(stub.requests)
    stub.push("http404")
    with pytest.raises(Exception) as info:
        b.complete(request())
    assert info.value.kind == "http_error" and len(stub.requests) == n + 1


def test_a_reset_connection_is_retried(stub):
    b = backend(stub, retries=2)
    stub.push("reset")
    assert b.complete(request()).attempts == 2
    stub.push("reset", "reset", "reset")
    with pytest.raises(Exception) as info:
        b.complete(request())
    assert (info.value.kind, info.value.attempts) == ("connection_error", 3)


def test_a_hang_is_a_timeout_after_timeout_s_without_retry(stub):
    b = backend(stub, timeout_s=0.4, retries=2)
    stub.push("hang")
    start = time.perf_counter()
    with pytest.raises(Exception) as info:
        b.complete(request())
    assert info.value.kind == "timeout" and info.value.attempts == 1
    assert 0.4 <= time.perf_counter() - start < 2.0


def test_an_unknown_model_at_call_time_is_an_http_error(stub):
    b = OpenAIBackend("not/served", stub.base_url, timeout_s=1.0, retries=2)
    with pytest.raises(Exception) as info:
        b.complete(request())
    assert info.value.kind == "http_error" and "404" in str(info.value) and len(stub.requests) == 1


# --------------------------------------------------------------------------- every fault through the controller

FAULTS = [
    (["malformed"], "malformed_json"),
    (["wrong_length"], "wrong_length"),
    (["nan"], "nonfinite"),
    (["inf"], "nonfinite"),
    (["missing"], "missing_field"),
    (["bad_action"], "bad_plan"),
    (["negative"], "out_of_range"),
    (["huge"], "out_of_range"),
    (["http429"] * 3, "rate_limited"),
    (["http500"] * 3, "server_error"),
    (["reset"] * 3, "connection_error"),
    (["delay:1.6"], "timeout"),
    (["hang"], "timeout"),
    (["bad_body"], "backend_error"),
]


def test_every_fault_gives_no_prior_is_counted_and_training_goes_on(stub, api_key, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    cfg = openai_cfg(stub, f"llm.cache_path={tmp_path / 'cache.sqlite'}")
    ctl = LLMController(cfg, tmp_path, ACTIONS, "minigrid")
    advice = ask_through_faults(ctl, stub, FAULTS)
    assert advice is not None and int(advice.prior_logits.argmax()) == 2  # training goes on with advice
    counters = ctl.counters()
    assert counters["llm_failures"] == len(FAULTS) and counters["llm_calls"] == len(FAULTS) + 1
    assert counters["llm_calls_ok"] == 1
    ctl.close()

    records = [json.loads(line) for line in (tmp_path / "llm_calls.jsonl").read_text().splitlines()]
    assert [r["failure"] for r in records] == [kind for _, kind in FAULTS] + [None]
    assert all(r["backend"] == "openai" for r in records) and len(records) == counters["llm_calls"]
    assert all(r["attempts"] == 3 for r in records if r["failure"] in ("rate_limited", "server_error",
                                                                       "connection_error"))
    assert records[-1]["tokens_in"] == 123 and records[-1]["answer"]["confidence"] == 0.7
    assert records[-1]["model"] == MODEL
    assert_key_nowhere(KEY, tmp_path, caplog.text, cfg)  # ledger, cache, logs, config dump


def test_error_messages_never_contain_the_key(stub, api_key):
    b = backend(stub, timeout_s=0.5, retries=0)
    for fault in ("http500", "hang", "bad_body", "http404", "reset"):
        stub.push(fault)
        with pytest.raises(Exception) as info:
            b.complete(request())
        assert KEY not in str(info.value) and KEY not in repr(info.value)
    stub.valid_key = "another-key"
    with pytest.raises(Exception) as info:
        b.complete(request())
    assert info.value.kind == "http_error" and "401" in str(info.value) and KEY not in str(info.value)


# --------------------------------------------------------------------------- start-up


def openai_args(base_url: str, *extra: str) -> list[str]:
    sets = ["model.preset=debug", "train.steps=200", "train.prefill=50", "train.batch_length=8", "device=cpu",
            "llm.cache_path=null", "train.tensorboard=false", "llm.backend=openai", f"llm.base_url={base_url}",
            f"llm.model={MODEL}", "llm.timeout_s=2", "llm.retries=1", "llm.backoff_s=0.01", *extra]
    return ["--ablation", "prior_only", *[arg for s in sets for arg in ("--set", s)]]


def test_an_unreachable_server_is_refused_before_the_run_starts(capsys, tmp_path, api_key):
    line = refused(capsys, tmp_path, *openai_args(closed_port_url() + "/v1"))
    assert "llm.base_url: cannot reach 'http://127.0.0.1:" in line and "refused" in line.lower()
    assert KEY not in line


def test_an_unknown_model_is_refused_before_the_run_starts(capsys, tmp_path, stub):
    line = refused(capsys, tmp_path, *openai_args(stub.base_url, "llm.model=qwen-nope"))
    assert f"llm.model: 'qwen-nope' is not served at '{stub.base_url}' (it serves '{MODEL}')" in line
    assert stub.requests == [], "the check spent a generation call"


def test_a_rejected_key_is_refused_before_the_run_starts(capsys, tmp_path, api_key, stub):
    stub.valid_key = "another-key"
    line = refused(capsys, tmp_path, *openai_args(stub.base_url))
    assert "OPENAI_API_KEY: rejected by" in line and "HTTP 401" in line and KEY not in line


def test_an_endpoint_without_models_is_refused_before_the_run_starts(capsys, tmp_path, stub):
    line = refused(capsys, tmp_path, *openai_args(stub.address))  # the /v1 is missing
    assert "has no /models, so it is not an OpenAI-compatible endpoint" in line


def test_a_reachable_server_costs_one_listing_and_no_generation(tmp_path, stub):
    from lore.train.run_dir import preflight

    cfg = openai_cfg(stub, ablation="prior_only")
    preflight(cfg, tmp_path / "run")
    assert stub.lookups == ["/v1/models"] and stub.requests == []


@pytest.mark.parametrize(("sets", "message"), [
    (["llm.backend=openai"], "llm.base_url: backend 'openai' needs the server's endpoint"),
    (["llm.backend=openai", "llm.base_url=localhost:8000/v1"], "llm.base_url: 'localhost:8000/v1'"),
    (["llm.backend=openai", "llm.base_url=http://user:pw@127.0.0.1:8000/v1"], "llm.base_url: 'http://***@"),
    (["llm.backend=openai", "llm.base_url=http://127.0.0.1:8000/v1", "llm.api_version=v1beta"],
     "llm.api_version: a Gemini API version, not read by llm.backend=openai"),
    (["llm.backend=openai", "llm.base_url=http://127.0.0.1:8000/v1", "llm.model="],
     "llm.model: backend 'openai' needs the name"),
    (["llm.backend=openai-compatible"], "llm.backend"),
])
def test_bad_settings_are_one_line_naming_the_key(capsys, tmp_path, sets, message):
    args = ["--ablation", "prior_only", *[a for s in ["model.preset=debug", "device=cpu", *sets] for a in ("--set", s)]]
    line = refused(capsys, tmp_path, *args)
    assert message in line, line
    assert "pw" not in line


def test_the_base_url_may_come_from_the_environment(stub, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
    b = OpenAIBackend(MODEL, timeout_s=1.0)
    b.check_endpoint()
    assert stub.lookups == ["/v1/models"]
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:1")
    with pytest.raises(LLMConfigError, match="OPENAI_BASE_URL"):
        OpenAIBackend(MODEL)


def test_the_workflow_needs_a_base_url_for_openai(monkeypatch):
    from lore.grid.workflow import GridError, check_workflow_config

    config = {"envs": ["MiniGrid-DoorKey-5x5-v0"], "ablations": ["prior_only"], "seeds": [0],
              "llm_backend": "openai", "run": {"model.preset": "debug"}}
    with pytest.raises(GridError, match="llm_backend: 'openai' needs the server's endpoint"):
        check_workflow_config(config, environ={})
    config["run"].update({"llm.base_url": "http://127.0.0.1:8000/v1", "llm.model": MODEL})
    assert len(check_workflow_config(config, environ={})) == 1
    with pytest.raises(ConfigError):
        build_config(overrides=["llm.backend=openai", "llm.api_version=v1"])


# --------------------------------------------------------------------------- a training run, then its replay


TIMING_COLUMNS = ("llm_latency_ms_total", "steps_per_s", "update_ms", "update_time_frac")


def test_a_train_run_with_an_open_model_and_its_replay_without_the_server(stub, api_key, tmp_path, monkeypatch):
    """`lore train` with llm.backend=openai asks the loopback server (some calls fail and are counted; the
    server refuses response_format, so the run switches to plain text, with a warning in the ledger and
    metrics.csv); a `replay` run of its ledger, with no server and no key, writes the same eval.csv and the
    same losses and counters."""
    import pandas as pd

    stub.schema_support = False
    stub.push("http500", "http500", "http500", "malformed", "bad_action")
    sets = ["model.preset=debug", "env.name=MiniGrid-Empty-5x5-v0", "env.max_episode_steps=40", "device=cpu",
            "train.steps=200", "train.prefill=40", "train.batch_length=8", "train.train_ratio=32",
            "train.tensorboard=false", "train.checkpoint_every=1000", "eval.every=100", "eval.episodes=4",
            "llm.controller.budget=12", "llm.controller.cooldown=5", "llm.controller.cooldown_after_success=10",
            "llm.cache_path=null", "llm.retries=2", "llm.backoff_s=0.01", "llm.timeout_s=2"]

    def train(run: str, *extra: str) -> dict:
        rc = cli.main(["train", "--run-dir", str(tmp_path / run), "--no-progress", "--ablation", "prior_only",
                       *[a for s in [*sets, *extra] for a in ("--set", s)]])
        assert rc == 0
        files = {name: (tmp_path / run / name).read_text() for name in ("eval.csv", "llm_calls.jsonl")}
        metrics = pd.read_csv(tmp_path / run / "metrics.csv")
        files["metrics"] = metrics.drop(columns=[c for c in metrics.columns if c in TIMING_COLUMNS])
        return files

    recorded = train("open", "llm.backend=openai", f"llm.base_url={stub.base_url}", f"llm.model={MODEL}")
    records = [json.loads(line) for line in recorded["llm_calls.jsonl"].splitlines()]
    served = len(stub.requests)
    assert 6 <= len(records) <= 12 and served >= len(records)
    assert all(r["backend"] == "openai" and r["model"] == MODEL for r in records)
    failures = [r["failure"] for r in records if not r["ok"]]
    assert failures[:3] == ["server_error", "malformed_json", "bad_plan"]
    assert sum(r["attempts"] for r in records) == served  # every request the server saw is ledgered
    assert "does not support response_format" in records[0]["warning"]
    assert all(r["warning"] is None for r in records[1:])
    assert recorded["metrics"]["llm_schema_dropped"].iloc[-1] == 1
    for path in (tmp_path / "open").rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path
    stub.stop()
    monkeypatch.delenv("OPENAI_API_KEY")

    replayed = train("replay", "llm.backend=replay", f"llm.replay_ledger={tmp_path / 'open' / 'llm_calls.jsonl'}")
    assert replayed["eval.csv"] == recorded["eval.csv"]
    pd.testing.assert_frame_equal(replayed["metrics"], recorded["metrics"])  # losses, prior use, call counters
    assert recorded["metrics"]["llm_prior_applied_frac"].max() > 0
    again = [json.loads(line) for line in replayed["llm_calls.jsonl"].splitlines()]
    assert [(r["env_step"], r["answered_step"], r["failure"], r["answer"]) for r in again] == \
        [(r["env_step"], r["answered_step"], r["failure"], r["answer"]) for r in records]
