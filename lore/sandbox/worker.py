"""The worker process: it confines itself, then runs feature code for the parent until stdin closes.

Started by :mod:`lore.sandbox.process` in a fresh interpreter (``python -S -s -B -c <bootstrap>``),
which loads this file by path as ``lore.sandbox.worker`` under stand-in ``lore`` and
``lore.sandbox`` packages: the sibling modules it imports are found in this file's directory, no
package ``__init__`` runs (``lore``'s may pull in torch), and nothing else of ``lore`` is reachable.
Standard library and numpy only, in every module it imports.

:func:`main` warms up (everything lazily loaded gets loaded while files are still reachable),
hardens the process (:func:`lore.sandbox.hardening.harden`: namespaces, chroot, uid drop, resource
limits, seccomp), answers the handshake, then serves requests over its stdin/stdout pipes
(:mod:`lore.sandbox.protocol`): each observation runs the checked code in a fresh restricted
namespace under a wall-clock alarm.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import resource
import signal
import sys
import warnings

import numpy as np

from lore.sandbox.addresses import hide_addresses
from lore.sandbox.checker import compile_checked
from lore.sandbox.hardening import harden
from lore.sandbox.namespace import build_restricted_globals_factory
from lore.sandbox.protocol import read_frame, unpack_observations, write_frame
from lore.sandbox.results import MAX_MESSAGE_CHARS, clean_text, convert_result


class _Timeout(BaseException):
    """Raised into feature code by SIGALRM; BaseException so `except Exception` cannot catch it."""


class _Alarm:
    """One-shot wall-clock alarm around each feature call.

    ``fired`` stays set until the next ``arm``: code can swallow the raised ``_Timeout`` (a ``return``
    in ``finally:`` discards it), but not the record that time ran out.
    """

    def __init__(self) -> None:
        self.armed = False
        self.fired = False
        signal.signal(signal.SIGALRM, self._fire)

    def _fire(self, signum, frame) -> None:
        if self.armed:
            self.armed = False
            self.fired = True
            raise _Timeout()

    def arm(self, seconds: float) -> None:
        self.fired = False
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def disarm(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)


def _short(text: str) -> str:
    return clean_text(text, MAX_MESSAGE_CHARS)


def _describe(error: Exception) -> str:
    try:
        text = str(error)[: 4 * MAX_MESSAGE_CHARS]
    except Exception:  # str() of an odd payload can itself fail (or run out of memory)
        text = "<unprintable>"
    return _short(hide_addresses(f"{type(error).__name__}: {text}"))


class _Server:
    def __init__(self) -> None:
        self.fresh_globals = build_restricted_globals_factory()
        self.alarm = _Alarm()
        self.compiled: dict[str, object] = {}

    def compile(self, code_id: str, source: str):
        """-> code object, or a rejection message. Checked again here: the worker does not take the
        parent's word for it."""
        if code_id in self.compiled:
            return self.compiled[code_id]
        code = compile_checked(source)
        if isinstance(code, str):
            return code
        if len(self.compiled) >= 64:
            self.compiled.pop(next(iter(self.compiled)))
        self.compiled[code_id] = code
        return code

    def run_one(self, code, obs: dict, n_features: int, timeout_s: float) -> list:
        entry = self._run_with_alarm(code, obs, n_features, timeout_s)
        if self.alarm.fired:  # whatever the code made of the timeout (`finally: return ...`), it is one
            return _timeout_entry(timeout_s)
        return entry

    def _run_with_alarm(self, code, obs: dict, n_features: int, timeout_s: float) -> list:
        try:
            self.alarm.arm(timeout_s)
            try:
                namespace = self.fresh_globals()
                exec(code, namespace)
                function = namespace.get("compute_features")
                if not callable(function):
                    return ["rejected", "compute_features is not a function", None, None]
                result = function(obs)
            finally:
                self.alarm.disarm()
            kind, message, values, names = convert_result(result, n_features)
            return [kind, _short(message), values, names]
        except _Timeout:
            self.alarm.disarm()
            return _timeout_entry(timeout_s)
        except MemoryError:
            self.alarm.disarm()
            return ["memory", "MemoryError: feature code exceeded its memory limit", None, None]
        except Exception as e:  # anything the untrusted code raised
            self.alarm.disarm()
            return ["exception", _describe(e), None, None]

    def handle(self, request: dict) -> dict:
        observations = unpack_observations(request["obs"])
        code = self.compile(request["code_id"], request["source"])
        if isinstance(code, str):
            return {"results": [["rejected", _short(code), None, None]] * len(observations)}
        results = [self.run_one(code, private_copy(obs), request["n_features"], request["timeout_s"])
                   for obs in observations]
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"results": results, "cpu_s": usage.ru_utime + usage.ru_stime}


