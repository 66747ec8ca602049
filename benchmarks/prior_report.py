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

import pandas as pd

from lore.analysis.settings import budget_metric

BUDGETS = ("2500", "5000", "10000")


def finished_runs(root: Path, out: Path) -> Path:
    """A run list of the runs under ``root`` that finished (``done`` present); unfinished ones are
    named on stderr and left out, so a benchmark cut short reports what it reached, with its n."""
    done, unfinished = [], []
    for eval_csv in sorted(root.rglob("eval.csv")):
        (done if (eval_csv.parent / "done").exists() else unfinished).append(eval_csv.parent)
    for run in unfinished:
        print(f"prior_report: {run} has not finished; left out", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "run_list.txt"
    path.write_text("".join(f"{run}\n" for run in done))
    return path


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


PRIOR_COLUMNS = {
    "trust LLM / plan (last)": ("trust_llm_last", "trust_plan_last", "{:.2f} / {:.2f}"),
    "β advised: disagree / agree": ("beta_disagree_avg", "beta_agree_avg", "{:.2f} / {:.2f}"),
    "entropy part d / a": ("u_entropy_frac_disagree_avg", "u_entropy_frac_agree_avg", "{:.2f} / {:.2f}"),
    "value part d / a": ("u_value_ratio_disagree_avg", "u_value_ratio_agree_avg", "{:.2f} / {:.2f}"),
    "disagreement part d / a": ("u_disagreement_ratio_disagree_avg", "u_disagreement_ratio_agree_avg",
                                "{:.2f} / {:.2f}"),
    "act KL mean / max": ("kl_mix_wm_avg", "kl_act_max", "{:.2f} / {:.2f}"),
    "KL bound": ("cfg_prior_kl_bound", None, "{:g}"),
    "λ < λ_max": ("lambda_below_max_frac", None, "{:.0%}"),
    "T refits (at bound)": ("temperature_refits_last", "temperature_refits_at_bound_last", "{:.1f} ({:.1f})"),
    "T range": ("temperature_lo", "temperature_hi", "{:.2f}–{:.2f}"),
}


def prior_rows(env_runs: pd.DataFrame) -> list[str]:
    """What each part of the prior did: per-run quantities from `lore aggregate`, mean over seeds
    (the KL maximum and T range are taken over seeds). d / a = advised states where the advice's top
    action differs from / equals the policy's."""
    prior = env_runs[env_runs.get("beta_mean_avg", pd.Series(dtype=float)).notna()] \
        if "beta_mean_avg" in env_runs else env_runs.iloc[:0]
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
            elif first == "temperature_lo":
                values = (pick(first, "min"), pick(second, "max"))
            else:
                values = (pick(first),) if second is None else (pick(first), pick(second))
            cells.append("—" if any(math.isnan(v) for v in values) else fmt.format(*values))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


def verdict(ok: bool | None) -> str:
    return "n/a (arm not run)" if ok is None else ("**met**" if ok else "**not met**")


def targets(stats: pd.DataFrame, runs_table: pd.DataFrame, env: str, last: str) -> list[str]:
    """The issue's targets on the tuning environment, each with the numbers it rests on."""
    sr, auc = budget_metric(int(last)), "auc"

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
    p.add_argument("--paper", type=Path, default=None,
                   help="also build the paper from these runs into this folder (needs LaTeX)")
    args = p.parse_args(argv)
    tables, figures = args.out / "tables", args.out / "figures"
    common = ["--run-list", str(finished_runs(args.runs_root, tables)), "--budgets", *BUDGETS,
              "--headline-budget", BUDGETS[-1]]
    run_cli("aggregate", *common, "--out", str(tables))
    run_cli("figures", *common, "--tables", str(tables), "--out", str(figures))
    if args.paper is not None:
        generated = args.paper / "generated"
        run_cli("paper-macros", "--tables", str(tables), "--out", str(generated), *common[2:])
        subprocess.run([sys.executable, "-m", "lore.analysis.cli", "paper-build", "--tex", "paper/lore.tex",
                        "--generated", str(generated), "--figures", str(figures), "--out",
                        str(args.paper / "lore.pdf"), "--log", str(args.paper / "paper.log")], check=True)
    stats = pd.read_csv(tables / "stats.csv")
    runs_table = pd.read_csv(tables / "runs.csv")

    last = BUDGETS[-1]
    lines = ["# LLM-prior benchmark (generated by `benchmarks/prior_report.py`; do not edit)", "",
             "Eval success rate of the learned policy **without** the prior (20 episodes per point), mean and "
             "95% bootstrap CI over seeds; † marks fewer than 5 seeds. AUC = mean eval SR over the run. "
             "Calls = LLM API calls per run (mean, min–max).", ""]
    for env in sorted(runs_table["env"].unique()):
        lines += [f"## {env}", "", f"| arm | n | SR untrained (step 0) | SR @2.5k | SR @5k | SR @{int(last) // 1000}k | AUC "
                  f"| API calls |", "|---|---|---|---|---|---|---|---|"]
        env_runs = runs_table[runs_table["env"] == env]
        for arm in sorted(env_runs["ablation"].unique(), key=lambda a: (a != "rl_only", a)):
            group = env_runs[env_runs["ablation"] == arm]
            calls = group["llm_calls"] if "llm_calls" in group else pd.Series(dtype=float)
            calls_text = (f"{calls.mean():.1f} ({calls.min():.0f}–{calls.max():.0f})"
                          if len(calls) and calls.notna().any() else "0")
            cells = [fmt_ci(stat(stats, env, arm, budget_metric(int(b)))) for b in BUDGETS]
            floor = f"{group['initial_sr'].mean():.2f}" if "initial_sr" in group else "—"
            lines.append(f"| {arm} | {len(group)} | {floor} | {' | '.join(cells)} | "
                         f"{fmt_ci(stat(stats, env, arm, 'auc'), 3)} | {calls_text} |")
        lines += [""]
        lines += ["Targets (issue 9):", ""] + targets(stats, runs_table, env, last) + [""]
        lines += prior_rows(env_runs) + [""]
    lines += ["Figures: `figures/fig1_success.png` (learning curves), `figures/prior_dynamics.png` (β, trust, "
              "calls), `figures/kl_traces.png` (act-time KL, λ, entropy, T).", ""]
    (args.out / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
