"""The paper's generated parts and its PDF build.

``write_generated(tables, settings, out_dir)`` writes ``macros.tex`` (every statistic as a
macro, plus the result sentences) and the LaTeX tables; ``paper/lore.tex`` only ever refers
to these, so no result number is typed into the text. ``build_pdf`` compiles the paper with
latexmk (or pdflatex + bibtex) in a scratch directory and copies the PDF out.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lore.analysis import stats as st
from lore.analysis.aggregate import ALL_ENVS, AnalysisSettings, Tables, budget_metric
from lore.analysis.latex import (
    MISSING,
    ablation_tex,
    env_label,
    escape,
    fmt_count,
    fmt_rate,
    fmt_steps,
    formatter_for,
    label_slug,
    ordered_ablations,
    write_latex_tables,
)

PRIMARY = "primary"
# Goals from the design brief (targets we set before running anything, not results).
GOAL_RL_ONLY = (0.9, 50_000)
GOAL_FULL = (0.9, 10_000)
GOAL_ADVERSARIAL_RATIO = 0.9
# What the original prototype's paper reported (quoted claims, see docs/workflow.md).
ORIGINAL_CLAIM = {"full": 0.119, "rl_only": 0.025, "center": 10_000, "half_width": 250}

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
    rows = s[(s["env"] == env) & (s["ablation"] == ablation) & (s["metric"] == metric)]
    return rows.iloc[0] if len(rows) else None


def _iqm_text(row: pd.Series | None, metric: str) -> str:
    if row is None or not np.isfinite(row["iqm"]):
        return MISSING
    fmt = formatter_for(metric)
    return f"{fmt(row['iqm'])} [{fmt(row['iqm_low'])}, {fmt(row['iqm_high'])}]"


def _mean_text(row: pd.Series | None, metric: str) -> str:
    if row is None or not np.isfinite(row["mean"]):
        return MISSING
    fmt = formatter_for(metric)
    return f"{fmt(row['mean'])} [{fmt(row['mean_low'])}, {fmt(row['mean_high'])}]"


def headline_budget(tables: Tables, settings: AnalysisSettings, env: str) -> int | None:
    have = set(tables.stats.loc[tables.stats["env"] == env, "metric"])
    if settings.headline_budget is not None and budget_metric(settings.headline_budget) in have:
        return int(settings.headline_budget)
    for budget in settings.budgets_for(env):
        if budget_metric(budget) in have:
            return int(budget)
    return None


def _improve(tables: Tables, env: str, ablation: str, metric: str) -> str:
    imp = tables.improvement
    rows = imp[(imp["env"] == env) & (imp["ablation"] == ablation) & (imp["metric"] == metric)]
    if not len(rows):
        return MISSING
    r = rows.iloc[0]
    return f"{fmt_rate(r['p_improve'])} [{fmt_rate(r['low'])}, {fmt_rate(r['high'])}]"


def headline_sentence(tables: Tables, settings: AnalysisSettings, env: str | None) -> str:
    base = settings.baseline
    if env is None:
        return "No runs were aggregated."
    ablations = set(tables.stats.loc[tables.stats["env"] == env, "ablation"])
    if "full" not in ablations or base not in ablations:
        missing = " and ".join(ablation_tex(a) for a in ("full", base) if a not in ablations)
        return f"This grid has no {missing} runs on {escape(env_label(env))}, so the headline comparison is not available."
    level = int(round(settings.confidence * 100))
    parts = []
    budget = headline_budget(tables, settings, env)
    if budget is not None:
        metric = budget_metric(budget)
        full, rl = _stat(tables, env, "full", metric), _stat(tables, env, base, metric)
        overlap = (full is not None and rl is not None and full["iqm_low"] <= rl["iqm_high"]
                   and rl["iqm_low"] <= full["iqm_high"])
        parts.append(
            f"On {escape(env_label(env))}, after {fmt_steps(budget)} environment steps the IQM evaluation success "
            f"rate of {ablation_tex('full')} is {_iqm_text(full, metric)} against {_iqm_text(rl, metric)} for "
            f"{ablation_tex(base)} ({level}\\% confidence intervals in brackets; they "
            f"{'overlap' if overlap else 'do not overlap'}), and the probability that a {ablation_tex('full')} run "
            f"beats a {ablation_tex(base)} run at this budget is {_improve(tables, env, 'full', metric)}."
        )
    full_f, rl_f = _stat(tables, env, "full", "final_sr"), _stat(tables, env, base, "final_sr")
    parts.append(
        f"At the end of training the IQM success rates are {_iqm_text(full_f, 'final_sr')} and "
        f"{_iqm_text(rl_f, 'final_sr')}; the normalised areas under the success curves are "
        f"{_mean_text(_stat(tables, env, 'full', 'auc'), 'auc')} and {_mean_text(_stat(tables, env, base, 'auc'), 'auc')}."
    )
    return " ".join(parts)


def _per_run_at(eval_points: pd.DataFrame, env: str, ablation: str, budget: float) -> np.ndarray:
    """Each run's eval SR at ``budget`` (NaN for runs that stopped before it)."""
    values = []
    data = eval_points[(eval_points["env"] == env) & (eval_points["ablation"] == ablation)]
    for _, run in data.groupby("seed"):
        run = run.dropna(subset=["success_rate"]).sort_values("env_step")
        steps, sr = run["env_step"].to_numpy(float), run["success_rate"].to_numpy(float)
        values.append(st.value_at_budget(steps, sr, budget) if len(steps) and steps[-1] >= budget else math.nan)
    return np.asarray(values, float)


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
        head = (f"{what.capitalize()} ({ablation_tex(ablation)}) reaches an IQM evaluation success rate "
                f"$\\geq$ {fmt_rate(target)} by {fmt_steps(budget)} environment steps: ")
        values = _per_run_at(ev, env, ablation, budget)
        if not values.size:
            items.append(head + f"\\textbf{{not tested}} (no {ablation_tex(ablation)} runs).")
        elif np.isnan(values).any():
            items.append(head + f"\\textbf{{not tested}} (the runs stop at {fmt_steps(last)} steps).")
        else:
            value = float(st.iqm(values))
            verdict = "met" if value >= target else "not met"
            items.append(head + f"\\textbf{{{verdict}}} (IQM {fmt_rate(value)} over {values.size} seeds).")
    head = (f"With an adversarial advisor ({ablation_tex('full_adversarial')}) the final IQM success rate stays "
            f"$\\geq$ {int(GOAL_ADVERSARIAL_RATIO * 100)}\\% of {ablation_tex(base)}'s (low regret): ")
    adv, rl = _stat(tables, env, "full_adversarial", "final_sr"), _stat(tables, env, base, "final_sr")
    if adv is None or rl is None:
        items.append(head + "\\textbf{not tested} (the arm is not part of this grid).")
    elif rl["iqm"] <= 0:
        items.append(head + f"\\textbf{{not tested}} ({ablation_tex(base)} never succeeded, so the ratio is undefined).")
    else:
        ratio = adv["iqm"] / rl["iqm"]
        verdict = "met" if ratio >= GOAL_ADVERSARIAL_RATIO else "not met"
        items.append(head + f"\\textbf{{{verdict}}} ({fmt_rate(adv['iqm'])} vs {fmt_rate(rl['iqm'])}, "
                            f"ratio {fmt_rate(ratio)}).")
    return items


