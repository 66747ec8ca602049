"""``<run_dir>/train.log``: what ``lore train`` prints on its stdout and stderr, kept in the run directory.

:class:`RunLog` puts a tee in front of ``sys.stdout`` and ``sys.stderr``. What is printed before the run has
started (its checks passed, its checkpoint restored) is held in memory and written once :meth:`RunLog.attach`
opens the log (bad input and a refused checkpoint leave nothing behind); each attempt appends, so a resumed run's
log holds every attempt. A stream that already writes to that very file is not copied a second time: the workflow
runs ``lore train >> train.log 2>&1``. The progress bar goes to the terminal only; the log gets its plain status
line instead (:func:`log_only`).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import TextIO

LOG_NAME = "train.log"


class _Tee:
    """A text stream writing to ``terminal`` and, through its :class:`RunLog`, to the run's log."""

    def __init__(self, terminal: TextIO, log: RunLog, name: str):
        self.terminal = terminal
        self._log = log
        self._name = name

    def write(self, text: str) -> int:
        written = self.terminal.write(text)
        self._log.write(self._name, text)
        return written

    def write_log(self, text: str) -> None:
        """Write ``text`` to the log only, not to the terminal."""
        self._log.write(self._name, text)

    def flush(self) -> None:
        self.terminal.flush()
        self._log.flush()

    def __getattr__(self, name: str):  # isatty, fileno, encoding, ... are the terminal's
        return getattr(self.terminal, name)


class RunLog:
    """Copies ``sys.stdout`` and ``sys.stderr`` to ``<run_dir>/train.log`` while in use (a context manager)."""

    def __init__(self) -> None:
        self._held: list[tuple[str, str]] = []
        self._file: TextIO | None = None
        self._copied: set[str] = set()
        self._saved: dict[str, TextIO] = {}

    def __enter__(self) -> RunLog:
        self._saved = {"stdout": sys.stdout, "stderr": sys.stderr}
        sys.stdout = _Tee(sys.stdout, self, "stdout")  # type: ignore[assignment]
        sys.stderr = _Tee(sys.stderr, self, "stderr")  # type: ignore[assignment]
        return self

    def __exit__(self, kind, error, tb) -> None:
        if self._file is not None and kind is not None and not issubclass(kind, SystemExit):
            # Python prints the traceback on the terminal once this returns; the log gets its copy here
            self.write("stderr", "".join(traceback.format_exception(kind, error, tb)))
        for stream in self._saved.values():
            stream.flush()
        sys.stdout, sys.stderr = self._saved["stdout"], self._saved["stderr"]
        if self._file is not None:
            self._file.close()
            self._file = None
        self._held.clear()

    def attach(self, run_dir: str | Path) -> None:
        """Open ``<run_dir>/train.log`` for appending and write what was held so far.

        A stream whose descriptor already is that file (a shell redirect) is left out. A log that cannot be opened
        is one warning line; the run goes on without it.
        """
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        try:
            self._file = open(os.open(Path(run_dir) / LOG_NAME, flags, 0o644), "a", encoding="utf-8")  # noqa: SIM115
        except OSError as e:  # the run goes on; only its log file is missing
            self._held.clear()
            print(f"lore: warning: {Path(run_dir) / LOG_NAME} cannot be written ({e.strerror or e}); "
                  f"the run's output goes to the terminal only", file=self._saved["stderr"])
            return
        log = os.fstat(self._file.fileno())
        self._copied = {name for name, stream in self._saved.items() if not _same_file(stream, log)}
        for name, text in self._held:
            self.write(name, text)
        self._held.clear()
        self._file.flush()

    def write(self, name: str, text: str) -> None:
        if self._file is None:
            self._held.append((name, text))
        elif name in self._copied:
            self._file.write(text)
            self._file.flush()  # on disk at once: a crash, or a reader such as `lore status`, sees every line

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()


def _same_file(stream: TextIO, stat: os.stat_result) -> bool:
    try:
        own = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):  # no descriptor (a StringIO under test)
        return False
    return (own.st_dev, own.st_ino) == (stat.st_dev, stat.st_ino)


def log_only(line: str) -> None:
    """Write one line to the run's log, not to the terminal (nothing when no :class:`RunLog` is in use)."""
    write = getattr(sys.stderr, "write_log", None)
    if write is not None:
        write(line + "\n")


def terminal(stream: TextIO) -> TextIO:
    """The terminal behind a tee (for what must not reach the log, e.g. a progress bar)."""
    return getattr(stream, "terminal", stream)
