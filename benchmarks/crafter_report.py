"""The Crafter benchmark's report, from its raw runs: ``docs/benchmark/crafter.md`` and a PNG.

    .venv/bin/python benchmarks/crafter_report.py --runs-root results/bench_crafter --out docs/benchmark

Runs ``lore aggregate`` and ``lore figures`` (the workflow's own analysis code) over the finished runs
under ``--runs-root`` into ``<out>/crafter/tables`` and ``<out>/crafter/figures`` (with the workflow's
``crafter_achievements.png``), then writes ``<out>/crafter.md`` and ``<out>/crafter/figures/crafter_score.png``:
per arm the Crafter score at each budget, the per-achievement success rates at the last one, the mean
eval return, LLM API calls and training env steps/s, each as mean and 95% bootstrap CI over seeds with n,
next to the uniform-random policy measured by the same evaluation code (``benchmarks/crafter_benchmark.py``
writes it to ``<runs-root>/random_policy``). Nothing is typed by hand: the same runs give the same file.

Crafter score (Hafner 2021): S = exp(mean_i ln(1 + s_i)) - 1 over the 22 achievement success rates s_i in
percent (``lore.analysis.stats.crafter_score``, the function behind the ``crafter_score`` column of every
``eval.csv``). Here s_i is the share of a run's evaluation episodes (``eval.episodes`` of them, without the
LLM prior) that unlocked achievement i; the score is computed per run and then averaged over seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from crafter_benchmark import ADVISORS, FINAL_EVAL, FINAL_EVAL_PRIOR, RANDOM_DIR, REFERENCES  # noqa: E402

from lore.analysis import stats as st  # noqa: E402
from lore.analysis.benchmark_report import signal_separation  # noqa: E402
from lore.analysis.runs import find_run_dirs  # noqa: E402
from lore.analysis.settings import AnalysisSettings  # noqa: E402
from lore.utils.io import atomic_write_text  # noqa: E402

RANDOM = "random"
DOORKEY = "MiniGrid-DoorKey-5x5-v0"
"""The random policy's name in the report's tables."""
ARM_ORDER = ("rl_only", "full", "full_adversarial")


# --------------------------------------------------------------------------- reading the runs


def finished_runs(root: Path, out: Path) -> tuple[Path, list[Path]]:
    """A run list of the finished training runs under ``root`` (``done`` present; the random baseline
    is not a run); unfinished ones are named on stderr and left out, so a cut-short benchmark reports
    what it reached, with its n."""
    done, unfinished = [], []
    for run in find_run_dirs(root):
        if set(REFERENCES) & set(run.relative_to(root).parts):
            continue
        (done if (run / "done").exists() else unfinished).append(run)
    for run in unfinished:
        print(f"crafter_report: {run} has not finished; left out", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "run_list.txt"
    path.write_text("".join(f"{run}\n" for run in done))
    return path, done


def read_eval(runs: list[Path]) -> pd.DataFrame:
    """Every eval point of the trained runs, with ``ablation`` / ``seed`` from the resolved config."""
    import yaml

    frames = []
    for run in runs:
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        frame = pd.read_csv(run / "eval.csv")
        frame["ablation"], frame["seed"] = cfg["ablation"], int(cfg["seed"])
        frame["setup"] = setup_text(cfg)
        frame["controller"] = controller_text(cfg)
        done = json.loads((run / "done").read_text())
        frame["steps_per_s"] = done["env_step"] / done["wall_s"] if done.get("wall_s") else math.nan
        advised = bool(frame["controller"].iloc[0])
        # one read of the run's metrics; a running count (plan steps) is its last value, the rest the last three's mean
        last = last_logged(run / "metrics.csv", {"entropy_imag": 3, "lambda_kl": 3, "trust_llm": 3, "llm_plan_steps": 1})
        frame["entropy_last"] = last["entropy_imag"]
        for name, column in (("lambda_last", "lambda_kl"), ("trust_last", "trust_llm"), ("plan_steps", "llm_plan_steps")):
            frame[name] = last[column] if advised else math.nan
        frame["act_strength"] = act_strength(run / "metrics.csv", cfg.get("prior") or {}) if advised else math.nan
        frame["advised_gap"] = advised_gap(run / "episodes.csv") if advised else math.nan
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def per_run_text(per_run: pd.DataFrame, column: str) -> str:
    """Mean [CI] over runs of a per-run value (``lambda_last``, ``trust_last``, ``act_strength``); — without one."""
    values = per_run[column] if column in per_run else pd.Series(dtype=float)
    return fmt(ci(values)) if values.notna().any() else "—"


def act_strength(metrics_csv: Path, prior: dict) -> float:
    """The share of beta the LLM's answers acted at, mean over the run's log points: ``act_scale`` of the logged
    act-time trust (``trust_act_llm``) under the run's ``prior.trust_act_floor`` / ``trust_act_uninformed``.
    1 with ``prior.trust`` off (nothing scales the advice); NaN for a run that did not log the act-time trust."""
    import torch

    from lore.prior.trust import act_scale

    prior = prior_settings(prior)
    if not prior["trust"]:
        return 1.0
    if not metrics_csv.is_file():
        return math.nan
    frame = pd.read_csv(metrics_csv, usecols=lambda c: c == "trust_act_llm")
    values = frame["trust_act_llm"].dropna() if "trust_act_llm" in frame else pd.Series(dtype=float)
    if not len(values):
        return math.nan
    scale = act_scale(torch.tensor(values.to_numpy(), dtype=torch.float64), float(prior["trust_act_floor"]),
                      float(prior["trust_act_uninformed"]))
    return float(scale.mean())


def advised_gap(episodes_csv: Path) -> float:
    """Mean training-episode return of the advised episodes whose advice acted (``control`` 0, an
    ``advice_strength``) minus that of the control episodes (``control`` 1): the raw gap the advised-vs-control
    evidence reads. NaN for a run whose episodes.csv predates the two columns, or without one of the groups."""
    if not episodes_csv.is_file():
        return math.nan
    frame = pd.read_csv(episodes_csv)
    if not {"control", "advice_strength", "return"} <= set(frame.columns):
        return math.nan
    advised = frame.loc[(frame["control"] == 0) & frame["advice_strength"].notna(), "return"]
    control = frame.loc[frame["control"] == 1, "return"]
    return float(advised.mean() - control.mean()) if len(advised) and len(control) else math.nan


def last_logged(metrics_csv: Path, points: dict[str, int]) -> dict[str, float]:
    """Per column, the mean of its last ``points[column]`` logged values in a run's metrics.csv (NaN when absent).
    The actor's entropy in imagination (``entropy_imag``, nats): a policy that collapsed onto a few actions shows
    here long before its score says why. The KL multiplier (``lambda_kl``): how hard advice is being absorbed.
    The trust in the LLM's answers (``trust_llm``): whether the advised-vs-control evidence caught the advisor."""
    if not metrics_csv.is_file():
        return dict.fromkeys(points, math.nan)
    frame = pd.read_csv(metrics_csv, usecols=lambda c: c in points)
    out = {}
    for column, n in points.items():
        values = frame[column].dropna() if column in frame else pd.Series(dtype=float)
        out[column] = float(values.iloc[-n:].mean()) if len(values) else math.nan
    return out


