"""Compare an experiment's runs paired by seed and apply its decision rule.

:func:`compare_experiment` reads the runs of :func:`lore.experiments.plan.run_dirs`, tabulates each
(arm, vs, metric) as a paired difference with its bootstrap CI, decides with the declaration's rule
(``adopt`` or ``select``) and writes ``comparison.csv``, ``comparison.md``, ``arms.csv``, ``fig_success.png``
and ``verdict.json`` (and, when asked, the experiment's record).

A decided experiment (:func:`lore.experiments.log.check_open`) is not compared again, and a record is
written once: only a record of an ``incomplete`` comparison is written over.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

from lore.archive import commit_counts
from lore.experiments.declaration import METRICS, Declaration, decision_envs, load_declaration
from lore.experiments.log import UNDECIDED, ExperimentDecided, check_open, commits_text, read_record
from lore.experiments.plan import RESULTS_DIR, PlannedRun, comparisons, run_dirs

CONFIDENCE, RESAMPLES = 0.95, 2000
STATISTICS = "exact-paired-bootstrap"
"""How paired intervals are computed (:func:`lore.report.stats.paired_interval`: no resampling seed), as
records name it; :data:`LEGACY_STATISTICS` is how records that name none were computed."""
LEGACY_STATISTICS = "bootstrap-2000"
"""Monte-Carlo paired bootstrap, 2,000 resamples, seed 0 (records written before they named their statistics)."""


def load_finished(pairs: list[tuple[PlannedRun, Path]]) -> list[tuple[PlannedRun, object]]:
    """Each finished planned run with its loaded run (:func:`lore.report.runs.load_run`), read once for every table."""
    from lore.report.runs import load_run

    return [(run, load_run(folder)) for run, folder in pairs if (folder / "done").is_file()]


def run_metrics_table(loaded: list[tuple[PlannedRun, object]]):
    """One row per finished planned run (from :func:`load_finished`): env, arm, seed and every metric of
    :data:`METRICS` it has."""
    import pandas as pd

    from lore.report.aggregate import run_table
    from lore.report.runs import ACHIEVEMENT_PREFIX
    from lore.report.settings import AnalysisSettings

    rows = []
    for run, data in loaded:
        steps = int(data.eval["env_step"].max())
        table = run_table([data], AnalysisSettings(budgets=(steps,)))
        row = {"env": run.env, "arm": run.arm, "seed": run.seed,
               **{m: float(table[m].iloc[0]) for m in ("auc", "final_sr", "crafter_score") if m in table}}
        if any(c.startswith(ACHIEVEMENT_PREFIX) for c in data.eval.columns):
            row["distinct"] = distinct_at_last_eval(data.eval)
        rows.append(row)
    return pd.DataFrame(rows, columns=["env", "arm", "seed", *METRICS]) if not rows else pd.DataFrame(rows)


def outcome_table(loaded: list[tuple[PlannedRun, object]], phases: int | None = None):
    """How each finished run's training episodes ended, by phase (:mod:`lore.report.episodes`, default
    :data:`~lore.report.episodes.PHASES` of them): one row per (env, arm, seed, phase) with the shares of
    success, failure and time-out (for a run that predates the ``failed`` column, failures are the episodes
    that ended without success before the env's time limit; for one that predates ``length`` too and trained
    one env, lengths are the env steps between episode ends: :func:`lore.report.episodes.with_lengths`)."""
    import pandas as pd

    from lore.report.episodes import PHASES, outcome_shares, time_limit, with_lengths

    frames = []
    for run, data in loaded:
        env_cfg = data.config.get("env") if isinstance(data.config, dict) else None
        env_cfg = env_cfg if isinstance(env_cfg, dict) else {}
        limit = time_limit(run.env, env_cfg.get("max_episode_steps"))
        episodes = with_lengths(data.episodes, env_cfg.get("num_envs", 0))
        frames.append(outcome_shares(episodes, int(data.eval["env_step"].max()), phases or PHASES,
                                     limit).assign(env=run.env, arm=run.arm, seed=run.seed))
    columns = ["env", "arm", "seed", "phase", "start", "end", "episodes", "success", "failure", "timeout"]
    return pd.concat(frames)[columns] if frames else pd.DataFrame(columns=columns)


def advice_table(loaded: list[tuple[PlannedRun, object]]):
    """How much weight the advice kept in each finished run that mixed a prior in (:mod:`lore.report.episodes`):
    one row per (env, arm, seed) with the run's mean β, the step its β settled below
    :data:`lore.report.episodes.SETTLED_BETA` (NaN when it never did), the advice's β summed over the act
    steps of the run's first phase (``beta_steps``), the mean KL-control term after it (``kl_term_after``) and
    the run's LLM API calls per 10,000 env steps (``llm_calls_per_10k``). A run with the prior enabled counts
    even where its β stayed 0; a run without one is left out."""
    import pandas as pd

    from lore.report.episodes import PHASES, advice_exposure, advice_weight, mixes_a_prior, phase_bounds
    from lore.report.runs import llm_calls_per_10k

    rows = []
    for run, data in loaded:
        if mixes_a_prior(data.config):
            first_end = phase_bounds(int(data.eval["env_step"].max()), PHASES)[0][1]
            rows.append({"env": run.env, "arm": run.arm, "seed": run.seed, **advice_weight(data.metrics),
                         **advice_exposure(data.metrics, first_end), "llm_calls_per_10k": llm_calls_per_10k(data)})
    return pd.DataFrame(rows, columns=["env", "arm", "seed", "beta_mean", "settled_at", "beta_steps",
                                       "kl_term_after", "llm_calls_per_10k"])


def stuck_runs(outcomes):
    """Per (env, arm, seed) of :func:`outcome_table`: ``stuck``, 1.0 when the run's last phase timed out in at
    least :data:`lore.report.episodes.STUCK_TIMEOUT_SHARE` of its episodes, 0.0 when not, NaN when its
    episodes did not record failures."""
    import pandas as pd

    from lore.report.episodes import stuck

    rows = [{"env": env, "arm": arm, "seed": seed, "stuck": stuck(shares.sort_values("phase"))}
            for (env, arm, seed), shares in outcomes.groupby(["env", "arm", "seed"], sort=False)]
    return pd.DataFrame(rows, columns=["env", "arm", "seed", "stuck"])


def stuck_p_value(stuck_arm, stuck_base) -> float:
    """Two-sided Fisher exact p of "as many runs stuck" between two arms' per-seed stuck flags (NaN dropped;
    NaN when either side has none)."""
    from scipy import stats as sps

    a, b = stuck_arm.dropna(), stuck_base.dropna()
    if not len(a) or not len(b):
        return math.nan
    table = [[int(a.sum()), len(a) - int(a.sum())], [int(b.sum()), len(b) - int(b.sum())]]
    return float(sps.fisher_exact(table, alternative="two-sided").pvalue)


def outcome_markdown(outcomes, base: str = "rl_only") -> list[str]:
    """Per env and arm, the mean shares of each outcome in each phase over seeds, how many seeds end stuck
    in their time-out phase (:data:`lore.report.episodes.STUCK_TIMEOUT_SHARE`) and, for the other arms of an
    env where ``base`` ran, the Fisher exact p of stuck counts against it (:func:`stuck_p_value`)."""
    from lore.report.episodes import STUCK_TIMEOUT_SHARE

    if not len(outcomes):
        return []
    runs = stuck_runs(outcomes)
    lines = [f"How training episodes ended (mean share over seeds per phase of the run: success / failure / "
             f"time-out); stuck: seeds whose last phase times out in at least {STUCK_TIMEOUT_SHARE:.0%} of "
             f"episodes; p: two-sided Fisher exact test of the stuck counts against {base}'s.", "",
             "| env | arm | n | " + " | ".join(
                 f"phase {k}" for k in sorted(set(outcomes["phase"]))) + " | stuck | p |",
             "|---|---|---|" + "---|" * (len(set(outcomes["phase"])) + 2)]
    for (env, arm), part in outcomes.groupby(["env", "arm"], sort=False):
        means = part.groupby("phase")[["success", "failure", "timeout"]].mean()
        cells = [" / ".join(_fmt(means.loc[k, o]) for o in ("success", "failure", "timeout")) for k in means.index]
        flags = runs[(runs["env"] == env) & (runs["arm"] == arm)]["stuck"].dropna()
        stuck = f"{int(flags.sum())} of {len(flags)}" if len(flags) else "-"
        ref = runs[(runs["env"] == env) & (runs["arm"] == base)]["stuck"]
        p = _fmt(stuck_p_value(flags, ref)) if arm != base and len(ref) else "-"
        lines.append(f"| {env} | {arm} | {part['seed'].nunique()} | " + " | ".join(cells) + f" | {stuck} | {p} |")
    return [*lines, ""]


def advice_markdown(advice, outcomes=None) -> list[str]:
    """Per env and arm with a prior, the mean β over seeds, how fast it settled below
    :data:`lore.report.episodes.SETTLED_BETA` (the seeds that settled and the median step among them), the
    median over seeds of the β summed over the first phase's act steps (with ``outcomes``: apart for the seeds
    that end stuck and the others, :func:`stuck_runs`), the mean KL-control term after the first phase and the
    LLM API calls per 10,000 env steps (median and largest over seeds)."""
    from lore.report.episodes import SETTLED_BETA

    if not len(advice):
        return []
    runs = stuck_runs(outcomes) if outcomes is not None and len(outcomes) else None
    lines = [f"The advice's weight: mean β over the run (mean over seeds); settled: seeds whose logged β stays "
             f"below {SETTLED_BETA:g} from some step to the end, and the median of that step over them; β-steps: "
             "β summed over the act steps of the run's first phase (median over seeds; stuck / other: over the "
             "seeds that end stuck in their time-out phase and the others); KL term: the mean KL-control term "
             "of the actor loss after the first phase (mean over seeds); LLM calls: API calls per 10,000 env "
             "steps (median over seeds, largest in brackets).", "",
             "| env | arm | n | mean β | settled | median step settled | β-steps, first phase | β-steps, "
             "stuck / other | KL term after | LLM calls per 10k steps |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (env, arm), part in advice.groupby(["env", "arm"], sort=False):
        settled = part["settled_at"].dropna()
        step = f"{settled.median():,.0f}" if len(settled) else "-"
        split = "-"
        if runs is not None:
            flags = part.merge(runs, on=["env", "arm", "seed"], how="left")
            sides = [flags.loc[flags["stuck"] == v, "beta_steps"] for v in (1.0, 0.0)]
            split = " / ".join(f"{side.median():,.0f}" if len(side) else "-" for side in sides)
        lines.append(f"| {env} | {arm} | {len(part)} | {_fmt(part['beta_mean'].mean())} | "
                     f"{len(settled)} of {len(part)} | {step} | {part['beta_steps'].median():,.0f} | {split} | "
                     f"{_fmt(part['kl_term_after'].mean())} | {_call_rate(part['llm_calls_per_10k'])} |")
    return [*lines, ""]


def _call_rate(rates) -> str:
    """``median (max)`` of per-seed call rates, ``-`` when none is known."""
    known = rates.dropna()
    return f"{known.median():.1f} ({known.max():.1f})" if len(known) else "-"


def experiment_figure(decl: Declaration, pairs: list[tuple[PlannedRun, Path]], out: Path) -> list[Path]:
    """``fig_success.png``: eval SR over env steps of each arm against the arm most comparisons use as ``vs``
    (mean over seeds with its 95% bootstrap band), one panel per env and arm."""
    import pandas as pd

    from lore.report.figures import plot_success_curves
    from lore.report.runs import load_run
    from lore.report.settings import AnalysisSettings

    frames = []
    for run, folder in pairs:
        if (folder / "done").is_file():
            ev = load_run(folder).eval[["env_step", "success_rate"]].copy()
            ev.insert(0, "seed", run.seed)
            ev.insert(0, "ablation", run.arm)
            ev.insert(0, "env", run.env)
            frames.append(ev)
    if not frames:
        return []
    vs = [c["vs"] for c in comparisons(decl)]
    base = max(vs, key=vs.count) if vs else "rl_only"
    base = f"baseline:{base}" if base == "baseline" else base
    paths = plot_success_curves(pd.concat(frames, ignore_index=True), AnalysisSettings(baseline=base), out)
    keep = [p for p in paths if p.suffix == ".png"]
    for p in paths:
        if p.suffix != ".png":
            p.unlink()
    return [p.rename(p.with_name("fig_success.png")) for p in keep]


def distinct_at_last_eval(eval_points) -> float:
    """How many Crafter achievements the last evaluation of one run unlocked (in any of its episodes)."""
    from lore.report.runs import ACHIEVEMENT_PREFIX

    ach = [c for c in eval_points.columns if c.startswith(ACHIEVEMENT_PREFIX)]
    last = eval_points.loc[eval_points["env_step"].idxmax(), ach]
    return float((last.astype(float) > 0).sum())


def compare_pair(x: dict[int, float], y: dict[int, float], seed: int = 0, statistics: str = STATISTICS) -> dict:
    """``x`` against ``y`` (seed -> value): paired mean difference with its 95% CI (``statistics``: exact, with
    the bounds' Monte-Carlo error ``mc_error``; or the legacy Monte-Carlo bootstrap), P(x > y), n per side."""
    if statistics not in (STATISTICS, LEGACY_STATISTICS):
        raise ValueError(f"statistics {statistics!r}: not one of {STATISTICS}, {LEGACY_STATISTICS}")
    import numpy as np

    from lore.report import stats as st

    xs = {s: v for s, v in x.items() if v is not None and math.isfinite(v)}
    ys = {s: v for s, v in y.items() if v is not None and math.isfinite(v)}
    both = sorted(set(xs) & set(ys))
    out = {"n_arm": len(xs), "n_vs": len(ys), "n_paired": len(both),
           "mean_arm": float(np.mean(list(xs.values()))) if xs else math.nan,
           "mean_vs": float(np.mean(list(ys.values()))) if ys else math.nan,
           "difference": math.nan, "low": math.nan, "high": math.nan, "p_improvement": math.nan}
    if statistics == STATISTICS:
        out["mc_error"] = math.nan
    if len(both) >= 2:
        a, b = np.array([xs[s] for s in both]), np.array([ys[s] for s in both])
        if statistics == STATISTICS:
            d = st.paired_interval(a, b, confidence=CONFIDENCE, seed=seed)
            out["mc_error"] = d.mc_error
        else:
            d = st.paired_difference(a, b, confidence=CONFIDENCE, resamples=RESAMPLES, seed=seed)
        out.update(difference=d.estimate, low=d.low, high=d.high,
                   p_improvement=st.probability_of_improvement(a, b))
    return out


def comparison_table(decl: Declaration, metrics_table, statistics: str = STATISTICS):
    """One row per (env, arm, vs, metric) of :func:`comparisons`, paired by seed (``statistics``:
    :func:`compare_pair`)."""
    import pandas as pd

    rows = []
    for item in comparisons(decl):
        arm, vs = item["arm"], item["vs"]
        vs_label = f"baseline:{arm}" if vs == "baseline" else vs
        for env in decl.envs:
            if item["metric"] not in metrics_table:
                continue
            pick = metrics_table[metrics_table["env"] == env]
            x = dict(zip(pick[pick["arm"] == arm]["seed"], pick[pick["arm"] == arm][item["metric"]], strict=True))
            y = dict(zip(pick[pick["arm"] == vs_label]["seed"], pick[pick["arm"] == vs_label][item["metric"]],
                         strict=True))
            if not x and not y:
                continue
            rows.append({"env": env, "arm": arm, "vs": vs_label, "metric": item["metric"],
                         **compare_pair(x, y, statistics=statistics)})
    return pd.DataFrame(rows)


def _holds(row, test: str, value: float | None) -> bool | None:
    """Whether one comparison row passes ``test``; None when it has too few paired seeds to say."""
    if test == "ratio_at_least":
        if not (math.isfinite(row["mean_arm"]) and math.isfinite(row["mean_vs"])):
            return None
        return bool(row["mean_arm"] >= value * row["mean_vs"])
    if row["n_paired"] < 2:
        return None
    if test == "lower_at_least":
        return bool(row["low"] >= value)
    return bool(row["low"] > 0) if test == "above" else bool(row["high"] >= 0)


def _requirement(table, arm: str, vs: str, metric: str, test: str, value: float | None,
                 envs: list[str]) -> bool | None:
    """Whether ``test`` holds on every env of ``envs``; None while an env has no row or too few paired seeds."""
    vs_label = f"baseline:{arm}" if vs == "baseline" else vs
    rows = table[(table["arm"] == arm) & (table["vs"] == vs_label) & (table["metric"] == metric)
                 & table["env"].isin(envs)] if len(table) else []
    if len(rows) == 0:
        return None
    results = [_holds(row, test, value) for _, row in rows.iterrows()]
    if any(r is False for r in results):
        return False
    return None if any(r is None for r in results) or set(rows["env"]) != set(envs) else True


def power_verdict(decl: Declaration, metrics_table) -> dict:
    """The ``power`` rule: the envs where the arm's mean metric over its seeds reaches ``at_least``
    (``scores``: that mean per env); fewer than :data:`MIN_SEEDS` seeds on an env is flagged."""
    rule = decl.decision
    arm, metric, at_least = rule["arm"], rule["metric"], float(rule["at_least"])
    envs = decl.arms[arm].envs
    pick = metrics_table[metrics_table["arm"] == arm] if len(metrics_table) else metrics_table
    scores, seeds = {}, []
    for env in envs:
        values = pick[pick["env"] == env][metric].dropna() if len(pick) and metric in pick else []
        if len(values):
            scores[env] = float(values.mean())
            seeds.append(len(values))
    if len(scores) < len(envs):
        return {"verdict": "incomplete", "reason": "some runs have not finished", "scores": scores}
    powered = [e for e in envs if scores[e] >= at_least]
    names = ", ".join(e.removeprefix("MiniGrid-").removesuffix("-v0") for e in powered)
    reason = f"mean {METRICS[metric]} of {arm} at least {at_least:g} on {len(powered)} of {len(envs)} envs"
    if min(seeds) < MIN_SEEDS:
        reason += f"; only {min(seeds)} seed(s) on some env, fewer than {MIN_SEEDS}: not evidence for a claim"
    return {"verdict": f"powered: {names}" if powered else "none", "reason": reason, "scores": scores}


MIN_SEEDS = 5
"""Fewer paired seeds than this in any comparison row are flagged in the verdict's reason."""


def verdict(decl: Declaration, table, metrics_table) -> dict:
    """The decision rule applied to the comparison: ``{"verdict": ..., "reason": ...}``; a comparison with
    fewer than :data:`MIN_SEEDS` paired seeds says so in the reason."""
    decided = _rule_verdict(decl, table, metrics_table)
    if decl.decision["rule"] == "power":
        return decided
    rows = table.to_dict("records") if len(table) else []
    paired = [int(r["n_paired"]) for r in rows if r.get("n_arm") and r.get("n_vs")]  # rows with both sides run
    if paired and min(paired) < MIN_SEEDS:
        decided["reason"] += (f"; only {min(paired)} paired seed(s) in some comparison, fewer than {MIN_SEEDS}: "
                              "not evidence for a claim")
    return decided


def _rule_verdict(decl: Declaration, table, metrics_table) -> dict:
    rule = decl.decision
    if rule["rule"] == "power":
        return power_verdict(decl, metrics_table)
    envs = decision_envs(decl)
    if rule["rule"] == "adopt":
        results = [(_requirement(table, r["arm"], r["vs"], r["metric"], r["test"], r.get("value"), envs), r)
                   for r in rule["require"]]
        failed = [r for ok, r in results if ok is False]
        if failed:
            r = failed[0]
            return {"verdict": "reject", "reason": f"{r['arm']} vs {r['vs']}: {r['metric']} not {r['test']} "
                                                   f"on every env"}
        if any(ok is None for ok, _ in results):
            return {"verdict": "incomplete", "reason": "some runs have not finished"}
        return {"verdict": "adopt", "reason": "every requirement holds on every env"}
    scores, eligible, pending = {}, [], False
    for cand, roles in rule["candidates"].items():
        oks = [_requirement(table, roles[r["role"]], r["vs"], r["metric"], r["test"], r.get("value"), envs)
               for r in rule.get("require", [])]
        pending |= any(ok is None for ok in oks)
        arm = roles[rule["score"]["role"]]
        values = metrics_table[metrics_table["arm"] == arm] if len(metrics_table) else []
        if len(values):
            per_env = values[values["env"].isin(envs)].groupby("env")[rule["score"]["metric"]].mean()
            scores[cand] = float(per_env.mean()) if len(per_env) == len(envs) else math.nan
        if all(ok is True for ok in oks):
            eligible.append(cand)
    if pending or any(not math.isfinite(scores.get(c, math.nan)) for c in rule["candidates"]):
        return {"verdict": "incomplete", "reason": "some runs have not finished", "scores": scores}
    if not eligible:
        return {"verdict": "none", "reason": "no candidate meets every requirement", "scores": scores}
    best = max(scores[c] for c in eligible)
    tied = [c for c in eligible if scores[c] >= best - float(rule.get("tie", 0.0))]
    winner = min(tied, key=lambda c: (rule["candidates"][c]["mechanisms"], -scores[c]))
    return {"verdict": f"select {winner}", "reason": f"highest mean {rule['score']['metric']} among "
                                                     f"{', '.join(eligible)} (ties within {rule.get('tie', 0)} "
                                                     f"go to fewer mechanisms)", "scores": scores}


def _fmt(x: float, signed: bool = False) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def arm_table(decl: Declaration, metrics_table):
    """One row per (env, arm, metric): n and the mean over seeds with its 95% bootstrap CI."""
    import numpy as np
    import pandas as pd

    from lore.report import stats as st

    rows = []
    for env in decl.envs:
        for arm in sorted(set(metrics_table["arm"]) if len(metrics_table) else [], key=_arm_order(decl)):
            pick = metrics_table[(metrics_table["env"] == env) & (metrics_table["arm"] == arm)]
            for metric in decl.metrics:
                values = pick[metric].to_numpy(float) if metric in pick else np.array([])
                values = values[np.isfinite(values)]
                if not values.size:
                    continue
                ci = st.stratified_bootstrap_ci([values], "mean", confidence=CONFIDENCE, resamples=RESAMPLES, seed=0)
                rows.append({"env": env, "arm": arm, "metric": metric, "n": int(values.size),
                             "mean": float(values.mean()), "low": ci.low, "high": ci.high})
    return pd.DataFrame(rows)


def _arm_order(decl: Declaration):
    names = list(decl.arms)
    return lambda arm: (names.index(arm) if arm in names else len(names), arm)


def arm_markdown(arms) -> list[str]:
    if not len(arms):
        return []
    lines = ["Each arm: mean over seeds [95% bootstrap CI], n seeds.", "",
             "| env | arm | " + " | ".join(METRICS[m] for m in arms["metric"].unique()) + " |",
             "|---|---|" + "---|" * arms["metric"].nunique()]
    for (env, arm), group in arms.groupby(["env", "arm"], sort=False):
        cells = [f"{_fmt(r['mean'])} [{_fmt(r['low'])}, {_fmt(r['high'])}] (n = {r['n']})"
                 for _, r in group.iterrows()]
        lines.append(f"| {env} | {arm} | " + " | ".join(cells) + " |")
    return lines + [""]


def comparison_markdown(decl: Declaration, table, decided: dict, run_commits: dict[str, int], arms=None,
                        outcomes=None, advice=None) -> str:
    lines = [f"# {decl.name}", "", decl.question, "",
             f"Verdict: **{decided['verdict']}** ({decided['reason']}).", "",
             f"Code: {commits_text(run_commits)}.", "",
             *(arm_markdown(arms) if arms is not None else []),
             "Paired by seed: mean of per-seed differences (arm − vs) with its 95% bootstrap CI; P(arm > vs) over "
             "runs; n per side and paired.", "",
             "| env | arm | vs | metric | n (arm / vs / paired) | arm | vs | difference [95% CI] | P(improvement) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['env']} | {r['arm']} | {r['vs']} | {METRICS[r['metric']]} | {r['n_arm']} / {r['n_vs']} / "
                     f"{r['n_paired']} | {_fmt(r['mean_arm'])} | {_fmt(r['mean_vs'])} | {_fmt(r['difference'], True)} "
                     f"[{_fmt(r['low'], True)}, {_fmt(r['high'], True)}] | {_fmt(r['p_improvement'])} |")
    if outcomes is not None and len(outcomes):
        lines += ["", *outcome_markdown(outcomes)]
    if advice is not None and len(advice):
        lines += ["", *advice_markdown(advice, outcomes)]
    return "\n".join(lines).rstrip("\n") + "\n"


def current_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def record(decl: Declaration, table, decided: dict, commit: str | None, run_commits: dict[str, int],
           runs: list | None = None) -> dict:
    """What the log keeps of a finished comparison (tracked under ``docs/experiments/records``), with the
    run key of every planned run (``runs``), so that the comparison can be found again in the archive
    after the code's defaults have moved on."""
    rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
            for r in table.to_dict("records")]
    planned = [{"env": r.env, "arm": r.arm, "seed": r.seed, "ablation": r.ablation, "key": r.key}
               for r in (runs or [])]
    return {"name": decl.name, "commit": commit, "run_commits": run_commits, "verdict": decided["verdict"],
            "reason": decided["reason"], "scores": decided.get("scores"), "statistics": STATISTICS,
            "comparison": rows, "runs": planned}


