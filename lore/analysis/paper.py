"""The paper's generated parts and its PDF build.

``write_generated(tables, settings, out_dir)`` writes ``macros.tex`` (every statistic as a
macro, the result sentences and the findings / train-vs-eval tables) and the LaTeX tables;
``paper/lore.tex`` only ever refers to these, so no result number is typed into the text.
Every number the generated prose computes is wrapped in ``\\lorenum{...}`` (prints its argument),
so tests/test_paper.py can check that no digit in a sentence template was typed by hand.
``build_pdf`` compiles the paper with latexmk (or pdflatex + bibtex) in a scratch directory and
copies the PDF out.
"""

from __future__ import annotations

import functools
import math
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lore.analysis import stats as st
from lore.analysis.aggregate import ALL_ENVS, TRAIN_TAIL_FRACTION, AnalysisSettings, Tables, budget_metric
from lore.analysis.latex import (
    DAGGER,
    FEW_SEEDS,
    IQM_TRIMS_FROM,
    LORENUM_DEF,
    MISSING,
    TABLE_FILES,
    _cell,
    _float,
    _tabular,
    ablation_tex,
    budgets_shown,
    crafter_achievement_count,
    env_label,
    env_names,
    escape,
    few,
    fmt_count,
    fmt_rate,
    fmt_signed,
    fmt_steps,
    formatter_for,
    label_slug,
    latex_texts,
    n_runs,
    name_tex,
    num,
    ordered_ablations,
    seeds_caption,
    stat_cell,
)
from lore.analysis.outputs import copy_file, write_text

PRIMARY = "primary"
# Goals from the design brief (targets we set before running anything, not results).
GOAL_RL_ONLY = (0.9, 50_000)
GOAL_FULL = (0.9, 10_000)
GOAL_ADVERSARIAL_RATIO = 0.9
# What the original prototype's paper and code showed (quoted facts, see docs/workflow.md).
ORIGINAL_CLAIM = {"full": 0.119, "rl_only": 0.025, "center": 10_000, "half_width": 250,
                  "full_episodes": "5/42", "rl_only_episodes": "1/40", "influenced_actions": 98, "api_calls": 36,
                  "beta_max_reached": 0.006}

LATEX_INSTALL_HINT = (
    "install TeX Live, e.g. on Debian/Ubuntu: apt-get install texlive-latex-base texlive-latex-recommended "
    "texlive-fonts-recommended latexmk (or run .ci/install-system.sh as root)"
)


class PaperBuildError(RuntimeError):
    """The PDF could not be built; the message says why and what to install."""


# --------------------------------------------------------------------------- macros


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


def _stat(tables: Tables, env: str, ablation: str, metric: str) -> pd.Series | None:
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


def _iqm_text(row: pd.Series | None, metric: str) -> str:
    return _interval(row, metric, "iqm")


def _mean_text(row: pd.Series | None, metric: str) -> str:
    return _interval(row, metric, "mean")


def _n_of(row: pd.Series | None) -> int:
    return int(row["n"]) if row is not None and np.isfinite(row["n"]) else 0


def _iqm_name(*rows: pd.Series | None) -> str:
    """"IQM", or "mean" where every row has fewer runs than the IQM trims from."""
    ns = [_n_of(r) for r in rows if r is not None]
    return "mean" if ns and max(ns) < IQM_TRIMS_FROM else "IQM"


def headline_budget(tables: Tables, settings: AnalysisSettings, env: str) -> int | None:
    have = set(tables.stats.loc[tables.stats["env"] == env, "metric"]) if len(tables.stats) else set()
    if settings.headline_budget is not None and budget_metric(settings.headline_budget) in have:
        return int(settings.headline_budget)
    for budget in settings.budgets_for(env):
        if budget_metric(budget) in have:
            return int(budget)
    return None


def _improve(tables: Tables, env: str, ablation: str, metric: str) -> str:
    imp = tables.improvement
    if not len(imp):
        return MISSING
    rows = imp[(imp["env"] == env) & (imp["ablation"] == ablation) & (imp["metric"] == metric)]
    if not len(rows):
        return MISSING
    r = rows.iloc[0]
    return (num(f"{fmt_rate(r['p_improve'])} [{fmt_rate(r['low'])}, {fmt_rate(r['high'])}]")
            + few(min(r["n"], r.get("n_baseline", r["n"]))))


def _ns(*rows: pd.Series | None) -> str:
    """``$n$ = 5 and 3`` for the rows' run counts."""
    return "$n$ = " + " and ".join(num(_n_of(r)) for r in rows)


def headline_sentence(tables: Tables, settings: AnalysisSettings, env: str | None) -> str:
    base = settings.baseline
    if env is None:
        return "No runs were aggregated."
    ablations = set(tables.stats.loc[tables.stats["env"] == env, "ablation"]) if len(tables.stats) else set()
    if "full" not in ablations or base not in ablations:
        missing = " and ".join(ablation_tex(a) for a in ("full", base) if a not in ablations)
        return (f"This grid has no {missing} runs on {name_tex(env_label(env))}, so the headline comparison "
                "is not available.")
    level = num(int(round(settings.confidence * 100)))
    parts = []
    budget = headline_budget(tables, settings, env)
    final_too = True
    if budget is not None:
        metric = budget_metric(budget)
        shown, separate_final = budgets_shown(tables, settings, env)
        final_too = separate_final or budget != shown[-1]
        full, rl = _stat(tables, env, "full", metric), _stat(tables, env, base, metric)
        overlap = (full is not None and rl is not None and full["iqm_low"] <= rl["iqm_high"]
                   and rl["iqm_low"] <= full["iqm_high"])
        when = "" if final_too else " (the end of training)"
        parts.append(
            f"On {name_tex(env_label(env))}, after {num(fmt_steps(budget))} environment steps{when} the "
            f"{_iqm_name(full, rl)} evaluation success rate of {ablation_tex('full')} is {_iqm_text(full, metric)} "
            f"against {_iqm_text(rl, metric)} for {ablation_tex(base)} ({_ns(full, rl)} seeds; {level}\\% "
            f"confidence intervals in brackets; they {'overlap' if overlap else 'do not overlap'}), and the "
            f"probability that a {ablation_tex('full')} run beats a {ablation_tex(base)} run at this budget is "
            f"{_improve(tables, env, 'full', metric)}."
        )
    full_f, rl_f = _stat(tables, env, "full", "final_sr"), _stat(tables, env, base, "final_sr")
    auc = (f"the normalised areas under the success curves are {_mean_text(_stat(tables, env, 'full', 'auc'), 'auc')} "
           f"and {_mean_text(_stat(tables, env, base, 'auc'), 'auc')}")
    if final_too:
        parts.append(f"At the end of training the {_iqm_name(full_f, rl_f)} success rates are "
                     f"{_iqm_text(full_f, 'final_sr')} and {_iqm_text(rl_f, 'final_sr')}; {auc}.")
    else:
        parts.append(f"Over the whole run {auc}.")
    if min(_n_of(full_f), _n_of(rl_f)) < FEW_SEEDS:
        parts.append(f"{DAGGER}\\,Intervals from fewer than {num(FEW_SEEDS)} seeds.")
    return " ".join(parts)


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


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    try:
        return bool(value) and not (isinstance(value, float) and math.isnan(value))
    except (TypeError, ValueError):
        return False