def call_settings(cfg: dict) -> str:
    """When the run's LLM controller may ask (empty for a run without an LLM): a Crafter state rarely repeats,
    so these settings, not the answer cache, decide how many steps can have advice."""
    llm = cfg["llm"]
    if llm["backend"] == "none":
        return ""
    ctl = llm["controller"]
    # runs written before llm.ask_before_act existed asked after acting
    asked = "the state being acted in" if llm.get("ask_before_act", False) else "the state just acted in"
    return (f"budget {ctl['budget']} calls, cooldown {ctl['cooldown']} env steps after a question "
            f"({ctl['cooldown_after_success']} after an answered one), asked about {asked}, "
            f"plans of at most {llm['plan_max_len']} steps")


def controller_text(cfg: dict) -> str:
    """The arm, its call settings and how its advice is absorbed (empty for an arm without an LLM)."""
    calls = call_settings(cfg)
    if not calls:
        return ""
    prior = prior_settings(cfg.get("prior") or {})
    width = "family-wise" if prior["trust_familywise"] else "fixed"
    return (f"{cfg['ablation']}: {calls}, KL absorption averaged over {prior['absorb_over']} states with the trust "
            f"weighting its {prior['absorb_trust']}, {width} dead zone of the episode evidence{act_trust_text(prior)}")


