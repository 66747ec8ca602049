"""Number formatting and LaTeX tables (booktabs) from the statistics tables.

One formatter per metric kind, used by the CSV-to-LaTeX tables, the paper macros and the
tests that look for those numbers in the PDF, so the three always agree.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from lore.analysis.aggregate import ALL_ENVS, AnalysisSettings, Tables, budget_metric

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


def formatter_for(metric: str):
    if metric in ("final_sr", "auc", "reached_threshold", "train_sr_window", "p_improve") or metric.startswith("sr@"):
        return fmt_rate
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


# --------------------------------------------------------------------------- tables


def _cell(text: str, ci: str | None = None) -> str:
    """Estimate on the first line, the CI small on the second (nested tabular: base LaTeX only)."""
    if ci is None:
        return text
    return r"\begin{tabular}[t]{@{}c@{}}" + text + r"\\[-1pt]{\scriptsize " + ci + r"}\end{tabular}"


def _stat(stats: pd.DataFrame, env: str, ablation: str, metric: str) -> pd.Series | None:
    rows = stats[(stats["env"] == env) & (stats["ablation"] == ablation) & (stats["metric"] == metric)]
    return rows.iloc[0] if len(rows) else None


def stat_cell(stats: pd.DataFrame, env: str, ablation: str, metric: str, field: str = "iqm") -> str:
    row = _stat(stats, env, ablation, metric)
    if row is None or not _finite(row[field]):
        return MISSING
    fmt = formatter_for(metric)
    return _cell(fmt(row[field]), f"[{fmt(row[f'{field}_low'])}, {fmt(row[f'{field}_high'])}]")


def improve_cell(improvement: pd.DataFrame, env: str, ablation: str, metric: str) -> str:
    rows = improvement[(improvement["env"] == env) & (improvement["ablation"] == ablation)
                       & (improvement["metric"] == metric)]
    if not len(rows):
        return MISSING
    row = rows.iloc[0]
    return _cell(fmt_rate(row["p_improve"]), f"[{fmt_rate(row['low'])}, {fmt_rate(row['high'])}]")


def ordered_ablations(names) -> list[str]:
    """The order of :data:`lore.ablations.ABLATIONS` (the paper's order), unknown names last."""
    from lore.ablations import ABLATIONS

    order = {name: i for i, name in enumerate(ABLATIONS)}
    return sorted(set(names), key=lambda n: (order.get(n, len(order)), n))


def _tabular(header: list[str], rows: list[list[str]], align: str) -> str:
    lines = [r"\begin{tabular}{" + align + "}", r"\toprule", " & ".join(header) + r" \\", r"\midrule"]
    lines += [" & ".join(r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def _float(body: str, caption: str, label: str) -> str:
    return "\n".join([r"\begin{table}[tbp]", r"\centering", r"\small", r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%", body + "}",
                      r"\caption{" + caption + "}", r"\label{" + label + "}", r"\end{table}", ""])


def label_slug(env: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", env_label(env)).strip("-").lower()


def sr_table(tables: Tables, settings: AnalysisSettings) -> str:
    """Per env: IQM eval success rate at each budget and at the end, and P(improvement) over the baseline."""
    out = []
    stats = tables.stats
    for env in sorted(e for e in stats["env"].unique() if e != ALL_ENVS):
        in_env = stats[stats["env"] == env]
        budgets = [b for b in settings.budgets_for(env) if budget_metric(b) in set(in_env["metric"])]
        header = ["Ablation"] + [f"SR @ {fmt_steps(b)}" for b in budgets] + [
            "Final SR", f"P(final SR $>$ {ablation_tex(settings.baseline)})"]
        rows = []
        for ablation in ordered_ablations(in_env["ablation"]):
            row = [ablation_tex(ablation)]
            row += [stat_cell(stats, env, ablation, budget_metric(b)) for b in budgets]
            row.append(stat_cell(stats, env, ablation, "final_sr"))
            row.append(MISSING if ablation == settings.baseline
                       else improve_cell(tables.improvement, env, ablation, "final_sr"))
            rows.append(row)
        level = int(round(settings.confidence * 100))
        caption = (f"{escape(env_label(env))}: interquartile mean (IQM) of the evaluation success rate across "
                   f"seeds at fixed budgets of environment steps and at the end of training, and the probability "
                   f"that an ablation's final success rate exceeds {ablation_tex(settings.baseline)}'s. "
                   f"Brackets: {level}\\% stratified bootstrap confidence intervals over seeds.")
        out.append(_float(_tabular(header, rows, "l" + "c" * (len(header) - 1)), caption,
                          f"tab:sr-{label_slug(env)}"))
    return "\n".join(out)


def efficiency_table(tables: Tables, settings: AnalysisSettings) -> str:
    """Per env: AUC, steps to the threshold, the original metric and LLM calls."""
    out = []
    stats = tables.stats
    runs = tables.runs
    for env in sorted(e for e in stats["env"].unique() if e != ALL_ENVS):
        in_env = stats[stats["env"] == env]
        header = ["Ablation", "AUC (mean)", f"Steps to SR $\\geq$ {fmt_rate(settings.threshold)}",
                  f"Train SR @ {fmt_steps(settings.window_center)} $\\pm$ {fmt_steps(settings.window_half_width)}",
                  "LLM calls", "Seeds"]
        rows = []
        for ablation in ordered_ablations(in_env["ablation"]):
            reached = _stat(stats, env, ablation, "reached_threshold")
            steps_row = _stat(stats, env, ablation, "steps_to_threshold")
            n_runs = int(reached["n_runs"]) if reached is not None else 0
            n_hit = int(round(reached["mean"] * reached["n"])) if reached is not None else 0
            steps_text = MISSING
            if steps_row is not None and _finite(steps_row["median"]):
                steps_text = f"{fmt_steps(steps_row['median'])} ({n_hit}/{n_runs})"
            elif reached is not None:
                steps_text = f"{MISSING} (0/{n_runs})"
            calls = _stat(stats, env, ablation, "llm_calls")
            n_seeds = int(((runs["env"] == env) & (runs["ablation"] == ablation)).sum()) if len(runs) else 0
            rows.append([
                ablation_tex(ablation),
                stat_cell(stats, env, ablation, "auc", "mean"),
                steps_text,
                stat_cell(stats, env, ablation, "train_sr_window", "mean"),
                fmt_count(calls["mean"]) if calls is not None else MISSING,
                str(n_seeds),
            ])
        level = int(round(settings.confidence * 100))
        caption = (f"{escape(env_label(env))}: area under the evaluation success curve (normalised by the step "
                   f"range), median environment steps until the evaluation success rate first reaches "
                   f"{fmt_rate(settings.threshold)} (seeds that reached it / all seeds), the original "
                   f"prototype's metric (median cumulative \\emph{{training}} success rate over episodes ending "
                   f"within {fmt_steps(settings.window_half_width)} steps of {fmt_steps(settings.window_center)}; "
                   f"mean over seeds), and LLM API calls per run (cache misses). Brackets: {level}\\% bootstrap "
                   f"confidence intervals.")
        out.append(_float(_tabular(header, rows, "lccccc"), caption, f"tab:efficiency-{label_slug(env)}"))
    return "\n".join(out)


def crafter_table(tables: Tables, settings: AnalysisSettings) -> str:
    """Crafter score per ablation (empty string when no Crafter runs)."""
    stats = tables.stats
    crafter = stats[stats["metric"] == "crafter_score"]
    if crafter.empty:
        return ""
    out = []
    for env in sorted(crafter["env"].unique()):
        rows = [[ablation_tex(a), stat_cell(stats, env, a, "crafter_score", "mean"),
                 stat_cell(stats, env, a, "final_sr", "mean")]
                for a in ordered_ablations(crafter.loc[crafter["env"] == env, "ablation"])]
        caption = (f"{escape(env_label(env))}: Crafter score $\\exp(\\frac{{1}}{{22}}\\sum_i \\ln(1 + s_i)) - 1$ "
                   f"(percent; $s_i$ the final-evaluation success rate of achievement $i$ in percent) and the "
                   f"mean fraction of achievements unlocked per evaluation episode, mean over seeds with "
                   f"{int(round(settings.confidence * 100))}\\% bootstrap confidence intervals.")
        out.append(_float(_tabular(["Ablation", "Crafter score (\\%)", "Achievements unlocked"], rows, "lcc"),
                          caption, f"tab:crafter-{label_slug(env)}"))
    return "\n".join(out)


def ablation_table() -> str:
    """What each ablation changes, read from :data:`lore.ablations.ABLATIONS` (never retyped)."""
    from lore.ablations import ABLATIONS

    rows = []
    for name, overrides in ABLATIONS.items():
        settings = ", ".join(f"{escape(k)}={escape(v)}" for k, v in overrides.items())
        rows.append([ablation_tex(name), r"\parbox[t]{0.72\linewidth}{\raggedright\footnotesize " + settings + "}"])
    body = _tabular(["Ablation", "Configuration overrides"], rows, "ll")
    return "\n".join([r"\begin{table}[tbp]", r"\centering", r"\small", body,
                      r"\caption{Ablations: the configuration overrides each applies on top of the defaults "
                      r"(from \texttt{lore/ablations.py}).}", r"\label{tab:ablations}", r"\end{table}", ""])


LATEX_TABLES = {
    "sr_table.tex": sr_table,
    "efficiency_table.tex": efficiency_table,
    "crafter_table.tex": crafter_table,
}


def write_latex_tables(tables: Tables, settings: AnalysisSettings, out_dir: str | Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in LATEX_TABLES.items():
        path = out_dir / name
        path.write_text(build(tables, settings) or "% no data for this table in this grid\n")
        written.append(path)
    path = out_dir / "ablation_table.tex"
    path.write_text(ablation_table())
    written.append(path)
    return written
