"""The scope of the persistent LLM answer cache (lore/llm/cache.py): every run writes only its own
cache (no WAL, safe on network filesystems), a shared cache is read-only, and a run-owned cache
rolls back with the run's checkpoint."""

import json
import sqlite3
import time

import pytest

from lore.config import ConfigError, build_config
from lore.grid.workflow import RUN_CACHE_NAME, cache_overrides, grid_jobs
from lore.llm.backends import BackendResponse
from lore.llm.cache import AdviceCache, TieredCache, open_cache
from lore.llm.controller import EnvQuery, LLMController

A = 4


def answer(best: int) -> str:
    logits = [0.0] * A
    logits[best] = 4.0
    return json.dumps({"action_prior": {"logits": logits}, "confidence": 0.8})


class Backend:
    """Answers with action ``best`` for every question; records the questions it was asked."""

    name = "programmed"
    model = "programmed-1"
    cache_tag = ""
    needs_snapshot = False
    inline = True

    def __init__(self, best: int = 1):
        self.best = best
        self.requests = []

    def complete(self, request):
        self.requests.append(request)
        return BackendResponse(text=answer(self.best), tokens_in=10, tokens_out=5, model=self.model)

    def close(self):
        pass


def controller(backend, run_dir, *overrides):
    cfg = build_config(overrides=["llm.backend=scripted", "model.preset=debug", "llm.controller.cooldown=0",
                                  "llm.controller.cooldown_after_success=0", *overrides])
    return LLMController(cfg, run_dir, [f"a{i}" for i in range(A)], "minigrid", backend=backend, cache=True)


def ask(ctl, step: int, key: str) -> None:
    ctl.maybe_request(step, [EnvQuery(0, key, lambda: f"state {key}", None, 1.0, False, 0.0)])


def rows(path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0]


def fingerprint(path):
    """Bytes, mtime and sibling files of a cache file: all unchanged if it was only read."""
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


def test_the_workflow_gives_every_run_its_own_cache_inside_its_run_directory():
    config = {"envs": ["MiniGrid-DoorKey-5x5-v0", "crafter"], "ablations": ["full", "full_noisy"], "seeds": [0, 1]}
    paths = [cache_overrides(config, job)["llm.cache_path"] for job in grid_jobs(config)]
    assert len(set(paths)) == len(paths) == 8
    assert all(p == f"{job.run_dir}/{RUN_CACHE_NAME}" for p, job in zip(paths, grid_jobs(config), strict=True))
    off = cache_overrides({**config, "llm_cache": {"per_run": False, "shared": "s.sqlite"}}, grid_jobs(config)[0])
    assert off == {"llm.cache_path": None, "llm.shared_cache": "s.sqlite"}


def test_a_run_cache_uses_a_rollback_journal_never_wal(tmp_path):
    path = tmp_path / "run" / RUN_CACHE_NAME
    cache = AdviceCache(path)
    assert cache.put("b", "m", "h", {"x": 1})
    assert cache._conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    cache.close()
    assert sorted(p.name for p in path.parent.iterdir()) == [RUN_CACHE_NAME]  # no -wal / -shm files
    # a cache written in WAL mode by an older version is switched back when opened for writing
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    AdviceCache(old).close()
    with sqlite3.connect(old) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_the_cache_of_one_run_is_never_written_by_another_run(tmp_path):
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    ctl_a = controller(Backend(best=2), run_a, f"llm.cache_path={run_a / RUN_CACHE_NAME}")
    ask(ctl_a, 0, "k")
    ctl_a.close()
    before = fingerprint(run_a / RUN_CACHE_NAME)
    backend_b = Backend(best=3)
    ctl_b = controller(backend_b, run_b, f"llm.cache_path={run_b / RUN_CACHE_NAME}")
    ask(ctl_b, 0, "k")  # the same question: run b asks its backend, whatever run a cached
    ask(ctl_b, 1, "k2")
    ctl_b.close()
    assert len(backend_b.requests) == 2 and ctl_b.counters()["llm_cache_hits_persistent"] == 0
    assert fingerprint(run_a / RUN_CACHE_NAME) == before
    assert rows(run_a / RUN_CACHE_NAME) == 1 and rows(run_b / RUN_CACHE_NAME) == 2


