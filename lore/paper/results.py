"""The paper's sentences about what the runs found: the headline, the findings and their verdicts,
the gap between training and evaluation, chance level, the design goals, the original prototype's
metric and the LLM cost. Every number in them comes from :mod:`lore.paper.numbers`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lore.paper.numbers import (
    ORIGINAL_CLAIM,
    diff_text,
    grid_arms,
    headline_budget,
    improve,
    iqm_name,
    iqm_text,
    join,
    mean_text,
    mechanisms,
    n_of,
    n_pair,
    ns_text,
    p_text,
    per_run_at,
    runs_of,
    stat,
    uses_prior,
)
from lore.report import stats as st
from lore.report.aggregate import TRAIN_TAIL_FRACTION, AnalysisSettings, Tables, budget_metric
from lore.report.latex import (
    DAGGER,
    FEW_SEEDS,
    IQM_TRIMS_FROM,
    MISSING,
    ablation_tex,
    budgets_shown,
    env_label,
    few,
    fmt_count,
    fmt_rate,
    fmt_steps,
    label_slug,
    name_tex,
    num,
)

# Goals from the design brief (targets we set before running anything, not results).
GOAL_RL_ONLY = (0.9, 50_000)
GOAL_FULL = (0.9, 10_000)
GOAL_ADVERSARIAL_RATIO = 0.9


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
        full, rl = stat(tables, env, "full", metric), stat(tables, env, base, metric)
        overlap = (full is not None and rl is not None and full["iqm_low"] <= rl["iqm_high"]
                   and rl["iqm_low"] <= full["iqm_high"])
        when = "" if final_too else " (the end of training)"
        parts.append(
            f"On {name_tex(env_label(env))}, after {num(fmt_steps(budget))} environment steps{when} the "
            f"{iqm_name(full, rl)} evaluation success rate of {ablation_tex('full')} is {iqm_text(full, metric)} "
            f"against {iqm_text(rl, metric)} for {ablation_tex(base)} ({ns_text(full, rl)} seeds; {level}\\% "
            f"confidence intervals in brackets; they {'overlap' if overlap else 'do not overlap'}), and the "
            f"probability that a {ablation_tex('full')} run beats a {ablation_tex(base)} run at this budget is "
            f"{improve(tables, env, 'full', metric)}."
        )
    full_f, rl_f = stat(tables, env, "full", "final_sr"), stat(tables, env, base, "final_sr")
    auc = (f"the normalised areas under the success curves are {mean_text(stat(tables, env, 'full', 'auc'), 'auc')} "
           f"and {mean_text(stat(tables, env, base, 'auc'), 'auc')}")
    if final_too:
        parts.append(f"At the end of training the {iqm_name(full_f, rl_f)} success rates are "
                     f"{iqm_text(full_f, 'final_sr')} and {iqm_text(rl_f, 'final_sr')}; {auc}.")
    else:
        parts.append(f"Over the whole run {auc}.")
    if min(n_of(full_f), n_of(rl_f)) < FEW_SEEDS:
        parts.append(f"{DAGGER}\\,Intervals from fewer than {num(FEW_SEEDS)} seeds.")
    return " ".join(parts)


LEAD = {"better": "{x} improves on {y}", "worse": "{x} does worse than {y}",
        "unclear": "No evidence of a difference between {x} and {y}"}
AUC_WORD = {"better": "higher", "worse": "lower", "unclear": "no evidence of a difference"}


def finding_sentence(x: str, y: str, comps: dict) -> str:
    """One comparison in words whose wording follows the intervals (:attr:`Comparison.verdict`)."""
    c = comps["final_sr"]
    X, Y = ablation_tex(x), ablation_tex(y)
    text = (LEAD[c.verdict].format(x=X, y=Y) + f" in final evaluation success rate ({num(fmt_rate(c.mean_x))} vs "
            f"{num(fmt_rate(c.mean_y))}, $\\Delta$ = {diff_text(c)}, P(X $>$ Y) = {p_text(c)}, {n_pair(c)})")
    auc = comps.get("auc")
    if auc is not None:
        text += f"; area under the curve: {AUC_WORD[auc.verdict]} (P = {p_text(auc)})"
    return text + "."


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
            clauses.append(text.format(join(groups[verdict])))
    out = ""
    if clauses:
        out = (f"On {name_tex(env_label(env))}, against {ablation_tex(base)} the final evaluation success rate "
               f"{join(clauses)}.")
    against = [(y, c["final_sr"].verdict) for x, y, c in comps if x == "full" and y != base]
    if against:
        words = {"better": "improves on", "worse": "does worse than", "unclear": "shows no evidence of a difference from"}
        by = {}
        for y, verdict in against:
            by.setdefault(verdict, []).append(ablation_tex(y))
        out += " " + ablation_tex("full") + " " + join(
            [f"{words[v]} {join(by[v], 'or' if v == 'unclear' else 'and')}" for v in ("better", "unclear", "worse")
             if v in by]) + "."
    return out.strip()


def gap_text(tables: Tables, env: str | None) -> str:
    """Training SR (with the prior) against final eval SR (without it), per arm, in words."""
    if env is None:
        return ""
    pct = num(int(round(100 * TRAIN_TAIL_FRACTION)))
    items = []
    largest = None
    for ablation in grid_arms(tables, env):
        train, final, gap = (stat(tables, env, ablation, m) for m in ("train_sr_final", "final_sr", "train_eval_gap"))
        if train is None or final is None or gap is None:
            continue
        X = ablation_tex(ablation)
        n = f"$n$ = {num(n_of(gap))}{few(n_of(gap))}"
        numbers = (f"training {mean_text(train, 'train_sr_final')}, evaluation {mean_text(final, 'final_sr')}, "
                   f"gap {mean_text(gap, 'train_eval_gap')}, {n}")
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


def chance_text(tables: Tables, settings: AnalysisSettings, envs: Sequence[str]) -> str:
    """The untrained policy's success (eval at step 0, pooled over every run of the env): the floor."""
    parts = []
    for env in envs:
        values = np.concatenate([runs_of(tables, env, a, "initial_sr") for a in grid_arms(tables, env)] or
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
        values = per_run_at(ev, env, ablation, budget) if len(ev) else np.array([])
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
    adv, rl = stat(tables, env, "full_adversarial", "final_sr"), stat(tables, env, base, "final_sr")
    if adv is None or rl is None:
        items.append(head + "\\textbf{not tested} (the arm is not part of this grid).")
    elif rl["iqm"] <= 0:
        items.append(head + f"\\textbf{{not tested}} ({ablation_tex(base)} never succeeded, so the ratio is undefined).")
    else:
        ratio = adv["iqm"] / rl["iqm"]
        verdict = "met" if ratio >= GOAL_ADVERSARIAL_RATIO else "not met"
        items.append(head + f"\\textbf{{{verdict}}} ({num(fmt_rate(adv['iqm']))} vs {num(fmt_rate(rl['iqm']))}, "
                            f"ratio {num(fmt_rate(ratio))}, {ns_text(adv, rl)}{few(min(n_of(adv), n_of(rl)))}).")
    unguarded = stat(tables, env, "kl_adversarial", "final_sr")
    if adv is not None and unguarded is not None:
        # a measurement beside the goal, not a goal: the same adversary without the parts full adds to kl
        lacks = [m.removeprefix("the ") for m in mechanisms(tables, env, "full_adversarial")
                 if m not in mechanisms(tables, env, "kl_adversarial")]
        without = f" without the {join(lacks)} that {ablation_tex('full')} adds" if lacks else ""
        items.append(f"Measured beside it, the same adversary{without} "
                     f"({ablation_tex('kl_adversarial')}): final {iqm_name(adv, unguarded)} success rate "
                     f"{num(fmt_rate(unguarded['iqm']))} against {num(fmt_rate(adv['iqm']))} for "
                     f"{ablation_tex('full_adversarial')} ({ns_text(unguarded, adv)}{few(min(n_of(adv), n_of(unguarded)))}).")
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
    full = stat(tables, env, "full", "train_sr_window")
    rl = stat(tables, env, settings.baseline, "train_sr_window")
    window = f"{num(fmt_steps(settings.window_center))} $\\pm$ {num(fmt_steps(settings.window_half_width))}"
    if full is None or rl is None:
        return quoted + (f" Our runs have no episodes in the window {window} for both {ablation_tex('full')} "
                         f"and {ablation_tex(settings.baseline)}, so the metric is not available for this grid.")
    return quoted + (
        f" The same metric on our runs (window {window}, mean over seeds) is {mean_text(full, 'train_sr_window')} "
        f"for {ablation_tex('full')} ({num(int(full['n']))} seeds) and {mean_text(rl, 'train_sr_window')} for "
        f"{ablation_tex(settings.baseline)} ({num(int(rl['n']))} seeds).")


def llm_cost_sentence(tables: Tables, env: str | None) -> str:
    if env is None:
        return ""
    calls = stat(tables, env, "full", "llm_calls")
    if calls is None:
        return f"This grid has no {ablation_tex('full')} runs, so LLM costs are not reported."
    hits = stat(tables, env, "full", "llm_cache_hits")
    fails = stat(tables, env, "full", "llm_failures")
    return (f"On {name_tex(env_label(env))} a {ablation_tex('full')} run made {num(fmt_count(calls['mean']))} LLM "
            f"API calls on average ({mean_text(calls, 'llm_calls')} with CI, $n$ = {num(n_of(calls))}), answered "
            f"{num(fmt_count(hits['mean'])) if hits is not None else MISSING} more requests from the cache, and saw "
            f"{num(fmt_count(fails['mean'])) if fails is not None else MISSING} failed calls.")
