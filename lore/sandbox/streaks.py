"""Disabling feature code that keeps failing, so that it stops costing its timeout on every call."""

from __future__ import annotations

from collections import OrderedDict

from lore.sandbox.results import MAX_MESSAGE_CHARS, clean_text
from lore.sandbox.validation import FeatureResult

_STREAKS_SIZE = 1024


class FailureStreaks:
    """Per code id: calls in a row in which no observation came back ok; code that reaches ``limit``
    is disabled, so a program that always times out stops costing its timeout on every call."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._streaks: OrderedDict[str, int] = OrderedDict()
        self.disabled: OrderedDict[str, str] = OrderedDict()  # code id -> why

    def why_disabled(self, cid: str) -> str | None:
        return self.disabled.get(cid)

    def record(self, cid: str, results: list[FeatureResult]) -> bool:
        """Count one call's results; True when this call disabled the code."""
        counted = [r for r in results if r.ok or r.error.split(":", 1)[0] not in ("rejected", "disabled")]
        if self.limit is None or not counted or cid in self.disabled:
            return False
        if any(r.ok for r in counted):
            self._streaks.pop(cid, None)
            return False
        streak = self._streaks.pop(cid, 0) + 1
        if streak < self.limit:
            self._streaks[cid] = streak  # most recent last; the oldest is forgotten first
            _trim(self._streaks, _STREAKS_SIZE)
            return False
        last = clean_text(counted[-1].error, MAX_MESSAGE_CHARS)
        self.disabled[cid] = f"feature code failed {streak} calls in a row (last: {last})"
        _trim(self.disabled, _STREAKS_SIZE)
        return True


def _trim(table: OrderedDict, size: int) -> None:
    while len(table) > size:
        table.popitem(last=False)
