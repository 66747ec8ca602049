"""The controller: budget, cooldowns, triggers, one call per step, caches, TTL, plans, resume,
non-blocking calls and the distillation surrogate."""

import json
import time
from collections import deque

import numpy as np
import pytest

from lore.config import build_config
from lore.llm.backends import BackendResponse, LLMServerError
from lore.llm.controller import EnvQuery, LLMController

A = 4


def make_cfg(*overrides: str):
    return build_config(overrides=["llm.backend=scripted", "llm.cache_path=null", "model.preset=debug",
                                   *overrides])


def answer(best: int = 1, plan=None, confidence: float = 0.8) -> str:
    logits = [0.0] * A
    logits[best] = 4.0
    out = {"action_prior": {"logits": logits}, "confidence": confidence}
    if plan is not None:
        out["plan"] = plan
    return json.dumps(out)


class ProgrammedBackend:
    """A backend whose answers (text, or an exception to raise) are queued by the test."""

    name = "programmed"
    model = "programmed-1"
    cache_tag = ""
    needs_snapshot = False

    def __init__(self, answers=(), inline: bool = True, delay_s: float = 0.0, cancellable: bool = True):
        self.answers = deque(answers)
        self.inline = inline
        self.delay_s = delay_s
        self.cancellable = cancellable
        self.requests = []

    def complete(self, request):
        self.requests.append(request)
        if self.delay_s and self.cancellable and request.call is not None:
            request.call.wait(self.delay_s)  # as an HTTP backend's transfer: ended when the caller gives up
        elif self.delay_s:
            time.sleep(self.delay_s)
        item = self.answers.popleft() if self.answers else answer()
        if isinstance(item, Exception):
            raise item
        return BackendResponse(text=item, tokens_in=10, tokens_out=5, model=self.model)

    def close(self):
        pass


def query(i: int, key: str, beta: float = 0.0, is_first: bool = False, reward: float = 0.0, calls=None):
    def describe():
        if calls is not None:
            calls.append(i)
        return f"state {key}"
    return EnvQuery(i, key, describe, None, beta, is_first, reward)


def controller(backend, *overrides, run_dir=None, **kwargs):
    return LLMController(make_cfg(*overrides), run_dir, [f"a{i}" for i in range(A)], "minigrid",
                         backend=backend, **kwargs)


def test_budget_is_never_exceeded_with_many_envs_and_steps(tmp_path):
    backend = ProgrammedBackend()
    ctl = controller(backend, "llm.controller.budget=25", "llm.controller.cooldown=0",
                     "llm.controller.cooldown_after_success=0", run_dir=tmp_path)
    for step in range(600):
        ctl.maybe_request(step, [query(i, f"s{step}-{i}", beta=1.0) for i in range(8)])
    counters = ctl.counters()
    assert len(backend.requests) == 25
    assert counters["llm_calls"] == 25 and counters["llm_budget_left"] == 0
    assert counters["llm_skipped_budget"] > 0
    ctl.close()
    lines = (tmp_path / "llm_calls.jsonl").read_text().splitlines()
    assert len(lines) == 25


def test_envs_that_may_not_ask_are_never_asked_but_still_tracked(tmp_path):
    """A control episode of the prior cannot use an answer, so its env is never the one asked."""
    import dataclasses

    backend = ProgrammedBackend()
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                     run_dir=tmp_path)
    for step in range(20):
        silent = dataclasses.replace(query(0, f"a{step}", beta=1.0), may_ask=False)
        ctl.maybe_request(step, [silent, query(1, f"b{step}", beta=0.1)])
    asked = [r.state_key for r in backend.requests]
    assert asked and all(key.startswith("b") for key in asked)
    ctl.close()


def test_budget_holds_for_background_calls_too():
    backend = ProgrammedBackend(inline=False)
    ctl = controller(backend, "llm.controller.budget=5", "llm.controller.cooldown=0",
                     "llm.controller.cooldown_after_success=0", "llm.max_wait_ms=200")
    for step in range(100):
        ctl.maybe_request(step, [query(i, f"s{step}-{i}", beta=1.0) for i in range(3)])
    ctl.close()
    assert len(backend.requests) == 5 and ctl.counters()["llm_budget_left"] == 0


