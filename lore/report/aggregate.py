"""From run directories to tidy statistics tables.

``aggregate(runs, settings)`` returns:

- ``eval_points``: every eval point of every run (env, ablation, seed, env_step, ...).
- ``runs``: one row per run with its per-run metrics (final SR, AUC, SR at each budget, ...).
- ``stats``: per (env, ablation, metric): n, mean, IQM, median, 95% bootstrap CIs of mean and IQM.
  ``env == "all"`` rows pool the environments with a stratified bootstrap.
- ``improvement``: probability that an ablation beats the baseline (``rl_only``), with CI.
- ``achievements``: Crafter achievement success rates per (env, ablation), with CI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lore.envs.crafter import crafter_score
from lore.report import stats as st
from lore.report.outputs import write_csv
from lore.report.runs import (
    ACHIEVEMENT_PREFIX,
    CONFIG_COLUMNS,
    KEYS,
    Run,
    TableSpec,
    config_value,
    llm_call_counts,
    read_table,
    tidy,
)
from lore.report.settings import AnalysisSettings, budget_metric

__all__ = ["ALL_ENVS", "CONFIG_COLUMNS", "AnalysisSettings", "Tables", "aggregate", "budget_metric"]

ALL_ENVS = "all"


# --------------------------------------------------------------------------- per run


def run_metrics(run: Run, settings: AnalysisSettings) -> dict[str, float]:
    """The per-run numbers every table is built from.

    Besides the eval curve summaries: ``initial_sr`` (the eval at step 0: the untrained policy, the floor),
    ``train_sr_final`` (success of the training episodes ending in the last :data:`TRAIN_TAIL_FRACTION` of
    the run; they act with the prior where the arm has one) and ``train_eval_gap`` (that minus ``final_sr``).
    """
    ev = run.eval.dropna(subset=["env_step", "success_rate"])
    out: dict[str, float] = {"last_step": math.nan, "final_sr": math.nan, "auc": math.nan}
    if len(ev):
        steps, sr = ev["env_step"].to_numpy(float), ev["success_rate"].to_numpy(float)
        out["last_step"] = float(steps[-1])
        out["final_sr"] = float(sr[-1])
        out["auc"] = st.area_under_curve(steps, sr)
        hit = st.steps_to_threshold(steps, sr, settings.threshold)
        out["steps_to_threshold"] = hit
        out["reached_threshold"] = float(not math.isnan(hit))
        for budget in settings.budgets_for(run.env):
            # A budget the run never reached has no value (not the run's last point).
            out[budget_metric(budget)] = st.value_at_budget(steps, sr, budget) if steps[-1] >= budget else math.nan
        if "return_mean" in ev:
            out["final_return"] = float(ev["return_mean"].iloc[-1])
        ach = run.achievement_columns
        if ach:
            rates = ev[ach].iloc[-1].to_numpy(float)
            out["crafter_score"] = crafter_score(rates) if np.all(np.isfinite(rates)) else math.nan
        if steps[0] == 0:
            out["initial_sr"] = float(sr[0])  # the untrained policy: the floor (chance level)
    episodes = run.episodes
    if len(episodes) and {"env_step", "success"} <= set(episodes.columns):
        raw = episodes["success"].astype(float).to_numpy()
        success = (raw > 0).astype(float) if run.achievement_columns else raw  # Crafter logs a fraction
        ends = episodes["env_step"].to_numpy(float)
        out["train_sr_window"] = st.cumulative_success_window(
            ends, success, settings.window_center, settings.window_half_width
        )
        # Training episodes act with the prior (apart from control episodes); eval episodes without it.
        tail = st.training_success_tail(ends, raw, TRAIN_TAIL_FRACTION, last=out["last_step"])
        out["train_sr_final"] = tail
        if not math.isnan(tail) and not math.isnan(out["final_sr"]):
            out["train_eval_gap"] = tail - out["final_sr"]
    out.update(llm_call_counts(run))
    out.update(prior_run_metrics(run))
    out.update(loop_run_metrics(run))
    if run.done and "wall_s" in run.done:
        out["wall_s"] = float(run.done["wall_s"])
    return out


TRAIN_TAIL_FRACTION = 0.25
"""``train_sr_final``: success rate of the training episodes ending in this last share of a run's steps."""

