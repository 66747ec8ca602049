"""The values the paper's text cites, read from the aggregated tables.

A statistic of an (env, arm, metric) with its interval, every statistic as a ``\\lorestat`` macro
(:func:`stat_macros`), the configuration each arm ran with (:func:`arm_cfg`), the paired comparisons
the findings report (:func:`comparisons`) and the setup macros the method section quotes
(:func:`setup_macros`). Every number meant for prose is wrapped in ``\\lorenum{...}`` (:func:`num`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from lore.report import stats as st
from lore.report.aggregate import ALL_ENVS, TRAIN_TAIL_FRACTION, AnalysisSettings, Tables, budget_metric
from lore.report.latex import (
    FEW_SEEDS,
    IQM_TRIMS_FROM,
    MISSING,
    ablation_tex,
    crafter_achievement_count,
    env_label,
    escape,
    few,
    fmt_rate,
    fmt_signed,
    fmt_steps,
    formatter_for,
    label_slug,
    num,
    ordered_ablations,
)

PRIMARY = "primary"


# What the original prototype's paper and code showed (quoted facts, see docs/workflow.md).
ORIGINAL_CLAIM = {"full": 0.119, "rl_only": 0.025, "center": 10_000, "half_width": 250,
                  "full_episodes": "5/42", "rl_only_episodes": "1/40", "influenced_actions": 98, "api_calls": 36,
                  "beta_max_reached": 0.006}


# --------------------------------------------------------------------------- statistics


def _def(key: str, value: str) -> str:
    if "}" in key or "{" in key or "\\" in key:
        raise ValueError(f"macro key {key!r} must not contain braces or backslashes")
    return f"\\lore@set{{{key}}}{{{value}}}"


def primary_env(envs: Sequence[str]) -> str | None:
    """The environment the headline sentences talk about: the first MiniGrid env, else the first."""
    envs = [e for e in envs if e != ALL_ENVS]
    if not envs:
        return None
    minigrid = [e for e in envs if e.startswith("MiniGrid")]
    return (minigrid or sorted(envs))[0]


def stat_macros(tables: Tables, primary: str | None) -> list[str]:
    lines = []
    for row in tables.stats.itertuples(index=False):
        fmt = formatter_for(row.metric)
        envs = [row.env] + ([PRIMARY] if row.env == primary else [])
        for env in envs:
            base = f"{env}/{row.ablation}/{row.metric}"
            for field in ("mean", "iqm", "median"):
                value = getattr(row, field)
                lines.append(_def(f"{base}/{field}", fmt(value)))
                if field != "median":
                    low, high = getattr(row, f"{field}_low"), getattr(row, f"{field}_high")
                    lines.append(_def(f"{base}/{field}_ci", f"[{fmt(low)}, {fmt(high)}]"))
            lines.append(_def(f"{base}/n", str(int(row.n))))
    for row in tables.improvement.itertuples(index=False):
        envs = [row.env] + ([PRIMARY] if row.env == primary else [])
        for env in envs:
            base = f"{env}/{row.ablation}/{row.metric}/p_improve"
            lines.append(_def(base, fmt_rate(row.p_improve)))
            lines.append(_def(f"{base}_ci", f"[{fmt_rate(row.low)}, {fmt_rate(row.high)}]"))
    return lines


def stat(tables: Tables, env: str, ablation: str, metric: str) -> pd.Series | None:
    """The ``stats`` row of (``env``, ``ablation``, ``metric``), or None when the tables have none."""
    s = tables.stats
    if not len(s):
        return None
    rows = s[(s["env"] == env) & (s["ablation"] == ablation) & (s["metric"] == metric)]
    return rows.iloc[0] if len(rows) else None


def _interval(row: pd.Series | None, metric: str, field: str) -> str:
    """``0.98 [0.75, 1.00]`` (dagger when from fewer than FEW_SEEDS seeds), one computed number."""
    if row is None or not np.isfinite(row[field]):
        return MISSING
    fmt = formatter_for(metric)
    return num(f"{fmt(row[field])} [{fmt(row[f'{field}_low'])}, {fmt(row[f'{field}_high'])}]") + few(row["n"])


def iqm_text(row: pd.Series | None, metric: str) -> str:
    """The IQM of a ``stats`` row with its interval (:func:`_interval`)."""
    return _interval(row, metric, "iqm")


def mean_text(row: pd.Series | None, metric: str) -> str:
    """The mean of a ``stats`` row with its interval (:func:`_interval`)."""
    return _interval(row, metric, "mean")


def n_of(row: pd.Series | None) -> int:
    """The run count of a ``stats`` row (0 for none)."""
    return int(row["n"]) if row is not None and np.isfinite(row["n"]) else 0


def iqm_name(*rows: pd.Series | None) -> str:
    """"IQM", or "mean" where every row has fewer runs than the IQM trims from."""
    ns = [n_of(r) for r in rows if r is not None]
    return "mean" if ns and max(ns) < IQM_TRIMS_FROM else "IQM"


def headline_budget(tables: Tables, settings: AnalysisSettings, env: str) -> int | None:
    have = set(tables.stats.loc[tables.stats["env"] == env, "metric"]) if len(tables.stats) else set()
    if settings.headline_budget is not None and budget_metric(settings.headline_budget) in have:
        return int(settings.headline_budget)
    for budget in settings.budgets_for(env):
        if budget_metric(budget) in have:
            return int(budget)
    return None


def improve(tables: Tables, env: str, ablation: str, metric: str) -> str:
    """P(``ablation`` > baseline) of (``env``, ``metric``) with its interval, as a number for prose."""
    imp = tables.improvement
    if not len(imp):
        return MISSING
    rows = imp[(imp["env"] == env) & (imp["ablation"] == ablation) & (imp["metric"] == metric)]
    if not len(rows):
        return MISSING
    r = rows.iloc[0]
    return (num(f"{fmt_rate(r['p_improve'])} [{fmt_rate(r['low'])}, {fmt_rate(r['high'])}]")
            + few(min(r["n"], r.get("n_baseline", r["n"]))))


def ns_text(*rows: pd.Series | None) -> str:
    """``$n$ = 5 and 3`` for the rows' run counts."""
    return "$n$ = " + " and ".join(num(n_of(r)) for r in rows)