def test_at_most_one_call_per_step_and_highest_beta_wins():
    backend = ProgrammedBackend()
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                     "llm.controller.trigger_novelty=false")
    described = []
    queries = [query(0, "a", 0.6, calls=described), query(1, "b", 0.9, calls=described),
               query(2, "c", 0.7, calls=described), query(3, "d", 0.2, calls=described)]
    ctl.maybe_request(0, queries)
    ctl.maybe_request(0, queries)  # the same step again: no second call
    assert [r.env_index for r in backend.requests] == [1]
    assert described == [1]  # descriptions are built only for the env actually asked
    assert ctl.current(1, "b", 0) is not None and ctl.current(0, "a", 0) is None
    ctl.maybe_request(1, queries)
    assert [r.env_index for r in backend.requests] == [1, 2]  # b is answered now; c has the next highest beta
    assert ctl.counters()["llm_calls"] == 2


def test_cooldown_and_longer_cooldown_after_success():
    backend = ProgrammedBackend(["not json", answer(), answer(), answer()])
    ctl = controller(backend, "llm.controller.cooldown=10", "llm.controller.cooldown_after_success=30")
    steps = []
    for step in range(80):
        before = len(backend.requests)
        ctl.maybe_request(step, [query(0, f"s{step}", beta=1.0)])
        if len(backend.requests) > before:
            steps.append(step)
    # 0: failure (malformed) -> next after 10; 10: success -> next after 30; 40: success -> 70
    assert steps == [0, 10, 40, 70]
    assert ctl.counters()["llm_failures_malformed_json"] == 1


def test_triggers_novelty_episode_start_plateau_and_beta():
    backend = ProgrammedBackend()
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                     "llm.controller.trigger_novelty=false", "llm.controller.trigger_episode_start=false",
                     "llm.controller.trigger_plateau=5", "llm.controller.trigger_beta=0.5")
    asked = []
    for step in range(20):
        n = len(backend.requests)
        ctl.maybe_request(step, [query(0, f"s{step}", beta=0.1)])
        if len(backend.requests) > n:
            asked.append(step)
    assert asked == [4, 9, 14, 19]  # every 5 rewardless steps
    ctl2 = controller(ProgrammedBackend(), "llm.controller.trigger_beta=2.0", "llm.controller.cooldown=0",
                      "llm.controller.cooldown_after_success=0")
    ctl2.maybe_request(0, [query(0, "x")])  # novel -> asked
    ctl2.maybe_request(1, [query(0, "x")])  # not novel, not first, beta low -> not asked
    ctl2.maybe_request(2, [query(0, "y", is_first=True)])
    assert [r.state_key for r in ctl2.backend.requests] == ["x", "y"]


def test_memory_cache_serves_other_envs_and_expires_after_ttl():
    backend = ProgrammedBackend([answer(best=3)] * 5)
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                     "llm.controller.cache_ttl=100", "llm.controller.trigger_novelty=false")
    ctl.maybe_request(0, [query(0, "A", beta=1.0)])
    assert len(backend.requests) == 1
    ctl.maybe_request(1, [query(0, "B", beta=0.0), query(1, "A", beta=1.0)])  # env 1 reaches A: cached
    assert len(backend.requests) == 1
    assert ctl.counters()["llm_cache_hits"] == 1
    advice = ctl.current(1, "A", 1)
    assert advice is not None and int(np.argmax(advice.prior_logits)) == 3 and advice.source == "llm"
    assert advice.prior_logits.dtype == np.float32 and advice.prior_logits.shape == (A,)
    assert ctl.current(1, "A", 100) is not None
    assert ctl.current(1, "A", 101) is None  # TTL (env steps) expired
    ctl.maybe_request(150, [query(1, "A", beta=1.0)])
    assert len(backend.requests) == 2  # asked again after expiry


def test_plan_following_applies_and_cancels_on_deviation_and_episode_end():
    backend = ProgrammedBackend([answer(best=2, plan=[2, 2, 3]), answer(best=2, plan=[2, 1])])
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=1000",
                     "llm.controller.trigger_novelty=false")
    ctl.maybe_request(0, [query(0, "s0", beta=1.0)])
    first = ctl.current(0, "s0", 0)
    assert first.source == "llm" and first.plan == [2, 2, 3]
    ctl.observe_action(0, 2, "s1")
    ctl.maybe_request(1, [query(0, "s1", beta=1.0)])  # served by the plan: no call
    step1 = ctl.current(0, "s1", 1)
    assert step1.source == "plan" and int(np.argmax(step1.prior_logits)) == 2 and step1.plan == [2, 3]
    ctl.observe_action(0, 2, "s2")
    step2 = ctl.current(0, "s2", 2)
    assert step2.source == "plan" and int(np.argmax(step2.prior_logits)) == 3
    ctl.observe_action(0, 1, "s3")  # deviation
    assert ctl.current(0, "s3", 3) is None
    assert len(backend.requests) == 1
    assert ctl.counters()["llm_plan_steps"] == 2
    # a new plan, cut by the end of the episode
    ctl._next_allowed_step = 0
    ctl.maybe_request(4, [query(0, "t0", beta=1.0)])
    assert ctl.current(0, "t0", 4).plan == [2, 1]
    ctl.observe_action(0, 2, "reset-state", is_first=True)
    assert ctl.current(0, "reset-state", 5) is None
    # the plan runs out
    ctl.current(0, "t0", 6)
    ctl.observe_action(0, 2, "t1")
    ctl.observe_action(0, 1, "t2")
    assert ctl.current(0, "t2", 8) is None


