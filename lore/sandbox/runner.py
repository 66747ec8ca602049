"""The parent side of the feature sandbox: run untrusted LLM-written feature code,
``compute_features(obs) -> list | dict`` of numbers, in sandboxed worker processes.

A security boundary, in three layers (``docs/sandbox.md`` has the threat model):

1. a static check of the source (:func:`lore.sandbox.checker.check_source`): size limit,
   an allow-list of syntax, only ``import math`` / ``import numpy`` (numpy through an allow-list of
   functions), no dunder names or ``_``-attributes, no ``eval``/``open``/``getattr``/``type``..., no
   attribute assignment, no classes, generators, ``global``, bare ``except``; at top level only
   imports, defs and constants;
2. execution in a warm pool of worker processes started with an empty environment in a fresh
   empty directory, which (before any untrusted code runs) enter new network/mount/IPC/UTS
   namespaces, chroot into that empty directory, drop to uid ``nobody`` when started as root, set
   ``RLIMIT_{AS,CPU,FSIZE=0,NOFILE,NPROC=0,CORE=0}`` and install a seccomp filter (no
   fork/exec/socket/kill/ptrace/mount, read-only opens). The code runs with a small allow-list of
   builtins and read-only stand-ins for ``math`` and ``numpy``. A per-observation alarm inside the
   worker and a wall-clock deadline in the parent (SIGKILL of the worker's process group, then a
   fresh worker) bound the time;
3. validation here in the parent: the worker's answer is JSON (never unpickled), of bounded size,
   checked for shape, type, finiteness and length, then clipped to ``[-clip, clip]``.

Result vectors: a list/tuple/1-D array maps one-to-one; a dict maps in **insertion order** (the
order the code wrote the keys; :attr:`FeatureResult.names` keeps them). Any failure gives zeros and
``ok=False`` with ``error = "<kind>: <message>"``, kind one of :data:`FAILURE_KINDS`. Code whose
last ``max_consecutive_failures`` calls all failed (no observation ok) is disabled: later calls fail
at once with ``disabled`` instead of paying its timeouts again.

The parts: :mod:`lore.sandbox.process` starts, talks to and kills one worker process;
:mod:`lore.sandbox.validation` checks its replies; :mod:`lore.sandbox.streaks` disables code that
keeps failing. Here: the pool, splitting a batch across it under deadlines, and the result cache.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import pickle
import select
import signal
import subprocess
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lore.sandbox.checker import check_source
from lore.sandbox.process import SandboxError, WorkerProcess, describe_exit, shutdown
from lore.sandbox.protocol import pack_observations, reply_cap
from lore.sandbox.results import FAILURE_KINDS
from lore.sandbox.streaks import FailureStreaks
from lore.sandbox.validation import FeatureResult, feature_results, parse_reply

__all__ = ["FeatureSandbox", "code_id"]

log = logging.getLogger(__name__)

MAX_N_FEATURES = 4096
_CHECK_CACHE_SIZE = 256


def code_id(code: str) -> str:
    """Short stable id of feature source: the first 16 hex digits of its SHA-256."""
    if not isinstance(code, str):
        raise TypeError(f"code_id: code must be a str, got {type(code).__name__}")
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass
class _Job:
    """One worker's share of a batch."""

    worker: WorkerProcess
    n: int
    deadline: float
    cap: int
    entries: list | None = None