def per_run_at(eval_points: pd.DataFrame, env: str, ablation: str, budget: float) -> np.ndarray:
    """Each run's eval SR at ``budget`` (NaN for runs that stopped before it)."""
    values = []
    data = eval_points[(eval_points["env"] == env) & (eval_points["ablation"] == ablation)]
    for _, run in data.groupby("seed"):
        run = run.dropna(subset=["success_rate"]).sort_values("env_step")
        steps, sr = run["env_step"].to_numpy(float), run["success_rate"].to_numpy(float)
        values.append(st.value_at_budget(steps, sr, budget) if len(steps) and steps[-1] >= budget else math.nan)
    return np.asarray(values, float)


# --------------------------------------------------------------------------- what the runs ran


@functools.lru_cache(maxsize=64)
def _default_config(ablation: str) -> dict:
    """The resolved defaults of an ablation (for runs whose config lacks a field); {} if unknown."""
    from lore.config import build_config, to_dict

    try:
        return to_dict(build_config({}, ablation=ablation))
    except Exception:  # noqa: BLE001 - an ablation this checkout does not know
        return {}


def arm_cfg(tables: Tables, env: str | None, ablation: str, key: str, default=None):
    """A config field (dotted) of an arm's runs in ``env``: from the runs, else the ablation's defaults."""
    runs = tables.runs
    column = "cfg_" + key.replace(".", "_")
    if len(runs) and column in runs:
        mask = runs["ablation"] == ablation
        if env is not None:
            mask &= runs["env"] == env
        values = runs.loc[mask, column].dropna()
        if len(values):
            return values.iloc[0]
    node: object = _default_config(ablation)
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return default if node is None else node


