"""A run directory before its training loop starts: what the machine must offer (:func:`preflight`), the
state files a run trusts (:func:`check_run_state`), and whether the directory holds a finished run
(:func:`finished_summary`), a resumable one (:func:`resumable_checkpoint`) or another config's run.

Every check here raises a one-line :class:`~lore.config.ConfigError` (or
:class:`~lore.train.checkpoint.CheckpointError`) before anything is written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from lore.config import ConfigError, RunConfig, config_from_saved, dotted, to_dict
from lore.llm.ledger import LEDGER_NAME
from lore.train.checkpoint import CheckpointError, load_checkpoint
from lore.utils.io import LOCK_NAME, UnsafeFileError, check_state_file, expand_run_dir, read_bounded

CHECKPOINT = "checkpoint.pt"
DONE = "done"


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: 'cuda' requested but no CUDA device is available")
    return torch.device(name)


def prepare_run_dir(run_dir: Path) -> None:
    """Create the run directory and prove it is writable before anything else happens."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write_test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"run directory {run_dir} is not writable ({e.strerror or e})") from e


def preflight(cfg: RunConfig, run_dir: Path | None = None) -> None:
    """What ``cfg`` needs from this machine, checked before the run directory is created so that bad input
    leaves nothing behind: the device, the environment (built and reset once), and the files and the key the
    LLM backend will open."""
    resolve_device(cfg.device)
    from lore.envs.factory import probe_env

    try:
        probe_env(cfg.env)
    except ValueError as e:
        raise ConfigError(f"env.name: {e}") from None
    llm = cfg.llm
    if llm.backend == "replay":
        from lore.llm.backends import LLMConfigError, ReplayBackend

        try:
            ReplayBackend(llm.replay_ledger).close()
        except (LLMConfigError, OSError, ValueError) as e:
            raise ConfigError(f"llm.replay_ledger: {e}") from None
    from lore.llm.backends import REMOTE_BACKENDS

    if llm.backend in REMOTE_BACKENDS:
        from lore.llm.secrets import API_KEY_ENV

        if llm.backend == "gemini" and not os.environ.get(API_KEY_ENV, "").strip():
            raise ConfigError(f"llm.backend: 'gemini' needs the {API_KEY_ENV} environment variable "
                              f"(or use llm.backend=scripted, the offline advisor)")
        from lore.llm.backends import LLMConfigError, check_endpoint

        try:  # one model lookup: an endpoint that cannot answer fails here, not after the run
            check_endpoint(llm)
        except LLMConfigError as e:
            raise ConfigError(str(e)) from None
    cache_path = expand_run_dir(llm.cache_path, run_dir)
    if llm.backend in ("scripted", *REMOTE_BACKENDS) and cache_path:
        _check_creatable_file("llm.cache_path", cache_path)
        from lore.llm.cache import check_cache

        try:  # an existing cache is checked before the run writes anything
            check_cache(cache_path)
        except ValueError as e:
            raise ConfigError(f"llm.cache_path: {e}") from None
    if llm.backend in ("scripted", *REMOTE_BACKENDS) and getattr(llm, "shared_cache", None):
        from lore.llm.cache import AdviceCache

        try:  # read-only: opening it proves it is a readable answer cache and touches nothing
            AdviceCache(llm.shared_cache, readonly=True).close()
        except ValueError as e:
            raise ConfigError(f"llm.shared_cache: {e}") from None


def _check_creatable_file(key: str, path: str) -> None:
    """``path`` is a writable file, or one that can be created (its parent folders included)."""
    try:
        target = Path(path)
        if target.is_dir():
            problem = "is a directory"
        elif target.exists():
            problem = "" if os.access(target, os.R_OK | os.W_OK) else "is not writable"
        else:
            parent = target.parent
            while not parent.exists():
                parent = parent.parent
            problem = ("" if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)
                       else f"cannot be created: {parent} is not a writable directory")
    except (OSError, ValueError) as e:  # a NUL byte, a name too long
        problem = f"is not a usable path ({e})"
    if problem:
        raise ConfigError(f"{key}: {path} {problem}")


def check_same_config(saved: RunConfig, wanted: RunConfig, path: Path) -> None:
    """Refuse a run directory whose saved config differs from ``wanted`` (both as saved: keys masked)."""
    from lore.config.build import shown_config

    diff = config_difference(shown_config(saved), shown_config(wanted))
    if diff:
        raise ConfigError(f"{path} holds a run with a different config ({diff}); "
                          f"use another --run-dir or delete this one")


