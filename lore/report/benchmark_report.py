"""The LLM-prior benchmark report, from the tables and figures the workflow made of its raw runs.

The rule ``benchmark_report`` (``workflow/rules/benchmark_report.smk``, run for
``config/benchmark.yaml``) calls :func:`write_report`, which writes to the report folder
(``docs/benchmark/``):

- ``README.md``: per environment and arm the eval success rate at each budget and the AUC (mean and
  95% bootstrap CI over seeds, n stated), LLM API calls, the quantities that show each part of the
  prior acting (trust, gate separation, KL against its bound), and the
  targets, each marked met / not met by the numbers;
- ``summary.csv``: the per-arm table of ``README.md`` as numbers;
- ``figures/``: the figures the README cites; ``tables/``: the CSV tables of ``lore aggregate``.

Nothing in the output is typed by hand: the same runs give the same files.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lore.report import stats as st
from lore.report.latex import FEW_SEEDS
from lore.report.outputs import CSV_FLOAT_FORMAT, remove_stale_temporaries, write_bytes, write_text
from lore.report.settings import AnalysisSettings, budget_metric

REPORT_FIGURES = {"fig1_success": "learning curves", "prior_dynamics": "β, trust, calls",
                  "kl_traces": "act-time KL, λ, entropy, T"}
"""The figures ``README.md`` cites (name: what it shows), copied as PNG into ``<out>/figures/``."""
REPORT_TABLES = ("eval_points", "runs", "stats", "improvement", "achievements")
"""The CSV tables of ``lore aggregate`` copied into ``<out>/tables/``."""
BASELINE_FIRST = "rl_only"
"""Listed first in every table: the arm the others are read against."""


def budget_label(steps: int) -> str:
    """``2500`` -> ``2.5k``, ``10000`` -> ``10k``, ``500`` -> ``500`` (column headers)."""
    return f"{steps / 1000:g}k" if steps >= 1000 else str(steps)


def stat(stats: pd.DataFrame, env: str, arm: str, metric: str) -> pd.Series | None:
    rows = stats[(stats["env"] == env) & (stats["ablation"] == arm) & (stats["metric"] == metric)]
    return rows.iloc[0] if len(rows) else None


def mean_of(stats: pd.DataFrame, env: str, arm: str, metric: str) -> float:
    row = stat(stats, env, arm, metric)
    return float(row["mean"]) if row is not None else math.nan


def fmt_interval(mean: float, low: float, high: float, n: float, digits: int = 2) -> str:
    """``0.95 [0.91, 0.99]``; a dagger when from fewer than FEW_SEEDS seeds; a dash when there is no value."""
    if not math.isfinite(mean):
        return "—"
    flag = "" if n >= FEW_SEEDS else "†"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{mean:.{digits}f}{flag}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]{flag}"


def fmt_ci(row: pd.Series | None, digits: int = 2) -> str:
    if row is None:
        return "—"
    return fmt_interval(float(row.get("mean", math.nan)), float(row.get("mean_low", math.nan)),
                        float(row.get("mean_high", math.nan)), float(row["n"]), digits)


def arm_order(arms) -> list[str]:
    return sorted(arms, key=lambda a: (a != BASELINE_FIRST, a))


def arm_summary(stats: pd.DataFrame, runs_table: pd.DataFrame, env: str, arm: str,
                budgets: tuple[int, ...]) -> dict[str, object]:
    """One row of ``summary.csv``: runs, untrained SR, SR at each budget and AUC (mean, CI, n), API calls."""
    group = runs_table[(runs_table["env"] == env) & (runs_table["ablation"] == arm)]
    calls = group["llm_calls"].dropna() if "llm_calls" in group else pd.Series(dtype=float)
    row: dict[str, object] = {"env": env, "arm": arm, "runs": len(group),
                              "initial_sr": float(group["initial_sr"].mean()) if "initial_sr" in group else math.nan}
    for metric in [budget_metric(b) for b in budgets] + ["auc"]:
        values = stat(stats, env, arm, metric)
        for field in ("mean", "mean_low", "mean_high", "n"):
            row[f"{metric}_{field}"] = float(values[field]) if values is not None else math.nan
    row.update({"llm_calls_mean": float(calls.mean()) if len(calls) else 0.0,
                "llm_calls_min": float(calls.min()) if len(calls) else 0.0,
                "llm_calls_max": float(calls.max()) if len(calls) else 0.0})
    return row


def summary_table(stats: pd.DataFrame, runs_table: pd.DataFrame, settings: AnalysisSettings) -> pd.DataFrame:
    rows = []
    for env in sorted(runs_table["env"].unique()):
        env_runs = runs_table[runs_table["env"] == env]
        for arm in arm_order(env_runs["ablation"].unique()):
            rows.append(arm_summary(stats, runs_table, env, arm, settings.budgets_for(env)))
    return pd.DataFrame(rows)


def arm_table(summary: pd.DataFrame, env: str, budgets: tuple[int, ...]) -> list[str]:
    """The Markdown table of one environment, formatted from its rows of ``summary.csv``."""
    header = ["arm", "n", "SR untrained (step 0)", *[f"SR @{budget_label(b)}" for b in budgets], "AUC", "API calls"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in summary[summary["env"] == env].to_dict("records"):
        cells = [fmt_interval(row[f"{m}_mean"], row[f"{m}_mean_low"], row[f"{m}_mean_high"], row[f"{m}_n"])
                 for m in [budget_metric(b) for b in budgets]]
        auc = fmt_interval(row["auc_mean"], row["auc_mean_low"], row["auc_mean_high"], row["auc_n"], 3)
        floor = f"{row['initial_sr']:.2f}" if math.isfinite(row["initial_sr"]) else "—"
        calls = f"{row['llm_calls_mean']:.1f} ({row['llm_calls_min']:.0f}–{row['llm_calls_max']:.0f})"
        lines.append(f"| {row['arm']} | {row['runs']} | {floor} | {' | '.join(cells)} | {auc} | {calls} |")
    return lines


PRIOR_COLUMNS = {
    "trust LLM / plan (last)": ("trust_llm_last", "trust_plan_last", "{:.2f} / {:.2f}"),
    "act-time trust LLM (last)": ("trust_act_llm_last", None, "{:.2f}"),
    "β advised: disagree / agree": ("beta_disagree_avg", "beta_agree_avg", "{:.2f} / {:.2f}"),
    "entropy part d / a": ("u_entropy_frac_disagree_avg", "u_entropy_frac_agree_avg", "{:.2f} / {:.2f}"),
    "value part d / a": ("u_value_ratio_disagree_avg", "u_value_ratio_agree_avg", "{:.2f} / {:.2f}"),
    "disagreement part d / a": ("u_disagreement_ratio_disagree_avg", "u_disagreement_ratio_agree_avg",
                                "{:.2f} / {:.2f}"),
    "act KL mean / max": ("kl_mix_wm_avg", "kl_act_max", "{:.2f} / {:.2f}"),
    "KL bound": ("cfg_prior_kl_bound", None, "{:g}"),
    "λ < λ_max": ("lambda_below_max_frac", None, "{:.0%}"),
}


def prior_rows(env_runs: pd.DataFrame) -> list[str]:
    """What each part of the prior did: per-run quantities from `lore aggregate`, mean over seeds
    (the KL maximum is taken over seeds). d / a = advised states where the advice's top
    action differs from / equals the policy's."""
    prior = env_runs[env_runs["beta_mean_avg"].notna()] if "beta_mean_avg" in env_runs else env_runs.iloc[:0]
    if not len(prior):
        return []
    lines = ["What each part of the prior did (per run after the prefill, mean over seeds; d / a = advised "
             "states where the advice's top action differs from / equals the policy's):", "",
             "| arm | " + " | ".join(PRIOR_COLUMNS) + " |", "|---|" + "---|" * len(PRIOR_COLUMNS)]
    for arm, group in prior.groupby("ablation"):
        cells = []
        for first, second, fmt in PRIOR_COLUMNS.values():
            def pick(col, how="mean", group=group):
                if col is None or col not in group or group[col].isna().all():
                    return math.nan
                values = group[col].astype(float)
                return {"mean": values.mean(), "max": values.max(), "min": values.min()}[how]
            if first == "kl_mix_wm_avg":
                values = (pick(first), pick(second, "max"))
            else:
                values = (pick(first),) if second is None else (pick(first), pick(second))
            cells.append("—" if any(math.isnan(v) for v in values) else fmt.format(*values))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