def test_a_shared_cache_answers_but_is_never_written(tmp_path):
    shared = tmp_path / "shared" / "cache.sqlite"
    producer = controller(Backend(best=2), tmp_path / "producer", f"llm.cache_path={shared}")
    ask(producer, 0, "k")
    producer.close()
    before = fingerprint(shared)
    time.sleep(0.01)  # an mtime change would be visible

    run = tmp_path / "run"
    backend = Backend(best=3)
    ctl = controller(backend, run, f"llm.cache_path={run / RUN_CACHE_NAME}", f"llm.shared_cache={shared}")
    assert isinstance(ctl.cache, TieredCache) and ctl.cache.shared.readonly
    ask(ctl, 0, "k")  # a hit in the shared cache: free, and the shared answer (action 2)
    assert backend.requests == [] and ctl.counters()["llm_cache_hits_persistent"] == 1
    assert int(ctl.current(0, "k", 0).prior_logits.argmax()) == 2
    ask(ctl, 1, "k2")  # a miss: asked, and stored in the run's own cache only
    assert len(backend.requests) == 1
    ctl.close()
    assert fingerprint(shared) == before
    assert rows(run / RUN_CACHE_NAME) == 1 and rows(shared) == 1
    with pytest.raises(ValueError, match="read-only"):
        AdviceCache(shared, readonly=True).put("b", "m", "h", {})

    # only the shared cache (llm_cache.per_run: false): hits still served, nothing written anywhere
    only = controller(Backend(), tmp_path / "only", "llm.cache_path=null", f"llm.shared_cache={shared}")
    ask(only, 0, "k")
    ask(only, 1, "k3")
    only.close()
    assert only.counters()["llm_cache_hits_persistent"] == 1 and fingerprint(shared) == before


def test_a_shared_cache_must_exist_and_be_a_cache(tmp_path):
    from lore.train.run_dir import preflight

    with pytest.raises(ValueError, match="read-only LLM cache .*no such file"):
        open_cache(None, str(tmp_path / "missing.sqlite"))
    cfg = build_config(overrides=["llm.backend=scripted", f"llm.shared_cache={tmp_path / 'missing.sqlite'}"])
    with pytest.raises(ConfigError, match="llm.shared_cache"):
        preflight(cfg)
    (tmp_path / "text.sqlite").write_text("not a database")
    with pytest.raises(ValueError, match="not an LLM answer cache|file is not a database"):
        open_cache(None, str(tmp_path / "text.sqlite"))


def test_a_run_cache_rolls_back_with_the_checkpoint_a_shared_one_does_not(tmp_path):
    run = tmp_path / "run"
    ctl = controller(Backend(), run, f"llm.cache_path={run / RUN_CACHE_NAME}")
    ask(ctl, 0, "before")
    state = ctl.state_dict()  # the checkpoint
    ask(ctl, 1, "after")  # asked after the checkpoint: a resume asks it again
    ctl.close()
    assert rows(run / RUN_CACHE_NAME) == 2
    backend = Backend()
    resumed = controller(backend, run, f"llm.cache_path={run / RUN_CACHE_NAME}")
    resumed.load_state_dict(state)
    assert rows(run / RUN_CACHE_NAME) == 1
    ask(resumed, 1, "after")  # asked of the backend, as in the run that was not interrupted
    assert len(backend.requests) == 1 and resumed.counters()["llm_cache_hits_persistent"] == 0
    resumed.close()

    # a cache outside the run directory may hold other runs' answers: never rolled back
    outside = tmp_path / "elsewhere.sqlite"
    ctl = controller(Backend(), tmp_path / "r2", f"llm.cache_path={outside}")
    ask(ctl, 0, "x")
    state = ctl.state_dict()
    assert state["cache_rows"] is None
    ask(ctl, 1, "y")
    ctl.close()
    again = controller(Backend(), tmp_path / "r2", f"llm.cache_path={outside}")
    again.load_state_dict(state)
    again.close()
    assert rows(outside) == 2


