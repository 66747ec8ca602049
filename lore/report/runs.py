"""Reading run directories written by ``lore train`` into tidy pandas tables.

A run directory holds ``config.yaml`` (resolved config), ``eval.csv``, ``episodes.csv``,
``metrics.csv``, ``llm_calls.jsonl`` and, once finished, ``done`` (see docs/CONTRACTS.md).
Every table built here carries the keys ``env``, ``ablation``, ``seed`` so runs can be
grouped without parsing paths again.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

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


# --------------------------------------------------------------------------- reading CSV tables

MAX_STEP = 10**12
"""Env steps stay below this (the run config's bound): a larger step is a corrupt file."""
MAX_TABLE_BYTES = 1 << 30
"""A CSV table larger than this is not one ``lore train`` or ``lore aggregate`` wrote."""
NA_TEXT = frozenset({"", "nan", "NaN", "NA", "N/A", "n/a", "null", "NULL", "None", "<NA>", "-nan", "-NaN"})
BOOL_TEXT = {"True": 1.0, "False": 0.0, "true": 1.0, "false": 0.0}


@dataclass(frozen=True)
class TableSpec:
    """What a CSV table must hold; every violation is a :class:`RunDataError` naming file, column and line."""

    required: tuple[str, ...] = ()
    """Columns that must be present and hold a value on every row."""
    steps: tuple[str, ...] = ()
    """Non-negative whole numbers below :data:`MAX_STEP` (env steps, counts, seeds)."""
    rates: tuple[str, ...] = ()
    rate_prefixes: tuple[str, ...] = ()
    """Columns (by name or name prefix) whose values lie in [0, 1]."""
    numeric: tuple[str, ...] = ()
    """Numbers (NaN allowed unless ``required``)."""
    text: tuple[str, ...] = ()
    """Non-numeric columns (names)."""
    numeric_all: bool = False
    """Every column that is not ``text`` (nor starts with a ``free_prefixes`` entry) must be numeric."""
    free_prefixes: tuple[str, ...] = ()
    """Columns starting with one of these are read as pandas infers them (config values: text, numbers)."""
    finite_all: bool = False
    """No column may hold +-inf (NaN stays allowed outside ``required``)."""
    unique_by: str | None = None
    """One row per value of this column: identical repeats are dropped, disagreeing ones are an error."""
    rows_needed: bool = False
    """A header without rows is an error."""

    def is_rate(self, column: str) -> bool:
        return column in self.rates or any(column.startswith(p) for p in self.rate_prefixes)

    def is_numeric(self, column: str) -> bool:
        if column in self.text or any(column.startswith(p) for p in self.free_prefixes):
            return False
        return self.numeric_all or self.is_rate(column) or column in (*self.required, *self.steps, *self.numeric)


def _text_of(path: Path) -> str:
    """The file's text, or an error naming why it cannot be a CSV table."""
    if path.is_dir() or (path.exists() and not path.is_file()):
        raise RunDataError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise RunDataError(f"{path}: empty file (zero bytes; expected a header line)")
    if size > MAX_TABLE_BYTES:
        raise RunDataError(f"{path}: {size} bytes, more than any table the analysis reads ({MAX_TABLE_BYTES})")
    raw = path.read_bytes()
    if b"\0" in raw:
        raise RunDataError(f"{path}: contains NUL bytes (a binary file, not CSV)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise RunDataError(f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None


FIELD_LIMIT = csv.field_size_limit()
"""A CSV field longer than this (characters) is garbage, not a number or a name."""


def _check_header(path: Path, header: list[str], line: int) -> None:
    dup = sorted({c for c in header if header.count(c) > 1})
    if dup or any(not c.strip() for c in header):
        raise RunDataError(f"{path}: line {line}: header has "
                           + (f"repeated column(s) {dup}" if dup else "an empty column name"))


def _layout(path: Path, text: str) -> tuple[list[str], list[int]]:
    """(header, file line of each data row); ragged rows, repeated names and huge fields are errors."""
    if '"' in text:
        return _layout_quoted(path, text)
    header: list[str] | None = None
    lines = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if not line:
            continue
        if len(line) > FIELD_LIMIT and max(len(f) for f in line.split(",")) > FIELD_LIMIT:
            raise RunDataError(f"{path}: line {number}: a field longer than {FIELD_LIMIT} characters")
        if header is None:
            header = line.split(",")
            _check_header(path, header, number)
        elif line.count(",") + 1 != len(header):
            raise RunDataError(f"{path}: line {number}: {line.count(',') + 1} fields, the header has "
                               f"{len(header)} (a ragged row)")
        else:
            lines.append(number)
    if header is None:
        raise RunDataError(f"{path}: no header line")
    return header, lines


def _layout_quoted(path: Path, text: str) -> tuple[list[str], list[int]]:
    """:func:`_layout` for a table with quoted fields (the csv module's reading)."""
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    lines = []
    try:
        for row in reader:
            if not row:
                continue
            if header is None:
                header = row
                _check_header(path, header, reader.line_num)
            elif len(row) != len(header):
                raise RunDataError(f"{path}: line {reader.line_num}: {len(row)} fields, the header has "
                                   f"{len(header)} (a ragged row)")
            else:
                lines.append(reader.line_num)
    except csv.Error as e:
        raise RunDataError(f"{path}: line {reader.line_num}: not CSV ({e})") from None
    if header is None:
        raise RunDataError(f"{path}: no header line")
    return header, lines


def _column_values(path: Path, column: str, values: list, lines: list[int]) -> pd.Series:
    """A column pandas read as text, as numbers (True/False as 1/0); a value that is no number names its line."""
    out = np.empty(len(values))
    for i, value in enumerate(values):
        if not isinstance(value, str):
            out[i] = float(value) if value is not None else np.nan
            continue
        v = value.strip()
        if v in NA_TEXT:
            out[i] = np.nan
        elif v in BOOL_TEXT:
            out[i] = BOOL_TEXT[v]
        else:
            try:
                out[i] = float(v)
            except ValueError:
                shown = v if len(v) <= 40 else v[:40] + "..."
                raise RunDataError(f"{path}: column '{column}', line {lines[i]}: {shown!r} is not a number") from None
    return pd.Series(out)


def _check_column(path: Path, column: str, numbers: pd.Series, lines: list[int], spec: TableSpec) -> None:
    """Missing values in required columns, infinities, steps that are not whole numbers, rates outside [0, 1]."""
    values = numbers.to_numpy(float)
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore"):
        checks = [
            (column in spec.required, np.isnan(values), "no value (empty or NaN)"),
            (spec.finite_all or column in spec.steps or spec.is_rate(column), np.isinf(values), "infinite"),
            (column in spec.steps, finite & ((values < 0) | (values >= MAX_STEP) | (values != np.floor(values))),
             f"not a whole number in [0, {MAX_STEP})"),
            (spec.is_rate(column), finite & ((values < 0) | (values > 1)), "outside [0, 1]"),
        ]
    for applies, bad, what in checks:
        if applies and bad.any():
            i = int(bad.argmax())
            shown = "" if np.isnan(values[i]) else f"{values[i]:g} is "
            raise RunDataError(f"{path}: column '{column}', line {lines[i]}: {shown}{what}")


def read_table(path: str | Path, spec: TableSpec, what: str) -> pd.DataFrame:
    """Read and check one CSV table (see :class:`TableSpec`); ``what`` says who writes it, for a missing file."""
    path = Path(path)
    if not os.path.lexists(path):
        raise RunDataError(f"{path}: missing ({what})")
    text = _text_of(path)
    header, lines = _layout(path, text)
    missing = [c for c in spec.required if c not in header]
    if missing:
        raise RunDataError(f"{path}: missing column(s) {missing} (has {header[:12]}"
                           + (" ..." if len(header) > 12 else "") + ")")
    if spec.rows_needed and not lines:
        raise RunDataError(f"{path}: header only, no rows")
    if not lines:
        return pd.DataFrame(columns=header)
    try:
        frame = pd.read_csv(io.StringIO(text))
    except (ValueError, pd.errors.ParserError) as e:
        raise RunDataError(f"{path}: not CSV ({' '.join(str(e).split())[:120]})") from None
    if len(frame) != len(lines) or list(frame.columns) != header:
        raise RunDataError(f"{path}: rows or columns read ambiguously (blank or whitespace-only lines?)")
    for column in header:
        if column in spec.text:
            texts = frame[column].astype("str")
            blank = (frame[column].isna() | (texts.str.strip() == "")).to_numpy()
            if blank.any() and column in spec.required:
                raise RunDataError(f"{path}: column '{column}', line {lines[int(blank.argmax())]}: empty")
            frame[column] = texts
        elif spec.is_numeric(column):
            if pd.api.types.is_numeric_dtype(frame[column]):  # every value read as a number (or bool)
                numbers = frame[column].astype(float)
            else:  # text somewhere, or True/False with gaps: name the first value that is no number
                numbers = _column_values(path, column, frame[column].tolist(), lines)
                frame[column] = numbers.to_numpy()
            _check_column(path, column, numbers, lines, spec)
    if spec.unique_by:
        frame = _one_row_per(path, frame, spec.unique_by, lines)
    return frame


def _one_row_per(path: Path, frame: pd.DataFrame, column: str, lines: list[int]) -> pd.DataFrame:
    """Drop exact repeats of a row; two different rows for one value of ``column`` are an error."""
    frame = frame.reset_index(drop=True)
    repeated = frame.duplicated(subset=[column], keep=False)
    if not repeated.any():
        return frame
    distinct = frame[repeated].astype(str).drop_duplicates()
    clash = distinct[distinct.duplicated(subset=[column], keep=False)]
    if len(clash):
        rows = clash.index[:2]
        raise RunDataError(f"{path}: column '{column}': lines {lines[rows[0]]} and {lines[rows[1]]} give "
                           f"different rows for {column} = {frame.loc[rows[0], column]}")
    return frame.drop_duplicates().reset_index(drop=True)


EVAL_SPEC = TableSpec(required=("env_step", "success_rate"), steps=("env_step",), rates=("success_rate",),
                      rate_prefixes=(ACHIEVEMENT_PREFIX,), numeric_all=True, finite_all=True,
                      unique_by="env_step", rows_needed=True)
EPISODES_SPEC = TableSpec(required=("env_step",), steps=("env_step",), rates=("success",), numeric_all=True)
METRICS_SPEC = TableSpec(required=("env_step",), steps=("env_step",), numeric_all=True, unique_by="env_step")


def _read_run_table(path: Path, spec: TableSpec, optional: bool) -> pd.DataFrame:
    if optional and not os.path.lexists(path):
        return pd.DataFrame()
    frame = read_table(path, spec, f"{path.name} is written by lore train")
    if "env_step" in frame.columns and len(frame):
        frame = frame.sort_values("env_step", kind="stable").reset_index(drop=True)
    return frame


# --------------------------------------------------------------------------- the LLM ledger, done, config

LEDGER_TYPES: dict[str, tuple[type, ...]] = {"env_step": (int,), "ok": (bool,), "cache_hit": (bool,),
                                             "failure": (str,), "source": (str,)}
"""The ledger fields the analysis reads and their JSON types (null allowed except for ``env_step``)."""


def _ledger_row(path: Path, lineno: int, record) -> dict:
    if not isinstance(record, dict):
        raise RunDataError(f"{path}:{lineno}: a ledger line must be a JSON object, got {type(record).__name__}")
    if "env_step" not in record:
        raise RunDataError(f"{path}:{lineno}: key 'env_step' missing")
    row = {}
    for key, types in LEDGER_TYPES.items():
        if key not in record:
            continue
        value = record[key]
        ok = value is None and key != "env_step" or (isinstance(value, types) and
                                                     (bool not in types) == (not isinstance(value, bool)))
        if ok and key == "env_step" and not 0 <= value < MAX_STEP:
            ok = False
        if not ok:
            want = {"env_step": "a non-negative integer", "ok": "true, false or null",
                    "cache_hit": "true, false or null"}.get(key, "a string or null")
            raise RunDataError(f"{path}:{lineno}: key '{key}' must be {want}, got {str(value)[:40]!r}")
        row[key] = value
    return row


def _read_jsonl(path: Path) -> pd.DataFrame:
    if not os.path.lexists(path):
        return pd.DataFrame(columns=["env_step", "ok", "cache_hit", "failure"])
    if not path.is_file():
        raise RunDataError(f"{path}: not a regular file")
    rows = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except (ValueError, RecursionError):
                # A run killed mid-write leaves a truncated last line; anything else is corrupt.
                if fh.read().strip():
                    raise RunDataError(f"{path}:{lineno}: not valid JSON") from None
                break
            rows.append(_ledger_row(path, lineno, record))
    return pd.DataFrame(rows)


def _read_done(path: Path) -> dict | None:
    """The ``done`` marker's JSON object (``{}`` when empty), None when the run has none."""
    if not os.path.lexists(path):
        return None
    if not path.is_file():
        raise RunDataError(f"{path}: not a regular file")
    try:
        text = path.read_bytes().decode("utf-8").strip()
        done = json.loads(text) if text else {}
    except (ValueError, RecursionError) as e:
        raise RunDataError(f"{path}: not valid JSON ({' '.join(str(e).split())[:120]})") from None
    if not isinstance(done, dict):
        raise RunDataError(f"{path}: must be a JSON object, got {type(done).__name__}")
    wall = done.get("wall_s")
    if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float))
                             or not 0 <= wall < float("inf")):
        raise RunDataError(f"{path}: key 'wall_s' must be a non-negative number of seconds, got {wall!r}")
    return done