def prior_settings(prior: dict) -> dict:
    """A run's ``prior`` section with the settings it predates filled in from :class:`lore.config.PriorConfig`'s
    defaults (a run written before a setting existed ran with its default)."""
    from dataclasses import asdict

    from lore.config import PriorConfig

    return {**asdict(PriorConfig()), **prior}


def act_trust_text(prior: dict) -> str:
    """How the trust scales advice at act time (empty with ``prior.trust`` off): its evidence, and the share of
    beta advice acts at before any evidence; ``prior`` as :func:`prior_settings` returns it."""
    if not prior["trust"]:
        return ""
    evidence = ("the episode returns alone (harm at face value)" if prior["trust_act_evidence"] == "returns"
                else "the value and the episode evidence")
    return (f"; at act time advice is scaled by a trust read from {evidence} and acts at "
            f"{prior['trust_act_uninformed']:g} of beta before any evidence")


def setup_text(cfg: dict) -> str:
    """The run settings the report states, from a run's resolved ``config.yaml`` (arm-independent keys)."""
    env, model, train, ev = cfg["env"], cfg["model"], cfg["train"], cfg["eval"]
    return (f"{env['name']} ({env['obs']} observation, {env['crafter_view']}x{env['crafter_view']} view, "
            f"episodes of at most {env['max_episode_steps'] or 10000} steps), model preset {model['preset']}, "
            f"{train['steps']} env steps, batch {train['batch_size']}x{train['batch_length']}, "
            f"train ratio {train['train_ratio']:g}, imag_last {cfg['dreamer']['imag_last']}, "
            f"eval every {ev['every']} env steps on {ev['episodes']} episodes, device {cfg['device']}")


WITH_PRIOR = " + prior"
"""Suffix of an arm's name for its final evaluation with the LLM prior mixed in (``eval_final_prior.csv``)."""


def read_final(runs: list[Path]) -> pd.DataFrame:
    """Each finished run's final evaluations written by the benchmark, where present: the learned policy
    alone (``eval_final.csv``, arm name as is) and with the prior (``eval_final_prior.csv``, ``<arm> + prior``)."""
    import yaml

    frames = []
    for run in runs:
        for name, suffix in ((FINAL_EVAL, ""), (FINAL_EVAL_PRIOR, WITH_PRIOR)):
            if (run / name).is_file():
                cfg = yaml.safe_load((run / "config.yaml").read_text())
                frame = pd.read_csv(run / name)
                frame["ablation"], frame["seed"] = cfg["ablation"] + suffix, int(cfg["seed"])
                frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


FINAL_TABLE = "final_eval.csv"
"""Per-run final evaluations in a report's ``tables/`` (arms, ``+ prior``, reference policies), so that a later
experiment can be paired by seed with these runs after the raw runs are gone (``experiment_compare.py``)."""