PRIOR_LAST = ("trust_llm", "trust_act_llm", "trust_plan")
"""Logged last values the run table keeps (older runs' metrics.csv may also hold the retired temperature
refit counters of temperature alignment; they are ignored)."""
PRIOR_MEAN = ("beta_mean", "prior_mask_frac", "kl_mix_wm", "kl_mix_wm_train", "beta_disagree", "beta_agree", "u_entropy_frac_disagree",
              "u_entropy_frac_agree", "u_value_ratio_disagree", "u_value_ratio_agree",
              "u_disagreement_ratio_disagree", "u_disagreement_ratio_agree")

TRUST_LOW = 0.1
"""Act-time trust below which advice is treated as caught (``trust_low_step``, ``trust_low_frac``): it then
acts at most at a fifth of beta (:func:`lore.prior.trust.act_scale`)."""


LOOP_LAST = ("steps_per_s", "update_ms", "update_time_frac")
"""Speed of the training loop, cumulative over the run, so the last logged value is the whole run's."""


def loop_run_metrics(run: Run) -> dict[str, float]:
    """``<name>_last`` of LOOP_LAST and ``outside_update_frac``: the share of the loop's wall time spent
    outside gradient updates (acting, env steps, replay writes, evaluation, logging, checkpoints)."""
    m = run.metrics
    out: dict[str, float] = {}
    for name in LOOP_LAST:
        values = m[name].to_numpy(float) if name in m else np.array([])
        values = values[np.isfinite(values)]
        if values.size:
            out[f"{name}_last"] = float(values[-1])
    if "update_time_frac_last" in out:
        out["outside_update_frac"] = 1.0 - out["update_time_frac_last"]
    return out


def prior_run_metrics(run: Run) -> dict[str, float]:
    """What the prior layer did in one run, from metrics.csv after the prefill (empty without a prior).

    ``<name>_last``: last logged value (trust); ``<name>_avg``: mean over log points;
    ``kl_act_max``: the largest logged act-time KL(pi_mix || pi_wm) on advised states;
    ``lambda_below_max_frac``: share of log points with lambda < lambda_max;
    ``trust_low_step``: first logged env step with the LLM's act-time trust below :data:`TRUST_LOW` (absent if
    never), ``trust_low_frac``: share of log points where it is, how soon and how steadily advice is caught.
    """
    m = run.metrics
    if not len(m) or "beta_mean" not in m or "env_step" not in m:
        return {}
    prior = run.config.get("prior", {}) if isinstance(run.config, dict) else {}
    if not prior.get("enabled", False):
        return {}
    prefill = float((run.config.get("train") or {}).get("prefill", 0))
    m = m[m["env_step"] > prefill]
    out: dict[str, float] = {}

    def finite(name: str) -> np.ndarray:
        values = m[name].to_numpy(float) if name in m else np.array([])
        return values[np.isfinite(values)]

    for name in PRIOR_LAST:
        values = finite(name)
        if values.size:
            out[f"{name}_last"] = float(values[-1])
    for name in PRIOR_MEAN:
        values = finite(name)
        if values.size:
            out[f"{name}_avg"] = float(values.mean())
    kl = finite("kl_mix_wm")
    if kl.size:
        out["kl_act_max"] = float(kl.max())
    lam = finite("lambda_kl")
    if lam.size and prior.get("kl_mode") == "lagrangian":
        out["lambda_below_max_frac"] = float(np.mean(lam < float(prior.get("lambda_max", math.inf)) - 1e-9))
    trust_column = "trust_act_llm" if "trust_act_llm" in m else "trust_llm"  # older runs logged both
    if prior.get("trust") and trust_column in m:
        trust = m[trust_column].to_numpy(float)
        low = np.isfinite(trust) & (trust < TRUST_LOW)
        out["trust_low_frac"] = float(low[np.isfinite(trust)].mean()) if np.isfinite(trust).any() else math.nan
        if low.any():
            out["trust_low_step"] = float(m["env_step"].to_numpy(float)[low.argmax()])
    return out


def config_values(config: dict) -> dict[str, object]:
    return {"cfg_" + dotted.replace(".", "_"): config_value(config, dotted) for dotted in CONFIG_COLUMNS}