CONFIG_COLUMNS = ("train.steps", "train.train_ratio", "model.preset", "eval.every", "eval.episodes",
                  "llm.backend", "advisor.mode", "env.obs", "env.num_envs", "device",
                  "prior.kl_bound", "prior.kl_delta", "prior.lambda_max", "prior.control_episodes",
                  "prior.trust_gain", "prior.advice_samples", "prior.temperature_min", "prior.temperature_max",
                  "prior.gate_full_at",
                  "llm.controller.cooldown", "llm.controller.cooldown_after_success",
                  "prior.enabled", "prior.gate", "prior.kl_mode", "prior.trust", "prior.align_temperature",
                  "prior.temperature_refit_every", "prior.temperature_min_labels", "prior.dropout",
                  "advisor.accuracy", "dreamer.unimix", "dreamer.retnorm_low", "dreamer.retnorm_high",
                  "prior.w_entropy", "prior.w_value", "prior.w_disagreement", "dreamer.critic_trunk",
                  "dreamer.uncertainty_head_steps", "prior.trust_act_evidence", "prior.trust_dead_zone",
                  "prior.trust_act_floor", "prior.trust_act_uninformed", "prior.trust_value_weight",
                  "prior.trust_failures", "prior.trust_model_failures", "prior.trust_step_failures",
                  "prior.trust_episode_acted", "prior.trust_episode_strength", "prior.trust_familywise",
                  "prior.gate_trust_floor", "prior.trust_act_pooled",
                  "prior.control_allocation", "prior.absorb_over", "prior.absorb_trust")