def grid_arms(tables: Tables, env: str | None = None) -> list[str]:
    runs = tables.runs
    if not len(runs):
        return []
    if env is not None:
        runs = runs[runs["env"] == env]
    return ordered_ablations(runs["ablation"].unique())


def uses_prior(tables: Tables, env: str | None, ablation: str) -> bool:
    return _truthy(arm_cfg(tables, env, ablation, "prior.enabled", False))


def uses_llm(tables: Tables, env: str | None, ablation: str) -> bool:
    return str(arm_cfg(tables, env, ablation, "llm.backend", "none")) != "none"


def _runs_of(tables: Tables, env: str | None, ablation: str, column: str) -> np.ndarray:
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


def _range_text(ns: Sequence[int]) -> str:
    ns = sorted(set(ns))
    if not ns:
        return MISSING
    return str(ns[0]) if len(ns) == 1 else f"{ns[0]}--{ns[-1]}"


def _join(items: Sequence[str], last: str = "and") -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {last} " + items[-1]


# --------------------------------------------------------------------------- findings


def _per_run(tables: Tables, env: str, ablation: str, metric: str) -> np.ndarray:
    return _runs_of(tables, env, ablation, metric)


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


def _diff_text(c: st.Comparison) -> str:
    d = c.difference
    return num(f"{fmt_signed(d.estimate)} [{fmt_signed(d.low)}, {fmt_signed(d.high)}]")


def _p_text(c: st.Comparison) -> str:
    p = c.p_improve
    return num(f"{fmt_rate(p.estimate)} [{fmt_rate(p.low)}, {fmt_rate(p.high)}]")


def _n_pair(c: st.Comparison) -> str:
    return f"$n$ = {num(c.n_x)} vs {num(c.n_y)}{few(min(c.n_x, c.n_y))}"


LEAD = {"better": "{x} improves on {y}", "worse": "{x} does worse than {y}",
        "unclear": "No evidence of a difference between {x} and {y}"}
AUC_WORD = {"better": "higher", "worse": "lower", "unclear": "no evidence of a difference"}
VERDICT_WORD = {"better": "improves", "worse": "worse", "unclear": "no evidence"}


def finding_sentence(x: str, y: str, comps: dict) -> str:
    """One comparison in words whose wording follows the intervals (:attr:`Comparison.verdict`)."""
    c = comps["final_sr"]
    X, Y = ablation_tex(x), ablation_tex(y)
    text = (LEAD[c.verdict].format(x=X, y=Y) + f" in final evaluation success rate ({num(fmt_rate(c.mean_x))} vs "
            f"{num(fmt_rate(c.mean_y))}, $\\Delta$ = {_diff_text(c)}, P(X $>$ Y) = {_p_text(c)}, {_n_pair(c)})")
    auc = comps.get("auc")
    if auc is not None:
        text += f"; area under the curve: {AUC_WORD[auc.verdict]} (P = {_p_text(auc)})"
    return text + "."


def _unbreakable_list(items: Sequence[str]) -> str:
    """An itemize that a page break (and so a float) cannot split."""
    body = "\n".join(f"  \\item {item}" for item in items)
    return ("\\par\\smallskip\\noindent\\begin{minipage}{\\linewidth}\\begin{itemize}\n" + body
            + "\n\\end{itemize}\\end{minipage}\\par\\smallskip\n")


def findings_text(tables: Tables, settings: AnalysisSettings, envs: Sequence[str],
                  found: dict[str, list]) -> str:
    parts = []
    for env in envs:
        comps = found.get(env, [])
        if not comps:
            continue
        head = f"\\emph{{On {name_tex(env_label(env))}:}} " if len(envs) > 1 else ""
        # prose, not a list: a long list would either break across pages (and a float split it) or,
        # kept unbreakable, overflow the page
        parts.append(head + " ".join(finding_sentence(x, y, c) for x, y, c in comps))
    if not parts:
        return (f"This grid has no pair of arms to compare (each arm against {ablation_tex(settings.baseline)}, "
                f"{ablation_tex('full')} against each of its ablations), so no comparison is reported.")
    level = num(int(round(settings.confidence * 100)))
    lead = (f"Table~\\ref{{tab:findings}} and the sentences below compare every arm with {ablation_tex(settings.baseline)}"
            f" and {ablation_tex('full')} with each of its ablations: the difference of the mean final evaluation "
            f"success rate (X minus Y) with its {level}\\% bootstrap interval, the probability of improvement "
            "P(X $>$ Y) with its interval, and $n$. An arm is said to improve (or to do worse) only where both "
            "intervals exclude no difference; otherwise there is no evidence of a difference, which with few seeds "
            "is not evidence that there is none.")
    return lead + "\n\n" + "\n\n".join(parts)