SEPARATION_PARTS = {"entropy": "u_entropy_frac", "value": "u_value_ratio", "disagreement": "u_disagreement_ratio",
                    "β (combined)": "beta"}
"""Gate parts whose disagree / agree split is checked: name -> column stem of ``runs.csv``."""


def interval_word(low: float, high: float, above: str = "higher", below: str = "lower",
                  neither: str = "no evidence of a difference") -> str:
    """What a CI of a difference says: ``above`` when it excludes 0 from above, ``below`` from below."""
    if low > 0:
        return above
    if high < 0:
        return below
    return neither


def separation_word(low: float, high: float) -> str:
    """Verdict of a d − a interval: the part is higher where the policy disagrees with the advice, or not."""
    return interval_word(low, high, "higher where the policy disagrees", "**lower** where the policy disagrees")


def signal_separation(env_runs: pd.DataFrame, settings: AnalysisSettings, arms: tuple[str, ...] = ("full",)) -> list[str]:
    """Does each gate signal carry information about where the advice matters? Per run the mean part on
    advised states where the advice's top action differs from the policy's minus where it equals it
    (d − a, paired within the run); mean and bootstrap CI over seeds, n, and what the interval says."""
    lines = []
    for arm in arms:
        group = env_runs[env_runs["ablation"] == arm]
        rows = []
        for name, stem in SEPARATION_PARTS.items():
            cols = (f"{stem}_disagree_avg", f"{stem}_agree_avg")
            if not len(group) or any(c not in group for c in cols):
                continue
            diff = (group[cols[0]] - group[cols[1]]).dropna().to_numpy(dtype=float)
            if not diff.size:
                continue
            ci = st.stratified_bootstrap_ci([diff], "mean", confidence=settings.confidence,
                                            resamples=settings.resamples, seed=settings.seed)
            flag = "" if diff.size >= FEW_SEEDS else "†"
            rows.append(f"| {name} | {diff.size} | {ci.estimate:+.3f} [{ci.low:+.3f}, {ci.high:+.3f}]{flag} | "
                        f"{separation_word(ci.low, ci.high)} |")
        if rows:
            lines += [f"Gate signals in `{arm}`: each part on advised states where the policy disagrees with the "
                      "advice (d) minus where it agrees (a), per run, mean [95% CI] over seeds:", "",
                      "| part | n | d − a | reading |", "|---|---|---|---|", *rows, ""]
    return lines