def original_metric_sentence(tables: Tables, settings: AnalysisSettings, env: str | None) -> str:
    claim = ORIGINAL_CLAIM
    quoted = (f"The original prototype reported a success rate of {claim['full']} for LoRe against "
              f"{claim['rl_only']} for RL alone ``near {fmt_steps(claim['center'])} steps''; that number is the "
              f"median of the cumulative \\emph{{training}} success rate of a single seed over episodes ending "
              f"within $\\pm${claim['half_width']} steps of {fmt_steps(claim['center'])} (5/42 against 1/40 "
              f"episodes), not an evaluation success rate.")
    if env is None:
        return quoted
    full = _stat(tables, env, "full", "train_sr_window")
    rl = _stat(tables, env, settings.baseline, "train_sr_window")
    window = f"{fmt_steps(settings.window_center)} $\\pm$ {fmt_steps(settings.window_half_width)}"
    if full is None or rl is None:
        return quoted + (f" Our runs have no episodes in the window {window} for both {ablation_tex('full')} "
                         f"and {ablation_tex(settings.baseline)}, so the metric is not available for this grid.")
    return quoted + (
        f" The same metric on our runs (window {window}, mean over seeds) is {_mean_text(full, 'train_sr_window')} "
        f"for {ablation_tex('full')} ({int(full['n'])} seeds) and {_mean_text(rl, 'train_sr_window')} for "
        f"{ablation_tex(settings.baseline)} ({int(rl['n'])} seeds).")


def llm_cost_sentence(tables: Tables, env: str | None) -> str:
    if env is None:
        return ""
    calls = _stat(tables, env, "full", "llm_calls")
    if calls is None:
        return f"This grid has no {ablation_tex('full')} runs, so LLM costs are not reported."
    hits = _stat(tables, env, "full", "llm_cache_hits")
    fails = _stat(tables, env, "full", "llm_failures")
    return (f"On {escape(env_label(env))} a {ablation_tex('full')} run made {fmt_count(calls['mean'])} LLM API calls "
            f"on average ({_mean_text(calls, 'llm_calls')} with CI), answered "
            f"{fmt_count(hits['mean']) if hits is not None else MISSING} more requests from the cache, and saw "
            f"{fmt_count(fails['mean']) if fails is not None else MISSING} failed calls.")