"""Resolved-config fields copied into the run table (as ``cfg_<section>_<field>``) for the paper's setup text."""
CONFIG_NUMBERS = ("train.prefill", "prior.kl_bound", "prior.kl_delta", "prior.lambda_max")
"""Config fields the analysis computes with: numbers (or absent / null)."""
SCALARS = (str, int, float, bool, type(None))


def config_value(config: dict, dotted: str):
    node: object = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _check_config(path: Path, config: dict) -> None:
    """The keys the analysis reads hold single values of the right type; sections are mappings."""
    for dotted in (*CONFIG_COLUMNS, *CONFIG_NUMBERS, "env.name", "ablation", "seed"):
        node: object = config
        parts = dotted.split(".")
        for depth, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
            key = ".".join(parts[: depth + 1])
            last = depth == len(parts) - 1
            if not last and not isinstance(node, (dict, type(None))):
                raise RunDataError(f"{path}: key '{key}' must be a mapping, got {type(node).__name__}")
            if last and not isinstance(node, SCALARS):
                raise RunDataError(f"{path}: key '{key}' must be a single value, got {type(node).__name__}")
    for dotted in CONFIG_NUMBERS:
        value = config_value(config, dotted)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value != value):
            raise RunDataError(f"{path}: key '{dotted}' must be a number, got {value!r}")
    for dotted in ("env.name", "ablation"):
        value = config_value(config, dotted)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise RunDataError(f"{path}: key '{dotted}' must be a non-empty name, got {value!r}")
    seed = config.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise RunDataError(f"{path}: key 'seed' must be a non-negative integer, got {seed!r}")


