"""Statistics, figures and the target check of the LLM-prior benchmark, from its raw runs.

    .venv/bin/python benchmarks/prior_report.py --runs-root results/bench --out docs/benchmark

Runs ``lore aggregate`` and ``lore figures`` (the workflow's own analysis code) over every run under
``--runs-root``, then writes ``<out>/README.md``: per environment and arm the eval success rate at the
last budget and the AUC (mean and 95% bootstrap CI over seeds, n stated), LLM API calls, and the
quantities that show each part of the prior acting (trust, gate separation, temperature refits, KL
bound, lambda); and the issue's targets, each marked met / not met by the numbers. Nothing in the
output is typed by hand: re-running the command on the same runs gives the same file.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from lore.analysis.runs import find_run_dirs, load_runs
from lore.config import PriorConfig

BUDGETS = ("2500", "5000", "10000")
PRIOR = PriorConfig()


def run_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "lore.cli", *args], check=True)


def fmt_ci(row: pd.Series | None, digits: int = 2) -> str:
    if row is None or not math.isfinite(row.get("mean", math.nan)):
        return "—"
    low, high = row.get("mean_low", math.nan), row.get("mean_high", math.nan)
    flag = "" if row["n"] >= 5 else "†"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{row['mean']:.{digits}f}{flag}"
    return f"{row['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]{flag}"


def stat(stats: pd.DataFrame, env: str, arm: str, metric: str) -> pd.Series | None:
    rows = stats[(stats["env"] == env) & (stats["ablation"] == arm) & (stats["metric"] == metric)]
    return rows.iloc[0] if len(rows) else None


def mean_of(stats: pd.DataFrame, env: str, arm: str, metric: str) -> float:
    row = stat(stats, env, arm, metric)
    return float(row["mean"]) if row is not None else math.nan


def prior_quantities(runs) -> pd.DataFrame:
    """Per run: what each part of the prior did, from metrics.csv (after the prefill)."""
    rows = []
    for run in runs:
        m = run.metrics
        if not len(m) or "beta_mean" not in m:
            continue
        m = m[m["env_step"] > float(run.config.get("train", {}).get("prefill", 0))]
        prior = run.config.get("prior", {})
        bound = float(prior.get("kl_bound", PRIOR.kl_bound))
        lam_max = float(prior.get("lambda_max", PRIOR.lambda_max))
        row = {"env": run.env, "ablation": run.ablation, "seed": run.seed}

        def col(name):
            return m[name].to_numpy(float) if name in m else np.array([])

        kl_act, lam = col("kl_mix_wm"), col("lambda_kl")
        row["kl_act_mean"] = float(np.nanmean(kl_act)) if np.isfinite(kl_act).any() else math.nan
        row["kl_act_max"] = float(np.nanmax(kl_act)) if np.isfinite(kl_act).any() else math.nan
        row["kl_bound"] = bound if prior.get("kl_mode") == "lagrangian" else math.nan
        row["lambda_below_max_frac"] = float(np.mean(lam < lam_max - 1e-9)) if lam.size else math.nan
        for name in ("trust_llm", "trust_plan", "beta_mean", "prior_mask_frac"):
            values = col(name)
            row[name + "_last"] = float(values[np.isfinite(values)][-1]) if np.isfinite(values).any() else math.nan
        for name in ("beta_disagree", "beta_agree", "u_entropy_frac_disagree", "u_entropy_frac_agree",
                     "u_value_ratio_disagree", "u_value_ratio_agree", "u_disagreement_ratio_disagree",
                     "u_disagreement_ratio_agree"):
            values = col(name)
            row[name] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
        refits, at_bound = col("temperature_refits"), col("temperature_refits_at_bound")
        row["t_refits"] = float(refits[-1]) if refits.size else math.nan
        row["t_refits_at_bound"] = float(at_bound[-1]) if at_bound.size else math.nan
        temps = col("temperature")
        row["t_min_seen"] = float(np.nanmin(temps)) if temps.size else math.nan
        row["t_max_seen"] = float(np.nanmax(temps)) if temps.size else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def verdict(ok: bool | None) -> str:
    return "n/a (arm not run)" if ok is None else ("**met**" if ok else "**not met**")


def targets(stats: pd.DataFrame, runs_table: pd.DataFrame, env: str, last: str) -> list[str]:
    """The issue's targets on the tuning environment, each with the numbers it rests on."""
    sr, auc = f"sr_at_{last}", "auc"

    def have(*arms):
        return all(stat(stats, env, a, auc) is not None for a in arms)

    out = []
    if have("full"):
        v = mean_of(stats, env, "full", sr)
        out.append(f"- `full` eval SR ≥ 0.9 at {last}: {v:.2f} → {verdict(v >= 0.9)}")
        for other in ("kl", "gate", "prior_only"):
            if have(other):
                full_high = float(stat(stats, env, "full", auc)["mean_high"])
                other_mean = mean_of(stats, env, other, auc)
                out.append(f"- `full` AUC not below `{other}` beyond the CI: full AUC "
                           f"{fmt_ci(stat(stats, env, 'full', auc))} vs {other} {other_mean:.2f} → "
                           f"{verdict(full_high >= other_mean)}")
    if have("full_adversarial", "rl_only"):
        adv, base = mean_of(stats, env, "full_adversarial", auc), mean_of(stats, env, "rl_only", auc)
        out.append(f"- `full_adversarial` AUC ≥ 0.9 × `rl_only` AUC: {adv:.3f} vs 0.9 × {base:.3f} = "
                   f"{0.9 * base:.3f} → {verdict(adv >= 0.9 * base)}")
        a_sr, b_sr = mean_of(stats, env, "full_adversarial", sr), mean_of(stats, env, "rl_only", sr)
        out.append(f"- `full_adversarial` final SR ≥ `rl_only` − 0.05: {a_sr:.2f} vs {b_sr:.2f} − 0.05 → "
                   f"{verdict(a_sr >= b_sr - 0.05)}")
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs-root", type=Path, default=Path("results/bench"))
    p.add_argument("--out", type=Path, default=Path("docs/benchmark"))
    args = p.parse_args(argv)
    tables, figures = args.out / "tables", args.out / "figures"
    common = ["--runs-root", str(args.runs_root), "--budgets", *BUDGETS, "--headline-budget", BUDGETS[-1]]
    run_cli("aggregate", *common, "--out", str(tables))
    run_cli("figures", *common, "--tables", str(tables), "--out", str(figures))
    stats = pd.read_csv(tables / "stats.csv")
    runs_table = pd.read_csv(tables / "runs.csv")
    runs = load_runs(find_run_dirs(args.runs_root))
    quantities = prior_quantities(runs)
    quantities.to_csv(tables / "prior_quantities.csv", index=False)

    last = BUDGETS[-1]
    lines = ["# LLM-prior benchmark (generated by `benchmarks/prior_report.py`; do not edit)", "",
             "Eval success rate of the learned policy **without** the prior (20 episodes per point), mean and "
             "95% bootstrap CI over seeds; † marks fewer than 5 seeds. AUC = mean eval SR over the run. "
             "Calls = LLM API calls per run (mean, min–max).", ""]
    for env in sorted(runs_table["env"].unique()):
        lines += [f"## {env}", "", f"| arm | n | SR @2.5k | SR @5k | SR @{int(last) // 1000}k | AUC | API calls |",
                  "|---|---|---|---|---|---|---|"]
        env_runs = runs_table[runs_table["env"] == env]
        for arm in sorted(env_runs["ablation"].unique(), key=lambda a: (a != "rl_only", a)):
            group = env_runs[env_runs["ablation"] == arm]
            calls = group["llm_calls"] if "llm_calls" in group else pd.Series(dtype=float)
            calls_text = (f"{calls.mean():.1f} ({calls.min():.0f}–{calls.max():.0f})"
                          if len(calls) and calls.notna().any() else "0")
            cells = [fmt_ci(stat(stats, env, arm, f"sr_at_{b}")) for b in BUDGETS]
            lines.append(f"| {arm} | {len(group)} | {' | '.join(cells)} | "
                         f"{fmt_ci(stat(stats, env, arm, 'auc'), 3)} | {calls_text} |")
        lines += [""]
        lines += ["Targets (issue 9):", ""] + targets(stats, runs_table, env, last) + [""]
        q = quantities[quantities["env"] == env]
        if len(q):
            agg = q.drop(columns=["seed", "env"]).groupby("ablation").mean(numeric_only=True)
            lines += ["What each part of the prior did (mean over seeds, after the prefill):", "",
                      "| arm | trust LLM (last) | trust plan (last) | β disagree / agree | entropy part d/a | "
                      "value part d/a | disagreement part d/a | act KL mean / max (bound) | λ < λ_max | "
                      "T refits (at bound) | T range |", "|---|---|---|---|---|---|---|---|---|---|---|"]
            for arm, r in agg.iterrows():
                lines.append(
                    f"| {arm} | {r['trust_llm_last']:.2f} | {r['trust_plan_last']:.2f} | "
                    f"{r['beta_disagree']:.2f} / {r['beta_agree']:.2f} | "
                    f"{r['u_entropy_frac_disagree']:.2f} / {r['u_entropy_frac_agree']:.2f} | "
                    f"{r['u_value_ratio_disagree']:.2f} / {r['u_value_ratio_agree']:.2f} | "
                    f"{r['u_disagreement_ratio_disagree']:.2f} / {r['u_disagreement_ratio_agree']:.2f} | "
                    f"{r['kl_act_mean']:.2f} / {r['kl_act_max']:.2f} ({r['kl_bound']:.1f}) | "
                    f"{r['lambda_below_max_frac']:.0%} | {r['t_refits']:.1f} ({r['t_refits_at_bound']:.1f}) | "
                    f"{r['t_min_seen']:.2f}–{r['t_max_seen']:.2f} |")
            lines += [""]
    lines += ["Figures: `figures/fig1_success.png` (learning curves), `figures/prior_dynamics.png` (β, trust, "
              "calls), `figures/kl_traces.png` (act-time KL, λ, entropy, T).", ""]
    (args.out / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