def setup_macros(tables: Tables, settings: AnalysisSettings, env: str | None) -> dict[str, str]:
    runs = tables.runs
    envs = sorted(runs["env"].unique()) if len(runs) else []
    ablations = ordered_ablations(runs["ablation"]) if len(runs) else []
    seeds = sorted(runs["seed"].unique()) if len(runs) else []

    def cfg(column: str, env_name: str | None = env) -> str:
        values = runs.loc[runs["env"] == env_name, column].dropna().unique() if column in runs else []
        if not len(values):
            return MISSING
        formatted = sorted({fmt_steps(v) if isinstance(v, (int, float, np.integer, np.floating)) else escape(v)
                            for v in values})
        return ", ".join(formatted)

    return {
        "loreNumRuns": str(len(runs)),
        "loreNumSeeds": str(len(seeds)),
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
        **{name: cfg_number(runs, column, env) for name, column in CONFIG_NUMBER_MACROS.items()},
    }


CONFIG_NUMBER_MACROS = {
    "loreKLBound": "cfg_prior_kl_bound", "loreKLDelta": "cfg_prior_kl_delta", "loreLambdaMax": "cfg_prior_lambda_max",
    "loreControlEpisodes": "cfg_prior_control_episodes", "loreTrustGain": "cfg_prior_trust_gain",
    "loreTMin": "cfg_prior_temperature_min", "loreTMax": "cfg_prior_temperature_max",
    "loreGateFullAt": "cfg_prior_gate_full_at", "loreCooldown": "cfg_llm_controller_cooldown",
    "loreCooldownSuccess": "cfg_llm_controller_cooldown_after_success",
}
"""Configuration numbers the method section quotes, read from the runs' resolved configs."""


def cfg_number(runs: pd.DataFrame, column: str, env: str | None) -> str:
    """A config value of the runs as a plain number (``0.25``, ``100``); several values are listed."""
    if column not in runs or env is None:
        return MISSING
    values = pd.to_numeric(runs.loc[runs["env"] == env, column], errors="coerce").dropna().unique()
    return ", ".join(f"{v:g}" for v in sorted(values)) if len(values) else MISSING


def _runs_of(tables: Tables, env: str | None, ablation: str, column: str) -> np.ndarray:
    runs = tables.runs
    if env is None or column not in runs:
        return np.array([])
    values = runs.loc[(runs["env"] == env) & (runs["ablation"] == ablation), column].to_numpy(float)
    return values[np.isfinite(values)]


def _per_arm(tables: Tables, env: str | None, columns: Sequence[str], render) -> list[str]:
    """``render(ablation, *per-run arrays)`` for each arm whose runs logged every column (None skips)."""
    parts = []
    for ablation in ordered_ablations(tables.runs["ablation"].unique() if len(tables.runs) else []):
        values = [_runs_of(tables, env, ablation, column) for column in columns]
        if all(v.size for v in values):
            text = render(ablation_tex(ablation), *values)
            if text:
                parts.append(text)
    return parts


def kl_sentence(tables: Tables, env: str | None) -> str:
    """What KL control held in this grid: the largest act-time KL per arm against the bound, and lambda."""
    def render(arm, kl_max, below, bound):
        held = "within" if kl_max.max() <= bound.max() + 1e-6 else "above"
        return (f"in {arm} the largest logged act-time KL was {kl_max.max():.2f} nats ({held} the bound "
                f"{bound.max():g}) and $\\lambda<\\lambda_{{\\max}}$ on {100 * below.mean():.0f}\\% of logged "
                f"points (n={below.size})")

    parts = _per_arm(tables, env, ("kl_act_max", "lambda_below_max_frac", "cfg_prior_kl_bound"), render)
    return "Measured: " + "; ".join(parts) + "." if parts else "No arm of this grid uses KL control."


def trust_sentence(tables: Tables, env: str | None) -> str:
    """Final trust in the LLM's answers per arm that uses trust (mean and range over seeds)."""
    def render(arm, values):
        if np.allclose(values, 0.5):  # arms without trust log the uninformed 0.5
            return None
        return f"{arm} {values.mean():.2f} ({values.min():.2f}--{values.max():.2f}, n={values.size})"

    parts = _per_arm(tables, env, ("trust_llm_last",), render)
    return ("Trust in the LLM's answers at the end of training: " + "; ".join(parts) + "." if parts
            else "No arm of this grid estimates advice trust.")


