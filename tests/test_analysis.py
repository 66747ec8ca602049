"""Statistics, tables, figures and paper macros on synthetic run directories with known answers."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from workflow_helpers import analysis_main

from lore.envs.crafter import crafter_score
from lore.paper.build import write_generated
from lore.paper.macros import macros_tex
from lore.report import stats as st
from lore.report.aggregate import AnalysisSettings, Tables, aggregate
from lore.report.latex import fmt_ci, fmt_rate, fmt_steps
from lore.report.runs import RunDataError, load_run, load_runs
from lore.report.synthetic import SyntheticRun, achievement_names, run_dir_for, write_grid, write_run

ENV = "MiniGrid-DoorKey-5x5-v0"


def plain(text: str) -> str:
    """Generated prose with the ``\\lorenum{...}`` wrappers of its computed numbers removed."""
    return re.sub(r"\\lorenum\{((?:[^{}]|\{[^{}]*\})*)\}", r"\1", text)

# --------------------------------------------------------------------------- pure statistics


def test_iqm_trims_a_quarter_from_each_end():
    values = np.array([100.0, 1, 2, 3, 4, 5, 6, -100])  # 8 values: drop 2 lowest and 2 highest
    assert st.iqm(values) == pytest.approx(np.mean([2, 3, 4, 5]))
    # Fewer than 4 runs: nothing to trim, the IQM is the mean (scipy / rliable convention).
    assert st.iqm(np.array([0.0, 0.0, 3.0])) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no values"):
        st.iqm(np.array([]))


def test_bootstrap_resamples_within_strata():
    # Stratum A always 0 (3 runs), stratum B always 1 (1 run): every stratified resample pools
    # three 0s and one 1, so the CI of the mean collapses to 0.25. A pooled (unstratified)
    # bootstrap would draw the 1 zero to four times and give a wide interval.
    ci = st.stratified_bootstrap_ci([np.zeros(3), np.ones(1)], "mean", resamples=500)
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((0.25, 0.25, 0.25))
    pooled = st.stratified_bootstrap_ci(np.array([0.0, 0, 0, 1]), "mean", resamples=500)
    assert pooled.high - pooled.low > 0.4


def test_bootstrap_ci_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(123)
    trials, covered = 300, 0
    for i in range(trials):
        sample = rng.normal(0.5, 0.2, size=20)
        ci = st.stratified_bootstrap_ci(sample, "mean", resamples=1000, seed=i)
        covered += ci.low <= 0.5 <= ci.high
    # Percentile bootstrap under-covers a little with 20 samples (about 0.93); a broken CI
    # (e.g. reusing the same resample, or a 50% interval) lands far outside this band.
    assert 0.88 <= covered / trials <= 0.99


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="finite"):
        st.stratified_bootstrap_ci(np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="at least one value"):
        st.stratified_bootstrap_ci([np.array([1.0]), np.array([])])
    with pytest.raises(ValueError, match="confidence"):
        st.stratified_bootstrap_ci(np.array([1.0, 2.0]), confidence=1.5)


def test_probability_of_improvement_known_values():
    assert st.probability_of_improvement([1, 2, 3], [0, 0, 0]) == 1.0
    assert st.probability_of_improvement([0, 0], [1, 1]) == 0.0
    assert st.probability_of_improvement([1, 1], [1, 1]) == 0.5  # ties count half
    # pairs: (2>1) (2<3) (0<1) (0<3) -> 1/4
    assert st.probability_of_improvement([2, 0], [1, 3]) == pytest.approx(0.25)


def test_probability_of_improvement_averages_over_strata():
    ci = st.probability_of_improvement_ci([np.ones(4), np.zeros(4)], [np.zeros(4), np.ones(4)], resamples=200)
    assert ci.estimate == pytest.approx(0.5)  # wins everywhere in env 1, loses everywhere in env 2
    assert (ci.low, ci.high) == pytest.approx((0.5, 0.5))
    with pytest.raises(ValueError, match="strata"):
        st.probability_of_improvement_ci([np.ones(2)], [np.ones(2), np.ones(2)])


def test_curve_summaries():
    steps = np.array([0, 1000, 2000, 3000])
    sr = np.array([0.0, 0.5, 0.95, 0.9])
    assert st.value_at_budget(steps, sr, 2500) == 0.95  # last point at or before the budget
    assert math.isnan(st.value_at_budget(steps[1:], sr[1:], 500))
    assert st.steps_to_threshold(steps, sr, 0.9) == 2000
    assert math.isnan(st.steps_to_threshold(steps, sr, 0.99))
    # trapezoid: (0.25 + 0.725 + 0.925) * 1000 / 3000
    assert st.area_under_curve(steps, sr) == pytest.approx((0.25 + 0.725 + 0.925) / 3)
    assert st.area_under_curve(steps, sr, until=1000) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="sorted"):
        st.area_under_curve(np.array([2, 1]), np.array([0.0, 1.0]))


def test_window_metric_is_the_cumulative_training_success_median():
    # Episodes end at these steps; successes 1,0,0,1,0,1 -> cumulative 1, .5, .333, .5, .4, .5
    ends = np.array([100, 200, 9760, 9900, 10200, 10300])
    success = np.array([1, 0, 0, 1, 0, 1])
    # Window 10000 ± 250 holds episodes ending at 9760, 9900, 10200 -> median(.333, .5, .4) = .4
    assert st.cumulative_success_window(ends, success, 10_000, 250) == pytest.approx(0.4)
    assert math.isnan(st.cumulative_success_window(ends, success, 50_000, 250))


def test_crafter_score_formula():
    assert crafter_score(np.zeros(22)) == pytest.approx(0.0)
    assert crafter_score(np.ones(22)) == pytest.approx(100.0)
    # Half the achievements always, half never: exp(mean(ln 101, ln 1)) - 1 = sqrt(101) - 1
    assert crafter_score(np.r_[np.ones(11), np.zeros(11)]) == pytest.approx(math.sqrt(101) - 1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        crafter_score(np.array([50.0]))  # percentages are not rates


# --------------------------------------------------------------------------- run directories


def _exact_run(root, ablation, seed, sr, **kw):
    spec = SyntheticRun(env=ENV, ablation=ablation, seed=seed, steps=1000 * (len(sr) - 1), eval_every=1000,
                        eval_sr=sr, log_every=500, **kw)
    return write_run(run_dir_for(root, ENV, ablation, seed), spec)


@pytest.fixture()
def known_grid(tmp_path):
    """rl_only and full, 4 seeds each, with exactly known eval curves (steps 0..4000)."""
    curves = {
        "rl_only": [[0, 0.1, 0.2, 0.5, 0.8], [0, 0.0, 0.3, 0.6, 0.9], [0, 0.1, 0.1, 0.4, 0.7], [0, 0, 0, 0.2, 0.6]],
        "full": [[0, 0.5, 0.9, 1.0, 1.0], [0, 0.4, 0.8, 0.9, 1.0], [0, 0.6, 0.9, 1.0, 1.0], [0, 0.3, 0.7, 0.9, 0.95]],
    }
    paths = [_exact_run(tmp_path / "runs", a, s, c) for a, cs in curves.items() for s, c in enumerate(cs)]
    return paths, curves


SETTINGS = AnalysisSettings(budgets=(2000, 4000, 8000), threshold=0.9, window_center=2000,
                            window_half_width=250, resamples=500)


def _stat(tables, ablation, metric, field="iqm", env=ENV):
    s = tables.stats
    row = s[(s["env"] == env) & (s["ablation"] == ablation) & (s["metric"] == metric)]
    assert len(row) == 1, f"no {ablation}/{metric} row"
    return float(row.iloc[0][field])


def test_aggregate_reproduces_known_answers(known_grid):
    paths, curves = known_grid
    tables = aggregate(load_runs(paths), SETTINGS)
    assert len(tables.runs) == 8 and tables.runs["complete"].all()
    assert len(tables.eval_points) == 8 * 5
    for ablation, cs in curves.items():
        at_2k = np.array([c[2] for c in cs])
        final = np.array([c[-1] for c in cs])
        assert _stat(tables, ablation, "sr@2000") == pytest.approx(st.iqm(at_2k))
        assert _stat(tables, ablation, "sr@2000", "mean") == pytest.approx(at_2k.mean())
        assert _stat(tables, ablation, "final_sr") == pytest.approx(st.iqm(final))
        low, high = _stat(tables, ablation, "final_sr", "iqm_low"), _stat(tables, ablation, "final_sr", "iqm_high")
        assert final.min() <= low <= st.iqm(final) <= high <= final.max()
    # The 8000-step budget lies beyond every run: no value rather than the last point.
    assert not (tables.stats["metric"] == "sr@8000").any()
    # full reaches 0.9 at 2000, 3000, 2000, 3000 steps; rl_only only seed 1 (at 4000).
    assert _stat(tables, "full", "steps_to_threshold", "median") == 2500
    assert _stat(tables, "rl_only", "reached_threshold", "mean") == pytest.approx(0.25)
    # Every full run beats every rl_only run at 2k steps.
    imp = tables.improvement
    row = imp[(imp["ablation"] == "full") & (imp["metric"] == "sr@2000")].iloc[0]
    assert (row["p_improve"], row["low"], row["high"]) == pytest.approx((1.0, 1.0, 1.0))
    assert row["baseline"] == "rl_only"
    # LLM calls come from the ledger (cache misses) for full and are zero for rl_only.
    assert _stat(tables, "rl_only", "llm_calls", "mean") == 0
    assert _stat(tables, "full", "llm_calls", "mean") > 0


def test_llm_calls_counted_from_the_ledger(tmp_path):
    path = _exact_run(tmp_path, "full", 0, [0, 0.5])
    lines = [{"env_step": 1, "ok": True, "cache_hit": False, "failure": None},
             {"env_step": 2, "ok": True, "cache_hit": True, "failure": None},
             {"env_step": 3, "ok": False, "cache_hit": False, "failure": "timeout"}]
    (path / "llm_calls.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"env_st")  # torn tail
    tables = aggregate([load_run(path)], SETTINGS)
    row = tables.runs.iloc[0]
    assert (row["llm_calls"], row["llm_cache_hits"], row["llm_failures"]) == (2, 1, 1)


def test_window_metric_from_episodes(tmp_path):
    path = _exact_run(tmp_path, "rl_only", 0, [0, 0, 0.1], train_success=[1, 0, 0, 1, 0],
                      episode_steps=[100, 1700, 1800, 2100, 2300])
    tables = aggregate([load_run(path)], SETTINGS)  # window 2000 ± 250: cumulative .333, .5 -> median .4167
    assert tables.runs.iloc[0]["train_sr_window"] == pytest.approx((1 / 3 + 0.5) / 2)


def test_crafter_runs_get_score_and_achievement_table(tmp_path):
    names = achievement_names()
    assert len(names) == 22
    rates = np.linspace(0, 1, 22)
    paths = [write_run(run_dir_for(tmp_path, "crafter", "rl_only", s),
                       SyntheticRun(env="crafter", ablation="rl_only", seed=s, steps=2000, eval_every=1000,
                                    achievement_rates=rates)) for s in range(2)]
    tables = aggregate(load_runs(paths), SETTINGS)
    assert _stat(tables, "rl_only", "crafter_score", "mean", env="crafter") == pytest.approx(crafter_score(rates))
    ach = tables.achievements
    assert len(ach) == 22 and set(ach["achievement"]) == set(names)
    assert ach.set_index("achievement").loc[names[-1], "rate"] == pytest.approx(1.0)


def test_pooled_rows_use_every_environment(tmp_path):
    paths = write_grid(tmp_path, [ENV, "crafter"], ["rl_only", "full"], [0, 1], steps=2000, eval_every=1000)
    tables = aggregate(load_runs(paths), SETTINGS)
    pooled = tables.stats[(tables.stats["env"] == "all") & (tables.stats["metric"] == "final_sr")]
    assert set(pooled["ablation"]) == {"rl_only", "full"} and (pooled["n"] == 4).all()
    assert ((tables.improvement["env"] == "all") & (tables.improvement["ablation"] == "full")).any()


def test_the_paper_gets_its_crafter_section_from_crafter_runs(tmp_path):
    from lore.report.latex import formatter_for

    paths = write_grid(tmp_path, [ENV, "crafter"], ["rl_only", "full"], [0, 1, 2], steps=2000, eval_every=1000)
    tables = aggregate(load_runs(paths), SETTINGS)
    write_generated(tables, SETTINGS, tmp_path / "gen", envs_order=[ENV, "crafter"])
    assert r"\lorecraftertrue" in (tmp_path / "gen" / "macros.tex").read_text()
    table = (tmp_path / "gen" / "crafter_table.tex").read_text()
    fmt = formatter_for("crafter_score")
    for arm in ("rl_only", "full"):
        mean, low, high = (_stat(tables, arm, "crafter_score", f, env="crafter") for f in ("mean", "mean_low", "mean_high"))
        assert low <= mean <= high and low < high  # three seeds that differ: a real interval
        assert fmt(mean) in table and f"[{fmt(low)}, {fmt(high)}]" in table, (arm, table)
    assert "tab:crafter-crafter" in table  # the label paper/lore.tex refers to


def test_incomplete_and_broken_runs(tmp_path):
    spec = SyntheticRun(env=ENV, ablation="gate", seed=3, steps=4000, eval_every=1000, complete=False)
    run = load_run(write_run(tmp_path / "r", spec))
    assert not run.complete and len(run.eval) < 5
    with pytest.raises(RunDataError, match="eval.csv"):
        load_run(_no_eval(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDataError, match="cannot tell env/ablation/seed"):
        load_run(tmp_path / "empty")
    bad = write_run(tmp_path / "bad", SyntheticRun(env=ENV, seed=1, steps=1000, eval_every=500))
    pd.DataFrame({"env_step": [0], "return_mean": [0.0]}).to_csv(bad / "eval.csv", index=False)
    with pytest.raises(RunDataError, match="success_rate"):
        load_run(bad)
    twin = write_run(tmp_path / "twin", SyntheticRun(env=ENV, seed=1, steps=1000, eval_every=500))
    ok = write_run(tmp_path / "ok", SyntheticRun(env=ENV, seed=1, steps=1000, eval_every=500))
    with pytest.raises(RunDataError, match="two run directories"):
        load_runs([twin, ok])


def _no_eval(tmp_path):
    path = write_run(tmp_path / "noeval", SyntheticRun(env=ENV, seed=0, steps=1000, eval_every=500))
    (path / "eval.csv").unlink()
    return path


def test_settings_validation_names_the_field():
    with pytest.raises(ValueError, match="analysis.budgets"):
        AnalysisSettings(budgets=(0,))
    with pytest.raises(ValueError, match="analysis: unknown key"):
        AnalysisSettings.from_mapping({"budget": [1]})
    with pytest.raises(ValueError, match="analysis.threshold"):
        AnalysisSettings.from_mapping({"threshold": 2})


# --------------------------------------------------------------------------- outputs


def test_formatters():
    assert fmt_rate(0.456) == "0.46" and fmt_rate(float("nan")) == "--"
    assert fmt_steps(6000) == "6k" and fmt_steps(12500) == "12.5k" and fmt_steps(750) == "750"
    assert fmt_steps(1_000_000) == "1M"
    assert fmt_ci(0.5, 0.25, 0.75) == "0.50 [0.25, 0.75]"


def test_latex_tables_and_macros_carry_the_statistics(known_grid, tmp_path):
    paths, _ = known_grid
    tables = aggregate(load_runs(paths), SETTINGS)
    written = write_generated(tables, SETTINGS, tmp_path / "gen", envs_order=[ENV])
    names = {p.name for p in written}
    assert {"macros.tex", "sr_table.tex", "efficiency_table.tex", "ablation_table.tex"} <= names
    sr_table = (tmp_path / "gen" / "sr_table.tex").read_text()
    full_iqm = fmt_rate(_stat(tables, "full", "sr@2000"))
    assert f"{full_iqm}" in sr_table and r"\texttt{rl\_only}" in sr_table
    macros = macros_tex(tables, SETTINGS, [ENV])
    assert r"\lore@set{primary/full/sr@2000/iqm}{" + full_iqm + "}" in macros
    # The headline sentence quotes the same numbers the table has.
    headline = plain(next(line for line in macros.splitlines() if line.startswith(r"\newcommand{\loreHeadline}")))
    assert full_iqm in headline and "2k environment steps" in headline
    assert "$n$ = 4 and 4 seeds" in headline
    assert r"\lorecrafterfalse" in macros
    # Goals: the runs stop at 4k, so the 50k / 10k goals are reported as not tested, not as met.
    assert "not tested" in macros


def test_tables_round_trip_through_csv(known_grid, tmp_path):
    paths, _ = known_grid
    tables = aggregate(load_runs(paths), SETTINGS)
    tables.write_csv(tmp_path / "t")
    again = Tables.read_csv(tmp_path / "t")
    pd.testing.assert_frame_equal(again.stats[["env", "ablation", "metric"]], tables.stats[["env", "ablation", "metric"]])


def test_cli_aggregate_figures_and_macros(known_grid, tmp_path, capsys):
    paths, _ = known_grid
    runs_root = paths[0].parents[2]
    out = tmp_path / "tables"
    assert analysis_main(["aggregate", "--runs-root", str(runs_root), "--out", str(out),
                          "--budgets", "2000", "4000", "--resamples", "200"]) == 0
    assert (out / "stats.csv").is_file() and (out / "sr_table.tex").is_file()
    figs = tmp_path / "figs"
    assert analysis_main(["figures", "--runs-root", str(runs_root), "--tables", str(out), "--out", str(figs),
                          "--budgets", "2000", "4000", "--resamples", "200"]) == 0
    crafter = any(p.parts[-3] == "crafter" for p in paths)
    for name in ("fig1_success", "prior_dynamics", "kl_traces", "iqm_intervals", "p_improvement",
                 *(["crafter_achievements"] if crafter else [])):
        for ext in ("png", "pdf"):
            assert (figs / f"{name}.{ext}").stat().st_size > 1000, f"{name}.{ext} is empty"
    if not crafter:  # nothing is drawn for an environment the grid does not have
        assert not list(figs.glob("crafter_achievements.*"))
    assert analysis_main(["paper-macros", "--tables", str(out), "--out", str(tmp_path / "gen")]) == 0
    assert (tmp_path / "gen" / "macros.tex").read_text().count(r"\lore@set") > 50
    report = tmp_path / "report"
    assert analysis_main(["benchmark-report", "--tables", str(out), "--figures", str(figs), "--out", str(report),
                          "--budgets", "2000", "4000", "--resamples", "200"]) == 0
    assert (report / "tables" / "stats.csv").read_bytes() == (out / "stats.csv").read_bytes()
    assert (report / "figures" / "fig1_success.png").read_bytes() == (figs / "fig1_success.png").read_bytes()
    assert "## " + ENV in (report / "README.md").read_text()
    assert not [p for folder in (out, figs, report, tmp_path / "gen") for p in folder.rglob("*.tmp")]
    capsys.readouterr()
    # Bad input: exit status 2 and a message naming the problem.
    assert analysis_main(["aggregate", "--runs-root", str(tmp_path / "nowhere")]) == 2
    assert "runs root does not exist" in capsys.readouterr().err
    assert analysis_main(["aggregate", str(runs_root), "--env-budget", "crafter"]) == 2
    assert "--env-budget" in capsys.readouterr().err


def test_cache_hits_include_memory_hits_and_priornet_answers_are_not_calls(tmp_path):
    # In-memory state-cache hits never reach the ledger; the controller's counter in metrics.csv has them.
    # Answers PriorNet gave instead of the LLM (source "surrogate") are ledgered but are not API calls.
    path = _exact_run(tmp_path, "full", 0, [0, 0.5])
    lines = [{"env_step": 1, "ok": True, "cache_hit": False, "failure": None, "source": "backend"},
             {"env_step": 2, "ok": True, "cache_hit": True, "failure": None, "source": "backend"},
             {"env_step": 3, "ok": True, "cache_hit": False, "failure": None, "source": "surrogate"}]
    (path / "llm_calls.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    pd.DataFrame({"env_step": [100, 200], "llm_calls": [1, 1], "llm_cache_hits": [3, 7]}).to_csv(
        path / "metrics.csv", index=False)
    row = aggregate([load_run(path)], SETTINGS).runs.iloc[0]
    assert (row["llm_calls"], row["llm_cache_hits"]) == (1, 7)


def _prior_run(kl, lam, *, bound=2.0, lam_max=10.0, trust=(0.5, 0.2), ablation="full"):
    """A Run whose metrics.csv logs the prior layer (first row inside the prefill, ignored)."""
    from pathlib import Path

    from lore.report.runs import Run

    steps = [100, 500, 1000, 1500][: len(kl)]
    metrics = pd.DataFrame({"env_step": steps, "beta_mean": 0.5, "kl_mix_wm": kl, "lambda_kl": lam,
                            "trust_llm": np.linspace(*trust, len(kl)), "temperature": [1.0, 1.0, 0.7, 0.9][: len(kl)],
                            "temperature_refits": [0, 0, 1, 2][: len(kl)],
                            "temperature_refits_at_bound": [0, 0, 0, 1][: len(kl)]})
    # the temperature refit counters and align_temperature are what runs logged before temperature
    # alignment was retired: the analysis must ignore them
    config = {"train": {"prefill": 300}, "prior": {"enabled": True, "kl_mode": "lagrangian", "kl_bound": bound,
                                                   "lambda_max": lam_max, "align_temperature": True}}
    empty = pd.DataFrame()
    return Run(Path("."), "MiniGrid-DoorKey-5x5-v0", ablation, 0, empty, empty, metrics, empty, None, config)


def test_prior_run_metrics_read_what_the_prior_did_after_the_prefill():
    from lore.report.aggregate import prior_run_metrics

    run = _prior_run([9.0, 0.4, 1.5, 0.8], [0.0, 10.0, 3.0, 10.0])
    out = prior_run_metrics(run)
    assert out["kl_act_max"] == 1.5  # the 9.0 logged inside the prefill does not count
    assert out["kl_mix_wm_avg"] == pytest.approx(0.9)
    assert out["lambda_below_max_frac"] == pytest.approx(1 / 3)
    assert out["trust_llm_last"] == pytest.approx(0.2)
    assert not {k for k in out if k.startswith("temperature")}  # retired temperature alignment: ignored
    assert "trust_low_step" not in out  # the arm has no advice trust
    # advice caught: the first logged step with act-time trust < 0.1 after the prefill, and how often it is
    run.config["prior"]["trust"] = True
    run.metrics["trust_act_llm"] = [0.01, 0.5, 0.05, 0.3]
    out = prior_run_metrics(run)
    assert out["trust_low_step"] == 1000 and out["trust_low_frac"] == pytest.approx(1 / 3)
    run.metrics["trust_act_llm"] = [0.01, 0.5, 0.4, 0.3]
    out = prior_run_metrics(run)
    assert "trust_low_step" not in out and out["trust_low_frac"] == 0.0
    run.config["prior"]["enabled"] = False
    assert prior_run_metrics(run) == {}


def test_loop_metrics_take_the_whole_run_figures_and_the_report_tabulates_the_share_outside_updates():
    from pathlib import Path

    from lore.report.aggregate import loop_run_metrics
    from lore.report.benchmark_report import loop_speed
    from lore.report.runs import Run
    from lore.report.settings import AnalysisSettings

    def run(seed, frac):
        metrics = pd.DataFrame({"env_step": [500, 1000, 1500], "steps_per_s": [20.0, 30.0, 40.0 + seed],
                                "update_ms": [90.0, 95.0, 100.0], "update_time_frac": [0.5, 0.7, frac]})
        empty = pd.DataFrame()
        return Run(Path("."), "E", "full", seed, empty, empty, metrics, empty, None, {})

    out = loop_run_metrics(run(0, 0.88))
    assert out["steps_per_s_last"] == 40.0 and out["update_ms_last"] == 100.0  # cumulative: the last row
    assert out["outside_update_frac"] == pytest.approx(0.12)
    assert loop_run_metrics(Run(Path("."), "E", "full", 0, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                                pd.DataFrame(), None, {})) == {}
    rows = [{"env": "E", "ablation": "full", "seed": s, **loop_run_metrics(run(s, f))}
            for s, f in enumerate((0.88, 0.90, 0.86, 0.89, 0.87))]
    lines = loop_speed(pd.DataFrame(rows), AnalysisSettings())
    row = next(line for line in lines if line.startswith("| full |"))
    assert row.startswith("| full | 5 | 42.0 [") and "| 100 [100, 100] |" in row
    assert row.split(" | ")[-1].startswith("12.0 [")  # percent of wall time outside updates
    assert loop_speed(pd.DataFrame([{"env": "E", "ablation": "full", "seed": 0}]), AnalysisSettings()) == []


def test_kl_sentence_says_within_or_above_the_bound_from_the_numbers():
    from lore.paper.method import kl_sentence
    from lore.paper.numbers import cfg_number
    from lore.report.aggregate import prior_run_metrics

    def tables(kl_max):
        run = _prior_run([0.1, 0.4, kl_max, 0.8], [0.0, 1.0, 2.0, 3.0])
        row = {"env": run.env, "ablation": run.ablation, "seed": 0, "cfg_prior_kl_bound": 2.0,
               **prior_run_metrics(run)}
        empty = pd.DataFrame()
        return Tables(runs=pd.DataFrame([row]), eval_points=empty, stats=empty, improvement=empty,
                      achievements=empty)

    inside, outside = tables(1.9), tables(2.5)
    assert "peaked at 1.90 (within the bound 2)" in plain(kl_sentence(inside, "MiniGrid-DoorKey-5x5-v0"))
    assert "peaked at 2.50 (above the bound 2)" in plain(kl_sentence(outside, "MiniGrid-DoorKey-5x5-v0"))
    assert "100\\% of logged points" in plain(kl_sentence(inside, "MiniGrid-DoorKey-5x5-v0"))
    assert cfg_number(inside.runs, "cfg_prior_kl_bound", "MiniGrid-DoorKey-5x5-v0") == "2"


# --------------------------------------------------------------------------- findings, gap, floor (issue 12)


def test_comparison_verdict_follows_both_intervals():
    better = st.compare(np.array([0.9, 1.0, 0.95, 1.0]), np.array([0.1, 0.2, 0.0, 0.1]), resamples=300)
    worse = st.compare(np.array([0.1, 0.2, 0.0, 0.1]), np.array([0.9, 1.0, 0.95, 1.0]), resamples=300)
    same = st.compare(np.array([0.5, 0.6, 0.4, 0.5]), np.array([0.6, 0.4, 0.5, 0.5]), resamples=300)
    tied = st.compare(np.zeros(3), np.zeros(3), resamples=300)
    assert (better.verdict, worse.verdict, same.verdict, tied.verdict) == ("better", "worse", "unclear", "unclear")
    assert better.difference.estimate == pytest.approx(0.8625) and better.p_improve.estimate == 1.0
    assert (tied.difference.low, tied.difference.high, tied.p_improve.estimate) == (0.0, 0.0, 0.5)
    assert (better.n_x, better.n_y) == (4, 4)


@pytest.fixture()
def findings_grid(tmp_path):
    """rl_only (4 seeds); full clearly better; gate (3 seeds) clearly worse; kl the same as rl_only."""
    base = [[0, 0.2, 0.5], [0, 0.1, 0.4], [0, 0.3, 0.6], [0, 0.2, 0.5]]
    curves = {"rl_only": base, "kl": base, "full": [[0, 0.8, 1.0], [0, 0.9, 0.95], [0, 0.7, 1.0], [0, 0.8, 0.9]],
              "gate": [[0, 0.0, 0.0], [0, 0.0, 0.05], [0, 0.0, 0.0]]}
    paths = [_exact_run(tmp_path / "runs", a, s, c) for a, cs in curves.items() for s, c in enumerate(cs)]
    settings = AnalysisSettings(budgets=(1000, 2000), resamples=300, window_center=1000, window_half_width=250)
    return aggregate(load_runs(paths), settings), settings


def test_findings_wording_follows_the_statistics(findings_grid):
    from lore.paper.numbers import comparison_pairs, comparisons
    from lore.paper.results import findings_summary, findings_text

    tables, settings = findings_grid
    assert comparison_pairs(tables, settings, ENV) == [
        ("gate", "rl_only"), ("kl", "rl_only"), ("full", "rl_only"), ("full", "gate"), ("full", "kl")]
    found = {ENV: comparisons(tables, settings, ENV)}
    text = plain(findings_text(tables, settings, [ENV], found))
    assert r"\texttt{full} improves on \texttt{rl\_only} in final evaluation success rate" in text
    assert r"\texttt{gate} does worse than \texttt{rl\_only}" in text
    assert r"No evidence of a difference between \texttt{kl} and \texttt{rl\_only}" in text
    assert r"\texttt{full} improves on \texttt{gate}" in text and r"\texttt{full} improves on \texttt{kl}" in text
    # n is stated, and intervals from fewer than 5 seeds are flagged
    assert r"$n$ = 3 vs 4\textsuperscript{\dag}" in text and r"$n$ = 4 vs 4\textsuperscript{\dag}" in text
    summary = plain(findings_summary(tables, settings, ENV, found))
    assert r"improves for \texttt{full}" in summary and r"is worse for \texttt{gate}" in summary
    assert r"no evidence of a difference for \texttt{kl}" in summary


def test_train_sr_gap_and_untrained_floor_from_the_runs(tmp_path):
    from lore.paper.results import chance_text, gap_text

    # 4000 steps: the last quarter holds the episodes ending after 3000 (two of three succeed).
    episodes = {"episode_steps": [500, 1500, 3200, 3600, 3900], "train_success": [0, 0, 1, 1, 0]}
    paths = [_exact_run(tmp_path, "full", s, [0.2, 0.1, 0.1, 0.0, 0.1], **episodes) for s in range(2)]
    tables = aggregate(load_runs(paths), SETTINGS)
    row = tables.runs.iloc[0]
    assert row["initial_sr"] == pytest.approx(0.2)
    assert row["train_sr_final"] == pytest.approx(2 / 3)
    assert row["train_eval_gap"] == pytest.approx(2 / 3 - 0.1)
    gap = plain(gap_text(tables, ENV))
    assert r"\texttt{full} succeeds more often in training, with the prior, than in evaluation without it" in gap
    assert "gap +0.57 [+0.57, +0.57]" in gap and "last 25\\%" in gap
    assert "the gap is largest for \\texttt{full}" in gap
    assert "succeeds in 0.20 [0.20, 0.20] of evaluation episodes ($n$ = 2 runs)" in plain(chance_text(tables, SETTINGS, [ENV]))


def test_sr_table_and_iqm_figure_show_the_last_budget_once_when_it_is_the_end(known_grid):
    from lore.report.figures import iqm_panels, success_panels
    from lore.report.latex import budgets_shown, sr_table

    paths, _ = known_grid  # runs end at 4000
    ends_at_budget = AnalysisSettings(budgets=(2000, 4000), resamples=200)
    tables = aggregate(load_runs(paths), ends_at_budget)
    assert budgets_shown(tables, ends_at_budget, ENV) == ([2000, 4000], False)
    assert iqm_panels(tables, ends_at_budget) == [(ENV, "sr@2000"), (ENV, "sr@4000")]
    table = sr_table(tables, ends_at_budget)
    assert "SR @ 4k (final)" in table and "Final SR" not in table and "Untrained" in table
    assert r"$n$ = \lorenum{4} seeds per ablation" in table and r"4\textsuperscript{\dag}" in table
    earlier = AnalysisSettings(budgets=(2000,), resamples=200)
    tables = aggregate(load_runs(paths), earlier)
    assert iqm_panels(tables, earlier) == [(ENV, "sr@2000"), (ENV, "final_sr")]
    assert "Final SR" in sr_table(tables, earlier)
    assert success_panels(tables.eval_points) == [(ENV, "full")]  # one panel per arm against rl_only


def test_setup_text_reports_what_ran(findings_grid):
    from lore.paper.method import advisor_sentence, arms_text, grid_sentence
    from lore.paper.numbers import setup_macros
    from lore.paper.results import goal_items

    tables, settings = findings_grid
    assert plain(grid_sentence(tables)) == (
        r"15 runs: 1 environment (DoorKey-5x5), 4 arms (\texttt{rl\_only}, \texttt{gate}, \texttt{kl} and "
        r"\texttt{full}), 3--4 seeds per arm (the counts per arm are in the tables).")
    advisor = plain(advisor_sentence(tables))
    assert "none" not in advisor and r"(backend \texttt{scripted})" in advisor
    arms = plain(arms_text(tables, settings, ENV))
    assert "noisy" not in arms and "adversarial" not in arms and "temperature" not in arms
    goals = " ".join(goal_items(tables, settings, ENV))
    assert "RL alone (" in goals and "Rl alone" not in goals
    macros = setup_macros(tables, settings, ENV)
    assert (macros["loreUnimix"], macros["loreRetnormLow"], macros["loreRetnormHigh"]) == ("1", "5", "95")
    assert macros["loreSeedsPerArm"] == "3--4" and macros["loreLLMBackend"] == "scripted"


NEW_FULL = {"llm.backend": "scripted", "prior.enabled": True, "prior.gate": "fixed", "prior.kl_mode": "lagrangian",
            "prior.trust": True, "features.enabled": False, "plan.enabled": False, "distill.enabled": False,
            "advisor.mode": "good"}
"""The resolved settings of the default ``full`` chosen by decide_default (lore/ablations.py)."""


def _method_tables(**arms: dict) -> Tables:
    """A run table with one run per arm whose config columns are ``arms[arm]`` (dotted keys)."""
    rows = [{"env": ENV, "ablation": arm, "seed": 0, "final_sr": 0.5,
             **{"cfg_" + k.replace(".", "_"): v for k, v in cfg.items()}} for arm, cfg in arms.items()]
    empty = pd.DataFrame()
    return Tables(runs=pd.DataFrame(rows), eval_points=empty, stats=empty, improvement=empty, achievements=empty)


def test_method_text_for_the_new_full_names_neither_gate_nor_temperature_alignment():
    from lore.paper.method import arms_text, full_components
    from lore.paper.results import goal_items

    tables = _method_tables(full=NEW_FULL, kl_adversarial={**NEW_FULL, "prior.trust": False,
                                                           "advisor.mode": "adversarial"},
                            full_adversarial={**NEW_FULL, "advisor.mode": "adversarial"})
    parts = plain(full_components(tables, ENV))
    assert parts == r"a fixed $\beta$, advice trust and KL control (trust region and distillation)"
    text = plain(arms_text(tables, AnalysisSettings(), ENV))
    full = next(s for s in text.removeprefix("In this grid ").split("; ") if s.startswith(r"\texttt{full} "))
    for word in ("gate", "temperature", "feature"):
        assert word not in full.lower(), f"{word!r} described as part of full: {full}"
    assert r"without the advice trust that \texttt{full\_adversarial} adds" in text
    stats = pd.DataFrame([{"env": ENV, "ablation": a, "metric": "final_sr", "iqm": 0.4, "n": 5}
                          for a in ("rl_only", "full_adversarial", "kl_adversarial")])
    tables = Tables(runs=tables.runs, eval_points=pd.DataFrame(), stats=stats, improvement=pd.DataFrame(),
                    achievements=pd.DataFrame())
    beside = [plain(g) for g in goal_items(tables, AnalysisSettings(), ENV) if "beside it" in g]
    assert len(beside) == 1 and "without the advice trust that" in beside[0] and "gate" not in beside[0]
    # the check has teeth: runs of the former full (gate, temperature alignment, features) are described as such
    old = _method_tables(full={**NEW_FULL, "prior.gate": "uncertainty", "features.enabled": True,
                               "prior.align_temperature": True})
    assert "uncertainty gate" in full_components(old, ENV) and "LLM features" in full_components(old, ENV)


def _experiment_checkout(root, name: str, record: dict | str | None):
    """A checkout with the real declaration of experiment ``name`` and, if given, its record (a dict, or raw
    text)."""
    import shutil
    from pathlib import Path

    decl = root / "config" / "experiments" / f"{name}.yaml"
    decl.parent.mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[1] / "config" / "experiments" / f"{name}.yaml", decl)
    if record is not None:
        path = root / "docs" / "experiments" / "records" / f"{name}.json"
        path.parent.mkdir(parents=True)
        path.write_text(record if isinstance(record, str) else json.dumps(record))
    return root


def _decision_checkout(root, record: dict | None):
    """A checkout with the decide_default declaration (the real one) and, if given, its record."""
    return _experiment_checkout(root, "decide_default", record)


def _auc_row(env, arm, low, high):
    return {"env": env, "arm": arm, "vs": "rl_only", "metric": "auc", "n_arm": 5, "n_vs": 5, "n_paired": 5,
            "mean_arm": 0.3, "mean_vs": 0.3, "difference": (low + high) / 2, "low": low, "high": high,
            "p_improvement": 0.5}


def test_default_choice_is_read_from_the_decide_default_record(tmp_path):
    from lore.paper.method import default_choice_sentence

    tables = _method_tables(full=NEW_FULL)
    lava, crossing, doorkey = "MiniGrid-LavaGapS5-v0", "MiniGrid-SimpleCrossingS9N1-v0", "MiniGrid-DoorKey-5x5-v0"
    rows = [_auc_row(env, f"{cand}_adversarial", *((-0.2, -0.01) if bad else (-0.05, 0.1)))
            for cand, bad_env in (("simple", lava), ("gated", lava), ("full", crossing))
            for env in (doorkey, lava, crossing) for bad in (env == bad_env,)]
    record = {"name": "decide_default", "commit": "abc", "run_commits": {}, "verdict": "none",
              "reason": "no candidate meets every requirement",
              "scores": {"simple": 0.421, "gated": 0.423, "full": 0.428}, "comparison": rows}
    text = plain(default_choice_sentence(tables, _decision_checkout(tmp_path / "with", record)))
    assert "3 designs" in text and "3 environments with 5 seeds each" in text
    assert r"failed for \texttt{simple} on LavaGapS5, for \texttt{gated} on LavaGapS5 and for \texttt{full} on " \
           "SimpleCrossingS9N1" in text
    assert "0.421 for \\texttt{simple}, 0.423 for \\texttt{gated} and 0.428 for \\texttt{full}" in text
    assert r"within 0.01 of it" in text and r"fewest mechanisms, \texttt{simple}, became the default" in text
    assert "predate" not in text and r"which \texttt{full} now runs" in text
    former = _method_tables(full={**NEW_FULL, "prior.gate": "uncertainty", "features.enabled": True})
    assert "predate that choice and ran with the uncertainty gate and LLM features" in plain(
        default_choice_sentence(former, tmp_path / "with"))
    # a selecting verdict is quoted as such; no record: a placeholder without numbers
    picked = plain(default_choice_sentence(tables, _decision_checkout(
        tmp_path / "select", {**record, "verdict": "select gated"})))
    assert r"The rule selected \texttt{gated}" in picked and "No design met" not in picked
    missing = default_choice_sentence(tables, _decision_checkout(tmp_path / "without", None))
    assert "has no record in this checkout" in missing and not any(c.isdigit() for c in missing)
    corrupt = _decision_checkout(tmp_path / "corrupt", None) / "docs" / "experiments" / "records"
    corrupt.mkdir(parents=True)
    (corrupt / "decide_default.json").write_text("{not json")
    assert "has no record" in default_choice_sentence(tables, tmp_path / "corrupt")


def test_the_regret_bound_is_claimed_only_where_the_low_regret_verdict_shows_it(tmp_path):
    from lore.paper.method import regret_sentence, regret_summary

    envs = ("MiniGrid-DistShift1-v0", "MiniGrid-Empty-Random-6x6-v0", "MiniGrid-DoorKey-5x5-v0",
            "MiniGrid-MultiRoom-N2-S4-v0")
    safe, harmful, shaky, worse = (-0.01, 0.05), (-0.2, -0.05), (-0.06, 0.04), (-0.1, -0.01)

    def rows(arm, vs, bad_env, bad):  # one AUC row per env; ``bad`` on ``bad_env`` (every env when None)
        return [{**_auc_row(env, arm, *(bad if bad_env in (None, env) else safe)), "vs": vs, "n_paired": 10}
                for env in envs]

    comparison = (rows("full_adversarial", "rl_only", envs[3], harmful) + rows("full", "kl", envs[1], worse)
                  + rows("bandit_adversarial", "rl_only", envs[0], shaky) + rows("bandit", "kl", None, safe)
                  + rows("critic_adversarial", "rl_only", None, safe) + rows("critic", "kl", None, worse)
                  + rows("rl_only", "rl_only", "MiniGrid-LavaGapS5-v0", harmful))  # an env that decides nothing
    record = {"name": "low_regret", "commit": "abc", "verdict": "none", "comparison": comparison}
    text = plain(regret_sentence(_experiment_checkout(tmp_path / "none", "low_regret", record)))
    assert r"\texttt{full}: under adversarial advice it fell below \texttt{rl\_only} on MultiRoom-N2-S4 and the " \
           r"lower end of its interval against \texttt{rl\_only} lay below $-$0.02 on MultiRoom-N2-S4; with good " \
           r"advice it fell below \texttt{kl} on Empty-Random-6x6." in text
    # a lower end under the bound fails even where the interval covers 0; a design that fails nothing is not named
    assert r"\texttt{bandit}: under adversarial advice the lower end of its interval against \texttt{rl\_only} " \
           r"lay below $-$0.02 on DistShift1." in text
    assert r"\texttt{critic}: with good advice it fell below \texttt{kl} on every one." in text
    assert "LavaGapS5" not in text and "10 paired seeds" in text
    assert "claims no bound on what a bad advisor costs" in text and r"\texttt{full} stays the default" in text
    picked = plain(regret_sentence(_experiment_checkout(tmp_path / "select", "low_regret",
                                                        {**record, "verdict": "select bandit"})))
    assert r"The rule selected \texttt{bandit}, which \texttt{full} now runs" in picked
    assert r"was at least $-$0.02, the bound this paper claims there" in picked and "claims no bound" not in picked
    assert "no such bound is claimed" in regret_summary(tmp_path / "none")
    chosen = plain(regret_summary(tmp_path / "select"))
    assert r"selected \texttt{bandit}: there an adversarial advisor cost at most 0.02 AUC" in chosen
    for name, saved in (("missing", None), ("corrupt", "{not json")):
        assert regret_summary(_experiment_checkout(tmp_path / name, "low_regret", saved)) == (
            "No bound on what an adversarial advisor costs is claimed.")
        missing = regret_sentence(tmp_path / name)
        assert "has no record in this checkout" in missing and "claims no such bound" in missing
        assert not any(c.isdigit() for c in missing)


def test_the_crafter_claim_follows_the_crafter_cpu_full_verdict(tmp_path):
    from lore.paper.method import crafter_claim_sentence

    def row(vs, metric, low, high):
        return {"env": "crafter", "arm": "full", "vs": vs, "metric": metric, "n_arm": 5, "n_vs": 5,
                "n_paired": 5, "difference": (low + high) / 2, "low": low, "high": high}

    rows = [row("rl_only", "crafter_score", -0.2, 1.0), row("rl_only", "final_sr", 0.04, 0.06),
            row("random", "crafter_score", 0.2, 1.2)]
    record = {"name": "crafter_cpu_full", "commit": "abc", "run_commits": {}, "verdict": "adopt",
              "reason": "every requirement holds on every env", "scores": None, "comparison": rows}
    held = plain(crafter_claim_sentence(_experiment_checkout(tmp_path / "adopt", "crafter_cpu_full", record)))
    assert r"\texttt{full} $-$ \texttt{rl\_only}: Crafter score +0.40 [$-$0.20, +1.00], achievement rate +0.05" in held
    assert r"\texttt{full} $-$ \texttt{random}: Crafter score +0.70 [+0.20, +1.20]" in held
    assert "5 seeds per arm" in held and "config/" in held
    assert r"not fall below \texttt{rl\_only} beyond the paired interval of the Crafter score, held" in held
    assert "limited to MiniGrid" not in held
    rejected = plain(crafter_claim_sentence(_experiment_checkout(tmp_path / "reject", "crafter_cpu_full",
                                                            {**record, "verdict": "reject"})))
    assert "did not hold" in rejected and "limited to MiniGrid" in rejected and "claim this paper makes" not in rejected
    for name, bad in (("missing", None), ("corrupt", "{not json"), ("no_rows", json.dumps({"verdict": "adopt"}))):
        text = crafter_claim_sentence(_experiment_checkout(tmp_path / name, "crafter_cpu_full", bad))
        assert "has no record in this checkout" in text and "no claim for Crafter" in text
        assert not any(c.isdigit() for c in text)


def test_signed_differences_print_a_minus_sign():
    from lore.report.latex import fmt_signed

    assert (fmt_signed(0.5), fmt_signed(-0.25), fmt_signed(-0.001)) == ("+0.50", "$-$0.25", "0.00")


def test_act_time_trust_gets_a_figure_row_only_where_it_is_not_the_absorption_trust():
    from lore.report.figures import act_trust_differs

    same = pd.DataFrame({"trust_llm": [0.5, 0.3], "trust_act_llm": [0.5, 0.3]})
    assert not act_trust_differs(same)
    assert act_trust_differs(same.assign(trust_act_llm=[0.5, 0.1]))
    assert not act_trust_differs(same.drop(columns="trust_act_llm"))  # runs from before the column existed
    assert not act_trust_differs(pd.DataFrame({"trust_llm": [None], "trust_act_llm": [None]}, dtype=float))


def test_goals_report_the_unguarded_adversary_beside_the_low_regret_goal():
    from lore.paper.results import goal_items
    from lore.report.settings import AnalysisSettings

    def row(arm, iqm, n=5):
        return {"env": ENV, "ablation": arm, "metric": "final_sr", "iqm": iqm, "n": n}

    empty = pd.DataFrame()
    stats = pd.DataFrame([row("rl_only", 0.40), row("full_adversarial", 0.38), row("kl_adversarial", 0.05, 3)])
    tables = Tables(runs=empty, eval_points=empty, stats=stats, improvement=empty, achievements=empty)
    goals = [plain(g) for g in goal_items(tables, AnalysisSettings(), ENV)]
    assert any(g.startswith("With an adversarial advisor") and r"\textbf{met}" in g for g in goals)
    beside = [g for g in goals if g.startswith("Measured beside it")]
    assert len(beside) == 1 and "0.05 against 0.38" in beside[0] and "= 3 and 5" in beside[0]
    # without kl_adversarial runs nothing is said about it
    tables = Tables(runs=empty, eval_points=empty, stats=stats[stats["ablation"] != "kl_adversarial"],
                    improvement=empty, achievements=empty)
    assert not any("beside it" in g for g in goal_items(tables, AnalysisSettings(), ENV))


def test_paired_difference_cancels_what_pairs_share_and_checks_shapes():
    offsets = np.array([0.0, 0.4, 0.1, 0.7, 0.2, 0.5])
    noise = np.array([0.01, -0.02, 0.0, 0.02, -0.01, 0.0])
    d = st.paired_difference(offsets + 0.1 + noise, offsets)
    assert d.estimate == pytest.approx(0.1) and 0.08 < d.low < 0.1 < d.high < 0.12
    unpaired = st.compare(offsets + 0.1 + noise, offsets)
    assert unpaired.difference.low < 0 < unpaired.difference.high  # the shared offsets swamp it unpaired
    for x, y in ((np.ones(3), np.ones(4)), (np.ones((2, 2)), np.ones((2, 2))), (np.ones(0), np.ones(0))):
        with pytest.raises(ValueError, match="paired_difference"):
            st.paired_difference(x, y)


def test_find_run_dirs_follows_linked_folders_only_when_asked_and_reads_each_run_once(tmp_path):
    from lore.report.runs import find_run_dirs

    root, elsewhere = tmp_path / "cmp", tmp_path / "baseline"
    for folder in (root / "full" / "seed0", elsewhere / "rl_only" / "seed0", elsewhere / "rl_only" / "seed1"):
        folder.mkdir(parents=True)
        (folder / "eval.csv").write_text("env_step,success_rate\n")
    (root / "no_eval").mkdir()
    (root / "rl_only").symlink_to(elsewhere / "rl_only", target_is_directory=True)  # a linked baseline
    (root / "rl_only_again").symlink_to(elsewhere / "rl_only", target_is_directory=True)  # the same runs, twice
    (root / "full" / "seed0" / "up").symlink_to(root, target_is_directory=True)  # a loop
    with pytest.raises(RunDataError, match=r"cmp/rl_only: a symlink to .*outside the runs root"):
        find_run_dirs(root)  # links out of the root are refused unless asked for
    found = find_run_dirs(root, follow_outside=True)
    assert [p.relative_to(root).as_posix() for p in found] == ["full/seed0", "rl_only/seed0", "rl_only/seed1"]
    with pytest.raises(RunDataError, match="does not exist"):
        find_run_dirs(tmp_path / "missing")
