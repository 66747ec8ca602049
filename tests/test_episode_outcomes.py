"""How a run trained: how its episodes ended, by phase (success, failure and time-out shares, and runs stuck
in their time-out phase), and how much weight the advice kept (mean β, the step it settled out)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lore.experiments.compare import advice_markdown, outcome_markdown, stuck_p_value, stuck_runs
from lore.report.episodes import (
    SETTLED_BETA,
    advice_exposure,
    advice_weight,
    mixes_a_prior,
    outcome_shares,
    phase_bounds,
    stuck,
    time_limit,
    with_lengths,
)
from lore.report.runs import Run, llm_calls_per_10k


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


def test_shares_are_counted_so_a_phase_without_timeouts_shows_exactly_zero():
    # 4 successes and 1 failure: 1 - 4/5 - 1/5 is -5.6e-17 in floating point, shown as "-0.000"
    shares = outcome_shares(_episodes([(100, "S"), (200, "S"), (300, "S"), (400, "S"), (500, "F")]), 500, phases=1)
    assert shares.loc[0, "timeout"] == 0.0 and math.copysign(1.0, shares.loc[0, "timeout"]) == 1.0
    assert shares.loc[0, ["success", "failure"]].tolist() == [0.8, 0.2]
    row = next(line for line in outcome_markdown(shares.assign(env="E", arm="a", seed=0)) if "| E | a |" in line)
    assert "-0.000" not in row and "0.800 / 0.200 / 0.000" in row


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
    assert row.endswith("| 2 of 3 | - |") and "| 3 |" in row  # no rl_only in this env: no test against it


def _stuck_outcomes(arm: str, stuck_seeds: int, seeds: int) -> pd.DataFrame:
    frames = [outcome_shares(_episodes([(100, "F"), (900, "T" if seed < stuck_seeds else "S")]), 900, phases=2)
              .assign(env="E", arm=arm, seed=seed) for seed in range(seeds)]
    return pd.concat(frames)


def test_stuck_counts_are_tested_against_rl_only_by_fishers_exact_test():
    outcomes = pd.concat([_stuck_outcomes("rl_only", 0, 5), _stuck_outcomes("adv", 5, 5),
                          _stuck_outcomes("same", 0, 5)])
    runs = stuck_runs(outcomes)
    assert runs.groupby("arm")["stuck"].sum().to_dict() == {"adv": 5.0, "rl_only": 0.0, "same": 0.0}
    flags = {arm: runs.loc[runs["arm"] == arm, "stuck"] for arm in ("rl_only", "adv", "same")}
    # 5 of 5 against 0 of 5: the two most extreme of the C(10, 5) = 252 equally likely splits
    assert stuck_p_value(flags["adv"], flags["rl_only"]) == pytest.approx(2 / 252)
    assert stuck_p_value(flags["same"], flags["rl_only"]) == pytest.approx(1.0)
    assert math.isnan(stuck_p_value(flags["adv"], pd.Series([math.nan])))
    lines = outcome_markdown(outcomes)
    rows = {line.split(" | ")[1]: line for line in lines if line.startswith("| E |")}
    assert rows["adv"].endswith("| 5 of 5 | 0.008 |") and rows["rl_only"].endswith("| 0 of 5 | - |")
    assert rows["same"].endswith("| 0 of 5 | 1.000 |")


def test_a_run_that_did_not_record_failures_is_neither_stuck_nor_free():
    shares = outcome_shares(_episodes([(100, "T")], failed_column=False), 300, phases=1).assign(env="E", arm="a",
                                                                                                  seed=0)
    assert math.isnan(stuck_runs(shares)["stuck"].iloc[0])


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
    advice = pd.DataFrame([{"env": "E", "arm": "a", "seed": s, **advice_weight(_metrics(b)),
                            **advice_exposure(_metrics(b), 500), "llm_calls_per_10k": math.nan}
                           for s, b in enumerate([[0.5, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.5]])])
    row = next(line for line in advice_markdown(advice) if line.startswith("| E | a |"))
    assert row.startswith("| E | a | 3 | 0.333 | 2 of 3 | 1,250 |")


def test_exposure_sums_beta_over_the_act_steps_of_the_first_phase_and_averages_the_kl_term_after():
    metrics = pd.DataFrame({"env_step": [500, 1000, 2000, 3000], "beta_mean": [0.2, 0.4, 0.1, 0.9],
                            "prior_loss": [5.0, 5.0, 0.5, 1.5]})
    out = advice_exposure(metrics, 2000)
    assert out["beta_steps"] == pytest.approx(0.2 * 500 + 0.4 * 500 + 0.1 * 1000)  # each row covers its own steps
    assert out["kl_term_after"] == pytest.approx(1.5)  # only the rows after step 2000
    assert advice_exposure(metrics, 3000)["beta_steps"] == pytest.approx(400.0 + 0.9 * 1000)
    assert math.isnan(advice_exposure(metrics, 3000)["kl_term_after"])
    assert advice_exposure(None, 10) == {"beta_steps": 0.0, "kl_term_after": advice_exposure(None, 10)["kl_term_after"]}
    assert math.isnan(advice_exposure(pd.DataFrame({"env_step": [500], "beta_mean": [0.3]}), 500)["kl_term_after"])


def test_the_advice_table_sets_the_exposure_of_stuck_seeds_apart():
    outcomes = _stuck_outcomes("a", 2, 4)
    advice = pd.DataFrame([{"env": "E", "arm": "a", "seed": s, "beta_mean": 0.1, "settled_at": math.nan,
                            "beta_steps": float(b), "kl_term_after": 0.0, "llm_calls_per_10k": math.nan}
                           for s, b in enumerate([900, 700, 10, 30])])
    row = next(line for line in advice_markdown(advice, outcomes) if line.startswith("| E | a |"))
    assert row.endswith("| 365 | 800 / 20 | 0.000 | - |")  # median of all four, then stuck seeds 0-1 / others 2-3
    assert next(line for line in advice_markdown(advice)
                if line.startswith("| E | a |")).endswith("| 365 | - | 0.000 | - |")


def _run_with_calls(ledger: list[dict], last_eval_step: int) -> Run:
    return Run(path=None, env="E", ablation="a", seed=0, eval=pd.DataFrame({"env_step": [0, last_eval_step]}),
               episodes=pd.DataFrame(), metrics=pd.DataFrame(), llm_calls=pd.DataFrame(ledger), done={})


def test_llm_calls_per_10k_steps_count_api_calls_only_over_the_run_length():
    ledger = [{"cache_hit": False, "source": "llm"}] * 30 + [{"cache_hit": True, "source": "llm"}] * 50 \
        + [{"cache_hit": False, "source": "surrogate"}] * 7
    assert llm_calls_per_10k(_run_with_calls(ledger, 20_000)) == pytest.approx(15.0)  # 30 calls in 20k steps
    assert llm_calls_per_10k(_run_with_calls(ledger, 5_000)) == pytest.approx(60.0)
    assert llm_calls_per_10k(_run_with_calls([], 20_000)) == 0.0
    assert math.isnan(llm_calls_per_10k(_run_with_calls(ledger, 0)))


def test_the_advice_table_gives_the_median_and_largest_call_rate():
    advice = pd.DataFrame([{"env": "E", "arm": "a", "seed": s, "beta_mean": 0.1, "settled_at": math.nan,
                            "beta_steps": 0.0, "kl_term_after": 0.0, "llm_calls_per_10k": r}
                           for s, r in enumerate([10.0, 30.0, 62.5, math.nan])])
    row = next(line for line in advice_markdown(advice) if line.startswith("| E | a |"))
    assert row.endswith("| 30.0 (62.5) |")  # over the three seeds that know it


def test_a_run_that_predates_the_failed_column_has_its_failures_read_from_episode_lengths():
    episodes = pd.DataFrame({"env_step": [30, 130, 170, 270], "success": [0.0, 0.0, 1.0, 0.0],
                             "length": [30, 100, 40, 100]})  # lava at step 30, a time-out, a success, a time-out
    shares = outcome_shares(episodes, 300, phases=1, time_limit=100)
    assert shares.loc[0, ["success", "failure", "timeout"]].tolist() == pytest.approx([0.25, 0.25, 0.5])
    recorded = outcome_shares(episodes.assign(failed=[0.0, 0.0, 0.0, 0.0]), 300, phases=1, time_limit=100)
    assert recorded.loc[0, "failure"] == 0.0  # a recorded column is never second-guessed
    assert math.isnan(outcome_shares(episodes, 300, phases=1).loc[0, "failure"])  # no limit known: not guessed


def test_the_time_limit_is_the_envs_own_or_the_runs_override():
    assert time_limit("MiniGrid-LavaGapS5-v0") == 4 * 5 * 5  # MiniGrid's LavaGap: 4 * size^2 steps
    assert time_limit("MiniGrid-LavaGapS5-v0", 37) == 37
    assert time_limit("MiniGrid-NoSuchEnv-v0") is None


def test_a_one_env_run_without_lengths_has_them_read_from_its_episode_ends():
    episodes = pd.DataFrame({"env_step": [10, 110, 150], "success": [0.0, 0.0, 1.0]})
    assert with_lengths(episodes, 1)["length"].tolist() == [10, 100, 40]
    assert "length" not in with_lengths(episodes, 2).columns  # episodes of several envs interleave: unknown
    shares = outcome_shares(with_lengths(episodes, 1), 150, phases=1, time_limit=100)
    assert shares.loc[0, ["success", "failure", "timeout"]].tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3])