def temperature_sentence(tables: Tables, env: str | None) -> str:
    """Refits that happened, how many ended at a bound, and the range T moved over."""
    def render(arm, refits, at_bound, lo, hi):
        share = f"{100 * at_bound.sum() / refits.sum():.0f}\\%" if refits.sum() > 0 else "none"
        return (f"{arm}: {refits.mean():.1f} refits per run, {share} of them at a bound, $T$ between "
                f"{lo.min():.2f} and {hi.max():.2f}")

    parts = _per_arm(tables, env, ("temperature_refits_last", "temperature_refits_at_bound_last",
                                   "temperature_lo", "temperature_hi"), render)
    return "Temperature refits: " + "; ".join(parts) + "." if parts else "No arm of this grid aligns the temperature."


def gate_sentence(tables: Tables, env: str | None) -> str:
    """Does the gate separate states? beta where the advice's top action differs from the policy's vs not."""
    parts = _per_arm(tables, env, ("beta_disagree_avg", "beta_agree_avg"),
                     lambda arm, dis, agr: f"{arm} {dis.mean():.2f} vs {agr.mean():.2f}")
    if not parts:
        return ""
    return ("Mean $\\beta$ on advised states where the advice's top action differs from the policy's, vs where "
            "it agrees: " + "; ".join(parts) + ".")


def macros_tex(tables: Tables, settings: AnalysisSettings, envs_order: Sequence[str] | None = None) -> str:
    envs = list(envs_order) if envs_order else (sorted(tables.runs["env"].unique()) if len(tables.runs) else [])
    env = primary_env(envs)
    has_crafter = bool(len(tables.achievements))
    lines = [
        "% Generated by `lore paper-macros` from the statistics tables; do not edit.",
        r"\makeatletter",
        r"\def\lore@set#1#2{\expandafter\def\csname lore@#1\endcsname{#2}}",
        r"\newcommand{\lorestat}[1]{\ifcsname lore@#1\endcsname\csname lore@#1\endcsname"
        r"\else\textbf{??}\PackageWarning{lore}{no statistic `#1' in this grid}\fi}",
    ]
    lines += stat_macros(tables, env)
    lines.append(r"\makeatother")
    for name, value in setup_macros(tables, settings, env).items():
        lines.append(f"\\newcommand{{\\{name}}}{{{value}}}")
    lines.append(f"\\newcommand{{\\loreHeadline}}{{{headline_sentence(tables, settings, env)}}}")
    goals = "\n".join(f"  \\item {item}" for item in goal_items(tables, settings, env))
    lines.append(f"\\newcommand{{\\loreGoals}}{{\\begin{{itemize}}\n{goals}\n\\end{{itemize}}}}")
    lines.append(f"\\newcommand{{\\loreOriginalMetric}}{{{original_metric_sentence(tables, settings, env)}}}")
    lines.append(f"\\newcommand{{\\loreLLMCost}}{{{llm_cost_sentence(tables, env)}}}")
    for name, sentence in (("loreKLSentence", kl_sentence), ("loreTrustSentence", trust_sentence),
                           ("loreTemperatureSentence", temperature_sentence), ("loreGateSentence", gate_sentence)):
        lines.append(f"\\newcommand{{\\{name}}}{{{sentence(tables, env)}}}")
    lines.append(r"\newif\iflorecrafter")
    lines.append(r"\lorecraftertrue" if has_crafter else r"\lorecrafterfalse")
    return "\n".join(lines) + "\n"


def write_generated(tables: Tables, settings: AnalysisSettings, out_dir: str | Path,
                    envs_order: Sequence[str] | None = None) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "macros.tex"
    path.write_text(macros_tex(tables, settings, envs_order))
    return [path, *write_latex_tables(tables, settings, out_dir)]


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
                Path(log).write_text(text)
            tex_log = build / f"{tex.stem}.log"
            log_text = tex_log.read_text(errors="replace") if tex_log.exists() else text
            errors = [line for line in log_text.splitlines() if line.startswith("!") or ":error" in line.lower()
                      or re.match(r"^.*\.tex:\d+:", line)]
            raise PaperBuildError(
                f"{command[0]} failed (exit {proc.returncode}) building {tex}: "
                + ("; ".join(errors[:3]) or "see the log") + _missing_package_hint(log_text)
                + (f" (full log: {log})" if log else ""))
    if log:
        Path(log).write_text("\n".join(output))
    produced = build / f"{tex.stem}.pdf"
    if not produced.is_file():
        raise PaperBuildError(f"{command[0]} reported success but wrote no {produced}")
    out_pdf.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(produced, out_pdf)
    return out_pdf