def test_failures_give_no_prior_and_are_counted_by_kind(tmp_path):
    backend = ProgrammedBackend(['{"action_prior": {"logits": [1, 2]}, "confidence": 0.5}',
                                 '{"action_prior": {"logits": [NaN, 0, 0, 0]}, "confidence": 0.5}',
                                 LLMServerError("HTTP 503", attempts=4), answer()])
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                     run_dir=tmp_path)
    for step, key in enumerate(["a", "b", "c", "d"]):
        ctl.maybe_request(step, [query(0, key, beta=1.0)])
        assert (ctl.current(0, key, step) is None) == (key != "d")
    c = ctl.counters()
    assert c["llm_failures"] == 3
    assert c["llm_failures_wrong_length"] == 1 and c["llm_failures_nonfinite"] == 1
    assert c["llm_failures_server_error"] == 1 and c["llm_calls_ok"] == 1
    ctl.close()
    records = [json.loads(line) for line in (tmp_path / "llm_calls.jsonl").read_text().splitlines()]
    assert [r["failure"] for r in records] == ["wrong_length", "nonfinite", "server_error", None]
    assert records[2]["attempts"] == 4 and records[3]["ok"] and records[3]["answer"]["confidence"] == 0.8
    assert all(set(r) >= {"env_step", "env_index", "backend", "model", "prompt_hash", "state_key", "latency_ms",
                          "ok", "failure", "cache_hit", "tokens_in", "tokens_out", "attempts", "answer"}
               for r in records)


def test_calls_do_not_block_the_env_loop():
    cfg_overrides = ("llm.simulated_latency_ms=500", "llm.controller.cooldown=0")
    ctl = LLMController(make_cfg(*cfg_overrides), None, ["left", "right", "forward", "pickup", "drop", "toggle",
                                                          "done"], "minigrid")
    from lore.envs import make_env

    env = make_env("MiniGrid-DoorKey-5x5-v0", seed=0)
    env.reset()
    key = env.state_key()
    start = time.perf_counter()
    ctl.maybe_request(0, [EnvQuery(0, key, env.describe, env.state_snapshot, 1.0, True, 0.0)])
    elapsed = time.perf_counter() - start
    assert elapsed < 0.25, f"maybe_request blocked for {elapsed * 1000:.1f} ms"  # waiting would cost 500 ms
    assert ctl.counters()["llm_inflight"] == 1
    assert ctl.current(0, key, 0) is None  # not there yet
    time.sleep(0.7)
    ctl.maybe_request(1, [EnvQuery(0, key, env.describe, env.state_snapshot, 1.0, False, 0.0)])
    advice = ctl.current(0, key, 1)
    assert advice is not None and advice.source == "llm" and advice.plan
    assert ctl.counters()["llm_inflight"] == 0
    ctl.close()


def test_max_wait_ms_waits_for_a_quick_answer():
    backend = ProgrammedBackend(inline=False, delay_s=0.05)
    ctl = controller(backend, "llm.max_wait_ms=2000")
    start = time.perf_counter()
    ctl.maybe_request(0, [query(0, "k", beta=1.0)])
    assert time.perf_counter() - start < 1.0
    assert ctl.current(0, "k", 0) is not None  # applied within the same step
    ctl.close()