def config_difference(a: dict, b: dict) -> str:
    """The keys in which two config dicts differ, as ``key: a -> b`` (the first five), or ``""``."""
    a, b = dotted(a), dotted(b)
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    shown = ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:5])
    return shown + (" ..." if len(diff) > 5 else "")


def checkpoint_mismatch(payload: dict, cfg: RunConfig) -> str:
    """How the config a checkpoint was written with differs from ``cfg`` (``""`` when it does not)."""
    saved = payload.get("config")
    if not isinstance(saved, dict):
        return "it does not record its config"
    from lore.config import drop_retired, from_dict
    from lore.presets import resolve_model

    try:  # read as a saved config.yaml is: retired keys dropped, keys added since at their defaults
        recorded = from_dict(RunConfig, drop_retired(saved))
        recorded.model = resolve_model(recorded.model)
    except (ConfigError, TypeError, ValueError) as e:
        return f"the config it records is invalid ({e})"
    diff = config_difference(to_dict(recorded), to_dict(cfg))
    return f"it was written with another config ({diff})" if diff else ""


RUN_STATE_FILES = (LOCK_NAME, CHECKPOINT, DONE, "config.yaml", LEDGER_NAME, "metrics.csv", "eval.csv",
                   "episodes.csv", "train.log")
"""The files a run keeps in its directory and trusts on resume (besides its own answer cache)."""
MAX_DONE_BYTES = 1 << 20
"""A ``done`` summary is a few hundred bytes."""


def check_run_state(cfg: RunConfig, run_dir: Path) -> None:
    """Refuse (one-line :class:`ConfigError`, nothing written) a run directory whose state files
    (:data:`RUN_STATE_FILES` and the run's own answer cache) are not regular files inside it: a symbolic
    link out of it, a FIFO, a device or a folder in their place."""
    if not run_dir.is_dir():
        return
    names = [run_dir / name for name in RUN_STATE_FILES]
    cache = expand_run_dir(cfg.llm.cache_path, run_dir)
    if cache and Path(cache).parent.resolve() == run_dir.resolve():
        names.append(Path(cache))
    for path in names:
        try:
            check_state_file(path, run_dir)
        except UnsafeFileError as e:
            reason = str(e).removeprefix(str(path)).strip()
            if path.name == DONE:  # nothing computed is lost: the checkpoint resumes the run
                reason = reason.replace("move it away", "delete it to resume the run from its checkpoint")
            raise ConfigError(f"run directory {run_dir}: `{path.name}` {reason}") from None


def read_done(path: Path) -> dict:
    """The summary in a run's ``done`` marker; a clear error (nothing touched) if it is not one.

    ``done`` is written last and atomically, so a bad one was edited or damaged outside ``lore``.
    Deleting it lets the run resume from its checkpoint: nothing computed is lost.
    """
    hint = "delete it to resume the run from its checkpoint"
    if not path.is_file():
        raise ConfigError(f"run directory {path.parent}: `done` is not a file; {hint}")
    try:
        summary = json.loads(read_bounded(path, MAX_DONE_BYTES, directory=path.parent).decode("utf-8"))
    except UnsafeFileError as e:
        raise ConfigError(f"run directory {path.parent}: {e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as e:
        raise ConfigError(f"run directory {path.parent}: `done` is not a valid run summary ({e}); {hint}") from None
    if not isinstance(summary, dict):
        raise ConfigError(f"run directory {path.parent}: `done` is not a valid run summary "
                          f"(a JSON {type(summary).__name__}, expected an object); {hint}")
    return summary


def resumable_checkpoint(cfg: RunConfig, run_dir: Path) -> dict | None:
    """The run's checkpoint (None if it has none), checked against ``cfg`` before anything is built."""
    saved = run_dir / "config.yaml"
    if saved.exists():
        check_same_config(config_from_saved(saved), cfg, run_dir)
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    payload = load_checkpoint(path)
    mismatch = checkpoint_mismatch(payload, cfg)
    if mismatch:
        raise CheckpointError(f"checkpoint {path} does not fit the config of {run_dir}: {mismatch}")
    return payload


def finished_summary(cfg: RunConfig, run_dir: Path) -> dict:
    """The ``done`` summary of a finished run if ``cfg`` is the config it finished with (else ConfigError)."""
    summary = read_done(run_dir / DONE)
    saved = run_dir / "config.yaml"
    if saved.exists():
        check_same_config(config_from_saved(saved), cfg, run_dir)
    return {"already_done": True, **summary}