def final_table(final: pd.DataFrame, references: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per (policy, seed) of the final evaluation: the columns of ``eval_final.csv`` plus ``distinct``."""
    frames = [f for f in (final, *references) if len(f)]
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    table = table.assign(distinct=distinct_achievements(table))
    front = ["ablation", "seed", "env_step", "episodes", "crafter_score", "return_mean", "distinct"]
    return table[front + [c for c in table.columns if c not in front]].sort_values(["ablation", "seed"])


def read_reference(root: Path, name: str = "eval.csv", policy: str = RANDOM_DIR) -> pd.DataFrame:
    """A reference policy's evaluations (``policy``: its folder under ``root``), one frame over seeds."""
    frames = []
    for path in sorted((root / policy).glob(f"seed*/{name}")):
        frame = pd.read_csv(path)
        frame["ablation"] = RANDOM if policy == RANDOM_DIR else policy.replace("_", " ", 1) + " (alone)"
        frame["seed"] = int(path.parent.name[4:])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# --------------------------------------------------------------------------- statistics


def label_folders(parser, items: list[str]) -> dict[str, Path]:
    """``{label: folder}`` from ``LABEL=FOLDER`` arguments; a bad one is a usage error (exit 2) naming it."""
    folders = {}
    for item in items:
        label, sep, folder = item.partition("=")
        if not sep or not label or not Path(folder).is_dir():
            parser.error(f"{item!r}: expected LABEL=FOLDER with an existing folder of seed*/ runs")
        folders[label] = Path(folder)
    return folders


def ci(values, resamples: int = 2000) -> tuple[float, float, float, int]:
    """(mean, low, high, n) with a 95% percentile-bootstrap CI over seeds (the aggregate's own function)."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if not values.size:
        return math.nan, math.nan, math.nan, 0
    interval = st.stratified_bootstrap_ci([values], "mean", confidence=0.95, resamples=resamples, seed=0)
    return interval.estimate, interval.low, interval.high, int(values.size)


def fmt(stat: tuple[float, float, float, int], digits: int = 2, scale: float = 1.0) -> str:
    mean, low, high, n = stat
    if not n or not math.isfinite(mean):
        return "—"
    text = f"{scale * mean:.{digits}f}"
    if n >= 2:
        text += f" [{scale * low:.{digits}f}, {scale * high:.{digits}f}]"
    return text


def at_step(frame: pd.DataFrame, step: int) -> pd.DataFrame:
    """Each seed's eval row at env step ``step`` (one per seed)."""
    return frame[frame["env_step"] == step].drop_duplicates("seed", keep="last")


def arms_in(frame: pd.DataFrame) -> list[str]:
    present = list(frame["ablation"].unique()) if len(frame) else []
    return [a for a in ARM_ORDER if a in present] + sorted(a for a in present if a not in ARM_ORDER)


def achievement_names(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.startswith("ach_")]


def budgets_of(frame: pd.DataFrame) -> list[int]:
    """Eval points every run reached: the last one, and those nearest 1/5 and 1/2 of it."""
    per_run = frame.groupby(["ablation", "seed"])["env_step"].apply(set)
    common = sorted(set.intersection(*per_run)) if len(per_run) else []
    if not common:
        return []
    last = common[-1]
    picks = {min(common, key=lambda s: abs(s - last * f)) for f in (0.2, 0.5)} | {last}
    return sorted(s for s in picks if s > 0) or [last]


# --------------------------------------------------------------------------- the figure


def plot(frame: pd.DataFrame, random: pd.DataFrame, last: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = arms_in(frame)
    fig, (curve, bars) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 1.6]})
    colors = dict(zip([*arms, RANDOM], plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    colors[RANDOM] = "0.45"
    for arm, data in [*((a, frame[frame["ablation"] == a]) for a in arms), (RANDOM, random)]:
        if not len(data):
            continue
        steps = sorted(data["env_step"].unique())
        stats = [ci(at_step(data, s)["crafter_score"]) for s in steps]
        mean = np.array([s[0] for s in stats])
        curve.plot(steps, mean, color=colors[arm], label=f"{arm} (n={stats[-1][3]})",
                   ls="--" if arm == RANDOM else "-")
        curve.fill_between(steps, [s[1] for s in stats], [s[2] for s in stats], color=colors[arm], alpha=0.2)
    curve.set_xlabel("env steps")
    curve.set_ylabel("Crafter score (%)")
    curve.set_title("Crafter score of the evaluation (mean, 95% CI over seeds)")
    curve.legend(fontsize=8)
    names = achievement_names(frame if len(frame) else random)
    groups = [a for a in [*arms, RANDOM] if len(frame[frame["ablation"] == a]) or (a == RANDOM and len(random))]
    order = sorted(names, key=lambda c: -np.nanmean(at_step(frame, last)[c]) if len(frame) else 0)
    width = 0.8 / max(len(groups), 1)
    for i, arm in enumerate(groups):
        data = at_step(random if arm == RANDOM else frame[frame["ablation"] == arm], last)
        stats = [ci(data[c]) for c in order]
        x = np.arange(len(order)) + (i - (len(groups) - 1) / 2) * width
        pct = np.array([100 * s[0] for s in stats])
        err = np.array([[100 * (s[0] - s[1]), 100 * (s[2] - s[0])] for s in stats]).T.clip(min=0)
        bars.bar(x, np.maximum(pct, 0.05), width, color=colors[arm], label=arm, yerr=np.nan_to_num(err),
                 error_kw={"lw": 0.6, "ecolor": "0.3"})
    bars.set_yscale("log")
    bars.set_ylim(0.05, 100)
    bars.set_ylabel("success rate (%)")
    bars.set_xticks(np.arange(len(order)))
    bars.set_xticklabels([c[4:].replace("_", " ") for c in order], rotation=60, ha="right", fontsize=7)
    bars.set_title(f"achievement success rates at {last} env steps")
    bars.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --------------------------------------------------------------------------- the report


def run_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "lore.cli", *args], check=True)


