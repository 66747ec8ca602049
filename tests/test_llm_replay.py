"""``replay``: a recorded run's answers come back exactly, without a key; bad ledgers fail at start."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from lore.config import build_config
from lore.envs import make_env
from lore.llm.backends import LLMConfigError, make_backend
from lore.llm.controller import EnvQuery, LLMController

sys.path.insert(0, str(Path(__file__).parent))
from gemini_stub import GeminiStub  # noqa: E402


def run_loop(cfg, run_dir, steps: int = 300, seed: int = 0):
    """Random policy on DoorKey-5x5 that follows the advice when there is one.

    Returns the per-step trace of (state key, advice source, argmax of the prior, action).
    """
    env = make_env("MiniGrid-DoorKey-5x5-v0", seed=seed)
    ctl = LLMController(cfg, run_dir, env.action_names, env.family)
    rng = np.random.default_rng(seed)
    env.reset()
    is_first, reward, trace = True, 0.0, []
    for step in range(steps):
        key = env.state_key()
        beta = float(rng.random())
        ctl.maybe_request(step, [EnvQuery(0, key, env.describe, env.state_snapshot, beta, is_first, reward)])
        advice = ctl.current(0, key, step)
        explore = rng.random() < 0.3
        random_action = int(rng.integers(env.action_space.n))
        action = random_action if advice is None or explore else int(np.argmax(advice.prior_logits))
        trace.append((key, None if advice is None else advice.source,
                      None if advice is None else int(np.argmax(advice.prior_logits)), action))
        _, reward, terminated, truncated, _ = env.step(action)
        is_first = terminated or truncated
        if is_first:
            env.reset()
        ctl.observe_action(0, action, env.state_key(), reward, is_first)
    counters = ctl.counters()
    ctl.close()
    return trace, counters


def ledger(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "llm_calls.jsonl").read_text().splitlines()]


COMMON = ["llm.cache_path=null", "llm.controller.cooldown=5", "llm.controller.cooldown_after_success=10",
          "llm.controller.budget=40", "model.preset=debug"]


def test_replay_reproduces_a_scripted_run_exactly(tmp_path):
    recorded_trace, recorded = run_loop(build_config(overrides=["llm.backend=scripted", *COMMON]), tmp_path / "rec")
    assert recorded["llm_calls"] > 5
    replay_cfg = build_config(overrides=["llm.backend=replay", f"llm.replay_ledger={tmp_path / 'rec' / 'llm_calls.jsonl'}",
                                         *COMMON])
    replay_trace, replayed = run_loop(replay_cfg, tmp_path / "rep")
    assert replay_trace == recorded_trace
    assert replayed["llm_calls"] == recorded["llm_calls"] and replayed["llm_failures"] == 0
    original, again = ledger(tmp_path / "rec"), ledger(tmp_path / "rep")
    assert [(r["env_step"], r["answered_step"], r["prompt_hash"], r["answer"]) for r in original] == \
        [(r["env_step"], r["answered_step"], r["prompt_hash"], r["answer"]) for r in again]


@pytest.mark.parametrize("max_wait_ms", [3000, 0])
def test_replay_reproduces_a_gemini_run_without_the_key(tmp_path, monkeypatch, max_wait_ms):
    """With max_wait_ms=0 answers arrive steps later; replay applies them at the same steps."""
    monkeypatch.setenv("GEMINI_API_KEY", "replay-test-key-123")
    with GeminiStub(num_actions=7, best_action=2) as stub:
        stub.push("http500", "http500", "malformed")  # failures are replayed too
        cfg = build_config(overrides=["llm.backend=gemini", f"llm.base_url={stub.base_url}", "llm.retries=1",
                                      "llm.backoff_s=0.01", "llm.timeout_s=2", f"llm.max_wait_ms={max_wait_ms}", *COMMON])
        recorded_trace, recorded = run_loop(cfg, tmp_path / "rec", steps=120)
    records = ledger(tmp_path / "rec")
    if max_wait_ms == 0:
        assert any(r["answered_step"] > r["env_step"] for r in records)
    monkeypatch.delenv("GEMINI_API_KEY")
    cfg = build_config(overrides=["llm.backend=replay", f"llm.replay_ledger={tmp_path / 'rec' / 'llm_calls.jsonl'}",
                                  *COMMON])
    replay_trace, replayed = run_loop(cfg, tmp_path / "rep", steps=120)
    assert replay_trace == recorded_trace
    # How many calls hit the stub's faults depends on timing (and machine load); that replay repeats
    # exactly what was recorded does not.
    if max_wait_ms:  # blocking calls: the stub's faults are certainly hit within the run
        assert recorded["llm_failures_server_error"] + recorded["llm_failures_malformed_json"] >= 1
    for kind in ("server_error", "malformed_json"):
        assert replayed[f"llm_failures_{kind}"] == recorded[f"llm_failures_{kind}"]
    assert [r["answer"] for r in ledger(tmp_path / "rep")] == [r["answer"] for r in ledger(tmp_path / "rec")]


def test_prompt_not_in_the_ledger_is_a_replay_miss(tmp_path):
    run_loop(build_config(overrides=["llm.backend=scripted", *COMMON]), tmp_path / "rec", steps=30, seed=0)
    cfg = build_config(overrides=["llm.backend=replay", f"llm.replay_ledger={tmp_path / 'rec' / 'llm_calls.jsonl'}",
                                  *COMMON])
    _, counters = run_loop(cfg, tmp_path / "rep", steps=30, seed=1)  # another layout: other prompts
    assert counters["llm_failures_replay_miss"] >= 1


@pytest.mark.parametrize("content, message", [
    ("", "is empty"),
    ("\n\n", "is empty"),
    ('{"prompt_hash": "a", "ok": true}\n{not json\n', ":2: not valid JSON"),
    ('[1, 2]\n', ":1: expected a JSON object"),
    ('{"ok": true}\n', ":1: missing field"),
])
def test_empty_or_corrupt_ledger_is_a_startup_error(tmp_path, content, message):
    path = tmp_path / "llm_calls.jsonl"
    path.write_text(content)
    cfg = build_config(overrides=["llm.backend=replay", f"llm.replay_ledger={path}", "llm.cache_path=null"])
    with pytest.raises(LLMConfigError) as info:
        make_backend(cfg)
    assert str(path) in str(info.value) and message in str(info.value)


def test_missing_ledger_file_is_a_startup_error(tmp_path):
    cfg = build_config(overrides=["llm.backend=replay", f"llm.replay_ledger={tmp_path / 'nope.jsonl'}"])
    with pytest.raises(LLMConfigError, match="not found"):
        make_backend(cfg)


def test_replay_of_a_run_that_used_the_persistent_cache(tmp_path):
    """Cache hits are free in the recorded run; the replay treats them alike (budget, order)."""
    cached = [f"llm.cache_path={tmp_path / 'cache.sqlite'}", "llm.backend=scripted", *COMMON[1:],
              "llm.controller.budget=3"]
    run_loop(build_config(overrides=[*cached, "llm.controller.budget=40"]), tmp_path / "warm", steps=200)
    recorded_trace, recorded = run_loop(build_config(overrides=cached), tmp_path / "rec", steps=200)
    assert recorded["llm_cache_hits_persistent"] > 3  # more answers than the budget allows calls
    cfg = build_config(overrides=["llm.backend=replay", f"llm.replay_ledger={tmp_path / 'rec' / 'llm_calls.jsonl'}",
                                  *COMMON[1:], "llm.controller.budget=3"])
    replay_trace, replayed = run_loop(cfg, tmp_path / "rep", steps=200)
    assert replay_trace == recorded_trace
    assert replayed["llm_cache_hits_persistent"] == recorded["llm_cache_hits_persistent"]
    assert replayed["llm_calls"] == recorded["llm_calls"]
