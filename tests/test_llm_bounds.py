"""Every LLM call bounded, against real loopback servers through the real ``openai`` and ``google-genai``
clients (tests/openai_stub.py, tests/gemini_stub.py): one deadline per call whatever the server trickles or
withholds, the body's size capped as it arrives, Retry-After honoured up to its cap, the ledger's attempts
equal to the requests the server saw, an answer that fails a call but never the run, the response_format
fallback only when the server says it is unsupported, and no key in any line printed or written.

Durations are checked against the call's deadline plus ``CALL_SLACK_S`` (upper bounds only): a busy machine
makes calls slower, never a bound tighter.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gemini_stub import GeminiStub  # noqa: E402
from openai_stub import MODEL, OpenAIStub  # noqa: E402
from stub_server import ask_through_faults, assert_key_nowhere  # noqa: E402
from test_run_settings_refused import closed_port_url, refused  # noqa: E402

from lore.cli import RedactingFilter  # noqa: E402
from lore.config import build_config, save_config  # noqa: E402
from lore.config.sections import MAX_LLM_RETRIES  # noqa: E402
from lore.llm.backends import (  # noqa: E402
    CALL_SLACK_S,
    RETRY_AFTER_MAX_S,
    AdviceRequest,
    GeminiBackend,
    LLMConfigError,
    LLMError,
    OpenAIBackend,
    call_budget_s,
)
from lore.llm.controller import EnvQuery, LLMController  # noqa: E402
from lore.llm.secrets import redact, redact_text, redact_value  # noqa: E402
from lore.llm.transport import MAX_RESPONSE_BYTES  # noqa: E402
from lore.train.trainer import with_endpoint  # noqa: E402

KEYS = {"openai": "sk-TEST-bounds-secret-0123456789", "gemini": "AIzaTEST-bounds-secret-0123456789"}
ACTIONS = ["left", "right", "forward", "pickup", "drop", "toggle", "done"]
TIMEOUT_S = 1.5


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["openai", "gemini"])
def server(request, monkeypatch):
    """``(backend name, stub)`` with the backend's key set."""
    monkeypatch.setenv("OPENAI_API_KEY" if request.param == "openai" else "GEMINI_API_KEY", KEYS[request.param])
    stub_class = OpenAIStub if request.param == "openai" else GeminiStub
    with stub_class(num_actions=len(ACTIONS), best_action=2) as stub:
        yield request.param, stub


def backend(name: str, base_url: str, **settings):
    settings = {"timeout_s": TIMEOUT_S, "retries": 1, "backoff_s": 0.01, **settings}
    if name == "openai":
        return OpenAIBackend(MODEL, base_url, **settings)
    return GeminiBackend("gemini-x", base_url=base_url, **settings)


def request(prompt: str = "state: nothing") -> AdviceRequest:
    return AdviceRequest(prompt=prompt, prompt_hash="h", num_actions=len(ACTIONS), action_names=ACTIONS,
                         env_family="minigrid")


def failed_call(b) -> tuple[LLMError, float]:
    """The error of one call of ``b`` and the seconds it took."""
    start = time.perf_counter()
    with pytest.raises(LLMError) as info:
        b.complete(request())
    return info.value, time.perf_counter() - start


# --------------------------------------------------------------------------- one deadline per call


@pytest.mark.parametrize("fault", ["trickle:4:40", "hang"])
def test_a_trickled_or_withheld_answer_ends_by_the_deadline(server, fault):
    """The body comes in 40 pieces 0.1 s apart (each read far within timeout_s), or never: the call ends by
    its deadline all the same, after one attempt (a timeout is not retried)."""
    name, stub = server
    b = backend(name, stub.base_url, retries=2)
    stub.push(fault)
    error, seconds = failed_call(b)
    # one attempt; on a loaded machine the deadline may pass before the stub's thread reads the request
    assert error.kind == "timeout" and error.attempts == 1 and len(stub.requests) <= 1
    assert TIMEOUT_S * 0.9 <= seconds <= call_budget_s(TIMEOUT_S, 2) + CALL_SLACK_S
    assert b.complete(request()).attempts == 1  # the next call is answered


