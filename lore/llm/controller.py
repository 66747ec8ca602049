"""When to ask the LLM, without ever stalling the env loop, and which answer applies now.

Loop protocol (one env step, ``N`` vectorised envs)::

    controller.maybe_request(env_step, [EnvQuery(i, key_i, describe_i, snapshot_i, beta_i, is_first_i, r_i)])
    advice_i = controller.current(i, key_i, env_step)        # AppliedAdvice or None (mask 0)
    ... act, step the envs ...
    controller.observe_action(i, action_i, new_key_i, reward_i, new_is_first_i)

``maybe_request`` first applies the answers that arrived since the last step (so an answer that
arrives during step t applies from step t+1 — the same in a replayed run), then decides whether to
ask: an env is *triggered* when its β ≥ ``trigger_beta``, at episode start, in a never-seen state
key, or after ``trigger_plateau`` steps without reward; a triggered env already served (a cached
answer for its state key within ``cache_ttl`` env steps, or an active plan) needs no call. Among the
rest, the one with the highest β is asked — at most one question per env step — if the cooldown has
passed (``cooldown`` env steps after a question, ``cooldown_after_success`` after one that was
answered), fewer than ``llm.max_inflight`` questions are in flight, and budget is left.

A question is answered, in order, by the persistent cache (free), the distillation surrogate (free,
``llm_calls_saved``; every ``distill.check_every``-th one still goes to the backend as a held-out
check), or the backend (costs budget). Backend calls run on a daemon thread (in-line for instant,
deterministic backends: scripted without simulated latency, replay); ``maybe_request`` waits at most
``llm.max_wait_ms``. Failures of any kind give no prior and are counted by kind.

``current`` returns (a) the answer for exactly this state key, or (b) while the env follows a plan
from an answer, the plan's next action as a one-hot prior (``source="plan"``); taking another
action, or the episode ending, cancels the plan.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lore.llm.backends import (
    BACKEND_FAILURES,
    AdviceRequest,
    Backend,
    BackendResponse,
    LLMError,
    longest_call_s,
    make_backend,
)
from lore.llm.cache import AdviceCache, TieredCache, open_cache
from lore.llm.ledger import LEDGER_NAME, Ledger
from lore.llm.prompt import build_prompt, default_features_spec, prompt_hash
from lore.llm.schema import (
    DEFAULT_MAX_PLAN_LEN,
    MAX_ANSWER_CHARS,
    VALIDATION_FAILURES,
    Advice,
    advice_to_dict,
    answer_size,
    validate_advice,
)
from lore.llm.secrets import current_secrets, redact_text, redact_value, scrub_answer
from lore.llm.transport import CallState, spawn_call
from lore.utils.io import expand_run_dir

log = logging.getLogger("lore.llm")

FAILURE_KINDS = VALIDATION_FAILURES + BACKEND_FAILURES
SOURCES = ("llm", "cache", "plan", "surrogate")
PHASE_BEFORE, PHASE_AFTER, PHASE_CLOSE = 0, 1, 2
"""When, within an env step, arrived answers are applied (recorded so ``replay`` applies them alike)."""


@dataclass
class EnvQuery:
    """One env's view at this step; ``describe``/``snapshot`` are called only if a question is asked."""

    env_index: int
    state_key: str
    describe: Callable[[], str]
    snapshot: Callable[[], dict] | None = None
    beta: float = 0.0
    is_first: bool = False
    reward: float = 0.0
    may_ask: bool = True
    """False where an answer could not be used (e.g. a control episode of the prior): never asked."""


@dataclass
class AppliedAdvice:
    """The prior that applies to one env now."""

    prior_logits: np.ndarray  # float32 [A]
    confidence: float
    plan: list[int] | None
    features_code: str | None
    code_id: str | None
    source: str  # "llm" | "cache" | "plan" | "surrogate"
    subgoal: str | None = None