def run_table(runs: list[Run], settings: AnalysisSettings) -> pd.DataFrame:
    rows = []
    for run in runs:
        rows.append({"env": run.env, "ablation": run.ablation, "seed": run.seed, "complete": run.complete,
                     **run_metrics(run, settings), **config_values(run.config)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- across seeds

NON_METRICS = {"env", "ablation", "seed", "complete", "last_step"}
POOLED_METRICS = ("final_sr", "auc", "reached_threshold")
"""Metrics on the same [0, 1] scale in every environment, pooled into ``env == all`` rows."""
IMPROVEMENT_METRICS = ("final_sr", "auc")


def _describe(strata: list[np.ndarray], settings: AnalysisSettings) -> dict[str, float]:
    strata = [s[np.isfinite(s)] for s in strata]
    strata = [s for s in strata if s.size]
    n = int(sum(s.size for s in strata))
    row = {"n": n}
    if n == 0:
        return row | {k: math.nan for k in ("mean", "mean_low", "mean_high", "iqm", "iqm_low", "iqm_high",
                                            "median", "std")}
    pooled = np.concatenate(strata)
    for name in ("mean", "iqm"):
        ci = st.stratified_bootstrap_ci(strata, name, confidence=settings.confidence,
                                        resamples=settings.resamples, seed=settings.seed)
        row |= {name: ci.estimate, f"{name}_low": ci.low, f"{name}_high": ci.high}
    row["median"] = float(np.median(pooled))
    row["std"] = float(np.std(pooled, ddof=1)) if n > 1 else 0.0
    return row


def metric_columns(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c not in NON_METRICS and not c.startswith("cfg_")]


def stats_table(runs: pd.DataFrame, settings: AnalysisSettings) -> pd.DataFrame:
    rows = []
    metrics = metric_columns(runs)
    for (env, ablation), group in runs.groupby(["env", "ablation"], sort=True):
        for metric in metrics:
            values = group[metric].to_numpy(float)
            if np.all(np.isnan(values)):
                continue
            rows.append({"env": env, "ablation": ablation, "metric": metric, "n_runs": len(group),
                         **_describe([values], settings)})
    envs = sorted(runs["env"].unique())
    if len(envs) > 1:
        for ablation, group in runs.groupby("ablation", sort=True):
            for metric in [m for m in POOLED_METRICS if m in metrics]:
                strata = [group.loc[group["env"] == env, metric].to_numpy(float) for env in envs]
                if sum(np.isfinite(s).sum() for s in strata) == 0:
                    continue
                rows.append({"env": ALL_ENVS, "ablation": ablation, "metric": metric, "n_runs": len(group),
                             **_describe(strata, settings)})
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


STATS_COLUMNS = ["env", "ablation", "metric", "n_runs", "n", "mean", "mean_low", "mean_high", "iqm", "iqm_low",
                 "iqm_high", "median", "std"]


def improvement_table(runs: pd.DataFrame, settings: AnalysisSettings) -> pd.DataFrame:
    """P(ablation > baseline) per env and metric; ``env == all`` averages it over envs (stratified)."""
    columns = ["env", "ablation", "baseline", "metric", "p_improve", "low", "high", "n", "n_baseline"]
    base = runs[runs["ablation"] == settings.baseline]
    if base.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    envs = sorted(runs["env"].unique())
    ablations = sorted(a for a in runs["ablation"].unique() if a != settings.baseline)
    for env in envs:
        metrics = list(IMPROVEMENT_METRICS) + [budget_metric(b) for b in settings.budgets_for(env)]
        for ablation in ablations:
            for metric in metrics:
                if metric not in runs.columns:
                    continue
                x = runs.loc[(runs["env"] == env) & (runs["ablation"] == ablation), metric].to_numpy(float)
                y = base.loc[base["env"] == env, metric].to_numpy(float)
                x, y = x[np.isfinite(x)], y[np.isfinite(y)]
                if not x.size or not y.size:
                    continue
                ci = st.probability_of_improvement_ci([x], [y], confidence=settings.confidence,
                                                      resamples=settings.resamples, seed=settings.seed)
                rows.append({"env": env, "ablation": ablation, "baseline": settings.baseline, "metric": metric,
                             "p_improve": ci.estimate, "low": ci.low, "high": ci.high,
                             "n": x.size, "n_baseline": y.size})
    if len(envs) > 1:
        for ablation in ablations:
            for metric in IMPROVEMENT_METRICS:
                xs, ys = [], []
                for env in envs:
                    x = runs.loc[(runs["env"] == env) & (runs["ablation"] == ablation), metric].to_numpy(float)
                    y = base.loc[base["env"] == env, metric].to_numpy(float)
                    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
                    if x.size and y.size:
                        xs.append(x)
                        ys.append(y)
                if len(xs) < 2:
                    continue
                ci = st.probability_of_improvement_ci(xs, ys, confidence=settings.confidence,
                                                      resamples=settings.resamples, seed=settings.seed)
                rows.append({"env": ALL_ENVS, "ablation": ablation, "baseline": settings.baseline,
                             "metric": metric, "p_improve": ci.estimate, "low": ci.low, "high": ci.high,
                             "n": sum(x.size for x in xs), "n_baseline": sum(y.size for y in ys)})
    return pd.DataFrame(rows, columns=columns)


def achievement_table(runs: list[Run], settings: AnalysisSettings) -> pd.DataFrame:
    """Final-eval success rate of every Crafter achievement per (env, ablation), mean over seeds with CI."""
    columns = ["env", "ablation", "achievement", "n", "rate", "low", "high"]
    finals: dict[tuple[str, str], list[pd.Series]] = {}
    for run in runs:
        ach = run.achievement_columns
        ev = run.eval.dropna(subset=["env_step"])
        if ach and len(ev):
            finals.setdefault((run.env, run.ablation), []).append(ev[ach].iloc[-1])
    rows = []
    for (env, ablation), finals_list in sorted(finals.items()):
        frame = pd.DataFrame(finals_list)
        for column in frame.columns:
            values = frame[column].to_numpy(float)
            values = values[np.isfinite(values)]
            if not values.size:
                continue
            ci = st.stratified_bootstrap_ci([values], "mean", confidence=settings.confidence,
                                            resamples=settings.resamples, seed=settings.seed)
            rows.append({"env": env, "ablation": ablation, "achievement": column[len(ACHIEVEMENT_PREFIX):],
                         "n": values.size, "rate": ci.estimate, "low": ci.low, "high": ci.high})
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------- all together


RATE_COLUMNS = ("final_sr", "auc", "reached_threshold", "initial_sr", "train_sr_final", "train_sr_window")
TABLE_SPECS = {
    "eval_points": TableSpec(required=(*KEYS, "env_step", "success_rate"), text=("env", "ablation"),
                             steps=("seed", "env_step"), rates=("success_rate",),
                             rate_prefixes=(ACHIEVEMENT_PREFIX,), numeric_all=True, finite_all=True,
                             rows_needed=True),
    "runs": TableSpec(required=(*KEYS, "complete"), text=("env", "ablation"), steps=("seed",),
                      rates=RATE_COLUMNS, rate_prefixes=("sr@",), numeric_all=True, free_prefixes=("cfg_",),
                      rows_needed=True),
    "stats": TableSpec(required=tuple(STATS_COLUMNS[:5]), text=("env", "ablation", "metric"), steps=("n_runs", "n"),
                       numeric=tuple(STATS_COLUMNS[5:]), finite_all=True, rows_needed=True),
    "improvement": TableSpec(required=("env", "ablation", "baseline", "metric", "p_improve", "n", "n_baseline"),
                             text=("env", "ablation", "baseline", "metric"), steps=("n", "n_baseline"),
                             rates=("p_improve", "low", "high"), finite_all=True),
    "achievements": TableSpec(required=("env", "ablation", "achievement", "n", "rate"),
                              text=("env", "ablation", "achievement"), steps=("n",), rates=("rate", "low", "high"),
                              finite_all=True),
}
"""What each table ``lore aggregate`` writes must hold when ``lore figures`` / ``lore paper-macros`` read it."""


@dataclass
class Tables:
    eval_points: pd.DataFrame
    runs: pd.DataFrame
    stats: pd.DataFrame
    improvement: pd.DataFrame
    achievements: pd.DataFrame

    FILES = ("eval_points", "runs", "stats", "improvement", "achievements")

    @classmethod
    def paths(cls, out_dir: str | Path) -> list[Path]:
        return [Path(out_dir) / f"{name}.csv" for name in cls.FILES]

    def write_csv(self, out_dir: str | Path) -> list[Path]:
        """Each table written atomically (a kill or a full disk keeps its previous version)."""
        return [write_csv(path, getattr(self, name)) for name, path in zip(self.FILES, self.paths(out_dir), strict=True)]

    @classmethod
    def read_csv(cls, out_dir: str | Path) -> Tables:
        """Read and check all five tables (columns, types, ranges) before anything uses them."""
        frames = {name: read_table(path, TABLE_SPECS[name], "run `lore aggregate` first")
                  for name, path in zip(cls.FILES, cls.paths(out_dir), strict=True)}
        return cls(**frames)


def aggregate(runs: list[Run], settings: AnalysisSettings) -> Tables:
    if not runs:
        raise ValueError("aggregate: no runs")
    table = run_table(runs, settings)
    eval_points = tidy(runs, "eval")
    return Tables(
        eval_points=eval_points.sort_values(KEYS + ["env_step"], kind="stable").reset_index(drop=True),
        runs=table,
        stats=stats_table(table, settings),
        improvement=improvement_table(table, settings),
        achievements=achievement_table(runs, settings),
    )