def truthy(value) -> bool:
    """Whether a configuration value read back from a table is true (``true``, ``1``, ``yes``, a nonzero number)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    try:
        return bool(value) and not (isinstance(value, float) and math.isnan(value))
    except (TypeError, ValueError):
        return False


def mechanisms(tables: Tables, env: str | None, ablation: str) -> list[str]:
    """The parts of the prior an arm ran, from its configuration, in the order the method section
    introduces them (empty for an arm without the prior and without LLM features)."""
    parts = []
    if uses_prior(tables, env, ablation):
        gate = str(arm_cfg(tables, env, ablation, "prior.gate", ""))
        parts.append("the uncertainty gate" if gate == "uncertainty" else "a fixed $\\beta$")
        if truthy(arm_cfg(tables, env, ablation, "prior.trust", False)):
            parts.append("advice trust")
        if str(arm_cfg(tables, env, ablation, "prior.kl_mode", "none")) == "lagrangian":
            parts.append("KL control (trust region and distillation)")
    if truthy(arm_cfg(tables, env, ablation, "features.enabled", False)):
        parts.append("LLM features")
    if truthy(arm_cfg(tables, env, ablation, "plan.enabled", False)):
        parts.append("latent planning")
    if truthy(arm_cfg(tables, env, ablation, "distill.enabled", False)):
        parts.append("PriorNet distillation")
    return parts


def grid_arms(tables: Tables, env: str | None = None) -> list[str]:
    runs = tables.runs
    if not len(runs):
        return []
    if env is not None:
        runs = runs[runs["env"] == env]
    return ordered_ablations(runs["ablation"].unique())


def uses_prior(tables: Tables, env: str | None, ablation: str) -> bool:
    return truthy(arm_cfg(tables, env, ablation, "prior.enabled", False))


def uses_llm(tables: Tables, env: str | None, ablation: str) -> bool:
    return str(arm_cfg(tables, env, ablation, "llm.backend", "none")) != "none"


def runs_of(tables: Tables, env: str | None, ablation: str, column: str) -> np.ndarray:
    """The finite values of ``column`` over the runs of (``env``, ``ablation``) in ``runs.csv``."""
    runs = tables.runs
    if env is None or column not in runs:
        return np.array([])
    values = pd.to_numeric(runs.loc[(runs["env"] == env) & (runs["ablation"] == ablation), column],
                           errors="coerce").to_numpy(float)
    return values[np.isfinite(values)]


def seeds_per_arm(tables: Tables) -> list[int]:
    runs = tables.runs
    if not len(runs):
        return []
    return sorted(set(runs.groupby(["env", "ablation"]).size().astype(int)))


def range_text(ns: Sequence[int]) -> str:
    """``3`` or ``3--5``: the range of the run counts ``ns`` (MISSING when there are none)."""
    ns = sorted(set(ns))
    if not ns:
        return MISSING
    return str(ns[0]) if len(ns) == 1 else f"{ns[0]}--{ns[-1]}"


def join(items: Sequence[str], last: str = "and") -> str:
    """``a, b and c`` (``last`` joins the last two)."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {last} " + items[-1]


# --------------------------------------------------------------------------- paired comparisons


def _per_run(tables: Tables, env: str, ablation: str, metric: str) -> np.ndarray:
    return runs_of(tables, env, ablation, metric)


FINDING_METRICS = ("final_sr", "auc")


def comparison_pairs(tables: Tables, settings: AnalysisSettings, env: str) -> list[tuple[str, str]]:
    """Each arm against the baseline, then ``full`` against each of its ablations (the arms that are
    neither the baseline nor a variant of ``full``)."""
    arms = grid_arms(tables, env)
    base = settings.baseline
    pairs = [(a, base) for a in arms if a != base] if base in arms else []
    if "full" in arms:
        pairs += [("full", a) for a in arms if a not in (base, "full") and not a.startswith("full")]
    return pairs


