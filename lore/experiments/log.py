"""Experiment records (``docs/experiments/records/<name>.json``, the numbers of a comparison that ran),
the imported entries of experiments run before declarations existed, and the experiment log
``docs/experiments.md`` written from the declarations and both.

An experiment whose record holds a verdict (any but ``incomplete``) is decided, and closed: it is not planned,
compared or run again (:func:`check_open`), since the current defaults would make it a different grid that
answers another question. Its record and its archived runs are what it found.
"""

from __future__ import annotations

import json
from pathlib import Path

from lore.experiments.declaration import (
    METRICS,
    Declaration,
    ExperimentError,
    check_name,
    declared_names,
    load_declaration,
)

RECORDS_DIR = Path("docs/experiments/records")
"""One JSON record per experiment that ran: the numbers the log is written from (tracked)."""
IMPORTED = Path("docs/experiments/imported.yaml")
"""Experiments run before declarations existed, imported once from their reports (tracked)."""
LOG = Path("docs/experiments.md")
MAX_RECORD_BYTES = 1 << 20
"""Largest experiment record or imported log read (each is a few KB)."""
MAX_RECORD_DEPTH = 8
"""Deepest nesting of a record (an object of a list of flat objects is 3 deep)."""


def record_path(name: str, root: Path = Path(".")) -> Path:
    """``docs/experiments/records/<name>.json`` of an experiment name (:func:`check_name`)."""
    return root / RECORDS_DIR / f"{check_name(name)}.json"


def _read_checked(path: Path, what: str, parse):
    """``parse(text)`` of a tracked file of at most :data:`MAX_RECORD_BYTES`; ExperimentError naming it."""
    from lore.utils.io import read_bounded

    try:
        text = read_bounded(path, MAX_RECORD_BYTES).decode("utf-8")
    except OSError as e:  # not a regular file, too large, unreadable
        raise ExperimentError(f"{path}: {what} cannot be read ({str(e).removeprefix(str(path)).strip()})") from None
    except UnicodeDecodeError:
        raise ExperimentError(f"{path}: {what} is not UTF-8 text") from None
    try:
        return parse(text)
    except (ValueError, RecursionError) as e:
        raise ExperimentError(f"{path}: not a valid {what} ({' '.join(str(e).split())[:160] or 'nested too deeply'})"
                              ) from None


class ExperimentDecided(ExperimentError):
    """A decided experiment asked to plan, compare or run again (:func:`check_open`)."""


UNDECIDED = "incomplete"
"""The verdict of a comparison with runs missing: its record decides nothing and the experiment stays open."""


def decided_record(name: str, root: Path = Path(".")) -> dict | None:
    """The record of experiment ``name`` if it is decided (a record with a verdict other than
    :data:`UNDECIDED`), else None; a record that cannot be read is an ExperimentError naming it."""
    path = record_path(name, root)
    if not path.exists() and not path.is_symlink():
        return None
    rec = read_record(path)
    return None if rec["verdict"] == UNDECIDED else rec


def decided_line(name: str, rec: dict) -> str:
    """The one line that refuses to run a decided experiment again."""
    from lore.archive import ARCHIVE_ROOT

    return (f"{name}: decided at {rec.get('commit') or 'an unknown commit'} (verdict: {rec['verdict']}); "
            f"its record is {RECORDS_DIR / f'{name}.json'} and its runs, where archived, are in {ARCHIVE_ROOT}/; "
            f"`lore experiments recheck {name}` recomputes it from them, and a new question is a new experiment")


def check_open(name: str, root: Path = Path(".")) -> None:
    """ExperimentDecided (:func:`decided_line`) when experiment ``name`` is decided."""
    rec = decided_record(name, root)
    if rec is not None:
        raise ExperimentDecided(decided_line(name, rec))


RECORD_FIELDS = {"name": (str,), "verdict": (str,), "reason": (str,), "commit": (str, type(None)),
                 "comparison": (list,), "note": (str,)}
"""The fields of an experiment record and their JSON types (``note`` may be absent)."""


def read_record(path: Path) -> dict:
    """The experiment record at ``path``, checked: a JSON object with :data:`RECORD_FIELDS` of their types,
    comparison rows that are objects, nested at most :data:`MAX_RECORD_DEPTH`; ExperimentError naming it."""
    from lore.llm.ledger import nesting_depth

    rec = _read_checked(path, "experiment record", json.loads)
    if not isinstance(rec, dict):
        raise ExperimentError(f"{path}: an experiment record is a JSON object, got {type(rec).__name__}")
    if nesting_depth(rec) > MAX_RECORD_DEPTH:
        raise ExperimentError(f"{path}: an experiment record nested deeper than {MAX_RECORD_DEPTH} levels")
    for key, types in RECORD_FIELDS.items():
        if key not in rec and key != "note":
            raise ExperimentError(f"{path}: {key}: missing from the experiment record")
        if key in rec and not isinstance(rec[key], types):
            raise ExperimentError(f"{path}: {key}: expected {' or '.join(t.__name__ for t in types)}, "
                                  f"got {type(rec[key]).__name__}")
    if not all(isinstance(row, dict) for row in rec["comparison"]):
        raise ExperimentError(f"{path}: comparison: every row must be an object")
    return rec


IMPORTED_FIELDS = ("name", "question", "change", "grid", "effect", "verdict")
"""The fields every entry of the imported log has (scalars)."""