def test_persistent_cache_is_shared_across_runs(tmp_path):
    db = tmp_path / "cache.sqlite"
    overrides = (f"llm.cache_path={db}", "llm.controller.cooldown=0")
    first = controller(ProgrammedBackend([answer(best=2)]), *overrides, run_dir=tmp_path / "run1", cache=True)
    first.maybe_request(0, [query(0, "k", beta=1.0)])
    first.close()
    backend = ProgrammedBackend()
    second = controller(backend, *overrides, run_dir=tmp_path / "run2", cache=True)
    second.maybe_request(0, [query(0, "k", beta=1.0)])
    advice = second.current(0, "k", 0)
    assert backend.requests == [] and int(np.argmax(advice.prior_logits)) == 2 and advice.source == "cache"
    c = second.counters()
    assert c["llm_cache_hits"] == 1 and c["llm_calls"] == 0 and c["llm_budget_left"] == 500
    second.close()
    record = json.loads((tmp_path / "run2" / "llm_calls.jsonl").read_text())
    assert record["cache_hit"] is True and record["ok"] is True


def test_state_dict_round_trip_resumes_budget_cooldown_and_cache():
    backend = ProgrammedBackend([answer(best=1)])
    ctl = controller(backend, "llm.controller.cooldown=5", "llm.controller.cooldown_after_success=40",
                     "llm.controller.budget=3")
    ctl.maybe_request(0, [query(0, "k", beta=1.0)])
    state = ctl.state_dict()
    resumed = controller(ProgrammedBackend(), "llm.controller.cooldown=5",
                         "llm.controller.cooldown_after_success=40", "llm.controller.budget=3")
    resumed.load_state_dict(state)
    assert resumed.counters()["llm_budget_left"] == 2 and resumed.counters()["llm_calls"] == 1
    assert int(np.argmax(resumed.current(0, "k", 10).prior_logits)) == 1
    resumed.maybe_request(20, [query(0, "new", beta=1.0)])  # still in the after-success cooldown
    assert resumed.backend.requests == []
    resumed.maybe_request(40, [query(0, "k2", beta=1.0)])  # "k2" is novel for the resumed novelty set
    assert len(resumed.backend.requests) == 1
    resumed.maybe_request(41, [query(0, "k", beta=0.0)])  # "k" was seen before the save: no trigger
    assert len(resumed.backend.requests) == 1
    with pytest.raises(ValueError, match="version"):
        resumed.load_state_dict({"version": 99})


def test_a_plan_being_followed_survives_a_resume():
    backend = ProgrammedBackend([answer(best=1, plan=[2, 3, 0])])
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0")
    ctl.maybe_request(0, [query(0, "k", beta=1.0)])
    assert ctl.current(0, "k", 0).source in ("llm", "cache")  # the answer starts the plan
    ctl.observe_action(0, 2, "k1")                              # first plan step followed
    state = ctl.state_dict()
    resumed = controller(ProgrammedBackend(), "llm.controller.cooldown=0",
                         "llm.controller.cooldown_after_success=0")
    resumed.load_state_dict(state)
    for ctrl in (ctl, resumed):  # the original and the resumed controller advise the same next step
        advice = ctrl.current(0, "k1", 1)
        assert advice is not None and advice.source == "plan" and int(np.argmax(advice.prior_logits)) == 3
    assert resumed.backend.requests == []


def test_surrogate_answers_due_calls_and_every_nth_is_a_heldout_check():
    backend = ProgrammedBackend([answer(best=0)] * 10)
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                     "distill.check_every=3")
    surrogate_logits = np.array([0.0, 0.0, 2.0, 0.0], np.float32)
    ctl.set_surrogate(lambda env_index: surrogate_logits)
    pairs = []
    ctl.on_heldout(lambda s, llm: pairs.append((s.copy(), llm.copy())))
    for step in range(6):
        ctl.maybe_request(step, [query(0, f"s{step}", beta=1.0)])
    c = ctl.counters()
    assert c["llm_calls_saved"] == 4 and c["llm_calls"] == 2 and c["llm_heldout_checks"] == 2
    assert len(backend.requests) == 2 and len(pairs) == 2
    np.testing.assert_array_equal(pairs[0][0], surrogate_logits)
    assert int(np.argmax(pairs[0][1])) == 0
    assert ctl.current(0, "s0", 0).source == "surrogate"
    assert int(np.argmax(ctl.current(0, "s0", 0).prior_logits)) == 2
    ctl.set_surrogate(lambda env_index: None)  # not trusted: back to the backend
    ctl.maybe_request(6, [query(0, "s6", beta=1.0)])
    assert len(backend.requests) == 3


