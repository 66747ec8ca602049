"""LLM calls still in flight when a run ends: applied if they answer in time, otherwise recorded as
``timeout`` failures, in the ledger *and* in the final ``metrics.csv`` row (the two must agree)."""

import json
import time

import pandas as pd

from lore.config import build_config
from lore.llm.backends import BackendResponse, LLMServerError
from lore.llm.controller import PHASE_CLOSE, EnvQuery, LLMController
from lore.llm.ledger import LEDGER_NAME

A = 4


class SlowBackend:
    """A background (not in-line) backend whose calls take ``delay_s``; ``fail`` raises a server error."""

    name = "slow"
    model = "slow-1"
    cache_tag = ""
    needs_snapshot = False
    inline = False

    def __init__(self, delay_s: float, fail: bool = False):
        self.delay_s = delay_s
        self.fail = fail

    def complete(self, request):
        time.sleep(self.delay_s)
        if self.fail:
            raise LLMServerError("503 from the stub")
        logits = [0.0] * A
        logits[1] = 4.0
        return BackendResponse(text=json.dumps({"action_prior": {"logits": logits}, "confidence": 0.8}),
                               tokens_in=1, tokens_out=1, model=self.model)

    def close(self):
        pass


def controller(backend, run_dir):
    cfg = build_config(overrides=["llm.backend=scripted", "llm.cache_path=null", "model.preset=debug"])
    return LLMController(cfg, run_dir, [f"a{i}" for i in range(A)], "minigrid", backend=backend)


def ask(ctl, step: int = 0) -> None:
    ctl.maybe_request(step, [EnvQuery(0, f"k{step}", lambda: "state", None, 1.0, False, 0.0)])


def ledger(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / LEDGER_NAME).read_text().splitlines()]


def test_a_call_still_running_at_the_end_is_a_counted_timeout(tmp_path):
    ctl = controller(SlowBackend(delay_s=5.0), tmp_path)
    ask(ctl)
    assert ctl.counters()["llm_inflight"] == 1
    start = time.perf_counter()
    ctl.settle(timeout_s=0.1)
    assert time.perf_counter() - start < 1.0  # never waits for the call itself
    c = ctl.counters()
    assert (c["llm_calls"], c["llm_failures"], c["llm_failures_timeout"], c["llm_inflight"]) == (1, 1, 1, 0)
    records = ledger(tmp_path)
    assert len(records) == 1
    assert records[0]["failure"] == "timeout" and records[0]["ok"] is False
    assert records[0]["answered_phase"] == PHASE_CLOSE and "in flight" in records[0]["error"]
    ctl.close()  # nothing left: no second line, counters unchanged
    assert len(ledger(tmp_path)) == 1 and ctl.counters()["llm_failures"] == 1


def test_a_call_that_fails_while_the_run_ends_is_counted_before_the_final_row(tmp_path):
    ctl = controller(SlowBackend(delay_s=0.3, fail=True), tmp_path)
    ask(ctl)
    assert ctl.counters()["llm_failures"] == 0  # still in flight
    ctl.settle(timeout_s=5.0)  # it fails during the wait: applied at close, counted now
    c = ctl.counters()
    assert (c["llm_failures"], c["llm_failures_server_error"]) == (1, 1)
    assert [r["failure"] for r in ledger(tmp_path)] == ["server_error"]
    ctl.close()


def test_final_metrics_row_agrees_with_the_ledger_when_a_call_is_in_flight(tmp_path):
    """A whole run whose last LLM call cannot answer before the run ends (an hour's latency and a deadline far
    beyond the run, however slow the machine): the final metrics.csv row counts it, as the ledger does."""
    from lore.train.trainer import train

    cfg = build_config(overrides=[
        "env.name=MiniGrid-Empty-5x5-v0", "model.preset=debug", "train.steps=160", "train.prefill=40",
        "train.batch_size=4", "train.batch_length=8", "train.train_ratio=16", "eval.every=160",
        "eval.episodes=1", "train.log_every=40", "train.checkpoint_every=10000", "train.tensorboard=false",
        "train.progress=false", "llm.cache_path=null", "llm.simulated_latency_ms=3600000", "llm.timeout_s=600",
        "llm.controller.cooldown=0", "llm.controller.trigger_beta=0.0",
    ], ablation="prior_only")
    run = tmp_path / "run"
    train(cfg, run, show_progress=False)
    records = ledger(run)
    backend_calls = [r for r in records if r["source"] == "backend" and not r["cache_hit"]]
    failed = [r for r in backend_calls if not r["ok"]]
    assert failed and failed[-1]["failure"] == "timeout" and failed[-1]["answered_phase"] == PHASE_CLOSE
    final = pd.read_csv(run / "metrics.csv").iloc[-1]
    assert final["llm_calls"] == len(backend_calls)
    assert final["llm_failures"] == len(failed) == final["llm_failures_timeout"]
    assert final["llm_inflight"] == 0