def findings_summary(tables: Tables, settings: AnalysisSettings, env: str | None, found: dict[str, list]) -> str:
    """The findings on the primary environment in one sentence (for the abstract)."""
    comps = found.get(env, []) if env else []
    if not comps:
        return ""
    base = settings.baseline
    groups: dict[str, list[str]] = {"better": [], "unclear": [], "worse": []}
    for x, y, c in comps:
        if y == base:
            groups[c["final_sr"].verdict].append(ablation_tex(x))
    clauses = []
    for verdict, text in (("better", "improves for {}"), ("unclear", "shows no evidence of a difference for {}"),
                          ("worse", "is worse for {}")):
        if groups[verdict]:
            clauses.append(text.format(_join(groups[verdict])))
    out = ""
    if clauses:
        out = (f"On {name_tex(env_label(env))}, against {ablation_tex(base)} the final evaluation success rate "
               f"{_join(clauses)}.")
    against = [(y, c["final_sr"].verdict) for x, y, c in comps if x == "full" and y != base]
    if against:
        words = {"better": "improves on", "worse": "does worse than", "unclear": "shows no evidence of a difference from"}
        by = {}
        for y, verdict in against:
            by.setdefault(verdict, []).append(ablation_tex(y))
        out += " " + ablation_tex("full") + " " + _join(
            [f"{words[v]} {_join(by[v], 'or' if v == 'unclear' else 'and')}" for v in ("better", "unclear", "worse")
             if v in by]) + "."
    return out.strip()


def findings_table(tables: Tables, settings: AnalysisSettings, envs: Sequence[str], found: dict[str, list]) -> str:
    rows = []
    for env in envs:
        comps = found.get(env, [])
        if not comps:
            continue
        if len(envs) > 1:
            rows.append([f"\\multicolumn{{7}}{{l}}{{\\emph{{{escape(env_label(env))}}}}}"])
        for x, y, c in comps:
            final, auc = c["final_sr"], c.get("auc")
            flag = few(min(final.n_x, final.n_y))
            rows.append([
                f"{ablation_tex(x)} vs {ablation_tex(y)}",
                f"{final.n_x}/{final.n_y}{flag}",
                _cell(fmt_signed(final.difference.estimate),
                      f"[{fmt_signed(final.difference.low)}, {fmt_signed(final.difference.high)}]"),
                _cell(fmt_rate(final.p_improve.estimate),
                      f"[{fmt_rate(final.p_improve.low)}, {fmt_rate(final.p_improve.high)}]"),
                MISSING if auc is None else _cell(fmt_signed(auc.difference.estimate),
                                                  f"[{fmt_signed(auc.difference.low)}, {fmt_signed(auc.difference.high)}]"),
                MISSING if auc is None else _cell(fmt_rate(auc.p_improve.estimate),
                                                  f"[{fmt_rate(auc.p_improve.low)}, {fmt_rate(auc.p_improve.high)}]"),
                VERDICT_WORD[final.verdict],
            ])
    if not rows:
        return ""
    header = ["X vs Y", "$n$ (X/Y)", "$\\Delta$ final SR", "P(X $>$ Y), final", "$\\Delta$ AUC", "P(X $>$ Y), AUC",
              "Final SR"]
    ns = [n_runs(tables, env, a) for env in envs for a in grid_arms(tables, env)]
    level = num(int(round(settings.confidence * 100)))
    caption = ("Findings: each arm against " + ablation_tex(settings.baseline) + " and " + ablation_tex("full")
               + " against each of its ablations. $\\Delta$: difference of the mean over seeds (X minus Y) with its "
               f"{level}\\% bootstrap interval; P(X $>$ Y): probability that a run of X beats a run of Y, with its "
               "interval. Last column: the finding on the final SR, an improvement (or worse) only where both "
               "intervals exclude no difference;" + seeds_caption(ns))
    return _float(_tabular(header, rows, "lcccccc"), caption, "tab:findings")


# --------------------------------------------------------------------------- train vs eval, chance


def gap_text(tables: Tables, env: str | None) -> str:
    """Training SR (with the prior) against final eval SR (without it), per arm, in words."""
    if env is None:
        return ""
    pct = num(int(round(100 * TRAIN_TAIL_FRACTION)))
    items = []
    largest = None
    for ablation in grid_arms(tables, env):
        train, final, gap = (_stat(tables, env, ablation, m) for m in ("train_sr_final", "final_sr", "train_eval_gap"))
        if train is None or final is None or gap is None:
            continue
        X = ablation_tex(ablation)
        n = f"$n$ = {num(_n_of(gap))}{few(_n_of(gap))}"
        numbers = (f"training {_mean_text(train, 'train_sr_final')}, evaluation {_mean_text(final, 'final_sr')}, "
                   f"gap {_mean_text(gap, 'train_eval_gap')}, {n}")
        prior = uses_prior(tables, env, ablation)
        if gap["mean_low"] > 0:
            what = ("succeeds more often in training, with the prior, than in evaluation without it"
                    if prior else "succeeds more often in training than in evaluation (it never uses the prior)")
            if prior and (largest is None or gap["mean"] > largest[1]):
                largest = (ablation, gap["mean"])
        elif gap["mean_high"] < 0:
            what = "succeeds less often in training than in evaluation"
        else:
            what = "shows no evidence of a gap between training and evaluation"
        items.append(f"{X} {what} ({numbers})")
    if not items:
        return ("The runs logged no training episodes in the last part of training, so the gap between "
                "training and evaluation success is not reported.")
    out = (f"Training episodes act with the prior (apart from control episodes and $\\beta$-dropout); evaluation "
           f"episodes act without it. Over the training episodes that end in the last {pct}\\% of each run's "
           f"steps (mean over seeds, against the final evaluation), " + "; ".join(items) + ". ")
    if largest is not None:
        out += (f"Among the arms with a prior the gap is largest for {ablation_tex(largest[0])}: there the "
                "advice accounts for training success that the policy, evaluated without it, does not reach. ")
    return out + f"Table~\\ref{{tab:gap-{label_slug(env)}}} lists the numbers."