LOOP_COLUMNS = {"env steps/s": ("steps_per_s_last", 1, 1.0), "ms per update": ("update_ms_last", 0, 1.0),
                "wall time outside updates": ("outside_update_frac", 1, 100.0)}


def loop_speed(env_runs: pd.DataFrame, settings: AnalysisSettings) -> list[str]:
    """How fast each arm's runs trained, whole-run figures from each run's last metrics row, mean [CI]
    over seeds. Measured where the benchmark ran: only the share outside updates compares across machines."""
    if "outside_update_frac" not in env_runs or env_runs["outside_update_frac"].isna().all():
        return []
    lines = ["Training loop (whole run, mean [95% CI] over seeds; measured where the benchmark ran, under its "
             "load; the share of wall time outside updates is acting, env steps, replay writes, evaluation, "
             "logging and checkpoints, in %):", "",
             "| arm | n | " + " | ".join(LOOP_COLUMNS) + " |", "|---|---|" + "---|" * len(LOOP_COLUMNS)]
    for arm in arm_order(env_runs["ablation"].unique()):
        group = env_runs[env_runs["ablation"] == arm]
        cells, n = [], 0
        for column, digits, scale in LOOP_COLUMNS.values():
            values = (group[column].dropna().to_numpy(dtype=float) * scale) if column in group else np.array([])
            n = max(n, values.size)
            if not values.size:
                cells.append("—")
                continue
            ci = st.stratified_bootstrap_ci([values], "mean", confidence=settings.confidence,
                                            resamples=settings.resamples, seed=settings.seed)
            cells.append(fmt_interval(ci.estimate, ci.low, ci.high, values.size, digits))
        lines.append(f"| {arm} | {n} | " + " | ".join(cells) + " |")
    return lines + [""]


def verdict(ok: bool | None) -> str:
    return "n/a (arm not run)" if ok is None else ("**met**" if ok else "**not met**")


def not_below_line(stats: pd.DataFrame, runs_table: pd.DataFrame, env: str, other: str,
                   settings: AnalysisSettings) -> str:
    """``full`` AUC not below ``other`` beyond the CI, read on the bootstrap CI of the difference.

    The verdict is the two-group reading (the CI of mean(full) − mean(other) reaches 0 or above, i.e. no
    evidence that ``full`` is worse); the stricter one-sided reading (``full``'s own upper bound at or above
    ``other``'s mean) is printed next to it, so a reader sees both.
    """
    c = compare_auc(runs_table, env, "full", other, settings)
    d, p = c.difference, c.p_improve
    full_high = float(stat(stats, env, "full", "auc")["mean_high"])
    strict = "holds" if full_high >= c.mean_y else "fails"
    flag = "" if min(c.n_x, c.n_y) >= FEW_SEEDS else "†"
    return (f"- `full` AUC not below `{other}` beyond the CI: full − {other} = {d.estimate:+.3f} "
            f"[{d.low:+.3f}, {d.high:+.3f}]{flag} (n = {c.n_x} vs {c.n_y}, P(full > {other}) = {p.estimate:.2f}) → "
            f"{verdict(d.high >= 0)}; stricter reading, full's CI {fmt_ci(stat(stats, env, 'full', 'auc'))} "
            f"reaches {other}'s mean {c.mean_y:.3f}: {strict}")