def comparisons(tables: Tables, settings: AnalysisSettings, env: str) -> list[tuple[str, str, dict]]:
    """[(X, Y, {metric: Comparison})] for :func:`comparison_pairs` with data on both sides."""
    out = []
    for x, y in comparison_pairs(tables, settings, env):
        comps = {}
        for metric in FINDING_METRICS:
            a, b = _per_run(tables, env, x, metric), _per_run(tables, env, y, metric)
            if a.size and b.size:
                comps[metric] = st.compare(a, b, confidence=settings.confidence, resamples=settings.resamples,
                                           seed=settings.seed)
        if "final_sr" in comps:
            out.append((x, y, comps))
    return out


def diff_text(c: st.Comparison) -> str:
    """A paired comparison's mean difference with its interval, as a number for prose."""
    d = c.difference
    return num(f"{fmt_signed(d.estimate)} [{fmt_signed(d.low)}, {fmt_signed(d.high)}]")


def p_text(c: st.Comparison) -> str:
    """A paired comparison's P(X > Y) with its interval, as a number for prose."""
    p = c.p_improve
    return num(f"{fmt_rate(p.estimate)} [{fmt_rate(p.low)}, {fmt_rate(p.high)}]")


def n_pair(c: st.Comparison) -> str:
    """``$n$ = 5 vs 5`` of a paired comparison (dagger when from fewer than FEW_SEEDS seeds)."""
    return f"$n$ = {num(c.n_x)} vs {num(c.n_y)}{few(min(c.n_x, c.n_y))}"


# --------------------------------------------------------------------------- setup macros


CONFIG_NUMBER_MACROS = {
    "loreKLBound": "cfg_prior_kl_bound", "loreKLDelta": "cfg_prior_kl_delta", "loreLambdaMax": "cfg_prior_lambda_max",
    "loreControlEpisodes": "cfg_prior_control_episodes", "loreTrustGain": "cfg_prior_trust_gain",
    "loreTrustDeadZone": "cfg_prior_trust_dead_zone",
    "loreAdviceSamples": "cfg_prior_advice_samples",
    "loreGateFullAt": "cfg_prior_gate_full_at", "loreCooldown": "cfg_llm_controller_cooldown",
    "loreCooldownSuccess": "cfg_llm_controller_cooldown_after_success", "loreDropout": "cfg_prior_dropout",
}
"""Configuration numbers the method section quotes, read from the runs' resolved configs (of the
runs that use the prior for ``cfg_prior_*``, of those that ask an LLM for ``cfg_llm_*``)."""

DEFAULT_NUMBER_MACROS = {
    "loreUnimix": ("dreamer.unimix", "cfg_dreamer_unimix", 100.0),
    "loreRetnormLow": ("dreamer.retnorm_low", "cfg_dreamer_retnorm_low", 1.0),
    "loreRetnormHigh": ("dreamer.retnorm_high", "cfg_dreamer_retnorm_high", 1.0),
    "loreTemperature": ("prior.temperature", "cfg_prior_temperature", 1.0),
}
"""Agent settings the implementation section quotes: (config key, run column, scale); from the
runs where they logged the field, else the defaults in lore/config/sections.py."""


def _relevant(runs: pd.DataFrame, column: str) -> pd.Series:
    """Rows whose value of ``column`` describes what ran (prior settings of runs with a prior, ...)."""
    mask = pd.Series(True, index=runs.index)
    if column.startswith("cfg_prior_") and "cfg_prior_enabled" in runs:
        mask &= runs["cfg_prior_enabled"].map(truthy)
    if column.startswith("cfg_llm_") and "cfg_llm_backend" in runs:
        mask &= runs["cfg_llm_backend"].astype(str) != "none"
    return mask


def cfg_number(runs: pd.DataFrame, column: str, env: str | None) -> str:
    """A config value of the runs as a plain number (``0.25``, ``100``); several values are listed."""
    if column not in runs or env is None:
        return MISSING
    rows = runs[(runs["env"] == env) & _relevant(runs, column)]
    values = pd.to_numeric(rows[column], errors="coerce").dropna().unique()
    return " or ".join(f"{v:g}" for v in sorted(values)) if len(values) else MISSING