def _timeout_entry(timeout_s: float) -> list:
    return ["timeout", f"feature code ran longer than {timeout_s:g} s", None, None]


def private_copy(obs: dict) -> dict:
    """One observation as fresh arrays that share memory with nothing: the unpacked arrays are views
    into the whole batch (and pickle shares an array sent twice), so ``obs[k].base`` would let one
    observation's code rewrite the observations after it."""
    return {key: value.copy() for key, value in obs.items()}


def _warm_up(server: _Server) -> str | None:
    """Touch everything lazily loaded (pickle of arrays, numpy helpers) while files are still reachable."""
    sample = {"grid": np.zeros((5, 5, 3), np.uint8), "agent_pos": np.array([1, 2]), "agent_dir": np.array(0)}
    for protocol in (4, 5):
        pickle.loads(pickle.dumps(sample, protocol=protocol))
    stacked = {k: np.stack([v, v]) for k, v in sample.items()}
    packed = pickle.loads(pickle.dumps({"stacked": stacked, "n": 2}, protocol=5))
    sample = private_copy(unpack_observations(packed)[1])
    source = (
        "import math\nimport numpy as np\n"
        "def compute_features(obs):\n"
        "    g = np.asarray(obs['grid'], dtype=np.float64)\n"
        "    a = [g.sum(), g.mean(), g.std(), np.median(g), np.percentile(g, 50), np.unique(g).size,\n"
        "         np.linalg.norm(g[..., 0]), np.argwhere(g > 0).size, np.pad(g, 1).sum(), math.sqrt(4),\n"
        "         np.sort(g.ravel())[0], np.histogram(g.ravel(), bins=3)[0].sum(), np.isin(g, [1]).sum(),\n"
        "         len(f'{g.sum():.1f}{compute_features!r}' + '%s' % (np.sum,) + str(g[0, 0]) + repr(len))]\n"
        "    return {str(i): float(v) for i, v in enumerate(a)}\n"
    )
    code = server.compile("warmup", source)
    outcome = ["rejected", code] if isinstance(code, str) else server.run_one(code, sample, 14, 5.0)
    if not isinstance(code, str):
        server.run_one(code, sample, 2, 5.0)  # the wrong_length path
    json.dumps({"x": [1.0, math.nan]})
    server.compiled.clear()
    return None if outcome[0] == "ok" else f"warm-up feature code failed: {outcome[0]}: {outcome[1]}"


def main(config_text: str) -> None:
    config = json.loads(config_text)
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    sys.setrecursionlimit(int(config.get("recursion_limit", 1000)))
    stdin_fd, stdout_fd = 0, 1
    server = _Server()
    warm_up_problem = _warm_up(server)
    report = harden(config)
    if warm_up_problem:
        report["notes"].append(warm_up_problem)
    report.update(ready=True, pid=os.getpid())
    write_frame(stdout_fd, json.dumps(report).encode())
    while True:
        frame = read_frame(stdin_fd)
        if frame is None:
            return  # parent closed the pipe
        reply = server.handle(pickle.loads(frame))
        write_frame(stdout_fd, json.dumps(reply, allow_nan=True, ensure_ascii=False).encode())