def test_an_oversized_body_stops_being_read_at_the_cap(server):
    name, stub = server
    b = backend(name, stub.base_url, timeout_s=5.0)
    stub.push(f"oversize:{16 * MAX_RESPONSE_BYTES}")  # a valid answer, padded to 16 MiB
    error, seconds = failed_call(b)
    assert error.kind == "too_large" and error.attempts == len(stub.requests) == 1
    assert seconds <= call_budget_s(5.0, 1) + CALL_SLACK_S
    assert b.complete(request()).attempts == 1


def test_a_host_name_is_looked_up_within_the_deadline(server):
    name, stub = server
    b = backend(name, stub.base_url.replace("127.0.0.1", "localhost"))
    assert b.complete(request()).attempts == 1
    error, seconds = failed_call(backend(name, "https://no-such-host.invalid:8000/v1", retries=0))
    assert error.kind == "connection_error" and seconds <= TIMEOUT_S + CALL_SLACK_S


def test_a_compressed_body_is_inflated_under_the_same_cap(server):
    name, stub = server
    b = backend(name, stub.base_url, timeout_s=5.0)
    stub.push("gzip:4000")  # a valid answer, compressed although the client asked for none
    assert b.complete(request()).attempts == 1
    stub.push(f"gzip:{16 * MAX_RESPONSE_BYTES}")  # a few kB on the wire, 16 MiB inflated
    error, _ = failed_call(b)
    assert error.kind == "too_large" and error.attempts == 1
    stub.push("encoding:br")  # an encoding the transport does not inflate under the cap
    error, _ = failed_call(b)
    assert error.kind == "backend_error" and error.attempts == 1
    assert len(stub.requests) == 3 and stub.requests[0]["headers"].get("Accept-Encoding") == "identity"


def test_a_redirect_is_not_followed(server):
    """Following it would send the key to wherever it points and make requests no attempt counts."""
    name, stub = server
    b = backend(name, stub.base_url)
    stub.push("redirect")
    error, _ = failed_call(b)
    assert error.kind == "http_error" and "307" in str(error) and error.attempts == len(stub.requests) == 1


def test_a_retry_after_of_an_hour_is_honoured_up_to_its_cap(server):
    """A 429 asking for an hour: the wait (capped at RETRY_AFTER_MAX_S) passes the call's deadline, so the call
    ends at once; the calls that follow within the wait fail at once too, without a request."""
    name, stub = server
    b = backend(name, stub.base_url, retries=3)
    stub.push("http429:3600")
    error, seconds = failed_call(b)
    assert error.kind == "rate_limited" and error.attempts == len(stub.requests) == 1
    assert seconds <= call_budget_s(TIMEOUT_S, 3) + CALL_SLACK_S
    error, _ = failed_call(b)
    assert error.kind == "rate_limited" and error.attempts == 0 and len(stub.requests) == 1
    assert b._not_before - time.monotonic() <= RETRY_AFTER_MAX_S


@pytest.mark.parametrize("name", ["openai", "gemini"])
def test_a_closed_port_with_the_most_retries_ends_by_the_deadline(name, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY" if name == "openai" else "GEMINI_API_KEY", KEYS[name])
    # refusals are instant, so a 0.5 s per-attempt timeout (a 5.5 s deadline) leaves room for several attempts
    # even on a loaded machine; the backoff doubles from 0.05 s until the deadline stops the retries
    b = backend(name, closed_port_url() + "/v1", timeout_s=0.5, retries=MAX_LLM_RETRIES, backoff_s=0.05)
    error, seconds = failed_call(b)
    assert error.kind == "connection_error" and error.attempts >= 2
    assert seconds <= call_budget_s(0.5, MAX_LLM_RETRIES) + CALL_SLACK_S


# --------------------------------------------------------------------------- through the controller


def fault_list(name: str) -> list[tuple[list[str], str]]:
    return [
        (["digits"], "malformed_json"),
        (["length" if name == "openai" else "max_tokens"], "truncated"),
        ([f"oversize:{4 * MAX_RESPONSE_BYTES}"], "too_large"),
        (["trickle:3:30"], "timeout"),
        (["hang"], "timeout"),
        (["http500", "http500"], "server_error"),
    ]


def controller(name: str, stub, run_dir, *overrides: str) -> LLMController:
    model = MODEL if name == "openai" else "gemini-x"
    cfg = build_config(overrides=[f"llm.backend={name}", f"llm.base_url={stub.base_url}", f"llm.model={model}",
                                  f"llm.timeout_s={TIMEOUT_S}", "llm.retries=1", "llm.backoff_s=0.01",
                                  "llm.cache_path=null", "llm.controller.cooldown=0",
                                  "llm.controller.cooldown_after_success=0", "llm.max_wait_ms=5000", *overrides])
    return LLMController(cfg, run_dir, ACTIONS, "minigrid")


def ledger(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "llm_calls.jsonl").read_text().splitlines()]


