"""Figures from raw run files (PNG and PDF), never hand-edited.

- ``fig1_success``: eval success rate vs env steps, mean over seeds with a 95% bootstrap band,
  one panel per environment (the paper's Figure 1).
- ``prior_dynamics``: beta (the mixing weight) and LLM-call density over time for ``full``.
- ``kl_traces``: KL(pi_mix || pi_wm), the Lagrange multiplier lambda, policy entropies, temperature T.
- ``iqm_intervals``: IQM of eval success rate with CIs per ablation at each budget.
- ``p_improvement``: probability of improvement over the baseline with CIs.
- ``crafter_achievements``: per-achievement success rates (Crafter runs only).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lore.analysis.aggregate import ALL_ENVS, AnalysisSettings, Tables, budget_metric
from lore.analysis.latex import env_label, ordered_ablations
from lore.analysis.runs import Run, tidy

FIGURES = ("fig1_success", "prior_dynamics", "kl_traces", "iqm_intervals", "p_improvement", "crafter_achievements")
FORMATS = ("png", "pdf")
FOCUS_ABLATIONS = ("full", "full_noisy", "full_adversarial")
"""Ablations shown in the prior-dynamics figure (the full method and its advisor-quality arms)."""


def _pyplot():
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", font_scale=1.1)
    plt.rcParams.update({"figure.dpi": 150, "savefig.bbox": "tight", "axes.titleweight": "bold",
                         "legend.frameon": False, "pdf.fonttype": 42})
    return plt


def palette(ablations: Sequence[str]) -> dict[str, tuple]:
    """One fixed colour per ablation (by its position in ``ABLATIONS``), the baseline in dark grey."""
    import seaborn as sns

    from lore.ablations import ABLATIONS

    names = list(ABLATIONS)
    colors = sns.color_palette("tab10", 10)
    out = {}
    for name in ablations:
        idx = names.index(name) if name in names else len(names) + sorted(ablations).index(name)
        out[name] = (0.2, 0.2, 0.2) if name == "rl_only" else colors[idx % 10]
    return out


def _steps_axis(ax, label: str = "Environment steps") -> None:
    from matplotlib.ticker import FuncFormatter

    from lore.analysis.latex import fmt_steps

    ax.set_xlabel(label)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_steps(x) if x else "0"))


def bootstrap_band(matrix: np.ndarray, confidence: float = 0.95, resamples: int = 1000,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """matrix: [runs, points] with NaN where a run has no value -> (mean, low, high) per point.

    Resamples runs (rows) with replacement; NaN-aware so runs of different lengths mix.
    """
    matrix = np.asarray(matrix, float)
    mean = np.nanmean(matrix, axis=0) if matrix.size else np.array([])
    if matrix.shape[0] < 2:
        return mean, mean.copy(), mean.copy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, matrix.shape[0], size=(resamples, matrix.shape[0]))
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            boot = np.nanmean(matrix[idx], axis=1)  # [R, points]
            alpha = (1 - confidence) / 2
            low, high = np.nanquantile(boot, [alpha, 1 - alpha], axis=0)
    return mean, low, high


def curves_on_grid(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-seed curves of ``column`` interpolated onto the union of their steps -> (grid [P], [seeds, P]).

    A run contributes only inside its own step range (NaN outside), so shorter runs don't extrapolate.
    """
    frame = frame.dropna(subset=[column])
    grid = np.unique(frame["env_step"].to_numpy(float))
    rows = []
    for _, run in frame.groupby("seed", sort=True):
        x, y = run["env_step"].to_numpy(float), run[column].to_numpy(float)
        curve = np.interp(grid, x, y)
        curve[(grid < x.min()) | (grid > x.max())] = np.nan
        rows.append(curve)
    return grid, np.asarray(rows).reshape(len(rows), grid.size)


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    plt = _pyplot()
    paths = []
    for ext in FORMATS:
        path = out_dir / f"{name}.{ext}"
        fig.savefig(path)
        paths.append(path)
    plt.close(fig)
    return paths


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="0.4", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _legend_below(fig, axes, ncol: int | None = None) -> None:
    handles, labels = {}, {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                labels[lab] = lab
                handles[lab] = h
    if handles:
        fig.legend(list(handles.values()), list(labels.values()), loc="lower center",
                   ncol=ncol or min(len(handles), 5), bbox_to_anchor=(0.5, -0.02))
        fig.tight_layout(rect=(0, 0.06 + 0.035 * ((len(handles) - 1) // (ncol or 5)), 1, 1))


# --------------------------------------------------------------------------- figure 1


def plot_success_curves(eval_points: pd.DataFrame, settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    plt = _pyplot()
    envs = sorted(eval_points["env"].unique()) if len(eval_points) else []
    fig, axes = plt.subplots(1, max(1, len(envs)), figsize=(5.2 * max(1, len(envs)), 3.8), squeeze=False)
    colors = palette(eval_points["ablation"].unique() if len(eval_points) else [])
    for ax, env in zip(axes[0], envs, strict=False):
        data = eval_points[eval_points["env"] == env]
        for ablation in ordered_ablations(data["ablation"]):
            grid, matrix = curves_on_grid(data[data["ablation"] == ablation], "success_rate")
            mean, low, high = bootstrap_band(matrix, settings.confidence, seed=settings.seed)
            n = matrix.shape[0]
            ax.plot(grid, mean, color=colors[ablation], lw=2.2 if ablation in ("full", "rl_only") else 1.4,
                    label=ablation)
            if n > 1:
                ax.fill_between(grid, low, high, color=colors[ablation], alpha=0.15, lw=0)
        ax.set_title(env_label(env))
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("Eval achievements unlocked (fraction)" if env.lower().startswith("crafter")
                      else "Eval success rate")
        _steps_axis(ax)
    if not envs:
        _no_data(axes[0, 0], "no evaluation points")
    _legend_below(fig, axes)
    return _save(fig, out_dir, "fig1_success")


# --------------------------------------------------------------------------- prior dynamics


def _focus(candidates: Sequence[str]) -> list[str]:
    chosen = [a for a in FOCUS_ABLATIONS if a in candidates]
    return chosen or ordered_ablations(candidates)


def call_density(calls: pd.DataFrame, last_step: float, bin_steps: float) -> tuple[np.ndarray, np.ndarray]:
    """API calls (cache misses) per 1k env steps in bins of ``bin_steps`` -> (bin centres, density)."""
    edges = np.arange(0.0, last_step + bin_steps, bin_steps)
    if edges.size < 2:
        edges = np.array([0.0, max(last_step, 1.0)])
    steps = calls["env_step"].to_numpy(float) if len(calls) else np.array([])
    if len(calls) and "cache_hit" in calls:
        steps = steps[~calls["cache_hit"].fillna(False).astype(bool).to_numpy()]
    counts, _ = np.histogram(steps, bins=edges)
    return (edges[:-1] + edges[1:]) / 2, counts / np.diff(edges) * 1000.0


PRIOR_DYNAMICS_ROWS = (
    ("beta_mean", r"mixing weight $\beta$ (mean)"),
    ("trust_llm", "advice trust (LLM answers)"),
)


def plot_prior_dynamics(runs: list[Run], settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    plt = _pyplot()
    metrics = tidy(runs, "metrics")
    envs = sorted({r.env for r in runs})
    rows = len(PRIOR_DYNAMICS_ROWS) + 1
    fig, axes = plt.subplots(rows, max(1, len(envs)), figsize=(5.2 * max(1, len(envs)), 2.6 * rows), squeeze=False,
                             sharex="col")
    with_beta = set(metrics.loc[metrics["beta_mean"].notna(), "ablation"]) if "beta_mean" in metrics else set()
    with_calls = {r.ablation for r in runs if len(r.llm_calls)}
    colors = palette(sorted({r.ablation for r in runs}))
    for col, env in enumerate(envs):
        ax_calls = axes[-1, col]
        env_runs = [r for r in runs if r.env == env]
        candidates = sorted({r.ablation for r in env_runs} & (with_beta | with_calls))
        if not candidates:
            for ax in axes[:, col]:
                _no_data(ax, "no LLM-prior ablation in this grid")
            axes[0, col].set_title(env_label(env))
            continue
        last = max(float(r.eval["env_step"].max()) for r in env_runs if len(r.eval))
        bin_steps = max(last / 20.0, 1.0)
        for ablation in _focus(candidates):
            data = metrics[(metrics["env"] == env) & (metrics["ablation"] == ablation)]
            for row, (column, _) in enumerate(PRIOR_DYNAMICS_ROWS):
                # trust is drawn only for arms that use it (others log a constant 0.5)
                uses = column != "trust_llm" or ablation_uses_trust(data)
                if uses and column in data and data[column].notna().any():
                    grid, matrix = curves_on_grid(data, column)
                    mean, low, high = bootstrap_band(matrix, settings.confidence, seed=settings.seed)
                    axes[row, col].plot(grid, mean, color=colors[ablation], label=ablation)
                    axes[row, col].fill_between(grid, low, high, color=colors[ablation], alpha=0.15, lw=0)
            densities = []
            for run in (r for r in env_runs if r.ablation == ablation):
                centres, density = call_density(run.llm_calls, last, bin_steps)
                densities.append(density)
            if densities:
                mean, low, high = bootstrap_band(np.asarray(densities), settings.confidence, seed=settings.seed)
                ax_calls.plot(centres, mean, color=colors[ablation], label=ablation, drawstyle="steps-mid")
                ax_calls.fill_between(centres, low, high, color=colors[ablation], alpha=0.15, lw=0, step="mid")
        axes[0, col].set_title(env_label(env))
        for row, (_, label) in enumerate(PRIOR_DYNAMICS_ROWS):
            axes[row, col].set_ylabel(label)
        axes[1, col].axhline(0.5, color="0.6", lw=0.8, ls=":")  # uninformed trust
        axes[1, col].set_ylim(-0.02, 1.02)
        ax_calls.set_ylabel("LLM API calls / 1k steps")
        _steps_axis(ax_calls)
    _legend_below(fig, axes)
    return _save(fig, out_dir, "prior_dynamics")


def ablation_uses_trust(metrics: pd.DataFrame) -> bool:
    """Whether these metrics rows come from runs whose trust moved (arms without prior.trust log 0.5)."""
    if "trust_llm" not in metrics:
        return False
    values = metrics["trust_llm"].dropna()
    return bool(len(values)) and bool((values - 0.5).abs().max() > 1e-9)


# --------------------------------------------------------------------------- KL, lambda, entropy, T

TRACE_PANELS = (
    ("kl_mix_wm", r"act-time KL($\pi_{mix}\,\|\,\pi_{wm}$) (nats)"),
    ("lambda_kl", r"Lagrange multiplier $\lambda$"),
    ("entropy_mix", "policy entropy (nats)"),
    ("temperature", "prior temperature $T$"),
)


def kl_bounds(runs: list[Run]) -> list[float]:
    """The act-time KL bounds of the runs that use KL control (``kl_mode: lagrangian``)."""
    bounds = set()
    for run in runs:
        prior = run.config.get("prior", {}) if isinstance(run.config, dict) else {}
        if prior.get("enabled") and prior.get("kl_mode") == "lagrangian" and "kl_bound" in prior:
            bounds.add(float(prior["kl_bound"]))
    return sorted(bounds)


def plot_kl_traces(runs: list[Run], settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    plt = _pyplot()
    metrics = tidy(runs, "metrics")
    envs = sorted({r.env for r in runs})
    fig, axes = plt.subplots(max(1, len(envs)), len(TRACE_PANELS),
                             figsize=(3.6 * len(TRACE_PANELS), 3.0 * max(1, len(envs))), squeeze=False)
    colors = palette(sorted({r.ablation for r in runs}))
    for row, env in enumerate(envs):
        data_env = metrics[metrics["env"] == env]
        for col, (column, label) in enumerate(TRACE_PANELS):
            ax = axes[row, col]
            present = (data_env.loc[data_env[column].notna(), "ablation"].unique()
                       if column in data_env else [])
            if not len(present):
                _no_data(ax, f"{column} not logged")
            for ablation in ordered_ablations(present):
                data = data_env[data_env["ablation"] == ablation]
                grid, matrix = curves_on_grid(data, column)
                mean, low, high = bootstrap_band(matrix, settings.confidence, seed=settings.seed)
                ax.plot(grid, mean, color=colors[ablation], label=ablation)
                ax.fill_between(grid, low, high, color=colors[ablation], alpha=0.12, lw=0)
                if column == "entropy_mix" and "entropy_wm" in data and data["entropy_wm"].notna().any():
                    grid, matrix = curves_on_grid(data, "entropy_wm")
                    ax.plot(grid, np.nanmean(matrix, axis=0), color=colors[ablation], ls="--", lw=1)
            if column == "kl_mix_wm":
                for bound in kl_bounds([r for r in runs if r.env == env]):
                    ax.axhline(bound, color="0.3", lw=0.8, ls=":")  # the act-time trust region
            ax.set_ylabel(label)
            # the line-style key goes in the title: inside the axes it covers the curves
            key = r" (solid $\pi_{mix}$, dashed $\pi_{wm}$)" if column == "entropy_mix" and len(present) else ""
            ax.set_title(env_label(env) + key, fontsize=10)
            _steps_axis(ax)
    _legend_below(fig, axes)
    return _save(fig, out_dir, "kl_traces")


# --------------------------------------------------------------------------- intervals


def plot_iqm_intervals(tables: Tables, settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    plt = _pyplot()
    stats = tables.stats
    envs = sorted(e for e in stats["env"].unique() if e != ALL_ENVS) if len(stats) else []
    panels = []
    for env in envs:
        metrics = [budget_metric(b) for b in settings.budgets_for(env)] + ["final_sr"]
        panels += [(env, m) for m in metrics if ((stats["env"] == env) & (stats["metric"] == m)).any()]
    ncol = max(1, min(4, len(panels)))
    nrow = max(1, -(-len(panels) // ncol))
    ablations = ordered_ablations(stats["ablation"]) if len(stats) else []
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 0.35 * len(ablations) * nrow + 1.2 * nrow),
                             squeeze=False, sharey=True)
    colors = palette(ablations)
    for ax, (env, metric) in zip(axes.ravel(), panels, strict=False):
        rows = stats[(stats["env"] == env) & (stats["metric"] == metric)].set_index("ablation")
        for y, ablation in enumerate(ablations):
            if ablation not in rows.index:
                continue
            r = rows.loc[ablation]
            ax.plot([r["iqm_low"], r["iqm_high"]], [y, y], color=colors[ablation], lw=6, alpha=0.5,
                    solid_capstyle="butt")
            ax.plot([r["iqm"]], [y], marker="|", color="k", ms=12, mew=2)
        from lore.analysis.latex import fmt_steps

        when = "final" if metric == "final_sr" else f"at {fmt_steps(int(metric.split('@')[1]))} steps"
        ax.set_title(f"{env_label(env)}, {when}", fontsize=10)
        ax.set_xlim(-0.03, 1.03)
        ax.set_xlabel("IQM eval success rate")
        ax.set_yticks(range(len(ablations)))
        ax.set_yticklabels(ablations)
    axes.ravel()[0].invert_yaxis()  # shared y: first ablation on top in every panel
    for ax in axes.ravel()[len(panels):]:
        if panels:
            ax.set_visible(False)
        else:
            _no_data(ax, "no statistics")
    fig.tight_layout()
    return _save(fig, out_dir, "iqm_intervals")


def plot_p_improvement(tables: Tables, settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    plt = _pyplot()
    imp = tables.improvement
    envs = list(dict.fromkeys(sorted(e for e in imp["env"].unique() if e != ALL_ENVS) +
                              ([ALL_ENVS] if (imp["env"] == ALL_ENVS).any() else []))) if len(imp) else []
    n_rows = max([imp.loc[imp["env"] == e, "ablation"].nunique() for e in envs] or [1])
    fig, axes = plt.subplots(1, max(1, len(envs)), figsize=(4.6 * max(1, len(envs)), 0.45 * n_rows + 1.6),
                             squeeze=False)
    for ax, env in zip(axes[0], envs, strict=False):
        data = imp[(imp["env"] == env) & imp["metric"].isin(["final_sr", "auc"])]
        ablations = ordered_ablations(data["ablation"])
        for offset, metric, color in ((-0.15, "final_sr", "tab:blue"), (0.15, "auc", "tab:orange")):
            rows = data[data["metric"] == metric].set_index("ablation")
            for y, ablation in enumerate(ablations):
                if ablation in rows.index:
                    r = rows.loc[ablation]
                    ax.plot([r["low"], r["high"]], [y + offset] * 2, color=color, lw=5, alpha=0.45,
                            solid_capstyle="butt", label="final SR" if metric == "final_sr" else "AUC")
                    ax.plot([r["p_improve"]], [y + offset], marker="|", color="k", ms=9, mew=2)
        ax.axvline(0.5, color="0.5", ls=":", lw=1)
        ax.set_xlim(-0.03, 1.03)
        ax.set_yticks(range(len(ablations)))
        ax.set_yticklabels(ablations)
        ax.set_ylim(len(ablations) - 0.5, -0.5)  # first ablation on top, room for both bars
        ax.set_xlabel(f"P(ablation > {settings.baseline})")
        ax.set_title(env_label(env))
    if not envs:
        _no_data(axes[0, 0], f"no baseline ({settings.baseline}) runs to compare with")
    _legend_below(fig, axes, ncol=2)
    return _save(fig, out_dir, "p_improvement")


def plot_crafter_achievements(tables: Tables, settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    plt = _pyplot()
    ach = tables.achievements
    if ach is None or ach.empty:
        fig, ax = plt.subplots(figsize=(5, 1.6))
        _no_data(ax, "no Crafter runs in this grid")
        return _save(fig, out_dir, "crafter_achievements")
    envs = sorted(ach["env"].unique())
    fig, axes = plt.subplots(len(envs), 1, figsize=(11, 3.8 * len(envs)), squeeze=False)
    for ax, env in zip(axes[:, 0], envs, strict=True):
        data = ach[ach["env"] == env]
        order = (data.groupby("achievement")["rate"].mean().sort_values(ascending=False).index.tolist())
        ablations = ordered_ablations(data["ablation"])
        colors = palette(ablations)
        width = 0.8 / len(ablations)
        for i, ablation in enumerate(ablations):
            rows = data[data["ablation"] == ablation].set_index("achievement").reindex(order)
            x = np.arange(len(order)) + (i - (len(ablations) - 1) / 2) * width
            pct = 100 * rows["rate"].to_numpy(float)
            err = 100 * np.vstack([rows["rate"] - rows["low"], rows["high"] - rows["rate"]]).clip(min=0)
            ax.bar(x, np.maximum(pct, 0.01), width, color=colors[ablation], label=ablation,
                   yerr=err, error_kw={"lw": 0.6, "ecolor": "0.3"})
        ax.set_yscale("log")
        ax.set_ylim(0.01, 100)
        ax.set_ylabel("success rate (%)")
        ax.set_xticks(np.arange(len(order)))
        ax.set_xticklabels([a.replace("_", " ") for a in order], rotation=55, ha="right")
        ax.set_title(f"{env_label(env)}: achievement success rates (final evaluation)")
    _legend_below(fig, axes)
    return _save(fig, out_dir, "crafter_achievements")


def make_figures(runs: list[Run], tables: Tables, settings: AnalysisSettings, out_dir: str | Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    written += plot_success_curves(tidy(runs, "eval"), settings, out_dir)
    written += plot_prior_dynamics(runs, settings, out_dir)
    written += plot_kl_traces(runs, settings, out_dir)
    written += plot_iqm_intervals(tables, settings, out_dir)
    written += plot_p_improvement(tables, settings, out_dir)
    written += plot_crafter_achievements(tables, settings, out_dir)
    return written