def gap_table(tables: Tables, settings: AnalysisSettings, envs: Sequence[str]) -> str:
    out = []
    pct = num(int(round(100 * TRAIN_TAIL_FRACTION)))
    for env in envs:
        arms = [a for a in grid_arms(tables, env) if _stat(tables, env, a, "train_eval_gap") is not None]
        if not arms:
            continue
        rows = []
        for a in arms:
            n = n_runs(tables, env, a)
            rows.append([ablation_tex(a), f"{n}{few(n)}", "yes" if uses_prior(tables, env, a) else "no",
                         _stat_cell(tables, env, a, "train_sr_final"), _stat_cell(tables, env, a, "final_sr"),
                         _stat_cell(tables, env, a, "train_eval_gap")])
        header = ["Ablation", "$n$", "Prior", f"Training SR (last {pct}\\%)", "Final eval SR", "Gap"]
        level = num(int(round(settings.confidence * 100)))
        caption = (f"{name_tex(env_label(env))}: success rate of the training episodes that end in the last "
                   f"{pct}\\% of each run (acting with the prior where the arm has one, apart from control "
                   f"episodes) against the final evaluation success rate (without the prior), and their gap; mean "
                   f"over seeds with {level}\\% bootstrap intervals;" + seeds_caption(n_runs(tables, env, a)
                                                                                       for a in arms))
        out.append(_float(_tabular(header, rows, "lcccc" + "c"), caption, f"tab:gap-{label_slug(env)}"))
    return "\n".join(out)


def _stat_cell(tables: Tables, env: str, ablation: str, metric: str) -> str:
    return stat_cell(tables.stats, env, ablation, metric, "mean")


def chance_text(tables: Tables, settings: AnalysisSettings, envs: Sequence[str]) -> str:
    """The untrained policy's success (eval at step 0, pooled over every run of the env): the floor."""
    parts = []
    for env in envs:
        values = np.concatenate([_runs_of(tables, env, a, "initial_sr") for a in grid_arms(tables, env)] or
                                [np.array([])])
        if not values.size:
            continue
        ci = st.stratified_bootstrap_ci([values], "mean", confidence=settings.confidence,
                                        resamples=settings.resamples, seed=settings.seed)
        parts.append(f"on {name_tex(env_label(env))} it succeeds in "
                     f"{num(f'{fmt_rate(ci.estimate)} [{fmt_rate(ci.low)}, {fmt_rate(ci.high)}]')} of evaluation "
                     f"episodes ($n$ = {num(values.size)} runs)")
    if not parts:
        return ("The runs have no evaluation before their first environment step, so the untrained policy's "
                "success is not known.")
    return ("Untrained (evaluated before its first environment step; every run, all arms pooled), "
            + "; ".join(parts) + ": this is the floor against which every success rate should be read.")


# --------------------------------------------------------------------------- goals, original metric, cost


def _per_run_at(eval_points: pd.DataFrame, env: str, ablation: str, budget: float) -> np.ndarray:
    """Each run's eval SR at ``budget`` (NaN for runs that stopped before it)."""
    values = []
    data = eval_points[(eval_points["env"] == env) & (eval_points["ablation"] == ablation)]
    for _, run in data.groupby("seed"):
        run = run.dropna(subset=["success_rate"]).sort_values("env_step")
        steps, sr = run["env_step"].to_numpy(float), run["success_rate"].to_numpy(float)
        values.append(st.value_at_budget(steps, sr, budget) if len(steps) and steps[-1] >= budget else math.nan)
    return np.asarray(values, float)


def _sentence_case(text: str) -> str:
    """Capitalise the first letter only ("RL alone", not str.capitalize's "Rl alone")."""
    return text[:1].upper() + text[1:]


def goal_items(tables: Tables, settings: AnalysisSettings, env: str | None) -> list[str]:
    """The design goals, each marked met / not met / not tested from the runs."""
    base = settings.baseline
    items = []
    if env is None:
        return ["No runs were aggregated."]
    ev = tables.eval_points
    last = float(ev.loc[ev["env"] == env, "env_step"].max()) if len(ev) else math.nan
    for ablation, (target, budget), what in (
        (base, GOAL_RL_ONLY, "RL alone"),
        ("full", GOAL_FULL, "the full method with a good advisor"),
    ):
        head = (f"{_sentence_case(what)} ({ablation_tex(ablation)}) reaches an IQM evaluation success rate "
                f"$\\geq$ {num(fmt_rate(target))} by {num(fmt_steps(budget))} environment steps: ")
        values = _per_run_at(ev, env, ablation, budget) if len(ev) else np.array([])
        if not values.size:
            items.append(head + f"\\textbf{{not tested}} (no {ablation_tex(ablation)} runs).")
        elif np.isnan(values).any():
            items.append(head + f"\\textbf{{not tested}} (the runs stop at {num(fmt_steps(last))} steps).")
        else:
            value = float(st.iqm(values))
            verdict = "met" if value >= target else "not met"
            name = "mean" if values.size < IQM_TRIMS_FROM else "IQM"
            items.append(head + f"\\textbf{{{verdict}}} ({name} {num(fmt_rate(value))} over {num(values.size)} "
                                f"seeds{few(values.size)}).")
    head = (f"With an adversarial advisor ({ablation_tex('full_adversarial')}) the final IQM success rate stays "
            f"$\\geq$ {num(int(round(GOAL_ADVERSARIAL_RATIO * 100)))}\\% of {ablation_tex(base)}'s (low regret): ")
    adv, rl = _stat(tables, env, "full_adversarial", "final_sr"), _stat(tables, env, base, "final_sr")
    if adv is None or rl is None:
        items.append(head + "\\textbf{not tested} (the arm is not part of this grid).")
    elif rl["iqm"] <= 0:
        items.append(head + f"\\textbf{{not tested}} ({ablation_tex(base)} never succeeded, so the ratio is undefined).")
    else:
        ratio = adv["iqm"] / rl["iqm"]
        verdict = "met" if ratio >= GOAL_ADVERSARIAL_RATIO else "not met"
        items.append(head + f"\\textbf{{{verdict}}} ({num(fmt_rate(adv['iqm']))} vs {num(fmt_rate(rl['iqm']))}, "
                            f"ratio {num(fmt_rate(ratio))}, {_ns(adv, rl)}{few(min(_n_of(adv), _n_of(rl)))}).")
    unguarded = _stat(tables, env, "kl_adversarial", "final_sr")
    if adv is not None and unguarded is not None:
        # a measurement beside the goal, not a goal: the same adversary without the parts full adds to kl
        items.append(f"Measured beside it, the same adversary without the gate, trust, temperature and features "
                     f"({ablation_tex('kl_adversarial')}): final {_iqm_name(adv, unguarded)} success rate "
                     f"{num(fmt_rate(unguarded['iqm']))} against {num(fmt_rate(adv['iqm']))} for "
                     f"{ablation_tex('full_adversarial')} ({_ns(unguarded, adv)}{few(min(_n_of(adv), _n_of(unguarded)))}).")
    return items