def test_every_bad_answer_fails_its_call_and_the_ledger_counts_every_request(server, tmp_path, caplog):
    name, stub = server
    caplog.set_level(logging.DEBUG)
    faults = fault_list(name)
    ctl = controller(name, stub, tmp_path)
    advice = ask_through_faults(ctl, stub, faults)
    assert advice is not None and int(advice.prior_logits.argmax()) == 2  # the run goes on with advice
    ctl.close()
    records = ledger(tmp_path)
    assert [r["failure"] for r in records] == [kind for _, kind in faults] + [None]
    assert sum(r["attempts"] for r in records) == len(stub.requests)
    longest_ms = (call_budget_s(TIMEOUT_S, 1) + CALL_SLACK_S) * 1000
    assert all(r["latency_ms"] <= longest_ms for r in records)
    assert_key_nowhere(KEYS[name], tmp_path, caplog.text, ctl.cfg)


def test_a_call_given_up_has_its_transfer_ended_and_its_attempts_ledgered(server, tmp_path):
    name, stub = server
    ctl = controller(name, stub, tmp_path, "llm.timeout_s=5", "llm.max_wait_ms=0")
    ctl.hung_after_s = 0.3  # the controller gives up before the backend's own deadline
    stub.push("trickle:5:50")
    ctl.maybe_request(0, [EnvQuery(0, "s", lambda: "a state", None, 1.0)])
    start = time.perf_counter()
    while not stub.requests and time.perf_counter() - start < 5.0:  # the transfer has begun
        time.sleep(0.01)
    time.sleep(0.4)
    ctl.poll(0)
    assert ctl.counters()["llm_failures_timeout"] == 1
    start = time.perf_counter()
    while ctl.inflight and time.perf_counter() - start < 3.0:  # the worker ends once its transfer is cut
        time.sleep(0.02)
        ctl.poll(0)
    assert ctl.inflight == 0 and time.perf_counter() - start < 3.0
    ctl.close()
    assert [r["attempts"] for r in ledger(tmp_path)] == [len(stub.requests)] == [1]


def test_odd_usage_numbers_and_names_fail_nothing(tmp_path, monkeypatch):
    with OpenAIStub(num_actions=len(ACTIONS), best_action=2) as stub:
        stub.push("odd_usage")  # 400-digit and negative token counts, a 100,000-character model name
        ctl = controller("openai", stub, tmp_path)
        ctl.maybe_request(0, [EnvQuery(0, "s", lambda: "a state", None, 1.0)])
        assert ctl.current(0, "s", 0) is not None
        assert all(isinstance(float(v), float) for v in ctl.counters().values())  # what metrics.csv holds
        ctl.close()
    (record,) = ledger(tmp_path)
    assert (record["tokens_in"], record["tokens_out"], len(record["model"])) == (0, 0, 200)


def test_the_schema_is_dropped_only_when_the_server_says_it_is_unsupported(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEYS["openai"])
    with OpenAIStub(num_actions=len(ACTIONS), best_action=2) as stub:
        stub.schema_support = False  # 400 "response_format is not supported"
        ctl = controller("openai", stub, tmp_path)
        advice = ask_through_faults(ctl, stub, [])
        assert advice is not None
        assert ctl.counters()["llm_schema_dropped"] == 1
        ctl.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "response_format" in r.getMessage()]
    assert len(warnings) == 1 and "plain JSON text" in warnings[0].getMessage()
    (record,) = ledger(tmp_path)
    assert record["ok"] and record["attempts"] == len(stub.requests) == 2
    assert "does not support response_format" in record["warning"]


# --------------------------------------------------------------------------- no secret in any output