def step_label(step: int) -> str:
    """5000 -> '5k', 2500 -> '2.5k', 300 -> '300'."""
    return f"{step / 1000:g}k" if step >= 1000 else str(step)


def count_text(values: pd.Series) -> str:
    values = values.dropna()
    if not len(values) or not values.any():
        return "0"
    return f"{values.mean():.1f} ({values.min():.0f}–{values.max():.0f})"


def doorkey_speed(doorkey_runs: pd.DataFrame, arms: list[str]) -> list[str]:
    """Training env steps/s of the DoorKey benchmark's runs (its runs.csv), per arm, for comparison."""
    needed = {"env", "ablation", "steps_per_s_last", "cfg_model_preset", "cfg_train_train_ratio"}
    if not needed <= set(doorkey_runs.columns):
        return []
    data = doorkey_runs[doorkey_runs["env"] == DOORKEY]
    cells = []
    for arm in arms:
        group = data[data["ablation"] == arm]
        if len(group):
            cells.append(f"{arm} {fmt(ci(group['steps_per_s_last']), 1)} (n = {len(group)})")
    if not cells:
        return []
    setup = (f"preset {'/'.join(sorted(data['cfg_model_preset'].astype(str).unique()))}, train ratio "
             f"{'/'.join(f'{r:g}' for r in sorted(data['cfg_train_train_ratio'].unique()))}")
    return [f"For comparison, DoorKey-5x5 in the LLM-prior benchmark (`docs/benchmark/tables/runs.csv`, {setup}, "
            f"same machine class, measured the same way): " + "; ".join(cells) + " env steps/s.", ""]


def distinct_achievements(rows: pd.DataFrame) -> pd.Series:
    """Per row: how many of the 22 achievements any of its evaluation episodes unlocked."""
    return (rows[achievement_names(rows)] > 0).sum(axis=1)


def paired(a: pd.DataFrame, b: pd.DataFrame, column: str) -> tuple[float, float, float, int]:
    """Mean [95% CI] over the seeds present in both of ``a`` - ``b`` (one row per seed each)."""
    left, right = a.set_index("seed")[column], b.set_index("seed")[column]
    seeds = sorted(set(left.index) & set(right.index))
    return ci([left[s] - right[s] for s in seeds])


def signed(stat: tuple[float, float, float, int], digits: int = 2) -> str:
    mean, low, high, n = stat
    if not n or not math.isfinite(mean):
        return "—"
    return f"{mean:+.{digits}f}" + (f" [{low:+.{digits}f}, {high:+.{digits}f}]" if n >= 2 else "")


def final_section(final: pd.DataFrame, random_final: pd.DataFrame,
                  advisors: list[pd.DataFrame] | None = None) -> list[str]:
    """The final evaluation's table: score, return and distinct achievements per arm and reference policy
    (the random one; the scripted advisor played alone), each minus the random policy, paired by seed."""
    if not len(final):
        return []
    with_distinct = lambda f: f.assign(distinct=distinct_achievements(f)) if len(f) else f  # noqa: E731
    final, random_final = with_distinct(final), with_distinct(random_final)
    references = {RANDOM: random_final} | {f["ablation"].iloc[0]: with_distinct(f) for f in advisors or [] if len(f)}
    episodes = ", ".join(str(int(e)) for e in sorted(final["episodes"].unique()))
    steps = ", ".join(str(int(e)) for e in sorted(final["env_step"].unique()))
    lines = [f"## Final evaluation: {episodes} episodes at {steps} env steps", "",
             "Each finished run's last checkpoint evaluated again by `lore eval` on more episodes than the periodic "
             "evaluation (the same protocol: the policy without the prior, fixed layouts; `+ prior`: the same "
             "checkpoint with the LLM prior mixed in at act time, `lore eval --with-prior`), and on the same layouts "
             "the random policy and the scripted advisor played alone (its top action at every step, from the true "
             "state: what following the advice to the letter gives). `− random`: per-seed difference from the "
             "random policy on that seed's layouts.",
             "", "| arm | n | score | return | distinct achievements | score − random |", "|---|---|---|---|---|---|"]
    for arm in [*arms_in(final), *references]:
        data = references[arm] if arm in references else final[final["ablation"] == arm]
        if not len(data):
            continue
        versus = "—" if arm == RANDOM or not len(random_final) else signed(paired(data, random_final, "crafter_score"))
        lines.append(f"| {arm} | {data['seed'].nunique()} | {fmt(ci(data['crafter_score']))} | "
                     f"{fmt(ci(data['return_mean']))} | {fmt(ci(data['distinct']), 1)} | {versus} |")
    return [*lines, ""]