def compare_experiment(name: str, root: Path = Path("."), out: Path | None = None, record_dir: Path | None = None,
                       results_root: Path | None = None) -> dict:
    """Compare an undecided experiment's runs, write ``comparison.csv``/``comparison.md``/``verdict.json`` and
    its record (in ``record_dir``, where a decided record of it is an ExperimentDecided too)."""
    from lore.utils.io import atomic_write_text

    decl = load_declaration(name, root)
    check_open(name, root)
    previous = record_dir / f"{name}.json" if record_dir is not None else None
    old = read_record(previous) if previous is not None and (previous.exists() or previous.is_symlink()) else None
    if old is not None and old["verdict"] != UNDECIDED:
        raise ExperimentDecided(f"{name}: decided at {old.get('commit') or 'an unknown commit'} (verdict: "
                                f"{old['verdict']}); its record {previous} is written once")
    pairs = run_dirs(decl, root, results_root)
    loaded = load_finished(pairs)
    metrics_table = run_metrics_table(loaded)
    table = comparison_table(decl, metrics_table)
    decided = verdict(decl, table, metrics_table)
    missing = sum(not (folder / "done").is_file() for _, folder in pairs)
    if missing:  # a rule applied to part of its grid decides nothing
        decided = {"verdict": "incomplete", "reason": f"{missing} of {len(pairs)} runs have not finished",
                   "scores": decided.get("scores")}
    out = out or root / RESULTS_DIR / name
    run_commits = commit_counts([folder for _, folder in pairs if (folder / "done").is_file()])
    rec = record(decl, table, decided, current_commit(root), run_commits, [run for run, _ in pairs])
    if old is not None and old.get("note") and old["verdict"] == rec["verdict"]:  # a note on the same verdict stays
        rec["note"] = old["note"]
    atomic_write_text(out / "comparison.csv", table.to_csv(index=False, float_format="%.6g"))
    experiment_figure(decl, pairs, out)
    arms = arm_table(decl, metrics_table)
    atomic_write_text(out / "arms.csv", arms.to_csv(index=False, float_format="%.6g"))
    outcomes = outcome_table(loaded)
    atomic_write_text(out / "outcomes.csv", outcomes.to_csv(index=False, float_format="%.6g"))
    advice = advice_table(loaded)
    atomic_write_text(out / "advice.csv", advice.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(out / "comparison.md", comparison_markdown(decl, table, decided, run_commits, arms, outcomes,
                                                                 advice))
    atomic_write_text(out / "verdict.json", json.dumps(rec, indent=1) + "\n")
    if previous is not None:
        atomic_write_text(previous, json.dumps(rec, indent=1) + "\n")
    return rec