def difference_line(runs_table: pd.DataFrame, env: str, a: str, b: str, settings: AnalysisSettings,
                    what: str) -> str:
    """AUC of ``a`` minus ``b`` with its bootstrap CI and the reading of the interval (a measurement, no target)."""
    c = compare_auc(runs_table, env, a, b, settings)
    d = c.difference
    flag = "" if min(c.n_x, c.n_y) >= FEW_SEEDS else "†"
    return (f"- {what}: AUC {a} − {b} = {d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}]{flag} "
            f"(n = {c.n_x} vs {c.n_y}, P({a} > {b}) = {c.p_improve.estimate:.2f}) → {interval_word(d.low, d.high)}")


def compare_auc(runs_table: pd.DataFrame, env: str, a: str, b: str, settings: AnalysisSettings):
    """Bootstrap comparison of the per-run AUCs of arms ``a`` and ``b`` on ``env`` (seeds resampled per arm)."""
    return st.compare(per_run(runs_table, env, a, "auc"), per_run(runs_table, env, b, "auc"),
                      confidence=settings.confidence, resamples=settings.resamples, seed=settings.seed)


def per_run(runs_table: pd.DataFrame, env: str, arm: str, metric: str) -> np.ndarray:
    """One value per run (seed) of ``arm`` on ``env`` (NaNs dropped)."""
    rows = runs_table[(runs_table["env"] == env) & (runs_table["ablation"] == arm)]
    return rows[metric].dropna().to_numpy(dtype=float)


def targets(stats: pd.DataFrame, runs_table: pd.DataFrame, env: str, last: int,
            settings: AnalysisSettings) -> list[str]:
    """The targets on one environment, each with the numbers it rests on."""
    sr, auc = budget_metric(int(last)), "auc"

    def have(*arms):
        return all(stat(stats, env, a, auc) is not None for a in arms)

    out = []
    if have("full"):
        v = mean_of(stats, env, "full", sr)
        out.append(f"- `full` eval SR ≥ 0.9 at {last}: {v:.2f} → {verdict(v >= 0.9)}")
        for other in ("kl", "gate", "prior_only"):
            if have(other):
                out.append(not_below_line(stats, runs_table, env, other, settings))
    if have("full_adversarial", "rl_only"):
        adv, base = mean_of(stats, env, "full_adversarial", auc), mean_of(stats, env, "rl_only", auc)
        out.append(f"- `full_adversarial` AUC ≥ 0.9 × `rl_only` AUC: {adv:.3f} vs 0.9 × {base:.3f} = "
                   f"{0.9 * base:.3f} → {verdict(adv >= 0.9 * base)}")
        a_sr, b_sr = mean_of(stats, env, "full_adversarial", sr), mean_of(stats, env, "rl_only", sr)
        out.append(f"- `full_adversarial` final SR ≥ `rl_only` − 0.05: {a_sr:.2f} vs {b_sr:.2f} − 0.05 → "
                   f"{verdict(a_sr >= b_sr - 0.05)}")
        out.append(difference_line(runs_table, env, "full_adversarial", "rl_only", settings,
                                   "the regret itself, seeds resampled"))
    if have("full_adversarial", "kl_adversarial"):
        out.append(difference_line(runs_table, env, "full_adversarial", "kl_adversarial", settings,
                                   "what `full` adds to `kl` (the advice trust) under the adversary"))
    if have("full_noisy", "full", "full_adversarial"):
        n, f, a = (mean_of(stats, env, x, auc) for x in ("full_noisy", "full", "full_adversarial"))
        out.append(f"- `full_noisy` AUC between adversarial and good: {a:.3f} ≤ {n:.3f} ≤ {f:.3f} → "
                   f"{verdict(a <= n <= f)}")
    calls = runs_table[runs_table["env"] == env].groupby("ablation")["llm_calls"].mean() \
        if "llm_calls" in runs_table else pd.Series(dtype=float)
    if "full" in calls:
        out.append(f"- `full` ≤ 50 API calls per 10k env steps: {calls['full']:.1f} → {verdict(calls['full'] <= 50)}")
    if "full_distill" in calls and have("full", "rl_only", "full_distill"):
        base = mean_of(stats, env, "rl_only", sr)
        gain_full = mean_of(stats, env, "full", sr) - base
        gain_distill = mean_of(stats, env, "full_distill", sr) - base
        ratio = gain_distill / gain_full if gain_full > 0 else math.nan
        ok = calls["full_distill"] <= 25 and math.isfinite(ratio) and ratio >= 0.9
        out.append(f"- `full_distill` ≤ 25 calls at ≥ 90% of `full`'s SR gain: {calls['full_distill']:.1f} calls, "
                   f"gain {gain_distill:+.2f} vs {gain_full:+.2f} ({ratio:.0%}) → {verdict(ok)}")
    return out


