"""One sandboxed worker process, seen from the parent: start, handshake, framed I/O, kill.

The worker (:mod:`lore.sandbox.worker`) runs in a fresh interpreter with an empty environment, in a
fresh empty directory that it chroots into, in its own process group, which :meth:`WorkerProcess.kill`
SIGKILLs whole. The pipes are non-blocking on the parent's side: every read and write has a deadline.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import lore.sandbox.worker as worker_module
from lore.sandbox.protocol import MIN_REPLY_CAP, framed, take_frame

log = logging.getLogger(__name__)

_WORKER_FILE = worker_module.__file__

# The worker is started with exactly this environment: nothing of the parent's (no API keys, no
# proxies, no PYTHON* variables). One BLAS thread, C locale, a fixed hash seed so that iterating a
# set of strings in feature code gives the same features in every worker.
_WORKER_ENV = {
    "LC_ALL": "C",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
}
# `-S` (no site: no .pth files run), `-s` (no user site), `-B` (no .pyc writes). Not `-I`/`-E`: they
# would also ignore PYTHONHASHSEED, and the environment is ours entirely anyway. `-c` instead of a
# script path keeps lore/sandbox/ off sys.path. The worker module is loaded by file path as
# `lore.sandbox.<name>`, under stand-in `lore` and `lore.sandbox` packages whose only search path is
# that file's directory: its sibling modules import, no package __init__ runs (lore's may pull in
# torch), and nothing else of lore can be imported.
_BOOTSTRAP = (
    "import importlib, json, os, sys, types\n"
    "c = json.loads(sys.argv[2])\n"
    "sys.path[:] = [p for p in sys.path if p] + c['sys_path']\n"
    "folder, name = os.path.split(sys.argv[1])\n"
    "for package, path in (('lore', []), ('lore.sandbox', [folder])):\n"
    "    sys.modules[package] = m = types.ModuleType(package); m.__path__ = path\n"
    "importlib.import_module('lore.sandbox.' + name.removesuffix('.py')).main(sys.argv[2])\n"
)


class SandboxError(RuntimeError):
    """The sandbox itself cannot work (a worker does not start); never raised for bad feature code."""


class WorkerProcess:
    """One sandboxed worker process and its pipes (parent side)."""

    def __init__(self, config: dict, start_timeout_s: float) -> None:
        self._config = config
        self._start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.root_dir: str | None = None
        self.info: dict | None = None
        self.cpu_s = 0.0
        self._buffer = bytearray()
        self._start_deadline = 0.0

    # lifecycle -------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process; the handshake is read later (:meth:`ensure_ready`)."""
        self.root_dir = tempfile.mkdtemp(prefix="lore-sandbox-")
        config = dict(self._config, root_dir=self.root_dir)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-S", "-s", "-B", "-c", _BOOTSTRAP, _WORKER_FILE, json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=dict(_WORKER_ENV),
                cwd=self.root_dir,
                close_fds=True,
                start_new_session=True,  # own process group: the parent kills the group
            )
        except OSError as e:
            shutil.rmtree(self.root_dir, ignore_errors=True)
            self.root_dir = None
            raise SandboxError(f"cannot start a sandbox worker: {e}") from e
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.info = None
        self.cpu_s = 0.0
        self._buffer.clear()
        self._start_deadline = time.monotonic() + self._start_timeout_s

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure_ready(self) -> None:
        """Wait for the handshake; raises :class:`SandboxError` if the worker does not come up."""
        if self.proc is None:
            self.spawn()
        if self.info is not None:
            return
        frame = self.read_frame(self._start_deadline, MIN_REPLY_CAP)
        if not isinstance(frame, bytes):
            reason = {"timeout": f"no handshake within {self._start_timeout_s:g} s"}.get(frame, frame)
            code = self.proc.poll() if self.proc else None
            self.kill()
            raise SandboxError(f"sandbox worker failed to start ({reason}; exit code {code})")
        try:
            info = json.loads(frame)
        except ValueError as e:
            self.kill()
            raise SandboxError(f"sandbox worker sent a bad handshake: {e}") from e
        if not isinstance(info, dict) or info.get("ready") is not True:
            self.kill()
            raise SandboxError(f"sandbox worker sent a bad handshake: {str(info)[:200]}")
        self.info = info
        for note in info.get("notes", []):
            log.info("sandbox worker %s: %s", info.get("pid"), note)

    def kill(self) -> None:
        """SIGKILL the worker's process group, reap it, remove its directory."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _kill_process_group(proc)
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        if self.root_dir:
            shutil.rmtree(self.root_dir, ignore_errors=True)
            self.root_dir = None
        self.info = None

    # framed I/O ---------------------------------------------------------------

    def send(self, payload: bytes, deadline: float) -> str | None:
        """Write one frame before ``deadline``; None on success, else ``"timeout"`` / ``"closed"``."""
        data = memoryview(framed(payload))
        fd = self.proc.stdin.fileno()
        self._buffer.clear()  # nothing unread from an earlier request may pose as this reply
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            _, writable, _ = select.select([], [fd], [], left)
            if not writable:
                continue
            try:
                written = os.write(fd, data)
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                return "closed"
            data = data[written:]
        return None

    def poll_frame(self, cap: int) -> bytes | str | None:
        """Read what is available; a complete frame, None (not yet), or ``"closed"`` / ``"too_large"``."""
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return None
        except OSError:
            return "closed"
        if not chunk:
            return "closed"
        self._buffer += chunk
        return take_frame(self._buffer, cap)

    def read_frame(self, deadline: float, cap: int) -> bytes | str:
        """Block until a frame arrives: the frame, or ``"timeout"`` / ``"closed"`` / ``"too_large"``."""
        fd = self.proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                frame = self.poll_frame(cap)
                if frame is not None:
                    return frame


def _kill_process_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.warning("sandbox worker %d did not die after SIGKILL", proc.pid)


def shutdown(workers: list[WorkerProcess], owner_pid: int) -> None:
    """Kill every worker, when called in the process that started them."""
    if os.getpid() != owner_pid:
        return  # a forked copy of the parent must not kill the original's workers
    for w in workers:
        w.kill()


def describe_exit(code: int | None) -> str:
    """A worker's exit code in words: ``"killed by SIGXCPU"``, ``"exit status 3"``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
