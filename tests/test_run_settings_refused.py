"""Run settings that cannot work are refused before training: switches that need advice with no advisor,
a malformed ``llm.base_url``, and a Gemini endpoint whose first call cannot succeed (one model lookup at
the start of the run, against the loopback stub of tests/gemini_stub.py).

Each refusal: exit status 2, one ``lore: error: ...`` line naming the key, no run directory.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gemini_stub import GeminiStub  # noqa: E402

from lore import cli  # noqa: E402
from lore.config import ConfigError, build_config, check_advisor_settings  # noqa: E402
from lore.llm.backends import GeminiBackend, LLMConfigError  # noqa: E402
from lore.validation import url_problem  # noqa: E402

KEY = "AIzaTEST-start-check-0123456789"
TINY = ["model.preset=debug", "train.steps=200", "train.prefill=50", "train.batch_length=8", "device=cpu",
        "llm.cache_path=null", "train.tensorboard=false"]


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    return KEY


@pytest.fixture
def stub():
    with GeminiStub() as server:
        yield server


def closed_port_url() -> str:
    """An http URL on loopback where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def refused(capsys, tmp_path: Path, *args: str) -> str:
    """Run ``lore train`` in-process; assert the one-line refusal and that no run directory appeared."""
    run_dir = tmp_path / "run"
    rc = cli.main(["train", "--run-dir", str(run_dir), "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lore: error: "), err
    assert not run_dir.exists(), "the refused run left its directory behind"
    return lines[0]


def gemini_args(base_url: str, *extra: str) -> list[str]:
    sets = [*TINY, "llm.backend=gemini", f"llm.base_url={base_url}", "llm.timeout_s=2", "llm.retries=1",
            "llm.backoff_s=0.01", *extra]
    return ["--ablation", "prior_only", *[arg for s in sets for arg in ("--set", s)]]


# --------------------------------------------------------------------------- no advisor


@pytest.mark.parametrize("key", ["prior.enabled", "features.enabled", "plan.enabled", "distill.enabled"])
def test_a_switch_that_needs_advice_is_refused_without_an_advisor(capsys, tmp_path, key):
    line = refused(capsys, tmp_path, "--ablation", "rl_only", "--set", f"{key}=true", *[
        arg for s in TINY for arg in ("--set", s)])
    assert f"{key}: true needs advice, but llm.backend is 'none'" in line


def test_the_same_switches_with_an_advisor_are_accepted():
    for key in ("prior.enabled", "features.enabled", "plan.enabled", "distill.enabled"):
        check_advisor_settings(build_config(overrides=[*TINY, f"{key}=true", "llm.backend=scripted"]))
    with pytest.raises(ConfigError, match="distill.enabled"):
        check_advisor_settings(build_config(overrides=["distill.enabled=true"], ablation="rl_only"))


# --------------------------------------------------------------------------- base_url

BAD_URLS = ["localhost:8080", "ftp://example.com", "http://", "http://exa mple.com", "https://example.com:99999",
            "http://user:secret@example.com", "http://example.com/v1?key=x", "http://-bad-/", "http://h:0",
            "http://example.com/\x07"]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_malformed_base_url_is_refused_at_config_time(capsys, tmp_path, url):
    assert url_problem(url)
    line = refused(capsys, tmp_path, *gemini_args(url))
    assert "llm.base_url:" in line and "secret" not in line


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "https://generativelanguage.googleapis.com",
                                 "https://proxy.example.com/gemini/v1beta", "http://[::1]:9000/x"])
def test_a_well_formed_base_url_is_accepted(url):
    assert url_problem(url) is None
    assert build_config(overrides=["llm.backend=gemini", f"llm.base_url={url}"]).llm.base_url == url


def test_a_malformed_base_url_from_the_environment_is_refused_when_the_client_starts(api_key, monkeypatch):
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "localhost:8080")
    with pytest.raises(LLMConfigError, match="GOOGLE_GEMINI_BASE_URL"):
        GeminiBackend("gemini-x")


# --------------------------------------------------------------------------- the start-up lookup


def test_an_unreachable_endpoint_is_refused_before_the_run_starts(capsys, tmp_path, api_key):
    line = refused(capsys, tmp_path, *gemini_args(closed_port_url()))
    assert "llm.base_url: cannot reach 'http://127.0.0.1:" in line and KEY not in line


def test_an_unknown_model_is_refused_before_the_run_starts(capsys, tmp_path, api_key, stub):
    stub.unknown_models.add("gemini-nope")
    line = refused(capsys, tmp_path, *gemini_args(stub.base_url, "llm.model=gemini-nope"))
    assert "llm.model: 'gemini-nope' not found" in line and "HTTP 404" in line
    assert stub.requests == [], "the check spent a generation call"


def test_a_rejected_key_is_refused_before_the_run_starts(capsys, tmp_path, api_key, stub):
    stub.valid_key = "another-key"
    line = refused(capsys, tmp_path, *gemini_args(stub.base_url))
    assert "GEMINI_API_KEY: rejected by" in line and KEY not in line


def test_a_reachable_endpoint_costs_one_lookup_and_no_generation(tmp_path, api_key, stub):
    from lore.train.run_dir import preflight

    cfg = build_config(overrides=[*TINY, "llm.backend=gemini", f"llm.base_url={stub.base_url}"],
                       ablation="prior_only")
    preflight(cfg, tmp_path / "run")
    assert stub.lookups == [f"/v1/models/{cfg.llm.model}"] and stub.requests == []


@pytest.mark.parametrize("code", [429, 500, 503])
def test_a_transient_failure_of_the_lookup_is_left_to_the_run(api_key, code):
    from google.genai import errors

    backend = GeminiBackend("gemini-x", base_url=closed_port_url(), retries=0)
    calls = []

    def busy(**kwargs):
        calls.append(kwargs)
        raise errors.APIError(code, {"error": {"code": code, "message": "busy", "status": "UNAVAILABLE"}})

    backend._client.models.get = busy
    backend.check_endpoint()  # no exception: the run's own retries deal with it
    assert calls == [{"model": "gemini-x"}]