def above_random(base_arm: pd.DataFrame, random_rows: pd.DataFrame) -> tuple[tuple, tuple, bool, tuple, bool]:
    """The first target: rl_only's score CI, the random policy's, whether they do not overlap (as the issue states
    it), the per-seed difference and whether it is above 0 beyond its CI (both played the same layouts per seed,
    so the paired difference is the sharper reading)."""
    own, base = ci(base_arm["crafter_score"]), ci(random_rows["crafter_score"])
    diff = paired(base_arm, random_rows, "crafter_score")
    return own, base, own[3] >= 2 and base[3] >= 2 and own[1] > base[2], diff, diff[3] >= 2 and diff[1] > 0


def targets(rows: pd.DataFrame, random_rows: pd.DataFrame, where: str) -> list[str]:
    """Issue 10's targets read from ``rows`` (one row per arm and seed at the last budget), as measured."""
    rows = rows.assign(distinct=distinct_achievements(rows))
    arm = {a: rows[rows["ablation"] == a] for a in rows["ablation"].unique()}
    base_arm = arm.get("rl_only", pd.DataFrame())
    lines = [f"## Targets ({where})", ""]
    if len(base_arm) and len(random_rows):
        own, base, met, diff, above = above_random(base_arm, random_rows)
        lines.append(f"- rl_only above random with non-overlapping 95% CIs: {fmt(own)} (n = {own[3]}) vs "
                     f"{fmt(base)} (n = {base[3]}): **{'met' if met else 'not met'}**. Paired by seed on the same "
                     f"layouts (n = {diff[3]}): {signed(diff)}, {'above' if above else 'not above'} 0 beyond the CI.")
    if not len(base_arm):
        return [*lines, ""] if len(lines) > 2 else []
    for suffix in ("", WITH_PRIOR):
        good, bad = arm.get("full" + suffix, pd.DataFrame()), arm.get("full_adversarial" + suffix, pd.DataFrame())
        if len(good):
            score, distinct = paired(good, base_arm, "crafter_score"), paired(good, base_arm, "distinct")
            met = score[3] >= 2 and score[1] > 0 and distinct[1] > 0
            lines.append(f"- full{suffix} above rl_only (paired by seed, n = {score[3]}): score {signed(score)}, "
                         f"distinct achievements {signed(distinct, 1)}: **{'met' if met else 'not met'}** "
                         "(met when both CIs are above 0).")
        if len(bad):
            score = paired(bad, base_arm, "crafter_score")
            met = score[3] >= 2 and score[2] >= 0
            lines.append(f"- full_adversarial{suffix} not below rl_only beyond the CI (paired by seed, n = "
                         f"{score[3]}): score {signed(score)}: **{'met' if met else 'not met'}**.")
    return [*lines, ""] if len(lines) > 2 else []