def _read_config(path: Path) -> dict:
    """The run's resolved config ({} when it has none); YAML, mapping and the keys read are checked."""
    if not os.path.lexists(path):
        return {}
    from lore.config import ConfigError, load_yaml

    try:
        config = load_yaml(path)
    except ConfigError as e:
        raise RunDataError(str(e)) from None
    _check_config(path, config)
    return config


def _identity(path: Path, config: dict) -> tuple[str, str, int]:
    """(env, ablation, seed) from the resolved config, else from ``<env>/<ablation>/seed<k>``."""
    env = config_value(config, "env.name")
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


RUN_FILES = ("config.yaml", "eval.csv", "episodes.csv", "metrics.csv", "llm_calls.jsonl", "done")
"""The files of a run directory the analysis reads."""


def load_run(path: str | Path) -> Run:
    """Read and check one run directory; any bad file is a :class:`RunDataError` naming it."""
    path = Path(path)
    if not path.is_dir():
        raise RunDataError(f"{path}: not a run directory")
    config = _read_config(path / "config.yaml")
    done = _read_done(path / "done")
    env, ablation, seed = _identity(path, config)
    return Run(
        path=path,
        env=env,
        ablation=ablation,
        seed=seed,
        eval=_read_run_table(path / "eval.csv", EVAL_SPEC, optional=False),
        episodes=_read_run_table(path / "episodes.csv", EPISODES_SPEC, optional=True),
        metrics=_read_run_table(path / "metrics.csv", METRICS_SPEC, optional=True),
        llm_calls=_read_jsonl(path / "llm_calls.jsonl"),
        done=done,
        config=config,
    )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def find_run_dirs(root: str | Path, marker: str = "eval.csv", *, follow_outside: bool = False) -> list[Path]:
    """Every directory under ``root`` holding a file named ``marker`` (sorted, so results are stable).

    Symlinked folders inside the root are followed, each real folder read once (a run linked twice, or a
    link back up the tree, is not counted again). A symlink (folder or run file) that leads outside the
    root is an error naming the link, so a link to ``/`` never makes the walk read the file system;
    ``follow_outside=True`` follows such links instead (a comparison folder that links another
    benchmark's baseline runs).
    """
    root = Path(root)
    if not root.is_dir():
        raise RunDataError(f"{root}: runs root does not exist")
    real_root = os.path.realpath(root)
    found, seen = [], set()
    for folder, subfolders, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        subfolders.sort()  # the first of two links to one run is the one kept, whatever the file system's order
        if not follow_outside:
            linked = [os.path.join(folder, n) for n in subfolders] + [
                os.path.join(folder, n) for n in files if n in RUN_FILES]
            for link in linked:
                if os.path.islink(link) and not _inside(os.path.realpath(link), real_root):
                    raise RunDataError(f"{link}: a symlink to {os.path.realpath(link)}, outside the runs root "
                                       f"{root} (copy the runs in, or pass --follow-links-outside)")
        if marker in subfolders:
            raise RunDataError(f"{os.path.join(folder, marker)}: not a regular file")
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


def llm_calls_per_10k(run: Run) -> float:
    """API calls (:func:`llm_call_counts`) per 10,000 env steps of the run's last eval step (NaN without one)."""
    steps = float(run.eval["env_step"].max()) if len(run.eval) else math.nan
    return llm_call_counts(run)["llm_calls"] * 10_000.0 / steps if steps > 0 else math.nan


def _last_counter(run: Run, name: str) -> float:
    """The last logged value of a cumulative ``metrics.csv`` counter (0 when never logged)."""
    col = run.metrics.get(name)
    return float(col.dropna().iloc[-1]) if col is not None and col.notna().any() else 0.0
