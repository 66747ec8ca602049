"""Run records: CSV tables kept in memory and rewritten atomically, plus TensorBoard.

Rows live in memory and travel inside the checkpoint, so a resumed run rewrites its CSVs
from exactly the state of the checkpoint — no duplicated or orphaned rows after a kill.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from lore.utils.io import atomic_write_text


class CsvTable:
    """An append-only table whose column set may grow; written whole and atomically."""

    def __init__(self, path: Path, leading: tuple[str, ...] = ("env_step",)):
        self.path = Path(path)
        self.leading = leading
        self.rows: list[dict] = []

    def append(self, row: dict) -> None:
        self.rows.append(dict(row))

    def columns(self) -> list[str]:
        seen = dict.fromkeys(self.leading)
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def flush(self) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns(), restval="", extrasaction="raise")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: _fmt(v) for k, v in row.items()})
        atomic_write_text(self.path, buf.getvalue())

    def state_dict(self) -> list[dict]:
        return [dict(r) for r in self.rows]

    def load_state_dict(self, rows: list[dict]) -> None:
        self.rows = [dict(r) for r in rows]


def _fmt(value):
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.6g}"
    return value


class TensorBoard:
    """Thin wrapper so a run without tensorboard installed (or disabled) still works."""

    def __init__(self, log_dir: Path, enabled: bool, purge_step: int | None = None):
        self.writer = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # pragma: no cover - tensorboard is a dependency
                return
            self.writer = SummaryWriter(str(log_dir), purge_step=purge_step)

    def scalars(self, prefix: str, values: dict, step: int) -> None:
        if self.writer is None:
            return
        for key, value in values.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