def test_scripted_controller_end_to_end_on_doorkey(tmp_path):
    """Few calls, many advised steps: plans carry the advice between calls."""
    from lore.envs import make_env

    cfg = make_cfg("llm.controller.budget=50", "llm.controller.cooldown=20",
                   "llm.controller.cooldown_after_success=50")
    env = make_env("MiniGrid-DoorKey-5x5-v0", seed=0)
    ctl = LLMController(cfg, tmp_path, env.action_names, env.family)
    env.reset()
    rng = np.random.default_rng(0)
    is_first, reward, advised, successes = True, 0.0, 0, 0
    for step in range(1000):
        key = env.state_key()
        ctl.maybe_request(step, [EnvQuery(0, key, env.describe, env.state_snapshot, 0.0, is_first, reward)])
        advice = ctl.current(0, key, step)
        if advice is not None and rng.random() < 0.9:
            action = int(np.argmax(advice.prior_logits))
            advised += 1
        else:
            action = int(rng.integers(env.action_space.n))
        _, reward, terminated, truncated, info = env.step(action)
        successes += bool(info["success"])
        is_first = terminated or truncated
        if is_first:
            env.reset()
        ctl.observe_action(0, action, env.state_key(), reward, is_first)
    c = ctl.counters()
    ctl.close()
    assert c["llm_calls"] <= 50
    assert advised > 5 * c["llm_calls"]  # plans and the state cache stretch each call over many steps
    assert successes >= 10


def test_bad_construction():
    with pytest.raises(ValueError, match="action_names"):
        LLMController(make_cfg(), None, [], "minigrid")
    with pytest.raises(ValueError, match="none"):
        LLMController(make_cfg("llm.backend=none"), None, ["a"], "minigrid")
    ctl = controller(ProgrammedBackend())
    with pytest.raises(ValueError, match="env_index"):
        ctl.maybe_request(0, [query(-1, "k")])
    ctl.close()
    with pytest.raises(RuntimeError, match="close"):
        ctl.maybe_request(1, [query(0, "k")])


def test_a_hung_call_is_abandoned_counted_as_timeout_and_frees_the_slot_once_ended():
    backend = ProgrammedBackend(inline=False, delay_s=0.8, cancellable=False)
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0")
    ctl.hung_after_s = 0.1  # normally the call's deadline + CALL_SLACK_S + 5 s
    ctl.maybe_request(0, [query(0, "a", beta=1.0)])
    assert ctl.counters()["llm_inflight"] == 1
    ctl.maybe_request(1, [query(0, "b", beta=1.0)])  # busy: the one slot is taken
    assert len(backend.requests) == 1
    time.sleep(0.2)
    ctl.maybe_request(2, [query(0, "c", beta=1.0)])  # given up; the slot is held while its worker still runs
    c = ctl.counters()
    assert c["llm_failures_timeout"] == 1 and len(backend.requests) == 1
    assert backend.requests[0].call.cancelled and c["llm_inflight"] == 1
    deadline = time.perf_counter() + 5.0
    while ctl.counters()["llm_inflight"] and time.perf_counter() < deadline:
        time.sleep(0.01)
        ctl.poll(2)
    ctl.maybe_request(3, [query(0, "d", beta=1.0)])
    assert len(backend.requests) == 2
    start = time.perf_counter()
    ctl.close(timeout_s=0.1)
    assert time.perf_counter() - start < 1.0  # close never waits for a hung call


def test_resume_cuts_the_ledger_back_to_the_checkpoint(tmp_path):
    """Lines written after a checkpoint belong to steps the resumed run replays: no duplicates."""
    backend = ProgrammedBackend()
    ctl = controller(backend, "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                     run_dir=tmp_path)
    for step in range(3):
        ctl.maybe_request(step, [query(0, f"s{step}", beta=1.0)])
    checkpoint = ctl.state_dict()
    for step in range(3, 6):  # written, then the process is killed before the next checkpoint
        ctl.maybe_request(step, [query(0, f"s{step}", beta=1.0)])
    ledger = tmp_path / "llm_calls.jsonl"
    assert len(ledger.read_text().splitlines()) == 6
    resumed = controller(ProgrammedBackend(), "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0",
                         run_dir=tmp_path)
    resumed.load_state_dict(checkpoint)
    lines = ledger.read_text().splitlines()
    assert [json.loads(line)["env_step"] for line in lines] == [0, 1, 2]
    for step in range(3, 5):  # the replayed steps write their lines once
        resumed.maybe_request(step, [query(0, f"s{step}", beta=1.0)])
    resumed.close()
    ctl.close()
    assert [json.loads(line)["env_step"] for line in ledger.read_text().splitlines()] == [0, 1, 2, 3, 4]