def _default_number(runs: pd.DataFrame, key: str, column: str, scale: float) -> str:
    values = pd.to_numeric(runs[column], errors="coerce").dropna().unique() if column in runs else []
    if not len(values):
        from lore.config import RunConfig, to_dict

        node: object = to_dict(RunConfig())
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        values = [] if node is None else [float(node)]
    return " or ".join(f"{v * scale:g}" for v in sorted(values)) if len(values) else MISSING


def setup_macros(tables: Tables, settings: AnalysisSettings, env: str | None) -> dict[str, str]:
    runs = tables.runs
    envs = sorted(runs["env"].unique()) if len(runs) else []
    ablations = ordered_ablations(runs["ablation"]) if len(runs) else []
    seeds = sorted(runs["seed"].unique()) if len(runs) else []

    def cfg(column: str, env_name: str | None = env) -> str:
        if column not in runs:
            return MISSING
        rows = runs[(runs["env"] == env_name) & _relevant(runs, column)]
        values = rows[column].dropna().unique()
        if not len(values):
            return MISSING
        formatted = sorted({fmt_steps(v) if isinstance(v, (int, float, np.integer, np.floating)) else escape(v)
                            for v in values})
        return " or ".join(formatted)

    from lore.report.figures import CALL_DENSITY_STEPS

    return {
        "loreNumRuns": str(len(runs)),
        "loreNumSeeds": str(len(seeds)),
        "loreSeedsPerArm": range_text(seeds_per_arm(tables)),
        "loreNumAblations": str(len(ablations)),
        "loreNumEnvs": str(len(envs)),
        "loreEnvList": ", ".join(escape(env_label(e)) for e in envs) or MISSING,
        "loreAblationList": ", ".join(ablation_tex(a) for a in ablations) or MISSING,
        "lorePrimaryEnv": escape(env_label(env)) if env else MISSING,
        "lorePrimarySlug": label_slug(env) if env else "none",
        "loreTrainSteps": cfg("cfg_train_steps"),
        "loreTrainRatio": cfg("cfg_train_train_ratio"),
        "loreModelPreset": cfg("cfg_model_preset"),
        "loreEvalEvery": cfg("cfg_eval_every"),
        "loreEvalEpisodes": cfg("cfg_eval_episodes"),
        "loreLLMBackend": cfg("cfg_llm_backend"),
        "loreBudgets": ", ".join(fmt_steps(b) for b in settings.budgets_for(env)) if env else MISSING,
        "loreThreshold": fmt_rate(settings.threshold),
        "loreConfidence": str(int(round(settings.confidence * 100))),
        "loreResamples": str(settings.resamples),
        "loreBaseline": ablation_tex(settings.baseline),
        "loreWindowCenter": fmt_steps(settings.window_center),
        "loreWindowHalfWidth": fmt_steps(settings.window_half_width),
        "loreFewSeeds": str(FEW_SEEDS),
        "loreIQMTrimsFrom": str(IQM_TRIMS_FROM),
        "loreTrainTailPercent": f"{100 * TRAIN_TAIL_FRACTION:g}",
        "loreCrafterAchievements": str(crafter_achievement_count()),
        "loreCallDensitySteps": fmt_steps(CALL_DENSITY_STEPS),
        "loreOrigInfluenced": str(ORIGINAL_CLAIM["influenced_actions"]),
        "loreOrigAPICalls": str(ORIGINAL_CLAIM["api_calls"]),
        "loreOrigBetaMax": f"{ORIGINAL_CLAIM['beta_max_reached']:g}",
        **{name: cfg_number(runs, column, env) for name, column in CONFIG_NUMBER_MACROS.items()},
        **{name: _default_number(runs, *spec) for name, spec in DEFAULT_NUMBER_MACROS.items()},
    }
