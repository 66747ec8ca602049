"""Reading run directories written by ``lore train`` into tidy pandas tables.

A run directory holds ``config.yaml`` (resolved config), ``eval.csv``, ``episodes.csv``,
``metrics.csv``, ``llm_calls.jsonl`` and, once finished, ``done`` (see docs/CONTRACTS.md).
Every table built here carries the keys ``env``, ``ablation``, ``seed`` so runs can be
grouped without parsing paths again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

try:  # the C loader is ~10x faster on the resolved configs
    from yaml import CSafeLoader as _YamlLoader
except ImportError:  # pragma: no cover - depends on the libyaml build
    from yaml import SafeLoader as _YamlLoader

KEYS = ["env", "ablation", "seed"]
EVAL_REQUIRED = ["env_step", "success_rate"]
EPISODES_REQUIRED = ["env_step", "success"]
ACHIEVEMENT_PREFIX = "ach_"


class RunDataError(ValueError):
    """A run directory is missing a file or a column; the message names both."""


@dataclass
class Run:
    """Everything one training run left on disk."""

    path: Path
    env: str
    ablation: str
    seed: int
    eval: pd.DataFrame
    episodes: pd.DataFrame
    metrics: pd.DataFrame
    llm_calls: pd.DataFrame
    done: dict | None
    config: dict = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.done is not None

    @property
    def achievement_columns(self) -> list[str]:
        return [c for c in self.eval.columns if c.startswith(ACHIEVEMENT_PREFIX)]


def _read_csv(path: Path, required: list[str], what: str) -> pd.DataFrame:
    if not path.is_file():
        if required:
            raise RunDataError(f"{path}: missing ({what} is written by lore train)")
        return pd.DataFrame()
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame(columns=required)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise RunDataError(f"{path}: missing column(s) {missing} (has {list(frame.columns)})")
    if "env_step" in frame.columns:
        frame = frame.sort_values("env_step", kind="stable").reset_index(drop=True)
    return frame


def _read_jsonl(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=["env_step", "ok", "cache_hit", "failure"])
    rows = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                # A run killed mid-write leaves a truncated last line; anything else is corrupt.
                if fh.read().strip():
                    raise RunDataError(f"{path}:{lineno}: not valid JSON") from None
                break
    return pd.DataFrame(rows)


def _identity(path: Path, config: dict) -> tuple[str, str, int]:
    """(env, ablation, seed) from the resolved config, else from ``<env>/<ablation>/seed<k>``."""
    env = (config.get("env") or {}).get("name")
    ablation = config.get("ablation")
    seed = config.get("seed")
    if env is None or ablation is None or seed is None:
        parts = path.resolve().parts
        if len(parts) < 3 or not parts[-1].startswith("seed") or not parts[-1][4:].isdigit():
            raise RunDataError(
                f"{path}: cannot tell env/ablation/seed: no config.yaml and the path is not "
                "<env>/<ablation>/seed<k>"
            )
        env, ablation, seed = parts[-3], parts[-2], int(parts[-1][4:])
    return str(env), str(ablation), int(seed)


def load_run(path: str | Path) -> Run:
    path = Path(path)
    if not path.is_dir():
        raise RunDataError(f"{path}: not a run directory")
    config: dict = {}
    if (path / "config.yaml").is_file():
        config = yaml.load((path / "config.yaml").read_text(), Loader=_YamlLoader) or {}
    done = None
    if (path / "done").is_file():
        text = (path / "done").read_text().strip()
        try:
            done = json.loads(text) if text else {}
        except json.JSONDecodeError as e:
            raise RunDataError(f"{path / 'done'}: not valid JSON ({e})") from e
    env, ablation, seed = _identity(path, config)
    return Run(
        path=path,
        env=env,
        ablation=ablation,
        seed=seed,
        eval=_read_csv(path / "eval.csv", EVAL_REQUIRED, "eval.csv"),
        episodes=_read_csv(path / "episodes.csv", [], "episodes.csv"),
        metrics=_read_csv(path / "metrics.csv", [], "metrics.csv"),
        llm_calls=_read_jsonl(path / "llm_calls.jsonl"),
        done=done,
        config=config,
    )


def find_run_dirs(root: str | Path, marker: str = "eval.csv") -> list[Path]:
    """Every directory under ``root`` holding a file named ``marker`` (sorted, so results are stable).

    Symlinked folders are followed (a comparison folder that links another benchmark's baseline runs reports
    them; ``Path.rglob`` silently skips them), and each real folder is read once: a run linked twice, or a link
    back up the tree, is not counted again.
    """
    root = Path(root)
    if not root.is_dir():
        raise RunDataError(f"{root}: runs root does not exist")
    found, seen = [], set()
    for folder, subfolders, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        subfolders.sort()  # the first of two links to one run is the one kept, whatever the file system's order
        if marker in files:
            found.append(Path(folder))
    return sorted(found)


def load_runs(paths: list[str | Path]) -> list[Run]:
    if not paths:
        raise RunDataError("no run directories given")
    runs = [load_run(p) for p in paths]
    seen: dict[tuple[str, str, int], Path] = {}
    for run in runs:
        key = (run.env, run.ablation, run.seed)
        if key in seen:
            raise RunDataError(f"two run directories for {key}: {seen[key]} and {run.path}")
        seen[key] = run.path
    return sorted(runs, key=lambda r: (r.env, r.ablation, r.seed))


def _tagged(run: Run, frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame.insert(0, "seed", run.seed)
    frame.insert(0, "ablation", run.ablation)
    frame.insert(0, "env", run.env)
    return frame


def tidy(runs: list[Run], table: str) -> pd.DataFrame:
    """Concatenate one per-run table (``eval``, ``episodes``, ``metrics``, ``llm_calls``) with keys."""
    if table not in ("eval", "episodes", "metrics", "llm_calls"):
        raise ValueError(f"tidy: unknown table '{table}'")
    frames = [_tagged(run, getattr(run, table)) for run in runs if len(getattr(run, table))]
    if not frames:
        return pd.DataFrame(columns=KEYS)
    return pd.concat(frames, ignore_index=True, sort=False)


def llm_call_counts(run: Run) -> dict[str, float]:
    """API calls (cache misses), cache hits and failures from the call ledger, with the
    ``metrics.csv`` counters as fallback when the ledger is absent.

    The ledger holds call attempts only (persistent-cache hits included); answers served from the
    controller's in-memory state cache never reach it, so the controller's own ``llm_cache_hits``
    counter, when logged, is the larger and the right count of cache hits."""
    calls = run.llm_calls
    if len(calls):
        cache_hit = calls["cache_hit"].fillna(False).astype(bool) if "cache_hit" in calls else np.zeros(len(calls), bool)
        failure = calls["failure"] if "failure" in calls else pd.Series([None] * len(calls))
        failed = failure.notna() & (failure.astype(str) != "") & (failure.astype(str) != "None")
        if "ok" in calls:
            failed |= ~calls["ok"].fillna(False).astype(bool)
        # Answers PriorNet gave in the LLM's stead are ledgered too (source "surrogate"): not API calls.
        surrogate = (calls["source"].astype(str) == "surrogate").to_numpy() if "source" in calls \
            else np.zeros(len(calls), bool)
        api_call = ~cache_hit & ~surrogate
        return {
            "llm_calls": float(api_call.sum()),
            "llm_cache_hits": max(float(cache_hit.sum()), _last_counter(run, "llm_cache_hits")),
            "llm_failures": float((failed & api_call).sum()),
        }
    return {name: _last_counter(run, name) for name in ("llm_calls", "llm_cache_hits", "llm_failures")}


def _last_counter(run: Run, name: str) -> float:
    """The last logged value of a cumulative ``metrics.csv`` counter (0 when never logged)."""
    col = run.metrics.get(name)
    return float(col.dropna().iloc[-1]) if col is not None and col.notna().any() else 0.0
