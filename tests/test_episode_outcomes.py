"""How a run trained: how its episodes ended, by phase (success, failure and time-out shares, and runs stuck
in their time-out phase), and how much weight the advice kept (mean β, the step it settled out)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lore.experiments.compare import advice_markdown, outcome_markdown
from lore.report.episodes import (
    SETTLED_BETA,
    advice_weight,
    mixes_a_prior,
    outcome_shares,
    phase_bounds,
    stuck,
)


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


def _metrics(betas: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"env_step": [500 * (k + 1) for k in range(len(betas))], "beta_mean": betas})


def test_the_advice_settles_at_the_first_step_after_its_last_rise_above_the_threshold():
    high = SETTLED_BETA * 2
    weight = advice_weight(_metrics([0.0, high, 0.01, high, 0.05, 0.0]))  # a dip below and back up does not count
    assert weight["settled_at"] == 2500 and weight["beta_mean"] == pytest.approx((2 * high + 0.06) / 6)
    assert math.isnan(advice_weight(_metrics([0.0, 0.01, high]))["settled_at"])  # still above at the end
    assert advice_weight(_metrics([0.05, 0.0]))["settled_at"] == 500  # never above: settled from the start
    assert advice_weight(_metrics([SETTLED_BETA]))["settled_at"] != advice_weight(_metrics([0.0]))["settled_at"]


def test_only_runs_whose_config_enables_the_prior_mix_one_in():
    assert mixes_a_prior({"prior": {"enabled": True, "beta_max": 1.0}})
    assert not mixes_a_prior({"prior": {"enabled": False}}) and not mixes_a_prior({})
    assert not mixes_a_prior({"prior": {"enabled": "yes"}}) and not mixes_a_prior({"prior": None})


def test_a_run_without_a_prior_has_no_advice_weight():
    assert advice_weight(None)["beta_mean"] == 0.0
    assert advice_weight(pd.DataFrame({"env_step": [500], "trust_llm": [0.5]}))["beta_mean"] == 0.0
    assert math.isnan(advice_weight(_metrics([math.nan]))["settled_at"])


def test_the_comparison_counts_the_seeds_whose_advice_settled():
    advice = pd.DataFrame([{"env": "E", "arm": "a", "seed": s, **advice_weight(_metrics(b))}
                           for s, b in enumerate([[0.5, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.5]])])
    row = next(line for line in advice_markdown(advice) if line.startswith("| E | a |"))
    assert row == "| E | a | 3 | 0.333 | 2 of 3 | 1,250 |"