def original_metric_sentence(tables: Tables, settings: AnalysisSettings, env: str | None) -> str:
    claim = ORIGINAL_CLAIM
    quoted = (f"The original prototype reported a success rate of {num(claim['full'])} for LoRe against "
              f"{num(claim['rl_only'])} for RL alone ``near {num(fmt_steps(claim['center']))} steps''; that number "
              f"is the median of the cumulative \\emph{{training}} success rate of a single seed over episodes "
              f"ending within $\\pm${num(claim['half_width'])} steps of {num(fmt_steps(claim['center']))} "
              f"({num(claim['full_episodes'])} against {num(claim['rl_only_episodes'])} episodes), not an "
              f"evaluation success rate.")
    if env is None:
        return quoted
    full = _stat(tables, env, "full", "train_sr_window")
    rl = _stat(tables, env, settings.baseline, "train_sr_window")
    window = f"{num(fmt_steps(settings.window_center))} $\\pm$ {num(fmt_steps(settings.window_half_width))}"
    if full is None or rl is None:
        return quoted + (f" Our runs have no episodes in the window {window} for both {ablation_tex('full')} "
                         f"and {ablation_tex(settings.baseline)}, so the metric is not available for this grid.")
    return quoted + (
        f" The same metric on our runs (window {window}, mean over seeds) is {_mean_text(full, 'train_sr_window')} "
        f"for {ablation_tex('full')} ({num(int(full['n']))} seeds) and {_mean_text(rl, 'train_sr_window')} for "
        f"{ablation_tex(settings.baseline)} ({num(int(rl['n']))} seeds).")


def llm_cost_sentence(tables: Tables, env: str | None) -> str:
    if env is None:
        return ""
    calls = _stat(tables, env, "full", "llm_calls")
    if calls is None:
        return f"This grid has no {ablation_tex('full')} runs, so LLM costs are not reported."
    hits = _stat(tables, env, "full", "llm_cache_hits")
    fails = _stat(tables, env, "full", "llm_failures")
    return (f"On {name_tex(env_label(env))} a {ablation_tex('full')} run made {num(fmt_count(calls['mean']))} LLM "
            f"API calls on average ({_mean_text(calls, 'llm_calls')} with CI, $n$ = {num(_n_of(calls))}), answered "
            f"{num(fmt_count(hits['mean'])) if hits is not None else MISSING} more requests from the cache, and saw "
            f"{num(fmt_count(fails['mean'])) if fails is not None else MISSING} failed calls.")


# --------------------------------------------------------------------------- setup


CONFIG_NUMBER_MACROS = {
    "loreKLBound": "cfg_prior_kl_bound", "loreKLDelta": "cfg_prior_kl_delta", "loreLambdaMax": "cfg_prior_lambda_max",
    "loreControlEpisodes": "cfg_prior_control_episodes", "loreTrustGain": "cfg_prior_trust_gain",
    "loreTrustDeadZone": "cfg_prior_trust_dead_zone",
    "loreAdviceSamples": "cfg_prior_advice_samples",
    "loreTMin": "cfg_prior_temperature_min", "loreTMax": "cfg_prior_temperature_max",
    "loreGateFullAt": "cfg_prior_gate_full_at", "loreCooldown": "cfg_llm_controller_cooldown",
    "loreCooldownSuccess": "cfg_llm_controller_cooldown_after_success", "loreDropout": "cfg_prior_dropout",
    "loreTMinLabels": "cfg_prior_temperature_min_labels",
}
"""Configuration numbers the method section quotes, read from the runs' resolved configs (of the
runs that use the prior for ``cfg_prior_*``, of those that ask an LLM for ``cfg_llm_*``)."""

DEFAULT_NUMBER_MACROS = {
    "loreUnimix": ("dreamer.unimix", "cfg_dreamer_unimix", 100.0),
    "loreRetnormLow": ("dreamer.retnorm_low", "cfg_dreamer_retnorm_low", 1.0),
    "loreRetnormHigh": ("dreamer.retnorm_high", "cfg_dreamer_retnorm_high", 1.0),
}
"""Agent settings the implementation section quotes: (config key, run column, scale); from the
runs where they logged the field, else the defaults in lore/config/sections.py."""


def _relevant(runs: pd.DataFrame, column: str) -> pd.Series:
    """Rows whose value of ``column`` describes what ran (prior settings of runs with a prior, ...)."""
    mask = pd.Series(True, index=runs.index)
    if column.startswith("cfg_prior_") and "cfg_prior_enabled" in runs:
        mask &= runs["cfg_prior_enabled"].map(_truthy)
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


BACKEND_TEXT = {"scripted": "an offline scripted advisor", "gemini": "Google Gemini",
                "openai": "an open model on an OpenAI-compatible server",
                "replay": "a replay of an earlier run's call ledger"}


def advisor_modes(tables: Tables, env: str | None = None) -> list[tuple[str, list[str]]]:
    """[(advisor quality text, arms)] over the arms that ask an LLM, in the grid's order."""
    out: dict[str, list[str]] = {}
    for ablation in grid_arms(tables, env):
        if not uses_llm(tables, env, ablation):
            continue
        mode = str(arm_cfg(tables, env, ablation, "advisor.mode", "good"))
        if mode == "noisy":
            accuracy = arm_cfg(tables, env, ablation, "advisor.accuracy")
            acc = pd.to_numeric(pd.Series([accuracy]), errors="coerce").iloc[0]
            mode = f"noisy (accuracy {num(f'{acc:g}')})" if np.isfinite(acc) else "noisy"
        out.setdefault(mode, []).append(ablation)
    return list(out.items())