def read_imported(path: Path) -> list[dict]:
    """The entries of ``docs/experiments/imported.yaml`` ([] when absent), checked: a list of mappings with
    :data:`IMPORTED_FIELDS` as scalars; ExperimentError naming the file."""
    from lore.config import ConfigError, parse_yaml
    from lore.llm.ledger import nesting_depth

    if not path.exists() and not path.is_symlink():
        return []

    def parse(text: str):
        try:
            return parse_yaml(text)
        except ConfigError as e:
            raise ValueError(str(e)) from None

    entries = _read_checked(path, "imported experiment log", parse)
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ExperimentError(f"{path}: the imported experiment log is a list of mappings, got "
                              f"{type(entries).__name__}")
    if nesting_depth(entries) > MAX_RECORD_DEPTH:
        raise ExperimentError(f"{path}: the imported experiment log is nested deeper than {MAX_RECORD_DEPTH} levels")
    for i, entry in enumerate(entries):
        for key in IMPORTED_FIELDS:
            if not isinstance(entry.get(key), (str, int, float)):
                raise ExperimentError(f"{path}: [{i}].{key}: missing or not a scalar")
    return entries



def commits_text(run_commits: dict[str, int]) -> str:
    """``runs from commit abc (155)`` or ``runs from 2 commits: abc (100), def (55)``."""
    items = ", ".join(f"{c} ({n})" for c, n in run_commits.items())
    return f"runs from commit {items}" if len(run_commits) == 1 else f"runs from {len(run_commits)} commits: {items}"



def _grid_text(decl: Declaration) -> str:
    envs = ", ".join(_short_env(e) for e in decl.envs)
    steps = f", {decl.steps:,} env steps" if decl.steps else ""
    return f"{envs} × {', '.join(decl.arms)} × {len(decl.seeds)} seeds{steps}"


def _short_env(env: str) -> str:
    return env.removeprefix("MiniGrid-").removesuffix("-v0")


def effect_table(rec: dict) -> list[str]:
    """A record's effects as Markdown table lines: one row per paired comparison (difference, 95% CI, n), or
    per env for a rule on one arm's means (power); a line saying so when there is no result yet."""
    rows = [r for r in rec.get("comparison", []) if r.get("difference") is not None]
    if rows:
        lines = ["| env | comparison | metric | difference [95% CI] | n paired |", "|---|---|---|---|---|"]
        return lines + [f"| {_short_env(r['env'])} | {r['arm']} − {r['vs']} | {METRICS[r['metric']]} | "
                        f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] | {r['n_paired']} |"
                        for r in rows]
    scores = {env: v for env, v in (rec.get("scores") or {}).items() if isinstance(v, (int, float))}
    if scores and not rec.get("comparison"):
        return ["| env | mean |", "|---|---|"] + [f"| {_short_env(env)} | {v:.3f} |" for env, v in scores.items()]
    return ["no paired result yet"]


def log_markdown(root: Path = Path(".")) -> str:
    """The experiment log: declared experiments (with their records) first, then the imported ones."""

    lines = ["# Experiment log", "",
             "Written by `lore experiments log` from `config/experiments/*.yaml`, their records "
             "in `docs/experiments/records/` and the imported entries in `docs/experiments/imported.yaml`; "
             "do not edit. Effects are paired by seed, 95% bootstrap CIs.", "", "## Declared experiments", ""]
    entries = read_imported(root / IMPORTED)
    declared = [(load_declaration(name, root), record_path(name, root)) for name in declared_names(root)]
    records = {p: read_record(p) for _, p in declared if p.exists() or p.is_symlink()}
    for decl, rec_path in declared:
        name = decl.name
        rec = records.get(rec_path)
        change = ", ".join(f"{k}={json.dumps(v)}" for k, v in decl.settings.items()) or "see arms"
        lines += [f"### {name}", "", f"- Question: {decl.question}", f"- Change: {change}",
                  f"- Grid: {_grid_text(decl)}; baseline: {decl.baseline or 'none'}"]
        if rec is None:
            lines += [f"- Status: declared, no verdict yet (`lore experiments plan {name}` shows how many of its "
                      "runs have finished)", ""]
            continue
        lines += ["- Effect:", "", *effect_table(rec), "", f"- Verdict: {rec['verdict']} ({rec['reason']})"]
        lines += [f"- Decision: {rec['note']}"] if rec.get("note") else []
        commits = rec.get("run_commits") or {}
        mixed = " (the runs of this comparison come from more than one commit)" if len(commits) > 1 else ""
        lines += [f"- Compared at commit {rec['commit'] or 'unknown'}; "
                  f"{commits_text(commits) if commits else 'run commits not recorded'}{mixed}", ""]
    if entries:
        lines += ["## Imported experiments", "",
                  "Run before experiments were declared; numbers copied once from their reports (named in each "
                  "entry), not rerun.", ""]
        for e in entries:
            lines += [f"### {e['name']}", "", f"- Question: {e['question']}", f"- Change: {e['change']}",
                      f"- Grid: {e['grid']} (n = {e['n'] if e.get('n') is not None else '—'}); "
                      f"baseline: {e.get('baseline') or 'none'}",
                      f"- Effect: {e['effect']}", f"- Verdict: {e['verdict']}; {e.get('outcome', '')}".rstrip("; "),
                      f"- Commit {e.get('commit') or '—'}; imported from `{e.get('source', '—')}`", ""]
    return "\n".join(lines).rstrip() + "\n"