class FeatureSandbox:
    """A warm pool of sandboxed workers that evaluate untrusted ``compute_features`` code.

    Thread-safe (calls are serialised). ``timeout_s`` bounds each observation; ``memory_mb`` is the
    address space a worker may add on top of its own baseline (Python + numpy, ~120 MB of mappings);
    ``workers`` processes share a ``run_batch``. Failures never raise: they come back as
    ``ok=False`` results. Only a sandbox that cannot start a worker at all raises
    :class:`SandboxError` (from :meth:`start`, or from a call when the restart also fails).

    ``max_consecutive_failures`` (None: never) calls in a row in which no observation came back ok
    disable that code: from then on its calls fail at once with ``disabled`` (zeros), see
    :meth:`is_disabled` and the ``codes_disabled`` counter. Rejected code does not count (it never runs).

    ``result_cache`` (0: off) successful results are kept per (code, observation bytes): features are a
    pure function of the observation (the worker strips addresses, clocks and randomness are not
    importable), and navigation states repeat, so a repeated observation costs no worker round trip
    (~5 ms). Failures are never cached: a timeout is retried. ``cache_hits`` counts the answers it gave.
    """

    def __init__(
        self,
        n_features: int,
        timeout_s: float = 1.0,
        memory_mb: int = 256,
        workers: int = 1,
        clip: float = 1e3,
        *,
        kill_grace_s: float = 0.5,
        start_timeout_s: float = 60.0,
        cpu_lifetime_s: int = 600,
        max_consecutive_failures: int | None = 3,
        result_cache: int = 4096,
    ) -> None:
        _require(isinstance(n_features, int) and not isinstance(n_features, bool)
                 and 1 <= n_features <= MAX_N_FEATURES, f"n_features must be an int in [1, {MAX_N_FEATURES}]",
                 n_features)
        _require(_positive_finite(timeout_s), "timeout_s must be a positive number of seconds", timeout_s)
        _require(isinstance(memory_mb, int) and memory_mb >= 16, "memory_mb must be an int >= 16", memory_mb)
        _require(isinstance(workers, int) and 1 <= workers <= 64, "workers must be an int in [1, 64]", workers)
        _require(_positive_finite(clip) and clip <= 1e30, "clip must be a positive number <= 1e30", clip)
        _require(_positive_finite(kill_grace_s), "kill_grace_s must be positive", kill_grace_s)
        _require(_positive_finite(start_timeout_s), "start_timeout_s must be positive", start_timeout_s)
        _require(isinstance(cpu_lifetime_s, int) and cpu_lifetime_s >= 10, "cpu_lifetime_s must be an int >= 10",
                 cpu_lifetime_s)
        _require(max_consecutive_failures is None or isinstance(max_consecutive_failures, int)
                 and not isinstance(max_consecutive_failures, bool) and max_consecutive_failures >= 1,
                 "max_consecutive_failures must be None or an int >= 1", max_consecutive_failures)
        _require(isinstance(result_cache, int) and not isinstance(result_cache, bool) and result_cache >= 0,
                 "result_cache must be an int >= 0", result_cache)
        self.n_features = n_features
        self.result_cache = result_cache
        self._results: OrderedDict[tuple[str, bytes], FeatureResult] = OrderedDict()
        self.timeout_s = float(timeout_s)
        self.memory_mb = memory_mb
        self.clip = float(clip)
        self.kill_grace_s = float(kill_grace_s)
        self.cpu_lifetime_s = cpu_lifetime_s
        config = {
            "sys_path": [str(Path(np.__file__).resolve().parent.parent)],
            "memory_mb": memory_mb,
            "cpu_lifetime_s": cpu_lifetime_s,
        }
        self._workers = [WorkerProcess(config, start_timeout_s) for _ in range(workers)]
        self._lock = threading.Lock()
        self._closed = False
        self._check_cache: OrderedDict[str, str | None] = OrderedDict()
        self._streaks = FailureStreaks(max_consecutive_failures)
        self._counters = {"calls": 0, "ok": 0, "failures": 0, **{f"failures_{k}": 0 for k in FAILURE_KINDS},
                          "worker_starts": 0, "worker_kills": 0, "codes_disabled": 0, "cache_hits": 0}
        self._finalizer = weakref.finalize(self, shutdown, self._workers, os.getpid())

    @classmethod
    def from_config(cls, features_cfg) -> FeatureSandbox:
        """From ``cfg.features`` (:class:`lore.config.FeaturesConfig`)."""
        return cls(
            features_cfg.n_features,
            timeout_s=features_cfg.timeout_s,
            memory_mb=features_cfg.memory_mb,
            workers=features_cfg.workers,
            clip=getattr(features_cfg, "clip", 1e3),
            max_consecutive_failures=getattr(features_cfg, "max_consecutive_failures", 3),
        )

    # public API --------------------------------------------------------------

    def check(self, code: str) -> str | None:
        """Static check only: ``"rejected: <why>"`` or None. Runs nothing."""
        error = self._check_cached(code, code_id(code)) if isinstance(code, str) else check_source(code)
        return f"rejected: {error}" if error else None

    def run(self, code: str, obs: dict) -> FeatureResult:
        """``compute_features(obs)`` in the sandbox."""
        return self.run_batch(code, [obs])[0]

    def run_batch(self, code: str, obs_list: Sequence[Mapping]) -> list[FeatureResult]:
        """``compute_features`` on every observation, in one message per worker.

        A failure on one observation gives zeros and ``ok=False`` for that one only, unless its
        worker had to be killed (timeout past the grace, crash): then its whole share fails.
        """
        if not isinstance(code, str):
            raise TypeError(f"FeatureSandbox.run: code must be a str, got {type(code).__name__}")
        if isinstance(obs_list, Mapping) or not isinstance(obs_list, Sequence):
            raise TypeError(f"FeatureSandbox.run_batch: obs_list must be a list of dicts, got {type(obs_list).__name__}")
        observations = [_clean_obs(obs, i) for i, obs in enumerate(obs_list)]
        cid = code_id(code)
        with self._lock:
            if self._closed:
                raise RuntimeError("FeatureSandbox is closed")
            error = self._check_cached(code, cid)
            disabled = self._streaks.why_disabled(cid)
            if error:
                raw = [["rejected", error, None, None]] * len(observations)
            elif disabled:  # checked after the static check: rejected code keeps saying why
                raw = [["disabled", disabled, None, None]] * len(observations)
            elif observations:
                results = self._run_cached(cid, code, observations)
            else:
                raw = []
            if error or disabled or not observations:
                results = self._finish(raw, cid)
            self._count(results)
            if self._streaks.record(cid, results):
                self._counters["codes_disabled"] += 1
                log.warning("sandbox: feature code %s disabled: %s", cid, self._streaks.why_disabled(cid))
        return results

    def is_disabled(self, code: str) -> bool:
        """Whether ``code`` was disabled after ``max_consecutive_failures`` failed calls in a row."""
        with self._lock:
            return self._streaks.why_disabled(code_id(code)) is not None

    def disabled_codes(self) -> dict[str, str]:
        """``code_id -> why`` for every disabled code (the most recent 1024)."""
        with self._lock:
            return dict(self._streaks.disabled)

    def counters(self) -> dict[str, int]:
        """``calls`` (observations evaluated), ``ok``, ``failures``, ``failures_<kind>``,
        ``worker_starts``, ``worker_kills``, ``codes_disabled``."""
        with self._lock:
            return dict(self._counters)

    def start(self) -> dict:
        """Start every worker now and wait for it; returns the first worker's isolation report."""
        with self._lock:
            if self._closed:
                raise RuntimeError("FeatureSandbox is closed")
            for w in self._workers:
                self._ready(w)
            return dict(self._workers[0].info)

    @property
    def isolation(self) -> dict:
        """What the first worker achieved: ``network_isolated``, ``netns``, ``chroot``, ``uid``,
        ``seccomp``, ``rlimits``, ``environ_keys``, ``notes`` (starts it if needed)."""
        return self.start()

    @property
    def network_isolated(self) -> bool:
        """Whether the kernel stops the workers from using the network (empty network namespace, or
        seccomp refusing ``socket()``)."""
        return bool(self.isolation.get("network_isolated"))

    def worker_pids(self) -> list[int]:
        """PIDs of the worker processes alive now."""
        with self._lock:
            return [w.proc.pid for w in self._workers if w.alive()]

    def close(self) -> None:
        """Kill every worker and remove its directory. Idempotent."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> FeatureSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # internals -----------------------------------------------------------------

    def _check_cached(self, code: str, cid: str) -> str | None:
        if cid in self._check_cache:
            self._check_cache.move_to_end(cid)
            return self._check_cache[cid]
        error = check_source(code)
        self._check_cache[cid] = error
        if len(self._check_cache) > _CHECK_CACHE_SIZE:
            self._check_cache.popitem(last=False)
        return error

    def _ready(self, w: WorkerProcess, budget_s: float = 0.0) -> None:
        """Make ``w`` a live, handshaken worker, restarting it if it died or if ``budget_s`` more CPU
        seconds could take it past its lifetime RLIMIT_CPU."""
        aged = w.cpu_s + min(budget_s, self.cpu_lifetime_s / 2) > self.cpu_lifetime_s - 5
        if w.proc is not None and (not w.alive() or aged):
            w.kill()
        if w.proc is None:
            w.spawn()
            self._counters["worker_starts"] += 1
        try:
            w.ensure_ready()
        except SandboxError as first:
            log.warning("%s; retrying once", first)
            w.spawn()
            self._counters["worker_starts"] += 1
            w.ensure_ready()  # a second failure propagates

    def _dispatch(self, cid: str, code: str, observations: list[dict]) -> list[list]:
        """Split across workers, send, gather. Returns raw ``[kind, message, values, names]`` entries."""
        n_chunks = min(len(self._workers), len(observations))
        bounds = np.linspace(0, len(observations), n_chunks + 1).astype(int).tolist()
        jobs: list[_Job] = []
        for w, lo, hi in zip(self._workers, bounds[:-1], bounds[1:], strict=False):
            self._ready(w, (hi - lo) * self.timeout_s)
            request = {"code_id": cid, "source": code, "obs": pack_observations(observations[lo:hi]),
                       "n_features": self.n_features, "timeout_s": self.timeout_s}
            payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
            # The deadline starts after the handshake: a cold start does not eat into the code's time.
            deadline = time.monotonic() + (hi - lo) * self.timeout_s + self.kill_grace_s
            job = _Job(w, hi - lo, deadline, reply_cap(hi - lo, self.n_features))
            failure = w.send(payload, deadline)
            if failure:
                job.entries = self._fail_worker(w, job.n, failure)
            jobs.append(job)

        pending = {job.worker.proc.stdout.fileno(): job for job in jobs if job.entries is None}
        while pending:
            now = time.monotonic()
            for fd, job in list(pending.items()):
                if now >= job.deadline:
                    job.entries = self._fail_worker(job.worker, job.n, "timeout")
                    del pending[fd]
            if not pending:
                break
            wait = min(job.deadline for job in pending.values()) - now
            readable, _, _ = select.select(list(pending), [], [], max(wait, 0.0))
            for fd in readable:
                job = pending[fd]
                frame = job.worker.poll_frame(job.cap)
                if frame is not None:
                    del pending[fd]
                    job.entries = self._parse_reply(job.worker, job.n, frame)
        return [entry for job in jobs for entry in job.entries]

    def _fail_worker(self, w: WorkerProcess, n: int, why: str) -> list[list]:
        """Kill a worker that timed out / crashed / misbehaved; n failure entries for its share."""
        code = None
        if w.proc is not None and why == "closed":
            try:  # it closed its pipe: let it finish dying to learn why (e.g. SIGXCPU)
                code = w.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        w.kill()
        self._counters["worker_kills"] += 1
        if why == "timeout" or code == -signal.SIGXCPU:
            limit = f"{self.timeout_s:g} s per observation" if why == "timeout" else "its CPU-time limit"
            entry = ["timeout", f"worker killed after exceeding {limit}", None, None]
        elif why == "too_large":
            entry = ["output_too_large", "worker reply exceeded its size cap", None, None]
        else:
            entry = ["worker_crashed", f"worker {why} ({describe_exit(code)})", None, None]
        log.warning("sandbox worker killed: %s", entry[1])
        return [entry] * n

    def _parse_reply(self, w: WorkerProcess, n: int, frame: bytes | str) -> list[list]:
        if isinstance(frame, str):
            return self._fail_worker(w, n, frame)
        try:
            checked, cpu = parse_reply(frame, n)
        except (ValueError, KeyError, TypeError) as e:
            return self._fail_worker(w, n, f"sent a malformed reply: {str(e)[:80]}")
        w.cpu_s = float(cpu)
        return checked

    def _run_cached(self, cid: str, code: str, observations: list[dict]) -> list[FeatureResult]:
        """Results of the cached observations from the cache, the others from the workers."""
        keys = [(cid, _observation_digest(obs)) for obs in observations] if self.result_cache else []
        results: list[FeatureResult | None] = [self._results.get(k) for k in keys] or [None] * len(observations)
        misses = [i for i, r in enumerate(results) if r is None]
        self._counters["cache_hits"] += len(observations) - len(misses)
        if misses:
            fresh = self._finish(self._dispatch(cid, code, [observations[i] for i in misses]), cid)
            for i, r in zip(misses, fresh, strict=True):
                results[i] = r
                if r.ok and keys:
                    self._results[keys[i]] = r
        for k in keys:
            if k in self._results:
                self._results.move_to_end(k)
        while len(self._results) > self.result_cache:
            self._results.popitem(last=False)
        return [FeatureResult(r.features.copy(), r.ok, r.error, r.code_id, r.names) for r in results]

    def _finish(self, entries: list[list], cid: str) -> list[FeatureResult]:
        """Validated entries -> FeatureResults: length, finiteness, clipping (layer 3)."""
        return feature_results(entries, cid, self.n_features, self.clip)

    def _count(self, results: list[FeatureResult]) -> None:
        c = self._counters
        for r in results:
            c["calls"] += 1
            if r.ok:
                c["ok"] += 1
            else:
                c["failures"] += 1
                c["failures_" + r.error.split(":", 1)[0]] += 1


def _require(condition: bool, message: str, value) -> None:
    if not condition:
        raise ValueError(f"FeatureSandbox: {message}, got {value!r}")


def _positive_finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _observation_digest(obs: dict) -> bytes:
    """Digest of an observation's keys, dtypes, shapes and bytes (a cleaned one: numeric arrays)."""
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(obs):
        array = np.ascontiguousarray(obs[key])
        h.update(f"{key}|{array.dtype.str}|{array.shape}|".encode())
        h.update(array.tobytes())
    return h.digest()


def _clean_obs(obs, index: int) -> dict:
    """Check one observation (trusted input, so bad shapes raise): str keys, numeric arrays/scalars."""
    if not isinstance(obs, Mapping):
        raise TypeError(f"FeatureSandbox: observation {index} must be a dict, got {type(obs).__name__}")
    clean = {}
    for key, value in obs.items():
        if not isinstance(key, str):
            raise TypeError(f"FeatureSandbox: observation {index} has a non-str key {key!r}")
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise TypeError(f"FeatureSandbox: observation {index} key {key!r} has dtype {array.dtype}; "
                            "expected numbers")
        clean[key] = array  # scalars become 0-d arrays, as they will be in the worker
    return clean