def report(frame: pd.DataFrame, random: pd.DataFrame, runs_table: pd.DataFrame, budgets: list[int],
           figure: str, workflow_figure: str, doorkey_runs: pd.DataFrame | None = None,
           final_rows: pd.DataFrame | None = None, random_final: pd.DataFrame | None = None,
           advisors: list[pd.DataFrame] | None = None) -> list[str]:
    last = budgets[-1]
    arms = arms_in(frame)
    n_episodes = sorted(frame["episodes"].unique()) if "episodes" in frame else []
    setups = sorted(frame["setup"].unique()) if "setup" in frame else []
    controllers = sorted(c for c in frame["controller"].unique() if c) if "controller" in frame else []
    lines = [
        "# Crafter benchmark (generated by `benchmarks/crafter_report.py`; do not edit)", "",
        "Runs: " + ("; ".join(setups) if setups else "—") + " (from the runs' resolved config.yaml; "
        "`benchmarks/crafter_benchmark.py` runs `config/crafter_cpu.yaml`).", "",
        *([f"LLM controller: {'; '.join(controllers)}.", ""] if controllers else []),
        f"Evaluation of the learned policy "
        f"**without** the prior on {', '.join(str(int(e)) for e in n_episodes)} separate episodes per point "
        "(fixed layouts). Values: mean and 95% bootstrap CI over seeds (n = seeds; no interval for n = 1). "
        "Crafter score S = exp(mean ln(1 + s_i)) − 1 over the 22 achievement success rates s_i in percent, "
        "per run, then averaged. `random` = the uniform-random policy through the same evaluation code, "
        "at the same eval points and layouts.", "",
        "## Crafter score", "",
        "| arm | n | " + " | ".join(f"score @{step_label(b)}" for b in budgets)
        + f" | return @{step_label(last)} | distinct achievements @{step_label(last)} | API calls | plan steps "
        "| env steps/s (train) | actor entropy (last) | advised steps (% of train) | advice strength (mean) "
        "| advised − control return | KL multiplier λ (last) | trust in the LLM (last) |",
        "|---|---|" + "---|" * (len(budgets) + 11),
    ]
    for arm in [*arms, RANDOM]:
        data = random if arm == RANDOM else frame[frame["ablation"] == arm]
        if not len(data):
            continue
        final = at_step(data, last)
        scores = [fmt(ci(at_step(data, b)["crafter_score"])) for b in budgets]
        if arm == RANDOM:
            calls, plans, speed, entropy, advised, strength, gap, lam, trust = "0", "0", *["—"] * 7
        else:
            group = runs_table[runs_table["ablation"] == arm] if "ablation" in runs_table else pd.DataFrame()
            per_run = data.drop_duplicates("seed")
            calls = count_text(group["llm_calls"]) if "llm_calls" in group else "0"
            plans = count_text(per_run["plan_steps"]) if "plan_steps" in per_run else "0"
            speed = fmt(ci(per_run["steps_per_s"]), 1)
            entropy = fmt(ci(per_run["entropy_last"]))
            advised = (fmt(ci(group["prior_mask_frac_avg"]), 1, scale=100.0)
                       if "prior_mask_frac_avg" in group and group["prior_mask_frac_avg"].notna().any() else "—")
            lam, trust, strength, gap = (per_run_text(per_run, column)
                                         for column in ("lambda_last", "trust_last", "act_strength", "advised_gap"))
        distinct = distinct_achievements(final)  # per seed: unlocked in any eval episode
        lines.append(f"| {arm} | {final['seed'].nunique()} | {' | '.join(scores)} | "
                     f"{fmt(ci(final['return_mean']))} | {fmt(ci(distinct), 1)} | {calls} | {plans} | {speed} | {entropy} | {advised} "
                     f"| {strength} | {gap} | {lam} | {trust} |")
    lines += ["", "Distinct achievements: how many of the 22 a run unlocked at least once in its evaluation "
              "episodes at that point (mean over seeds). API calls: LLM calls per run that reached the backend (mean, min–max over seeds; the scripted "
              "advisor here). Plan steps: training env steps advised by the rest of a plan the LLM had written "
              "(per run, mean, min–max over seeds; a plan is dropped at the first step on which the agent takes "
              "another action, so advice the agent follows only in part loses its plans). Env steps/s: env steps / wall time of the whole run (evaluations included), "
              "as measured where the benchmark ran. Actor entropy: of the policy in imagination at the end of "
              "training, nats (mean of its last three logged values; uniform over Crafter's 17 actions: "
              f"{math.log(17):.2f}): far below that, the policy has collapsed onto a few actions. Advised steps: "
              "the share of training env steps on which advice applied (mask 1: an answer for that state or "
              "the next step of a plan still being followed), mean over log points. Advice strength: the share of β the "
              "LLM's answers acted at (1: full strength; below 1 the act-time trust scaled them down, "
              "`prior.trust_act_evidence` / `trust_act_uninformed`), mean over log points. Advised − control return: "
              "mean return of the training episodes whose advice acted minus that of the control episodes (run "
              "without the prior), per run (— for runs from before episodes.csv recorded which was which): the raw "
              "gap the advised-vs-control evidence reads. KL multiplier: the dual "
              "variable of the absorption term at the end of training (mean of its last three logged values; "
              "`prior.absorb_trust` says whether the trust weights the term's loss or its target). Trust in the "
              "LLM: of its answers at the end of training (mean of its last three logged values; 0.5 = no "
              "evidence either way, 1 = advised episodes clearly better than the control episodes, 0 = clearly "
              "worse; with `prior.trust` off it is not logged: —).", ""]
    if doorkey_runs is not None:
        lines += doorkey_speed(doorkey_runs, [a for a in arms if a in ("rl_only", "full", "full_adversarial")])
    final_rows = final_rows if final_rows is not None else pd.DataFrame()
    random_final = random_final if random_final is not None else pd.DataFrame()
    lines += final_section(final_rows, random_final, advisors)
    if len(final_rows):
        episodes = ", ".join(str(int(e)) for e in sorted(final_rows["episodes"].unique()))
        lines += targets(final_rows, random_final, f"final evaluation, {episodes} episodes")
    else:
        last_rows = pd.concat([at_step(frame[frame["ablation"] == a], last) for a in arms], ignore_index=True)
        lines += targets(last_rows, at_step(random, last) if len(random) else random,
                         f"periodic evaluation at {last} env steps")

    names = achievement_names(frame if len(frame) else random)
    groups = [a for a in [*arms, RANDOM] if len(frame[frame["ablation"] == a]) or (a == RANDOM and len(random))]
    lines += [f"## Achievement success rates at {last} env steps (%)", "",
              "| achievement | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
    order = sorted(names, key=lambda c: (-np.nanmean(at_step(frame, last)[c]) if len(frame) else 0, c))
    for column in order:
        cells = []
        for arm in groups:
            data = at_step(random if arm == RANDOM else frame[frame["ablation"] == arm], last)
            cells.append(fmt(ci(data[column]), 0, scale=100.0))
        lines.append(f"| {column[4:]} | " + " | ".join(cells) + " |")
    if len(runs_table) and "ablation" in runs_table:
        lines += [""] + signal_separation(runs_table, AnalysisSettings(), arms=("full", "full_adversarial"))
    lines += ["", f"Figures: `{figure}` (score curves with the random baseline, per-achievement rates), "
              f"`{workflow_figure}` (the workflow's achievements figure, same runs).", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs-root", type=Path, default=Path("results/bench_crafter"))
    p.add_argument("--out", type=Path, default=Path("docs/benchmark"))
    p.add_argument("--name", default="crafter",
                   help="report name: writes <out>/<name>.md and <out>/<name>/ (default: %(default)s; e.g. "
                        "crafter_50k for a benchmark run at another budget, whose runs cannot be pooled with these)")
    p.add_argument("--no-cli", action="store_true", help="skip `lore aggregate` / `lore figures` (tests)")
    p.add_argument("--doorkey-runs", type=Path,
                   default=Path(__file__).resolve().parents[1] / "docs/benchmark/tables/runs.csv",
                   help="the DoorKey benchmark's runs table, whose env steps/s are quoted beside Crafter's")
    args = p.parse_args(argv)
    if not args.name or "/" in args.name or args.name.startswith("."):
        p.error(f"--name must be a plain file name, got {args.name!r}")
    base = args.out / args.name
    tables, figures = base / "tables", base / "figures"
    run_list, runs = finished_runs(args.runs_root, tables)
    frame, random = read_eval(runs), read_reference(args.runs_root)
    if not len(frame):
        print(f"crafter_report: no finished run under {args.runs_root}", file=sys.stderr)
        return 1
    budgets = budgets_of(frame)
    if not args.no_cli:
        common = ["--run-list", str(run_list), "--budgets", *map(str, budgets), "--headline-budget", str(budgets[-1])]
        run_cli("aggregate", *common, "--out", str(tables))
        run_cli("figures", *common, "--tables", str(tables), "--out", str(figures))
    runs_table = pd.read_csv(tables / "runs.csv") if (tables / "runs.csv").is_file() else pd.DataFrame()
    figure = figures / "crafter_score.png"
    plot(frame, random, budgets[-1], figure)
    rel = lambda path: path.relative_to(args.out).as_posix()  # noqa: E731
    doorkey = pd.read_csv(args.doorkey_runs) if args.doorkey_runs.is_file() else None
    final, random_final = read_final(runs), read_reference(args.runs_root, FINAL_EVAL)
    advisors = [read_reference(args.runs_root, FINAL_EVAL, policy) for policy in ADVISORS]
    lines = report(frame, random, runs_table, budgets, rel(figure), rel(figures / "crafter_achievements.png"), doorkey,
                   final, random_final, advisors)
    table = final_table(final, [random_final, *advisors])
    if len(table):
        atomic_write_text(tables / FINAL_TABLE, table.to_csv(index=False))
    atomic_write_text(args.out / f"{args.name}.md", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
