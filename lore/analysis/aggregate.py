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

from lore.analysis import stats as st
from lore.analysis.runs import ACHIEVEMENT_PREFIX, KEYS, Run, llm_call_counts, tidy
from lore.analysis.settings import AnalysisSettings, budget_metric

__all__ = ["ALL_ENVS", "AnalysisSettings", "Tables", "aggregate", "budget_metric"]

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
            out["crafter_score"] = st.crafter_score(rates) if np.all(np.isfinite(rates)) else math.nan
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

PRIOR_LAST = ("trust_llm", "trust_act_llm", "trust_plan", "temperature_refits", "temperature_refits_at_bound")
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

    ``<name>_last``: last logged value (trust, refit counters); ``<name>_avg``: mean over log points;
    ``kl_act_max``: the largest logged act-time KL(pi_mix || pi_wm) on advised states;
    ``lambda_below_max_frac``: share of log points with lambda < lambda_max; ``temperature_lo/hi``: T range;
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
    if prior.get("trust") and "trust_act_llm" in m:
        trust = m["trust_act_llm"].to_numpy(float)
        low = np.isfinite(trust) & (trust < TRUST_LOW)
        out["trust_low_frac"] = float(low[np.isfinite(trust)].mean()) if np.isfinite(trust).any() else math.nan
        if low.any():
            out["trust_low_step"] = float(m["env_step"].to_numpy(float)[low.argmax()])
    temps = finite("temperature")
    if temps.size and prior.get("align_temperature"):
        out["temperature_lo"], out["temperature_hi"] = float(temps.min()), float(temps.max())
    return out


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
                  "prior.trust_act_floor", "prior.trust_act_uninformed", "prior.trust_value_weight", "prior.trust_failures", "prior.trust_model_failures", "prior.trust_step_failures", "prior.trust_episode_acted", "prior.trust_episode_strength", "prior.trust_familywise", "prior.gate_trust_floor", "prior.trust_act_pooled",
                  "prior.control_allocation", "prior.absorb_over", "prior.absorb_trust")
"""Resolved-config fields copied into the run table (as ``cfg_<section>_<field>``) for the paper's setup text."""


def config_values(config: dict) -> dict[str, object]:
    out = {}
    for dotted in CONFIG_COLUMNS:
        node: object = config
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out["cfg_" + dotted.replace(".", "_")] = node
    return out


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
    return pd.DataFrame(rows)


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


@dataclass
class Tables:
    eval_points: pd.DataFrame
    runs: pd.DataFrame
    stats: pd.DataFrame
    improvement: pd.DataFrame
    achievements: pd.DataFrame

    FILES = ("eval_points", "runs", "stats", "improvement", "achievements")

    def write_csv(self, out_dir: str | Path) -> list[Path]:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in self.FILES:
            path = out_dir / f"{name}.csv"
            getattr(self, name).to_csv(path, index=False, float_format="%.6g")
            written.append(path)
        return written

    @classmethod
    def read_csv(cls, out_dir: str | Path) -> Tables:
        out_dir = Path(out_dir)
        frames = {}
        for name in cls.FILES:
            path = out_dir / f"{name}.csv"
            if not path.is_file():
                raise FileNotFoundError(f"{path}: missing (run `lore aggregate` first)")
            try:
                frames[name] = pd.read_csv(path)
            except pd.errors.EmptyDataError:
                frames[name] = pd.DataFrame()
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