@pytest.mark.parametrize(("sets", "env", "hidden"), [
    (["llm.base_url=http://127.0.0.1:8000/v1?key=QUERYSECRET123"], {}, ["QUERYSECRET123"]),
    (["llm.base_url=http://user:p@ss@word9@127.0.0.1:8000/v1"], {}, ["p@ss", "word9", "user"]),
    ([], {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1?api_key=ENVSECRET123"}, ["ENVSECRET123"]),
    ([], {"OPENAI_BASE_URL": "http://u:pw@ENV@127.0.0.1:8000/v1"}, ["pw@ENV"]),
    (["llm.base_url={closed}/sk-pathsecret0123456789/v1"], {}, ["pathsecret"]),
])
def test_no_url_secret_in_the_error_line(capsys, tmp_path, monkeypatch, sets, env, hidden):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sets = [s.replace("{closed}", closed_port_url()) for s in sets]
    args = [a for s in ["model.preset=debug", "device=cpu", "llm.cache_path=null", "llm.backend=openai",
                        f"llm.model={MODEL}", "llm.retries=0", *sets] for a in ("--set", s)]
    line = refused(capsys, tmp_path, "--ablation", "prior_only", *args)
    assert "llm.base_url" in line and all(secret not in line for secret in hidden), line


def test_a_key_is_not_sent_over_plain_http_to_another_machine(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEYS["openai"])
    args = [a for s in ["model.preset=debug", "device=cpu", "llm.backend=openai", f"llm.model={MODEL}",
                        "llm.base_url=http://192.0.2.1:8000/v1"] for a in ("--set", s)]
    line = refused(capsys, tmp_path, "--ablation", "prior_only", *args)
    assert "plain http to another machine" in line and "llm.allow_plain_http" in line
    assert KEYS["openai"] not in line
    OpenAIBackend(MODEL, "http://192.0.2.1:8000/v1", allow_plain_http=True).close()  # the user says so
    OpenAIBackend(MODEL, "https://192.0.2.1:8000/v1").close()
    monkeypatch.delenv("OPENAI_API_KEY")
    OpenAIBackend(MODEL, "http://192.0.2.1:8000/v1").close()  # no key, nothing to protect
    monkeypatch.setenv("GEMINI_API_KEY", KEYS["gemini"])
    with pytest.raises(LLMConfigError, match="plain http to another machine"):
        GeminiBackend("gemini-x", base_url="http://192.0.2.1:8000")


def test_a_short_key_is_masked_wherever_it_stands_alone(tmp_path, caplog, monkeypatch):
    key = "Zq~"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    assert redact(f"key {key}, again:{key}") == "key ***, again:***"
    assert redact_value({"notes": f"you sent {key}"}) == {"notes": "you sent ***"}
    caplog.set_level(logging.DEBUG)
    with OpenAIStub(num_actions=len(ACTIONS), best_action=2) as stub:
        stub.push("echo_key")  # the server repeats the key in its answer
        ctl = controller("openai", stub, tmp_path)
        ctl.maybe_request(0, [EnvQuery(0, "s", lambda: "a state", None, 1.0)])
        assert ctl.current(0, "s", 0) is not None
        ctl.close()
    assert f" {key}" not in (tmp_path / "llm_calls.jsonl").read_text()
    assert ledger(tmp_path)[0]["answer"]["notes"] == "you sent ***"
    assert key not in caplog.text


def test_the_endpoint_from_the_environment_is_recorded_and_keys_are_masked(tmp_path, monkeypatch):
    key = KEYS["openai"]
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://models.example.org/{key}/v1")
    cfg = with_endpoint(build_config(overrides=["llm.backend=openai", f"llm.model={MODEL}"]))
    assert cfg.llm.base_url == f"https://models.example.org/{key}/v1"
    save_config(cfg, tmp_path / "config.yaml")
    saved = (tmp_path / "config.yaml").read_text()
    assert "base_url: https://models.example.org/***/v1" in saved and key not in saved
    monkeypatch.delenv("OPENAI_API_KEY")  # a key in the path that no variable names is masked too
    save_config(cfg, tmp_path / "config.yaml")
    saved = (tmp_path / "config.yaml").read_text()
    assert "base_url: https://models.example.org/***/v1" in saved and key not in saved


def test_log_lines_and_messages_have_url_secrets_masked():
    text = "GET http://u:p@ss@h.example/v1/sk-abcdefgh12345678?key=QSECRET#FRAG and more"
    shown = redact_text(text, ())
    assert shown == "GET http://***@h.example/v1/***?***#*** and more"
    for kept in ("https://h.example/v1beta", "https://h.example/deployments/gpt-4o-mini-2024-07-18/v1"):
        assert redact_text(kept, ()) == kept
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "calling %s", (text,), None)
    assert RedactingFilter().filter(record) and record.getMessage() == f"calling {shown}"