def test_tiered_cache_asks_the_run_cache_first_and_writes_only_it(tmp_path):
    shared_path = tmp_path / "shared.sqlite"
    seed = AdviceCache(shared_path)
    seed.put("b", "m", "both", {"from": "shared"})
    seed.put("b", "m", "shared-only", {"from": "shared"})
    seed.close()
    cache = open_cache(str(tmp_path / "run.sqlite"), str(shared_path))
    cache.put("b", "m", "both", {"from": "run"})
    assert cache.get("b", "m", "both")["answer"] == {"from": "run"}
    assert cache.get("b", "m", "shared-only")["answer"] == {"from": "shared"}
    assert cache.get("b", "m", "neither") is None
    assert cache.put("b", "m", "new", {"from": "run"}) and len(cache) == 2
    cache.close()
    assert rows(shared_path) == 2


@pytest.fixture(autouse=True)
def _no_stray_files(tmp_path):
    yield
    assert not list(tmp_path.rglob("*-wal")) and not list(tmp_path.rglob("*-shm"))


def test_a_killed_run_rolls_its_own_cache_back_to_the_checkpoint(tmp_path):
    """Training with the per-run cache, killed (no checkpoint on the way out: SIGKILL, node failure)
    after answers were cached since its last checkpoint, then resumed: those answers are dropped with
    the lines of the ledger, so the resumed run pays for them again instead of taking them from its
    cache (as the run that was never interrupted did), and its cache holds exactly its ledger's answers.

    (Not compared with an uninterrupted run: LLMController.load_state_dict drops the plan cursors, so
    a run resumed in the middle of a plan acts differently, with or without a cache.)"""
    from lore.train.checkpoint import load_checkpoint
    from lore.train.trainer import Trainer, train

    run = tmp_path / "run"
    cfg = build_config(overrides=[
        "env.name=MiniGrid-Empty-5x5-v0", "model.preset=debug", "train.steps=200", "train.prefill=40",
        "train.batch_size=4", "train.batch_length=8", "train.train_ratio=16", "eval.every=200",
        "eval.episodes=1", "train.log_every=50", "train.checkpoint_every=45", "train.tensorboard=false",
        "train.progress=false", f"llm.cache_path={run / RUN_CACHE_NAME}", "llm.controller.cooldown=0",
        "llm.controller.cooldown_after_success=0",
    ], ablation="prior_only")

    class KilledAt58(Trainer):
        def _collect_step(self):
            super()._collect_step()
            if self.env_step == 58:  # checkpoint at 45; the LLM is asked at steps 47-55 in between
                raise SystemExit("killed")

    with pytest.raises(SystemExit):
        KilledAt58(cfg, run, show_progress=False).run()
    at_checkpoint = load_checkpoint(run / "checkpoint.pt")["bridge"]["controller"]["cache_rows"]
    assert rows(run / RUN_CACHE_NAME) > at_checkpoint > 0  # answers cached after the checkpoint
    train(cfg, run, show_progress=False)

    calls = [json.loads(line) for line in (run / "llm_calls.jsonl").read_text().splitlines()]
    assert calls and not any(c["cache_hit"] for c in calls)  # nothing from what the lost steps cached
    answered = {c["prompt_hash"] for c in calls if c["ok"] and c["source"] == "backend"}
    with sqlite3.connect(run / RUN_CACHE_NAME) as conn:
        cached = {row[0] for row in conn.execute("SELECT prompt_hash FROM answers")}
    assert cached == answered