def backends(tables: Tables) -> list[str]:
    runs = tables.runs
    if not len(runs) or "cfg_llm_backend" not in runs:
        return []
    names = runs["cfg_llm_backend"].dropna().astype(str)
    return sorted({n for n in names if n != "none"})


def advisor_sentence(tables: Tables) -> str:
    names = backends(tables)
    if not names:
        return "No arm of this grid asks an LLM."
    which = _join([f"{BACKEND_TEXT.get(n, escape(n))} (backend \\texttt{{{escape(n)}}})" for n in names], "or")
    modes = advisor_modes(tables)
    qualities = _join([f"{mode} in {_join([ablation_tex(a) for a in arms])}" for mode, arms in modes])
    return f"Arms that ask an LLM ask {which}; the advice is {qualities}."


def abstract_grid(tables: Tables) -> str:
    envs = sorted(tables.runs["env"].unique()) if len(tables.runs) else []
    if not envs:
        return "No runs were aggregated."
    arms = grid_arms(tables)
    text = (f"We evaluate on {_join([name_tex(env_label(e)) for e in envs])} with the arms "
            f"{_join([ablation_tex(a) for a in arms])} ({num(_range_text(seeds_per_arm(tables)))} seeds per arm), "
            "with interquartile means and stratified bootstrap confidence intervals")
    names = backends(tables)
    if names:
        qualities = [mode.split(" (")[0] for mode, _ in advisor_modes(tables)]
        text += (f", asking {_join([BACKEND_TEXT.get(n, escape(n)) for n in names], 'or')} whose advice is "
                 f"{_join(qualities, 'or')}")
    return text + "."