def targets_block(stats: pd.DataFrame, runs_table: pd.DataFrame, env: str, last: int, settings: AnalysisSettings,
                  heading: str) -> list[str]:
    """``heading``, then the target lines of :func:`targets` (or one line saying none applies), then a blank."""
    lines = targets(stats, runs_table, env, last, settings) or ["- none: no arm that a target compares ran here"]
    return [heading, ""] + lines + [""]


def episodes_per_point(runs_table: pd.DataFrame) -> str:
    """"20 episodes per point" from the runs' own configs (several values are listed)."""
    if "cfg_eval_episodes" not in runs_table or runs_table["cfg_eval_episodes"].isna().all():
        return "episodes per point: see the runs' config.yaml"
    counts = sorted({int(v) for v in runs_table["cfg_eval_episodes"].dropna()})
    return f"{' or '.join(str(c) for c in counts)} episodes per point"


def markdown_report(stats: pd.DataFrame, runs_table: pd.DataFrame, settings: AnalysisSettings) -> str:
    summary = summary_table(stats, runs_table, settings)
    lines = ["# LLM-prior benchmark (written by `lore.report.benchmark_report` from the raw runs; do not edit)",
             "",
             f"Eval success rate of the learned policy **without** the prior ({episodes_per_point(runs_table)}), "
             f"mean and {settings.confidence:.0%} bootstrap CI over seeds; † marks fewer than {FEW_SEEDS} seeds. "
             "AUC = mean eval SR over the run. Calls = LLM API calls per run (mean, min–max). "
             "The same numbers: `summary.csv`.", ""]
    for env in sorted(runs_table["env"].unique()):
        budgets = settings.budgets_for(env)
        lines += [f"## {env}", ""] + arm_table(summary, env, budgets) + [""]
        lines += targets_block(stats, runs_table, env, budgets[-1], settings, "Targets:")
        lines += prior_rows(runs_table[runs_table["env"] == env]) + [""]
        lines += signal_separation(runs_table[runs_table["env"] == env], settings)
        lines += loop_speed(runs_table[runs_table["env"] == env], settings)
    lines += ["Figures: " + ", ".join(f"`figures/{name}.png` ({what})" for name, what in REPORT_FIGURES.items())
              + ".", ""]
    return "\n".join(lines)


def report_paths(tables_dir: str | Path, figures_dir: str | Path, out: str | Path) -> dict[Path, Path | None]:
    """{output: the input it copies, or None for the files written from the tables}."""
    tables_dir, figures_dir, out = Path(tables_dir), Path(figures_dir), Path(out)
    paths: dict[Path, Path | None] = {out / "README.md": None, out / "summary.csv": None}
    paths |= {out / "figures" / f"{name}.png": figures_dir / f"{name}.png" for name in REPORT_FIGURES}
    paths |= {out / "tables" / f"{name}.csv": tables_dir / f"{name}.csv" for name in REPORT_TABLES}
    return paths


def write_report(tables_dir: str | Path, figures_dir: str | Path, out: str | Path,
                 settings: AnalysisSettings) -> list[Path]:
    """Write ``README.md``, ``summary.csv`` and copies of the cited figures and CSV tables to ``out``.

    The tables are read and checked, and every copied file must exist, before the first file is written.
    """
    from lore.report.aggregate import Tables

    paths = report_paths(tables_dir, figures_dir, out)
    for source in paths.values():
        if source is not None and not source.is_file():
            raise FileNotFoundError(f"{source}: missing (run `lore aggregate` and `lore figures` first)")
    tables = Tables.read_csv(tables_dir)
    out = Path(out)
    texts = {out / "README.md": markdown_report(tables.stats, tables.runs, settings),
             out / "summary.csv": summary_table(tables.stats, tables.runs, settings).to_csv(
                 index=False, float_format=CSV_FLOAT_FORMAT)}
    copies = {path: source.read_bytes() for path, source in paths.items() if source is not None}
    remove_stale_temporaries(paths)
    written = [write_text(path, text) for path, text in texts.items()]
    return written + [write_bytes(path, data) for path, data in copies.items()]
