"""Number formatting and LaTeX tables (booktabs) from the statistics tables.

One formatter per metric kind, used by the CSV-to-LaTeX tables, the paper macros and the
tests that look for those numbers in the PDF, so the three always agree.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from lore.report.aggregate import ALL_ENVS, AnalysisSettings, Tables, budget_metric
from lore.report.outputs import write_text

MISSING = "--"


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fmt_rate(x) -> str:
    """Rates and probabilities in [0, 1]: two decimals."""
    return f"{float(x):.2f}" if _finite(x) else MISSING


def fmt_steps(x) -> str:
    """Env steps: ``750``, ``6k``, ``12.5k``, ``1.2M``."""
    if not _finite(x):
        return MISSING
    x = float(x)
    if abs(x) >= 1e6:
        return f"{round(x / 1e6, 2):g}M"
    if abs(x) >= 1e3:
        return f"{round(x / 1e3, 1):g}k"
    return f"{x:.0f}"


def fmt_count(x) -> str:
    if not _finite(x):
        return MISSING
    return f"{float(x):.0f}" if abs(float(x)) >= 10 else f"{float(x):.1f}"


def fmt_score(x) -> str:
    """Crafter score (percent) and returns: one or two decimals."""
    return f"{float(x):.1f}" if _finite(x) else MISSING


def fmt_plain(x) -> str:
    return f"{float(x):.2f}" if _finite(x) else MISSING


def fmt_signed(x) -> str:
    """Differences: ``+0.83``, ``$-$0.12`` (a real minus sign), ``0.00``."""
    if not _finite(x):
        return MISSING
    text = f"{float(x):+.2f}"
    if text in ("+0.00", "-0.00"):
        return "0.00"
    return text.replace("-", "$-$")


RATE_METRICS = ("final_sr", "auc", "reached_threshold", "train_sr_window", "p_improve", "initial_sr", "train_sr_final")


def formatter_for(metric: str):
    if metric in RATE_METRICS or metric.startswith("sr@"):
        return fmt_rate
    if metric == "train_eval_gap":
        return fmt_signed
    if metric in ("steps_to_threshold", "last_step"):
        return fmt_steps
    if metric.startswith("llm_"):
        return fmt_count
    if metric == "crafter_score":
        return fmt_score
    if metric == "wall_s":
        return fmt_count
    return fmt_plain


def fmt_ci(estimate, low, high, fmt=fmt_rate) -> str:
    if not _finite(estimate):
        return MISSING
    if not (_finite(low) and _finite(high)):
        return fmt(estimate)
    return f"{fmt(estimate)} [{fmt(low)}, {fmt(high)}]"


# --------------------------------------------------------------------------- names

_LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                   "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(c, c) for c in str(text))


def env_label(env: str) -> str:
    """Short human name: ``MiniGrid-DoorKey-5x5-v0`` -> ``DoorKey-5x5``, Crafter ids -> ``Crafter``."""
    if env == ALL_ENVS:
        return "all environments"
    if env.lower().startswith("crafter"):
        return "Crafter"
    name = re.sub(r"^MiniGrid-", "", env)
    return re.sub(r"-v\d+$", "", name)


def ablation_tex(name: str) -> str:
    return r"\texttt{" + escape(name) + "}"


LORENUM_DEF = r"\providecommand{\lorenum}[1]{#1}"
r"""``\lorenum{x}`` prints ``x``: generated prose wraps every number it computes in it, so a test can
tell computed numbers from digits typed into a template (tests/test_paper.py)."""


def num(text) -> str:
    """A computed number in generated prose (see :data:`LORENUM_DEF`)."""
    return r"\lorenum{" + str(text) + "}"


def name_tex(text: str) -> str:
    """A name that may contain digits (an environment such as DoorKey-5x5), escaped, in prose."""
    return r"\lorenum{" + escape(text) + "}"


FEW_SEEDS = 5
"""Intervals from fewer seeds than this are flagged with a dagger: a bootstrap over 3 runs can
only return values those 3 runs took, so "[0.20, 0.20]" says little."""
IQM_TRIMS_FROM = 4
"""The IQM trims nothing below this many runs (``int(0.25 * n) == 0``): it is then the mean."""
DAGGER = r"\textsuperscript{\dag}"


def few(n) -> str:
    """The dagger for an interval from fewer than :data:`FEW_SEEDS` seeds, else nothing."""
    try:
        return DAGGER if int(n) < FEW_SEEDS else ""
    except (TypeError, ValueError):
        return ""


def seeds_caption(ns) -> str:
    """Caption text stating n (one value or a range) and what the dagger means."""
    ns = sorted({int(n) for n in ns if _finite(n)})
    if not ns:
        return ""
    n_text = num(ns[0]) if len(ns) == 1 else f"{num(ns[0])}--{num(ns[-1])}"
    text = f" $n$ = {n_text} seeds per ablation"
    if ns[0] < FEW_SEEDS:
        text += rf"; {DAGGER}\,intervals from fewer than {num(FEW_SEEDS)} seeds (unreliable)"
    if ns[0] < IQM_TRIMS_FROM:
        text += f"; with fewer than {num(IQM_TRIMS_FROM)} seeds the IQM trims nothing and equals the mean"
    return text + "."


def crafter_achievement_count() -> int:
    """Number of Crafter achievements (from the crafter package, else the synthetic list)."""
    try:
        from crafter import constants

        return len(constants.achievements)
    except Exception:  # noqa: BLE001 - crafter is optional for the analysis
        from lore.report.synthetic import CRAFTER_DIFFICULTY

        return len(CRAFTER_DIFFICULTY)


# --------------------------------------------------------------------------- tables


def cell(text: str, ci: str | None = None) -> str:
    """Estimate on the first line, the CI small on the second (nested tabular: base LaTeX only)."""
    if ci is None:
        return text
    return r"\begin{tabular}[t]{@{}c@{}}" + text + r"\\[-1pt]{\scriptsize " + ci + r"}\end{tabular}"


def _stat(stats: pd.DataFrame, env: str, ablation: str, metric: str) -> pd.Series | None:
    if stats is None or not len(stats):
        return None
    rows = stats[(stats["env"] == env) & (stats["ablation"] == ablation) & (stats["metric"] == metric)]
    return rows.iloc[0] if len(rows) else None


def stat_cell(stats: pd.DataFrame, env: str, ablation: str, metric: str, field: str = "iqm") -> str:
    """Estimate with its CI below; a dagger on intervals from fewer than :data:`FEW_SEEDS` seeds."""
    row = _stat(stats, env, ablation, metric)
    if row is None or not _finite(row[field]):
        return MISSING
    fmt = formatter_for(metric)
    return cell(fmt(row[field]), f"[{fmt(row[f'{field}_low'])}, {fmt(row[f'{field}_high'])}]{few(row['n'])}")


def improve_cell(improvement: pd.DataFrame, env: str, ablation: str, metric: str) -> str:
    rows = improvement[(improvement["env"] == env) & (improvement["ablation"] == ablation)
                       & (improvement["metric"] == metric)]
    if not len(rows):
        return MISSING
    row = rows.iloc[0]
    flag = few(min(row["n"], row["n_baseline"])) if "n_baseline" in row else few(row["n"])
    return cell(fmt_rate(row["p_improve"]), f"[{fmt_rate(row['low'])}, {fmt_rate(row['high'])}]{flag}")


def ordered_ablations(names) -> list[str]:
    """The order of :data:`lore.ablations.ABLATIONS` (the paper's order), unknown names last."""
    from lore.ablations import ABLATIONS

    order = {name: i for i, name in enumerate(ABLATIONS)}
    return sorted(set(names), key=lambda n: (order.get(n, len(order)), n))


def tabular(header: list[str], rows: list[list[str]], align: str) -> str:
    """A booktabs ``tabular`` with ``header`` and ``rows`` (cells already LaTeX), columns aligned by ``align``."""
    lines = [r"\begin{tabular}{" + align + "}", r"\toprule", " & ".join(header) + r" \\", r"\midrule"]
    lines += [" & ".join(r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def table_float(body: str, caption: str, label: str) -> str:
    """A ``table`` float holding ``body`` (scaled down to the line width if wider), with its caption and label."""
    return "\n".join([r"\begin{table}[tbp]", r"\centering", r"\small", r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%", body + "}",
                      r"\caption{" + caption + "}", r"\label{" + label + "}", r"\end{table}", ""])


def label_slug(env: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", env_label(env)).strip("-").lower()


def n_runs(tables: Tables, env: str, ablation: str) -> int:
    runs = tables.runs
    if not len(runs):
        return 0
    return int(((runs["env"] == env) & (runs["ablation"] == ablation)).sum())


def final_is_budget(stats: pd.DataFrame, env: str, budget: int) -> bool:
    """True when the SR at ``budget`` is the final SR for every ablation (the runs end there):
    the two then carry the same numbers and are shown once."""
    at = stats[(stats["env"] == env) & (stats["metric"] == budget_metric(budget))]
    final = stats[(stats["env"] == env) & (stats["metric"] == "final_sr")]
    if not len(at) or len(at) != len(final):
        return False
    cols = ["iqm", "iqm_low", "iqm_high", "mean", "n"]
    a = at.set_index("ablation")[cols].sort_index()
    f = final.set_index("ablation")[cols].sort_index()
    return a.index.equals(f.index) and bool(np.allclose(a.to_numpy(float), f.to_numpy(float), equal_nan=True))


def budgets_shown(tables: Tables, settings: AnalysisSettings, env: str) -> tuple[list[int], bool]:
    """The budgets with data in ``env`` and whether the final SR needs its own column/panel."""
    stats = tables.stats
    have = set(stats.loc[stats["env"] == env, "metric"])
    budgets = [b for b in settings.budgets_for(env) if budget_metric(b) in have]
    separate_final = not (budgets and final_is_budget(stats, env, budgets[-1]))
    return budgets, separate_final


def env_names(stats: pd.DataFrame) -> list[str]:
    return sorted(e for e in stats["env"].unique() if e != ALL_ENVS) if len(stats) else []


def sr_table(tables: Tables, settings: AnalysisSettings) -> str:
    """Per env: the untrained policy's SR, IQM eval SR at each budget and at the end, and P(improvement)."""
    out = []
    stats = tables.stats
    for env in env_names(stats):
        in_env = stats[stats["env"] == env]
        budgets, separate_final = budgets_shown(tables, settings, env)
        untrained = "initial_sr" in set(in_env["metric"])
        header = ["Ablation", "$n$"] + (["Untrained"] if untrained else [])
        header += [f"SR @ {fmt_steps(b)}" + ("" if separate_final or b != budgets[-1] else " (final)")
                   for b in budgets]
        ablations = ordered_ablations(in_env["ablation"])
        with_base = settings.baseline in ablations
        header += (["Final SR"] if separate_final else []) + (
            [f"P(final SR $>$ {ablation_tex(settings.baseline)})"] if with_base else [])
        rows = []
        for ablation in ablations:
            n = n_runs(tables, env, ablation)
            row = [ablation_tex(ablation), f"{n}{few(n)}"]
            if untrained:
                row.append(stat_cell(stats, env, ablation, "initial_sr", "mean"))
            row += [stat_cell(stats, env, ablation, budget_metric(b)) for b in budgets]
            if separate_final:
                row.append(stat_cell(stats, env, ablation, "final_sr"))
            if with_base:
                row.append(MISSING if ablation == settings.baseline
                           else improve_cell(tables.improvement, env, ablation, "final_sr"))
            rows.append(row)
        level = num(int(round(settings.confidence * 100)))
        caption = (f"{name_tex(env_label(env))}: interquartile mean (IQM) of the evaluation success rate across "
                   f"seeds at fixed budgets of environment steps"
                   + (" and at the end of training" if separate_final else " (the last budget is the end of "
                      "training)")
                   + (", and the probability that an ablation's final success rate exceeds "
                      f"{ablation_tex(settings.baseline)}'s." if with_base else ".")
                   + (" Untrained: mean success of the untrained policy (evaluated before its first environment "
                      "step), the floor." if untrained else "")
                   + f" Brackets: {level}\\% stratified bootstrap confidence intervals over seeds;"
                   + seeds_caption(n_runs(tables, env, a) for a in ablations))
        out.append(table_float(tabular(header, rows, "l" + "c" * (len(header) - 1)), caption,
                          f"tab:sr-{label_slug(env)}"))
    return "\n".join(out)


def efficiency_table(tables: Tables, settings: AnalysisSettings) -> str:
    """Per env: AUC, steps to the threshold, the original metric and LLM calls."""
    out = []
    stats = tables.stats
    for env in env_names(stats):
        in_env = stats[stats["env"] == env]
        header = ["Ablation", "$n$", "AUC (mean)", f"Steps to SR $\\geq$ {fmt_rate(settings.threshold)}",
                  f"Train SR @ {fmt_steps(settings.window_center)} $\\pm$ {fmt_steps(settings.window_half_width)}",
                  "LLM calls"]
        rows = []
        ablations = ordered_ablations(in_env["ablation"])
        for ablation in ablations:
            reached = _stat(stats, env, ablation, "reached_threshold")
            steps_row = _stat(stats, env, ablation, "steps_to_threshold")
            n_all = int(reached["n_runs"]) if reached is not None else 0
            n_hit = int(round(reached["mean"] * reached["n"])) if reached is not None else 0
            steps_text = MISSING
            if steps_row is not None and _finite(steps_row["median"]):
                steps_text = f"{fmt_steps(steps_row['median'])} ({n_hit}/{n_all})"
            elif reached is not None:
                steps_text = f"{MISSING} (0/{n_all})"
            calls = _stat(stats, env, ablation, "llm_calls")
            n = n_runs(tables, env, ablation)
            rows.append([
                ablation_tex(ablation),
                f"{n}{few(n)}",
                stat_cell(stats, env, ablation, "auc", "mean"),
                steps_text,
                stat_cell(stats, env, ablation, "train_sr_window", "mean"),
                fmt_count(calls["mean"]) if calls is not None else MISSING,
            ])
        level = num(int(round(settings.confidence * 100)))
        caption = (f"{name_tex(env_label(env))}: area under the evaluation success curve (normalised by the step "
                   f"range), median environment steps until the evaluation success rate first reaches "
                   f"{num(fmt_rate(settings.threshold))} (seeds that reached it / all seeds), the original "
                   f"prototype's metric (median cumulative \\emph{{training}} success rate over episodes ending "
                   f"within {num(fmt_steps(settings.window_half_width))} steps of "
                   f"{num(fmt_steps(settings.window_center))}; mean over seeds), and LLM API calls per run (cache "
                   f"misses). Brackets: {level}\\% bootstrap confidence intervals;"
                   + seeds_caption(n_runs(tables, env, a) for a in ablations))
        out.append(table_float(tabular(header, rows, "lccccc"), caption, f"tab:efficiency-{label_slug(env)}"))
    return "\n".join(out)


def crafter_table(tables: Tables, settings: AnalysisSettings) -> str:
    """Crafter score per ablation (empty string when no Crafter runs)."""
    stats = tables.stats
    crafter = stats[stats["metric"] == "crafter_score"] if len(stats) else stats
    if crafter.empty:
        return ""
    out = []
    count = crafter_achievement_count()
    for env in sorted(crafter["env"].unique()):
        ablations = ordered_ablations(crafter.loc[crafter["env"] == env, "ablation"])
        rows = [[ablation_tex(a), f"{n_runs(tables, env, a)}{few(n_runs(tables, env, a))}",
                 stat_cell(stats, env, a, "crafter_score", "mean"), stat_cell(stats, env, a, "final_sr", "mean")]
                for a in ablations]
        caption = (f"{name_tex(env_label(env))}: Crafter score $\\exp(\\frac{{1}}{{{count}}}\\sum_i \\ln(1 + s_i)) - 1$ "
                   f"(percent; $s_i$ the final-evaluation success rate of achievement $i$ in percent) and the "
                   f"mean fraction of achievements unlocked per evaluation episode, mean over seeds with "
                   f"{num(int(round(settings.confidence * 100)))}\\% bootstrap confidence intervals;"
                   + seeds_caption(n_runs(tables, env, a) for a in ablations))
        out.append(table_float(tabular(["Ablation", "$n$", "Crafter score (\\%)", "Achievements unlocked"], rows,
                                   "lccc"), caption, f"tab:crafter-{label_slug(env)}"))
    return "\n".join(out)


def ablation_table(tables: Tables | None = None) -> str:
    """What each ablation changes, read from :data:`lore.ablations.ABLATIONS` (never retyped), and how
    many runs of it this grid has (arms not run are listed as defined, with no runs)."""
    from lore.ablations import ABLATIONS

    runs = tables.runs if tables is not None and len(tables.runs) else None
    rows = []
    for name, overrides in ABLATIONS.items():
        settings = ", ".join(f"{escape(k)}={escape(v)}" for k, v in overrides.items())
        row = [ablation_tex(name), r"\parbox[t]{0.66\linewidth}{\raggedright\footnotesize " + settings + "}"]
        if runs is not None:
            count = int((runs["ablation"] == name).sum())
            row.append(str(count) if count else MISSING)
        rows.append(row)
    header = ["Ablation", "Configuration overrides"] + (["Runs"] if runs is not None else [])
    body = tabular(header, rows, "llc" if runs is not None else "ll")
    note = (" Runs: how many runs of it this grid has (all environments; --: not run)." if runs is not None
            else "")
    return "\n".join([r"\begin{table}[tbp]", r"\centering", r"\small", body,
                      r"\caption{Ablations: the configuration overrides each applies on top of the defaults "
                      r"(from \texttt{lore/ablations.py})." + note + "}", r"\label{tab:ablations}", r"\end{table}", ""])


LATEX_TABLES = {
    "sr_table.tex": sr_table,
    "efficiency_table.tex": efficiency_table,
    "crafter_table.tex": crafter_table,
}


TABLE_FILES = (*LATEX_TABLES, "ablation_table.tex")
"""The .tex files :func:`write_latex_tables` writes."""


def latex_texts(tables: Tables, settings: AnalysisSettings) -> dict[str, str]:
    """{file name: LaTeX} of every table (a comment for a table this grid has no data for)."""
    texts = {}
    for name, build in LATEX_TABLES.items():
        body = build(tables, settings)
        texts[name] = LORENUM_DEF + "\n" + body if body else "% no data for this table in this grid\n"
    texts["ablation_table.tex"] = ablation_table(tables)
    return texts


def write_latex_tables(tables: Tables, settings: AnalysisSettings, out_dir: str | Path) -> list[Path]:
    """Every table rendered first, then each written atomically."""
    texts = latex_texts(tables, settings)
    return [write_text(Path(out_dir) / name, text) for name, text in texts.items()]