def grid_sentence(tables: Tables) -> str:
    runs = tables.runs
    if not len(runs):
        return "No runs were aggregated."
    envs = sorted(runs["env"].unique())
    arms = grid_arms(tables)
    per_arm = seeds_per_arm(tables)

    def plural(n: int, word: str) -> str:
        return f"{num(n)} {word}{'' if n == 1 else 's'}"

    seeds = (f"{plural(per_arm[0], 'seed')} each" if len(per_arm) == 1
             else f"{num(_range_text(per_arm))} seeds per arm (the counts per arm are in the tables)")
    return (f"{plural(len(runs), 'run')}: {plural(len(envs), 'environment')} "
            f"({_join([name_tex(env_label(e)) for e in envs])}), {plural(len(arms), 'arm')} "
            f"({_join([ablation_tex(a) for a in arms])}), {seeds}.")


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

    from lore.analysis.figures import CALL_DENSITY_STEPS

    return {
        "loreNumRuns": str(len(runs)),
        "loreNumSeeds": str(len(seeds)),
        "loreSeedsPerArm": _range_text(seeds_per_arm(tables)),
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
        "loreTRefitEvery": cfg("cfg_prior_temperature_refit_every"),
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


# --------------------------------------------------------------------------- what each part did


ARM_TEXT = {
    "random": "is the uniform-random policy (it never learns): the floor every arm has to clear",
    "rl_only": "is DreamerV3 alone (no LLM is asked)",
    "prior_only": "mixes the prior at a fixed $\\beta$ without any control",
    "gate": "adds the uncertainty gate (no KL control)",
    "kl": "adds KL control (trust region and distillation) to a fixed $\\beta$",
    "features": "uses the LLM-written features only, without mixing",
    "full_plan": "adds latent planning seeded by the LLM's plan to \\texttt{full}",
    "full_distill": "adds PriorNet distillation to \\texttt{full}",
    "kl_adversarial": ("is \\texttt{kl} under the adversarial advisor: a fixed $\\beta$ and KL control, without the "
                       "gate, the advice trust, temperature alignment or features that \\texttt{full} adds"),
}


def _temperature_ran(tables: Tables, env: str | None, ablation: str) -> str:
    """What temperature alignment did in an arm's runs, as a clause."""
    refits = _runs_of(tables, env, ablation, "temperature_refits_last")
    if not refits.size:
        return "temperature alignment (its refits were not logged)"
    if refits.sum() == 0:
        return "temperature alignment, which never refitted $T$ in these runs"
    return f"temperature alignment (on average {num(f'{refits.mean():.1f}')} refits per run)"


def full_components(tables: Tables, env: str | None, ablation: str = "full") -> str:
    parts = []
    if str(arm_cfg(tables, env, ablation, "prior.gate", "")) == "uncertainty":
        parts.append("the uncertainty gate")
    if _truthy(arm_cfg(tables, env, ablation, "prior.trust", False)):
        parts.append("advice trust")
    if str(arm_cfg(tables, env, ablation, "prior.kl_mode", "none")) == "lagrangian":
        parts.append("KL control")
    if _truthy(arm_cfg(tables, env, ablation, "prior.align_temperature", False)):
        parts.append(_temperature_ran(tables, env, ablation))
    if _truthy(arm_cfg(tables, env, ablation, "features.enabled", False)):
        parts.append("LLM features")
    return _join(parts) if parts else "no prior component"


def arms_text(tables: Tables, settings: AnalysisSettings, env: str | None) -> str:
    """What each arm of this grid is, from its configuration (only arms that ran)."""
    arms = grid_arms(tables)
    if not arms:
        return "No runs were aggregated."
    sentences = []
    for arm in arms:
        if arm in ARM_TEXT:
            sentences.append(f"{ablation_tex(arm)} {ARM_TEXT[arm]}")
        elif arm == "full":
            sentences.append(f"{ablation_tex(arm)} combines {full_components(tables, env, arm)}")
    text = ("In this grid " + "; ".join(sentences) + ".") if sentences else ""
    advisors = [(mode, a) for mode, a in advisor_modes(tables, env) if mode != "good"]
    if advisors:
        listed = "; ".join(f"{_join([ablation_tex(x) for x in a])}: advice that is {mode}" for mode, a in advisors)
        text += (f" The advisor-quality arms ({listed}) test the low-regret claim: with a wrong advisor, the trust "
                 f"and the control episodes should keep the agent close to {ablation_tex(settings.baseline)}.")
    return text.strip()


def _per_arm(tables: Tables, env: str | None, columns: Sequence[str], render) -> list[str]:
    """``render(ablation, *per-run arrays)`` for each arm whose runs logged every column (None skips)."""
    parts = []
    for ablation in grid_arms(tables, env):
        values = [_runs_of(tables, env, ablation, column) for column in columns]
        if all(v.size for v in values):
            text = render(ablation, *values)
            if text:
                parts.append(text)
    return parts


def kl_sentence(tables: Tables, env: str | None) -> str:
    """What KL control held: the act-time KL per arm against the bound, lambda, and the replay-state
    KL the distillation term acts on against its target delta."""
    def render(ablation, kl_max, kl_avg):
        arm = ablation_tex(ablation)
        lagrangian = str(arm_cfg(tables, env, ablation, "prior.kl_mode", "none")) == "lagrangian"
        text = (f"in {arm} the act-time KL averaged {num(f'{kl_avg.mean():.2f}')} nats and peaked at "
                f"{num(f'{kl_max.max():.2f}')}")
        if not lagrangian:
            return text + " (no KL control)"
        bound = _runs_of(tables, env, ablation, "cfg_prior_kl_bound")
        if bound.size:
            held = "within" if kl_max.max() <= bound.max() + 1e-6 else "above"
            text += f" ({held} the bound {num(f'{bound.max():g}')})"
        below = _runs_of(tables, env, ablation, "lambda_below_max_frac")
        if below.size:
            text += f", $\\lambda<\\lambda_{{\\max}}$ on {num(f'{100 * below.mean():.0f}')}\\% of logged points"
        train = _runs_of(tables, env, ablation, "kl_mix_wm_train_avg")
        delta = _runs_of(tables, env, ablation, "cfg_prior_kl_delta")
        if train.size and delta.size:
            side = "above" if train.mean() > delta.max() + 1e-9 else "within"
            text += (f", and the replay-state KL that the distillation term acts on averaged "
                     f"{num(f'{train.mean():.2f}')} nats, {side} its target $\\delta$ = {num(f'{delta.max():g}')}")
        return text + f" ($n$ = {num(kl_max.size)}{few(kl_max.size)})"

    parts = _per_arm(tables, env, ("kl_act_max", "kl_mix_wm_avg"), render)
    return "Measured: " + "; ".join(parts) + "." if parts else "No arm of this grid mixes a prior."


def trust_sentence(tables: Tables, env: str | None) -> str:
    """Final trust in the LLM's answers per arm that uses trust (mean and range over seeds)."""
    def render(ablation, values):
        trust_on = arm_cfg(tables, env, ablation, "prior.trust", None)
        if (trust_on is not None and not _truthy(trust_on)) or np.allclose(values, 0.5):
            return None  # arms without trust log the uninformed 0.5
        return (f"{ablation_tex(ablation)} {num(f'{values.mean():.2f}')} ({num(f'{values.min():.2f}--{values.max():.2f}')}, "
                f"$n$ = {num(values.size)}{few(values.size)})")

    parts = _per_arm(tables, env, ("trust_llm_last",), render)
    return ("Trust in the LLM's answers at the end of training: " + "; ".join(parts) + "." if parts
            else "No arm of this grid estimates advice trust, or its trust never left the uninformed value.")


def temperature_sentence(tables: Tables, env: str | None) -> str:
    """What temperature alignment did per arm that enables it: refits, how many at a bound, T range."""
    parts = []
    for ablation in grid_arms(tables, env):
        if not _truthy(arm_cfg(tables, env, ablation, "prior.align_temperature", False)):
            continue
        arm = ablation_tex(ablation)
        refits = _runs_of(tables, env, ablation, "temperature_refits_last")
        at_bound = _runs_of(tables, env, ablation, "temperature_refits_at_bound_last")
        lo, hi = (_runs_of(tables, env, ablation, c) for c in ("temperature_lo", "temperature_hi"))
        t_range = (f"$T$ between {num(f'{lo.min():.2f}')} and {num(f'{hi.max():.2f}')}" if lo.size and hi.size
                   else "$T$ not logged")
        n = max(refits.size, lo.size)
        if not refits.size:
            parts.append(f"{arm}: refits not logged, {t_range} ($n$ = {num(n)})")
        elif refits.sum() == 0:
            parts.append(f"{arm}: enabled but never refitted in any run, so it did not act ({t_range}; "
                         f"$n$ = {num(n)}{few(n)})")
        else:
            share = (f"{num(f'{100 * at_bound.sum() / refits.sum():.0f}')}\\% of them at a bound of the range"
                     if at_bound.size else "none logged at a bound")
            parts.append(f"{arm}: {num(f'{refits.mean():.1f}')} refits per run "
                         f"({num(f'{refits.min():.0f}--{refits.max():.0f}')}), {share}, {t_range} "
                         f"($n$ = {num(n)}{few(n)})")
    if not parts:
        return "No arm of this grid aligns the temperature."
    return "Temperature alignment, as it ran: " + "; ".join(parts) + "."


def gate_sentence(tables: Tables, env: str | None) -> str:
    """Does the gate separate states? beta where the advice's top action differs from the policy's vs not."""
    parts = _per_arm(tables, env, ("beta_disagree_avg", "beta_agree_avg"),
                     lambda a, dis, agr: (f"{ablation_tex(a)} {num(f'{dis.mean():.2f}')} vs {num(f'{agr.mean():.2f}')}"
                                          f" ($n$ = {num(dis.size)}{few(dis.size)})"))
    if not parts:
        return ""
    return ("Mean $\\beta$ on advised states where the advice's top action differs from the policy's, vs where "
            "it agrees: " + "; ".join(parts) + ".")


# --------------------------------------------------------------------------- macros.tex


def macros_tex(tables: Tables, settings: AnalysisSettings, envs_order: Sequence[str] | None = None) -> str:
    envs = list(envs_order) if envs_order else (sorted(tables.runs["env"].unique()) if len(tables.runs) else [])
    env = primary_env(envs)
    table_envs = [e for e in (envs or env_names(tables.stats)) if e != ALL_ENVS]
    has_crafter = bool(len(tables.achievements))
    found = {e: comparisons(tables, settings, e) for e in table_envs}
    lines = [
        "% Generated by `lore paper-macros` from the statistics tables; do not edit.",
        LORENUM_DEF,
        r"\makeatletter",
        r"\def\lore@set#1#2{\expandafter\def\csname lore@#1\endcsname{#2}}",
        r"\newcommand{\lorestat}[1]{\ifcsname lore@#1\endcsname\csname lore@#1\endcsname"
        r"\else\textbf{??}\PackageWarning{lore}{no statistic `#1' in this grid}\fi}",
    ]
    lines += stat_macros(tables, env)
    lines.append(r"\makeatother")
    for name, value in setup_macros(tables, settings, env).items():
        lines.append(f"\\newcommand{{\\{name}}}{{{value}}}")
    sentences = {
        "loreHeadline": headline_sentence(tables, settings, env),
        "loreGoals": _unbreakable_list(goal_items(tables, settings, env)),
        "loreOriginalMetric": original_metric_sentence(tables, settings, env),
        "loreLLMCost": llm_cost_sentence(tables, env),
        "loreKLSentence": kl_sentence(tables, env),
        "loreTrustSentence": trust_sentence(tables, env),
        "loreTemperatureSentence": temperature_sentence(tables, env),
        "loreGateSentence": gate_sentence(tables, env),
        "loreGridSentence": grid_sentence(tables),
        "loreAdvisorSentence": advisor_sentence(tables),
        "loreAbstractGrid": abstract_grid(tables),
        "loreArms": arms_text(tables, settings, env),
        "loreFindings": findings_text(tables, settings, table_envs, found),
        "loreFindingsSummary": findings_summary(tables, settings, env, found),
        "loreFindingsTable": findings_table(tables, settings, table_envs, found),
        "loreGap": gap_text(tables, env),
        "loreGapTable": gap_table(tables, settings, table_envs),
        "loreChance": chance_text(tables, settings, table_envs),
    }
    for name, text in sentences.items():
        lines.append(f"\\newcommand{{\\{name}}}{{{text}}}")
    lines.append(r"\newif\iflorecrafter")
    lines.append(r"\lorecraftertrue" if has_crafter else r"\lorecrafterfalse")
    return "\n".join(lines) + "\n"


SENTENCE_MACROS = ("loreHeadline", "loreGoals", "loreOriginalMetric", "loreLLMCost", "loreKLSentence",
                   "loreTrustSentence", "loreTemperatureSentence", "loreGateSentence", "loreGridSentence",
                   "loreAdvisorSentence", "loreAbstractGrid", "loreArms", "loreFindings", "loreFindingsSummary",
                   "loreGap", "loreChance")
"""The macros holding generated prose (tests/test_paper.py checks them for typed digits)."""


def write_generated(tables: Tables, settings: AnalysisSettings, out_dir: str | Path,
                    envs_order: Sequence[str] | None = None) -> list[Path]:
    """``macros.tex`` and the LaTeX tables, all rendered before the first is written (atomically)."""
    out_dir = Path(out_dir)
    texts = {"macros.tex": macros_tex(tables, settings, envs_order), **latex_texts(tables, settings)}
    return [write_text(out_dir / name, text) for name, text in texts.items()]


GENERATED_FILES = ("macros.tex", *TABLE_FILES)
"""The files :func:`write_generated` writes."""


# --------------------------------------------------------------------------- build


def latex_tools() -> dict[str, str | None]:
    return {name: shutil.which(name) for name in ("latexmk", "pdflatex", "bibtex")}


def _missing_package_hint(log_text: str) -> str:
    match = re.search(r"File `([^']+)' not found", log_text)
    if not match:
        return ""
    return (f" LaTeX file {match.group(1)} is missing: {LATEX_INSTALL_HINT}; find the Debian package that "
            f"ships it with `apt-file search {match.group(1)}`.")


def build_pdf(tex: str | Path, generated_dir: str | Path, figures_dir: str | Path, out_pdf: str | Path,
              log: str | Path | None = None) -> Path:
    """Compile ``tex`` with its ``generated/`` and ``figures/`` next to it; returns ``out_pdf``."""
    tex, generated_dir, figures_dir, out_pdf = map(Path, (tex, generated_dir, figures_dir, out_pdf))
    tools = latex_tools()
    if not tools["pdflatex"]:
        raise PaperBuildError(f"pdflatex not found: {LATEX_INSTALL_HINT}")
    for path, what in ((tex, "paper source"), (generated_dir / "macros.tex", "generated macros"),
                       (figures_dir, "figures directory")):
        if not path.exists():
            raise PaperBuildError(f"{path}: missing {what}")
    build = out_pdf.parent / "build"
    if build.exists():
        shutil.rmtree(build)
    build.mkdir(parents=True)
    shutil.copy2(tex, build / tex.name)
    for bib in tex.parent.glob("*.bib"):
        shutil.copy2(bib, build / bib.name)
    shutil.copytree(generated_dir, build / "generated")
    shutil.copytree(figures_dir, build / "figures")
    if tools["latexmk"]:
        commands = [["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error",
                     tex.name]]
    else:
        run = ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error", tex.name]
        commands = [run] + ([["bibtex", tex.stem]] if tools["bibtex"] and list(build.glob("*.bib")) else []) + [run, run]
    output = []
    for command in commands:
        proc = subprocess.run(command, cwd=build, capture_output=True, text=True)
        output.append(f"$ {' '.join(command)}\n{proc.stdout}\n{proc.stderr}")
        if proc.returncode != 0:
            text = "\n".join(output)
            if log:
                write_text(log, text)
            tex_log = build / f"{tex.stem}.log"
            log_text = tex_log.read_text(errors="replace") if tex_log.exists() else text
            errors = [line for line in log_text.splitlines() if line.startswith("!") or ":error" in line.lower()
                      or re.match(r"^.*\.tex:\d+:", line)]
            raise PaperBuildError(
                f"{command[0]} failed (exit {proc.returncode}) building {tex}: "
                + ("; ".join(errors[:3]) or "see the log") + _missing_package_hint(log_text)
                + (f" (full log: {log})" if log else ""))
    if log:
        write_text(log, "\n".join(output))
    produced = build / f"{tex.stem}.pdf"
    if not produced.is_file():
        raise PaperBuildError(f"{command[0]} reported success but wrote no {produced}")
    return copy_file(produced, out_pdf)