@dataclass
class _Entry:
    """A validated answer for one state key."""

    advice: Advice
    step: int  # env step the question was asked at (TTL origin)
    source: str
    code_id: str | None


@dataclass
class _PlanCursor:
    actions: list[int]
    index: int
    confidence: float
    features_code: str | None
    code_id: str | None
    subgoal: str | None


@dataclass
class _Pending:
    request: AdviceRequest
    future: Future
    started: float
    heldout_logits: np.ndarray | None = None
    abandoned: bool = False


@dataclass
class _Outcome:
    response: BackendResponse | None
    error: LLMError | None
    latency_ms: float


@dataclass
class _EnvTrack:
    last_key: str | None = None
    steps_since_reward: int = 0


def code_id(code: str) -> str:
    """Id of a feature-code string (the sandbox's own ``code_id`` when available)."""
    try:
        from lore.sandbox import code_id as sandbox_code_id
    except ImportError:
        return hashlib.sha256(code.encode()).hexdigest()[:16]
    return sandbox_code_id(code)


def _key_digest(state_key: str) -> int:
    """8-byte digest of a state key: the novelty set stays small on long Crafter runs."""
    return int.from_bytes(hashlib.blake2b(state_key.encode(), digest_size=8).digest(), "little")


class LLMController:
    """Decides when to ask, runs the calls in the background, and serves the applicable advice."""

    def __init__(self, cfg, run_dir: str | Path | None, action_names: list[str], env_family: str,
                 features_spec: str | None = None, *, backend: Backend | None = None,
                 cache: AdviceCache | TieredCache | None | bool = True):
        if not action_names:
            raise ValueError("LLMController: action_names is empty")
        self.cfg = cfg
        llm = cfg.llm
        ctl = llm.controller
        self.num_actions = len(action_names)
        self.action_names = list(action_names)
        self.env_family = env_family
        self.backend: Backend | None = backend if backend is not None else make_backend(cfg)
        if self.backend is None:
            raise ValueError("LLMController needs a backend: llm.backend is 'none'")
        self.budget = int(ctl.budget)
        self.cooldown = int(ctl.cooldown)
        self.cooldown_after_success = int(ctl.cooldown_after_success)
        self.cache_ttl = int(ctl.cache_ttl)
        self.trigger_beta = float(ctl.trigger_beta)
        self.trigger_episode_start = bool(ctl.trigger_episode_start)
        self.trigger_novelty = bool(ctl.trigger_novelty)
        self.trigger_plateau = int(ctl.trigger_plateau)
        self.max_wait_s = max(float(llm.max_wait_ms), 0.0) / 1000.0
        self.logit_clip = float(llm.logit_clip)
        self.max_plan_len = int(getattr(llm, "plan_max_len", DEFAULT_MAX_PLAN_LEN))
        self.plan_logit = float(getattr(llm, "plan_logit", 4.0))
        self.max_inflight = max(1, int(getattr(llm, "max_inflight", 1)))
        self.check_every = max(1, int(getattr(cfg.distill, "check_every", 10)))
        self.hung_after_s = longest_call_s(llm) + float(llm.simulated_latency_ms) / 1000.0 + 5.0
        self.with_features = bool(cfg.features.enabled)
        if self.with_features and features_spec is None:
            features_spec = default_features_spec(env_family, cfg.features.n_features)
        self.features_spec = features_spec if self.with_features else None

        self.run_dir = None if run_dir is None else Path(run_dir)
        self.ledger = Ledger(self.run_dir / LEDGER_NAME) if self.run_dir is not None else None
        if cache is True:
            cache = (open_cache(expand_run_dir(llm.cache_path, self.run_dir), getattr(llm, "shared_cache", None))
                     if self.backend.name != "replay" else None)
        # (an empty cache is falsy, hence isinstance)
        self.cache: AdviceCache | TieredCache | None = cache if isinstance(cache, (AdviceCache, TieredCache)) else None
        # A writable cache inside the run directory belongs to this run: a resume rolls it back to the
        # checkpoint like the ledger, so a resumed run asks (and is answered) exactly as an uninterrupted one.
        self._cache_owned = (self.cache is not None and self.run_dir is not None and not self.cache.readonly
                             and self.cache.path.resolve().is_relative_to(self.run_dir.resolve()))

        self._memory: dict[str, _Entry] = {}
        self._plans: dict[int, _PlanCursor] = {}
        self._tracks: dict[int, _EnvTrack] = {}
        self._seen: set[int] = set()
        self._pending: list[_Pending] = []
        self._calls_made = 0
        self._next_allowed_step = -(10 ** 18)
        self._last_request_step: int | None = None
        self._step_now = 0
        self._phase_now = PHASE_BEFORE
        self._surrogate: Callable[[int], np.ndarray | None] | None = None
        self._on_heldout: Callable[[np.ndarray, np.ndarray], None] | None = None
        self._surrogate_due = 0
        self._confidence_sum = 0.0
        self._confidence_n = 0
        self._closed = False
        self._counters: dict[str, float] = {
            "llm_calls": 0, "llm_calls_ok": 0, "llm_cache_hits": 0, "llm_cache_hits_memory": 0,
            "llm_cache_hits_persistent": 0, "llm_failures": 0, "llm_plan_steps": 0, "llm_calls_saved": 0,
            "llm_heldout_checks": 0, "llm_triggers": 0, "llm_skipped_budget": 0, "llm_tokens_in": 0,
            "llm_tokens_out": 0, "llm_latency_ms_total": 0.0, "llm_schema_dropped": 0,
        }
        for kind in FAILURE_KINDS:
            self._counters[f"llm_failures_{kind}"] = 0

    # ------------------------------------------------------------------ distillation hooks

    def set_surrogate(self, fn: Callable[[int], np.ndarray | None] | None) -> None:
        """``fn(env_index) -> logits [A] | None``: answer due questions from PriorNet when it is trusted."""
        self._surrogate = fn

    def on_heldout(self, fn: Callable[[np.ndarray, np.ndarray], None] | None) -> None:
        """``fn(surrogate_logits [A], llm_logits [A])`` after each held-out check call is answered."""
        self._on_heldout = fn

    # ------------------------------------------------------------------ the loop API

    def maybe_request(self, env_step: int, queries: list[EnvQuery]) -> None:
        """Apply arrived answers, then ask at most one question (never blocks > ``llm.max_wait_ms``)."""
        if self._closed:
            raise RuntimeError("LLMController.maybe_request after close()")
        self._step_now = int(env_step)
        self._drain(PHASE_BEFORE)
        if env_step % 1024 == 0:
            self._prune(env_step)
        candidates: list[EnvQuery] = []
        for q in queries:
            if q.env_index < 0:
                raise ValueError(f"EnvQuery.env_index must be >= 0, got {q.env_index}")
            track = self._tracks.setdefault(q.env_index, _EnvTrack())
            if q.is_first:
                self._plans.pop(q.env_index, None)
                track.steps_since_reward = 0
            elif q.reward != 0:
                track.steps_since_reward = 0
            else:
                track.steps_since_reward += 1
            if not self._triggered(q, track):
                track.last_key = q.state_key
                continue
            self._counters["llm_triggers"] += 1
            if self._memory_entry(q.state_key, env_step) is not None:
                if track.last_key != q.state_key:  # count once per visit, not once per step
                    self._counters["llm_cache_hits"] += 1
                    self._counters["llm_cache_hits_memory"] += 1
            elif q.may_ask and not self._plan_active(q.env_index) and not self._asked(q.state_key):
                candidates.append(q)
            track.last_key = q.state_key
        if not candidates or self._last_request_step == env_step:
            return
        if env_step < self._next_allowed_step or self.inflight >= self.max_inflight:
            return
        query = max(candidates, key=lambda q: (q.beta, -q.env_index))
        self._last_request_step = env_step
        self._ask(query, int(env_step))

    def current(self, env_index: int, state_key: str, env_step: int) -> AppliedAdvice | None:
        """The advice that applies to ``env_index`` in ``state_key`` now, or None (mask 0)."""
        entry = self._memory_entry(state_key, env_step)
        if entry is not None:
            advice = entry.advice
            logits = np.asarray(advice.action_prior.logits, np.float32)
            if advice.plan:
                self._plans[env_index] = _PlanCursor(list(advice.plan), 0, advice.confidence,
                                                     advice.features_code, entry.code_id, advice.subgoal)
            return AppliedAdvice(logits, float(advice.confidence), list(advice.plan) if advice.plan else None,
                                 advice.features_code, entry.code_id, entry.source, advice.subgoal)
        cursor = self._plans.get(env_index)
        if cursor is not None and cursor.index < len(cursor.actions):
            action = cursor.actions[cursor.index]
            logits = np.zeros(self.num_actions, np.float32)
            logits[action] = self.plan_logit
            self._counters["llm_plan_steps"] += 1
            return AppliedAdvice(logits, cursor.confidence, cursor.actions[cursor.index:], cursor.features_code,
                                 cursor.code_id, "plan", cursor.subgoal)
        return None

    def observe_action(self, env_index: int, action: int, new_state_key: str | None = None,
                       reward: float = 0.0, is_first: bool = False) -> None:
        """Report the action taken by ``env_index``: advances its plan, or cancels it on deviation."""
        cursor = self._plans.get(env_index)
        if cursor is None:
            return
        if is_first or cursor.index >= len(cursor.actions) or int(action) != cursor.actions[cursor.index]:
            del self._plans[env_index]
            return
        cursor.index += 1
        if cursor.index >= len(cursor.actions):
            del self._plans[env_index]

    def poll(self, env_step: int | None = None) -> None:
        """Apply answers that have arrived (``maybe_request`` does this itself)."""
        if env_step is not None:
            self._step_now = int(env_step)
        self._drain(PHASE_AFTER)

    @property
    def inflight(self) -> int:
        """Calls whose worker still runs or whose answer is still to be applied (a call given up counts until
        its worker has ended: no new request overlaps its transfer)."""
        return sum(1 for p in self._pending if not p.abandoned or not p.future.done())

    def counters(self) -> dict[str, float]:
        out = dict(self._counters)
        out["llm_budget_left"] = max(self.budget - self._calls_made, 0)
        out["llm_inflight"] = self.inflight
        out["llm_memory_entries"] = len(self._memory)
        out["llm_cache_corrupt_rows"] = self.cache.corrupt_rows if self.cache is not None else 0
        return out

    def settle(self, timeout_s: float = 2.0) -> None:
        """The run is over: wait up to ``timeout_s`` for the calls in flight and apply them; a call still
        running after that is given up and recorded as a ``timeout`` failure (a ledger line and the
        counters), so the counters logged after this agree with ``llm_calls.jsonl``. ``close`` calls it."""
        if self._closed:
            return
        deadline = time.monotonic() + timeout_s
        for pending in self._pending:
            remaining = deadline - time.monotonic()
            if remaining > 0:
                try:
                    pending.future.exception(timeout=remaining)
                except Exception:  # still running: given up below
                    pass
        self._drain(PHASE_CLOSE)
        now = time.monotonic()
        for pending in self._pending:  # what _drain left: calls still running
            if not pending.abandoned:
                self._give_up(pending, "no answer: call still in flight when the run ended", now)
            pending.future.cancel()
        self._pending.clear()

    def close(self, timeout_s: float = 2.0) -> None:
        """:meth:`settle` the calls in flight, then release files and the backend."""
        if self._closed:
            return
        self.settle(timeout_s)
        self._closed = True
        if self.ledger is not None:
            self.ledger.close()
        if self.cache is not None:
            self.cache.close()
        self.backend.close()

    def __enter__(self) -> LLMController:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ resume

    def state_dict(self) -> dict:
        """Counters, budget used, cooldown state, in-memory cache, novelty set (calls in flight are dropped)."""
        return {
            "version": 1,
            "counters": dict(self._counters),
            "calls_made": self._calls_made,
            "next_allowed_step": self._next_allowed_step,
            "last_request_step": self._last_request_step,
            "surrogate_due": self._surrogate_due,
            "confidence": [self._confidence_sum, self._confidence_n],
            "seen": np.fromiter(self._seen, np.uint64, len(self._seen)),
            "tracks": {i: [t.last_key, t.steps_since_reward] for i, t in self._tracks.items()},
            "memory": {k: {"advice": advice_to_dict(e.advice), "step": e.step, "source": e.source,
                           "code_id": e.code_id} for k, e in self._memory.items()},
            # the ledger as of this checkpoint: a resume cuts the lines written after it (they are replayed)
            "ledger_bytes": self.ledger.size() if self.ledger is not None else None,
            # likewise the run's own answer cache (None: no cache, or one shared with other runs)
            "cache_rows": self.cache.high_water() if self._cache_owned else None,
            # plans being followed: without them a resumed run asks again where the original followed on
            "plans": {i: {"actions": list(c.actions), "index": c.index, "confidence": c.confidence,
                          "features_code": c.features_code, "code_id": c.code_id, "subgoal": c.subgoal}
                      for i, c in self._plans.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != 1:
            raise ValueError(f"LLMController.load_state_dict: unsupported version {state.get('version')!r}")
        self._counters.update(state["counters"])
        self._calls_made = int(state["calls_made"])
        self._next_allowed_step = int(state["next_allowed_step"])
        last = state.get("last_request_step")
        self._last_request_step = None if last is None else int(last)
        self._surrogate_due = int(state.get("surrogate_due", 0))
        self._confidence_sum, self._confidence_n = state.get("confidence", [0.0, 0])
        self._seen = {int(v) for v in np.asarray(state["seen"], np.uint64)}
        self._tracks = {int(i): _EnvTrack(v[0], int(v[1])) for i, v in state["tracks"].items()}
        self._memory = {}
        for key, e in state["memory"].items():
            advice, failure = validate_advice(e["advice"], self.num_actions, self.logit_clip, self.max_plan_len)
            if advice is None:
                raise ValueError(f"LLMController.load_state_dict: cached answer for {key!r} is invalid ({failure})")
            self._memory[key] = _Entry(self._redacted(advice), int(e["step"]), e["source"], e.get("code_id"))
        self._plans = {int(i): _PlanCursor([int(a) for a in c["actions"]], int(c["index"]), float(c["confidence"]),
                                           redact_value(c["features_code"]), c["code_id"], redact_value(c["subgoal"]))
                       for i, c in state.get("plans", {}).items()}  # absent in older checkpoints
        if self.ledger is not None and state.get("ledger_bytes") is not None:
            self.ledger.truncate(int(state["ledger_bytes"]))
        if self._cache_owned and state.get("cache_rows") is not None:
            self.cache.rollback(int(state["cache_rows"]))

    # ------------------------------------------------------------------ internals

    def _triggered(self, q: EnvQuery, track: _EnvTrack) -> bool:
        fired = q.beta >= self.trigger_beta
        fired |= self.trigger_episode_start and q.is_first
        if self.trigger_novelty and q.state_key != track.last_key:  # staying put is never novel
            digest = _key_digest(q.state_key)
            if digest not in self._seen:
                self._seen.add(digest)
                fired = True
        if self.trigger_plateau > 0 and track.steps_since_reward >= self.trigger_plateau:
            track.steps_since_reward = 0
            fired = True
        return bool(fired)

    def _memory_entry(self, state_key: str, env_step: int) -> _Entry | None:
        entry = self._memory.get(state_key)
        if entry is None:
            return None
        if env_step - entry.step > self.cache_ttl:
            del self._memory[state_key]
            return None
        return entry

    def _prune(self, env_step: int) -> None:
        """Drop expired answers (lookups drop them too; this bounds memory on long runs)."""
        for key in [k for k, e in self._memory.items() if env_step - e.step > self.cache_ttl]:
            del self._memory[key]

    def _plan_active(self, env_index: int) -> bool:
        cursor = self._plans.get(env_index)
        return cursor is not None and cursor.index < len(cursor.actions)

    def _asked(self, state_key: str) -> bool:
        return any(p.request.state_key == state_key and not p.abandoned for p in self._pending)

    def _count_failure(self, kind: str) -> None:
        self._counters["llm_failures"] += 1
        name = f"llm_failures_{kind}"
        self._counters[name] = self._counters.get(name, 0) + 1

    def _ask(self, q: EnvQuery, env_step: int) -> None:
        description = q.describe()
        prompt = build_prompt(description, self.action_names, self.env_family, self.features_spec,
                              self.max_plan_len, self.logit_clip)
        phash = prompt_hash(prompt)
        backend = self.backend
        self._next_allowed_step = env_step + self.cooldown
        base = {"env_step": env_step, "env_index": q.env_index, "prompt_hash": phash, "state_key": q.state_key}

        if self.cache is not None:
            hit = self.cache.get(backend.name, backend.model, phash, backend.cache_tag)
            if hit is not None:
                advice, failure = validate_advice(hit["answer"], self.num_actions, self.logit_clip,
                                                  self.max_plan_len)
                if advice is not None:
                    self._counters["llm_cache_hits"] += 1
                    self._counters["llm_cache_hits_persistent"] += 1
                    self._store(q.state_key, advice, env_step, "cache")
                    self._write(base, answered_step=env_step, answered_phase=PHASE_AFTER,
                                backend=backend.name, model=backend.model, source="cache", latency_ms=0.0,
                                ok=True, cache_hit=True, attempts=0, tokens_in=0, tokens_out=0,
                                answer=advice_to_dict(advice), raw=hit["raw"], prompt=prompt)
                    return

        # Replay: where the recorded run answered from its persistent cache (before the surrogate and
        # the budget were consulted), do the same.
        replayed_hit = bool(getattr(backend, "next_is_cache_hit", lambda h: False)(phash))
        heldout = None
        if self._surrogate is not None and not replayed_hit:
            logits = self._surrogate(q.env_index)
            if logits is not None:
                logits = np.asarray(logits, np.float32).reshape(-1)
                if logits.shape != (self.num_actions,) or not np.isfinite(logits).all():
                    raise ValueError(f"surrogate returned logits of shape {logits.shape} (expected "
                                     f"({self.num_actions},)) or non-finite values")
                self._surrogate_due += 1
                if self._surrogate_due % self.check_every != 0:
                    self._answer_from_surrogate(q, logits, env_step, base)
                    return
                heldout = logits

        if self._calls_made >= self.budget and not replayed_hit:
            self._counters["llm_skipped_budget"] += 1
            return
        request = AdviceRequest(
            prompt=prompt, prompt_hash=phash, num_actions=self.num_actions, action_names=self.action_names,
            env_family=self.env_family, snapshot=q.snapshot() if backend.needs_snapshot and q.snapshot else None,
            state_key=q.state_key, env_step=env_step, env_index=q.env_index, with_features=self.with_features,
            max_plan_len=self.max_plan_len,
        )
        if not backend.inline:
            request.call = CallState()
        if backend.inline:
            future: Future = Future()
            future.set_result(self._call(request))
            response = future.result().response
            if response is not None and response.replayed_cache_hit:
                # The recorded run answered this from its cache: free there, free here.
                self._counters["llm_cache_hits"] += 1
                self._counters["llm_cache_hits_persistent"] += 1
            else:
                self._calls_made += 1
                self._counters["llm_calls"] += 1
        else:
            self._calls_made += 1
            self._counters["llm_calls"] += 1
            future = spawn_call(self._call, request)
        self._pending.append(_Pending(request, future, time.monotonic(), heldout))
        if heldout is not None:
            self._counters["llm_heldout_checks"] += 1
        if backend.inline:
            self._drain(PHASE_AFTER)
        elif self.max_wait_s > 0:
            try:
                future.exception(timeout=self.max_wait_s)
            except Exception:  # not finished within max_wait_ms: it will apply later
                pass
            self._drain(PHASE_AFTER)

    def _call(self, request: AdviceRequest) -> _Outcome:
        start = time.perf_counter()
        try:
            response = self.backend.complete(request)
            error = None
            size = answer_size(response.text)
            if size > MAX_ANSWER_CHARS:  # refused whole: nothing of it is validated, kept or written
                error = LLMError(f"answer of {size:,} characters is longer than the {MAX_ANSWER_CHARS:,}-character "
                                 f"cap", response.attempts, kind="too_large")
                error.warning = response.extra.get("warning")
                response = None
            else:
                response.text = scrub_answer(response.text)
        except LLMError as e:
            response, error = None, e
        except Exception as e:  # a backend bug must not kill training: counted as backend_error
            response, error = None, LLMError(redact_text(f"{type(e).__name__}: {e}")[:500])
        return _Outcome(response, error, (time.perf_counter() - start) * 1000.0)

    def _drain(self, phase: int) -> None:
        """Apply finished calls; replay: not before the (step, phase) the original run applied them.

        ``phase`` orders the drains within one env step: :data:`PHASE_BEFORE` (start of
        ``maybe_request``, before the ask decision), :data:`PHASE_AFTER` (after it: in-line answers,
        ``max_wait_ms``, ``poll``), :data:`PHASE_CLOSE`.
        """
        self._phase_now = phase
        if not self._pending:
            return
        still: list[_Pending] = []
        now = time.monotonic()
        for pending in self._pending:
            if pending.abandoned:
                if not pending.future.done():  # kept (and counted in flight) until its worker has ended
                    still.append(pending)
                continue
            if not pending.future.done():
                if now - pending.started > self.hung_after_s:
                    self._give_up(pending, "no answer: call abandoned as hung", now)
                still.append(pending)
                continue
            outcome: _Outcome = pending.future.result()
            deliver = (outcome.response.deliver_at if outcome.response is not None
                       else outcome.error.deliver_at if outcome.error is not None else None)
            if deliver is not None and (self._step_now, phase) < deliver and phase != PHASE_CLOSE:
                still.append(pending)
                continue
            self._finish(pending, outcome)
        self._pending = still

    def _give_up(self, pending: _Pending, message: str, now: float) -> None:
        """Record ``pending`` as a ``timeout`` failure and stop its call: no attempt starts after this, the
        transfer in progress is ended, and the attempts it made are the ledger's."""
        pending.abandoned = True  # its worker's result, if any, is ignored
        call = pending.request.call
        attempts = call.cancel() if call is not None else 1
        if call is not None and not call.begun:  # a backend that does not count its attempts: one call, one
            attempts = 1
        self._finish(pending, _Outcome(None, LLMError(message, attempts, kind="timeout"),
                                       (now - pending.started) * 1000.0))

    def _finish(self, pending: _Pending, outcome: _Outcome) -> None:
        request, backend = pending.request, self.backend
        record = {"env_step": request.env_step, "answered_step": self._step_now,
                  "answered_phase": self._phase_now, "env_index": request.env_index,
                  "backend": backend.name, "prompt_hash": request.prompt_hash, "state_key": request.state_key,
                  "latency_ms": round(outcome.latency_ms, 3), "prompt": request.prompt, "source": "backend"}
        warning = (outcome.error.warning if outcome.error is not None
                   else outcome.response.extra.get("warning") if outcome.response is not None else None)
        if warning:
            record["warning"] = redact_text(str(warning))[:500]
            self._counters["llm_schema_dropped"] = 1
        if outcome.error is not None:
            error = outcome.error
            self._count_failure(error.kind)
            text = redact_text(str(error))
            log.warning("LLM call failed (%s): %s", error.kind, text[:200])
            self._write(record, model=backend.model, ok=False, failure=error.kind, error=text[:300],
                        cache_hit=False, attempts=error.attempts, answer=None, raw=None, tokens_in=0, tokens_out=0)
            return
        response = outcome.response
        assert response is not None
        replayed_hit = response.replayed_cache_hit
        self._counters["llm_tokens_in"] += response.tokens_in
        self._counters["llm_tokens_out"] += response.tokens_out
        self._counters["llm_latency_ms_total"] += outcome.latency_ms
        advice, failure = validate_advice(response.text, self.num_actions, self.logit_clip, self.max_plan_len)
        common = dict(model=response.model or backend.model, cache_hit=replayed_hit, attempts=response.attempts,
                      tokens_in=response.tokens_in, tokens_out=response.tokens_out, raw=response.text)
        if replayed_hit:
            record["source"] = "cache"
        if advice is None:
            self._count_failure(failure)
            log.warning("LLM answer rejected: %s", failure)
            self._write(record, ok=False, failure=failure, answer=None, **common)
            return
        if not replayed_hit:
            self._counters["llm_calls_ok"] += 1
        self._store(request.state_key, advice, request.env_step, "cache" if replayed_hit else "llm")
        answer = advice_to_dict(advice)
        self._write(record, ok=True, failure=None, answer=answer, **common)
        if self.cache is not None:
            self.cache.put(backend.name, backend.model, request.prompt_hash, answer, backend.cache_tag,
                           raw=response.text, tokens_in=response.tokens_in, tokens_out=response.tokens_out)
        if pending.heldout_logits is not None and self._on_heldout is not None:
            self._on_heldout(pending.heldout_logits, np.asarray(advice.action_prior.logits, np.float32))

    def _store(self, state_key: str, advice: Advice, env_step: int, source: str) -> None:
        advice = self._redacted(advice)
        cid = code_id(advice.features_code) if advice.features_code else None
        self._memory[state_key] = _Entry(advice, env_step, source, cid)
        if source in ("llm", "cache"):
            self._confidence_sum += advice.confidence
            self._confidence_n += 1
            self._next_allowed_step = max(self._next_allowed_step, env_step + self.cooldown_after_success)

    def _redacted(self, advice: Advice) -> Advice:
        """``advice`` with every API key removed from its texts (itself when none occurs)."""
        data = advice_to_dict(advice) if current_secrets() else None
        if data is None or redact_value(data) == data:
            return advice
        clean, failure = validate_advice(redact_value(data), self.num_actions, self.logit_clip, self.max_plan_len)
        assert clean is not None, failure  # only texts changed
        return clean

    def _answer_from_surrogate(self, q: EnvQuery, logits: np.ndarray, env_step: int, base: dict) -> None:
        confidence = self._confidence_sum / self._confidence_n if self._confidence_n else 0.5
        clipped = np.clip(logits, -self.logit_clip, self.logit_clip)
        advice, failure = validate_advice({"action_prior": {"logits": clipped.tolist()}, "confidence": confidence,
                                           "notes": "distilled prior"}, self.num_actions, self.logit_clip,
                                          self.max_plan_len)
        assert advice is not None, failure
        self._counters["llm_calls_saved"] += 1
        self._store(q.state_key, advice, env_step, "surrogate")
        self._next_allowed_step = max(self._next_allowed_step, env_step + self.cooldown_after_success)
        self._write(base, answered_step=env_step, answered_phase=PHASE_AFTER, backend=self.backend.name,
                    model="surrogate", source="surrogate", latency_ms=0.0, ok=True, cache_hit=False, attempts=0,
                    tokens_in=0, tokens_out=0, answer=advice_to_dict(advice), raw=None, prompt=None)

    def _write(self, base: dict, **fields) -> None:
        if self.ledger is not None:
            self.ledger.write({**base, **fields})
