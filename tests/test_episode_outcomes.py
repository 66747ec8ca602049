"""How training episodes ended, by phase: success, failure and time-out shares, and runs stuck in their
time-out phase."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lore.experiments.compare import outcome_markdown
from lore.report.episodes import outcome_shares, phase_bounds, stuck


def _episodes(outcomes: list[tuple[int, str]], failed_column: bool = True) -> pd.DataFrame:
    rows = [{"env_step": step, "success": float(kind == "S"), **({"failed": float(kind == "F")} if failed_column
                                                                 else {})} for step, kind in outcomes]
    return pd.DataFrame(rows)


def test_phases_cover_the_run_without_gaps():
    assert phase_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    with pytest.raises(ValueError, match="phases"):
        phase_bounds(10, 0)


def test_each_phase_splits_its_episodes_into_success_failure_and_timeout():
    episodes = _episodes([(100, "F"), (200, "F"), (300, "T"), (400, "S"), (700, "T"), (800, "T"), (900, "T"),
                          (950, "T"), (1000, "S")])
    shares = outcome_shares(episodes, 900, phases=3)  # the last episode lies past the budget: not counted
    assert shares["episodes"].tolist() == [3, 1, 3]
    assert shares.loc[0, ["success", "failure", "timeout"]].tolist() == pytest.approx([0.0, 2 / 3, 1 / 3])
    assert shares.loc[1, ["success", "failure", "timeout"]].tolist() == pytest.approx([1.0, 0.0, 0.0])
    assert shares.loc[2, "timeout"] == 1.0 and stuck(shares) == 1.0
    learning = outcome_shares(_episodes([(100, "T"), (800, "S"), (850, "T")]), 900)
    assert stuck(learning) == 0.0


def test_a_run_that_did_not_record_failures_says_so():
    shares = outcome_shares(_episodes([(100, "S"), (200, "T")], failed_column=False), 300, phases=1)
    assert shares.loc[0, "success"] == 0.5
    assert math.isnan(shares.loc[0, "failure"]) and math.isnan(shares.loc[0, "timeout"]) and math.isnan(stuck(shares))
    empty = outcome_shares(pd.DataFrame(), 300, phases=2)
    assert empty["episodes"].tolist() == [0, 0] and math.isnan(empty.loc[0, "success"])


def test_the_comparison_counts_the_seeds_stuck_in_their_timeout_phase():
    frames = []
    for seed, last in enumerate(["T", "T", "S"]):
        shares = outcome_shares(_episodes([(100, "F"), (900, last)]), 900, phases=2)
        frames.append(shares.assign(env="E", arm="a", seed=seed))
    lines = outcome_markdown(pd.concat(frames))
    row = next(line for line in lines if line.startswith("| E | a |"))
    assert row.endswith("| 2 of 3 |") and "| 3 |" in row
