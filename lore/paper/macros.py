"""``macros.tex``: every statistic and setup value as a macro, the generated sentences, and the findings
and train-vs-eval tables, assembled from :mod:`lore.paper.numbers`,
:mod:`lore.paper.results` and :mod:`lore.paper.method`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lore.paper.method import (
    abstract_grid,
    advisor_sentence,
    arms_text,
    crafter_claim_sentence,
    default_choice_sentence,
    gate_sentence,
    grid_sentence,
    kl_sentence,
    regret_sentence,
    regret_summary,
    trust_sentence,
)
from lore.paper.numbers import (
    comparisons,
    grid_arms,
    primary_env,
    setup_macros,
    stat,
    stat_macros,
    uses_prior,
)
from lore.paper.results import (
    chance_text,
    findings_summary,
    findings_text,
    gap_text,
    goal_items,
    headline_sentence,
    llm_cost_sentence,
    original_metric_sentence,
)
from lore.report.aggregate import ALL_ENVS, TRAIN_TAIL_FRACTION, AnalysisSettings, Tables
from lore.report.latex import (
    LORENUM_DEF,
    MISSING,
    ablation_tex,
    cell,
    env_label,
    env_names,
    escape,
    few,
    fmt_rate,
    fmt_signed,
    label_slug,
    n_runs,
    name_tex,
    num,
    seeds_caption,
    stat_cell,
    table_float,
    tabular,
)

VERDICT_WORD = {"better": "improves", "worse": "worse", "unclear": "no evidence"}


def _unbreakable_list(items: Sequence[str]) -> str:
    """An itemize that a page break (and so a float) cannot split."""
    body = "\n".join(f"  \\item {item}" for item in items)
    return ("\\par\\smallskip\\noindent\\begin{minipage}{\\linewidth}\\begin{itemize}\n" + body
            + "\n\\end{itemize}\\end{minipage}\\par\\smallskip\n")


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
                cell(fmt_signed(final.difference.estimate),
                      f"[{fmt_signed(final.difference.low)}, {fmt_signed(final.difference.high)}]"),
                cell(fmt_rate(final.p_improve.estimate),
                      f"[{fmt_rate(final.p_improve.low)}, {fmt_rate(final.p_improve.high)}]"),
                MISSING if auc is None else cell(fmt_signed(auc.difference.estimate),
                                                  f"[{fmt_signed(auc.difference.low)}, {fmt_signed(auc.difference.high)}]"),
                MISSING if auc is None else cell(fmt_rate(auc.p_improve.estimate),
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
    return table_float(tabular(header, rows, "lcccccc"), caption, "tab:findings")


def gap_table(tables: Tables, settings: AnalysisSettings, envs: Sequence[str]) -> str:
    out = []
    pct = num(int(round(100 * TRAIN_TAIL_FRACTION)))
    for env in envs:
        arms = [a for a in grid_arms(tables, env) if stat(tables, env, a, "train_eval_gap") is not None]
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
        out.append(table_float(tabular(header, rows, "lcccc" + "c"), caption, f"tab:gap-{label_slug(env)}"))
    return "\n".join(out)


def _stat_cell(tables: Tables, env: str, ablation: str, metric: str) -> str:
    return stat_cell(tables.stats, env, ablation, metric, "mean")


def macros_tex(tables: Tables, settings: AnalysisSettings, envs_order: Sequence[str] | None = None,
               decision_root: Path | None = None) -> str:
    """Every macro ``paper/lore.tex`` reads. ``decision_root``: the checkout whose
    ``docs/experiments/records`` say how the default was chosen and whether the claim extends to Crafter (default: this
    repository, else the working directory; without the record a sentence says so)."""
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
        "loreGateSentence": gate_sentence(tables, env),
        "loreGridSentence": grid_sentence(tables),
        "loreAdvisorSentence": advisor_sentence(tables),
        "loreAbstractGrid": abstract_grid(tables),
        "loreArms": arms_text(tables, settings, env),
        "loreDefaultChoice": default_choice_sentence(tables, decision_root),
        "loreRegret": regret_sentence(decision_root),
        "loreRegretSummary": regret_summary(decision_root),
        "loreCrafterClaim": crafter_claim_sentence(decision_root),
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
                   "loreTrustSentence", "loreGateSentence", "loreGridSentence",
                   "loreAdvisorSentence", "loreAbstractGrid", "loreArms", "loreDefaultChoice", "loreRegret", "loreRegretSummary", "loreCrafterClaim", "loreFindings", "loreFindingsSummary",
                   "loreGap", "loreChance")
"""The macros holding generated prose (tests/test_paper.py checks them for typed digits)."""
