"""Re-check a decided experiment's record from the archived runs it lists.

:func:`recheck` reads the entries a record names by their run keys (``runs/<env>/<key>/seed<k>``, whatever
today's defaults resolve the declaration's arms to), recomputes every comparison row (with the statistics the
record names) and the verdict with the declaration's decision rule, and lists each value that differs from the record. A record that lists no
runs (written before records did) is matched to the archive by today's run keys; when the archive lacks them,
only the verdict is re-derived from the record's own table, and the result says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from lore.archive import ARCHIVE_ROOT, entry_path
from lore.experiments.declaration import ExperimentError, load_declaration
from lore.experiments.log import UNDECIDED, read_record, record_path

ENV_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""An environment id as a folder name of the archive (never a path)."""
TOLERANCE = 1e-9
"""Largest absolute difference between a recorded and a recomputed number that counts as identical."""
ROW_KEYS = ("env", "arm", "vs", "metric")
"""What identifies a comparison row."""


@dataclass
class Recheck:
    """The outcome of :func:`recheck`: ``differences`` empty means the record holds."""

    name: str
    source: str
    """``archive`` (recomputed from the entries) or ``table`` (verdict re-derived from the record's table)."""
    runs: int
    rows: int
    verdict: str
    differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences

    def line(self) -> str:
        """One line: identical with what was recomputed, or the number of differences."""
        if self.source == "archive":
            what = f"{self.rows} comparison rows and the verdict recomputed from {self.runs} archived runs"
        else:
            what = (f"the verdict re-derived from the record's {self.rows} comparison rows; the rows cannot be "
                    "recomputed: the record lists no runs and the archive lacks them")
        state = "identical" if self.identical else f"{len(self.differences)} difference(s)"
        return f"lore: recheck {self.name}: {state} (verdict {self.verdict}; {what})"


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if not (math.isfinite(a) and math.isfinite(b)):
            return (math.isnan(a) and math.isnan(b)) or a == b
        return abs(a - b) <= TOLERANCE
    if a is None and isinstance(b, float) and math.isnan(b):
        return True
    return a == b


def _row_differences(recorded: list[dict], table) -> list[str]:
    """Each value of a recorded comparison row that the recomputed ``table`` does not give back."""
    fresh = {tuple(r[k] for k in ROW_KEYS): r for r in table.to_dict("records")} if len(table) else {}
    out = []
    for row in recorded:
        ident = tuple(row.get(k) for k in ROW_KEYS)
        name = "/".join(str(x) for x in ident)
        other = fresh.pop(ident, None)
        if other is None:
            out.append(f"row {name}: in the record, not recomputed")
            continue
        for key, value in row.items():
            if key not in ROW_KEYS and not _same(value, other.get(key)):
                out.append(f"row {name}: {key} recorded {value!r}, recomputed {other.get(key)!r}")
    out += [f"row {'/'.join(str(x) for x in ident)}: recomputed, not in the record" for ident in fresh]
    return out


def _verdict_differences(rec: dict, decided: dict) -> list[str]:
    out = [f"{key}: recorded {rec.get(key)!r}, recomputed {decided.get(key)!r}"
           for key in ("verdict", "reason") if rec.get(key) != decided.get(key)]
    recorded, fresh = rec.get("scores") or {}, decided.get("scores") or {}
    for cand in sorted(set(recorded) | set(fresh)):
        if not _same(recorded.get(cand), fresh.get(cand)):
            out.append(f"score {cand}: recorded {recorded.get(cand)!r}, recomputed {fresh.get(cand)!r}")
    return out


def _listed_runs(rec: dict, decl, root: Path, archive: Path) -> list[tuple[object, Path]] | None:
    """(run, entry) of every run the record lists, or of today's plan when it lists none; None when a run
    has no entry in the archive (the record can then only be re-checked from its own table)."""
    from lore.experiments.plan import plan

    if rec.get("runs"):
        runs = [_listed_run(rec, i, r, root) for i, r in enumerate(rec["runs"])]
    else:
        runs = plan(decl, root)
    pairs = [(run, entry_path(archive, run.env, run.key, run.seed)) for run in runs]
    if not all((path / "done").is_file() for _, path in pairs):
        if rec.get("runs"):
            missing = next(path for _, path in pairs if not (path / "done").is_file())
            raise ExperimentError(f"{record_path(rec['name'], root)}: lists run {missing}, which the archive "
                                  "does not hold")
        return None
    return pairs


def _listed_run(rec: dict, index: int, item: object, root: Path):
    """Run ``index`` of a record's ``runs`` as a planned run; ExperimentError naming the record and the field
    when it is not one (a key that is no run key, an env that is a path, a seed that is no whole number)."""
    from lore.archive import KEY_PATTERN
    from lore.experiments.plan import PlannedRun

    where = f"{record_path(rec['name'], root)}: runs[{index}]"
    if not isinstance(item, dict):
        raise ExperimentError(f"{where}: not an object")
    env, key, seed = item.get("env"), item.get("key"), item.get("seed")
    if not (isinstance(env, str) and ENV_NAME.fullmatch(env)):
        raise ExperimentError(f"{where}.env: {env!r} is not an environment name")
    if not (isinstance(key, str) and KEY_PATTERN.fullmatch(key)):
        raise ExperimentError(f"{where}.key: {key!r} is not a run key (<ablation>-<10 hex digits>)")
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**31):
        raise ExperimentError(f"{where}.seed: {seed!r} is not a seed (a whole number in 0..2**31-1)")
    for field_name in ("arm", "ablation"):
        if not isinstance(item.get(field_name), str):
            raise ExperimentError(f"{where}.{field_name}: {item.get(field_name)!r} is not a name")
    return PlannedRun(env, item["arm"], seed, item["ablation"], (), key)


def recheck(name: str, root: Path = Path("."), archive: Path | None = None) -> Recheck:
    """Recompute decided experiment ``name``'s comparison and verdict from the archive and compare them with
    its record (ExperimentError naming the file when the record or an entry it lists is missing)."""
    import pandas as pd

    from lore.experiments.compare import (
        LEGACY_STATISTICS,
        comparison_table,
        load_finished,
        run_metrics_table,
        verdict,
    )

    path = record_path(name, root)
    if not path.exists():
        raise ExperimentError(f"experiment {name!r}: no record {path}; only a decided experiment can be re-checked")
    rec = read_record(path)
    if rec["verdict"] == UNDECIDED:
        raise ExperimentError(f"{path}: verdict {UNDECIDED}: the experiment is not decided yet")
    decl = load_declaration(name, root)
    pairs = _listed_runs(rec, decl, root, archive if archive is not None else root / ARCHIVE_ROOT)
    if pairs is None:
        table = pd.DataFrame(rec["comparison"])
        decided = verdict(decl, table, pd.DataFrame(columns=["env", "arm", "seed"]))
        out = Recheck(name, "table", 0, len(table), decided["verdict"], _verdict_differences(rec, decided))
        return out
    metrics_table = run_metrics_table(load_finished(pairs))
    table = comparison_table(decl, metrics_table, rec.get("statistics", LEGACY_STATISTICS))
    decided = verdict(decl, table, metrics_table)
    differences = _row_differences(rec["comparison"], table) + _verdict_differences(rec, decided)
    return Recheck(name, "archive", len(pairs), len(table), decided["verdict"], differences)
