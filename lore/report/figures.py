"""Figures from raw run files (PNG and PDF), never hand-edited.

- ``fig1_success``: eval success rate vs env steps, mean over seeds with a 95% bootstrap band, one
  small panel per arm against the baseline, with the untrained policy's success as the floor.
- ``prior_dynamics``: beta (the mixing weight), advice trust and LLM-call density over time.
- ``kl_traces``: KL(pi_mix || pi_wm), the Lagrange multiplier lambda, policy entropy
  (a 2 x 2 block per environment, each panel only with the arms the quantity applies to).
- ``iqm_intervals``: IQM of eval success rate with CIs per ablation at each budget (one panel for the
  last budget when it is the end of training).
- ``p_improvement``: probability of improvement over the baseline with CIs.
- ``crafter_achievements``: per-achievement success rates (Crafter runs only).

Every figure is drawn at the paper's text width (:data:`TEXT_WIDTH_IN`) with text of at least
:data:`MIN_FONT_PT` points, so it prints legibly at the size LaTeX includes it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lore.report.aggregate import ALL_ENVS, AnalysisSettings, Tables, budget_metric
from lore.report.latex import IQM_TRIMS_FROM, budgets_shown, env_label, env_names, ordered_ablations
from lore.report.outputs import write_bytes
from lore.report.runs import Run, tidy

FIGURES = ("fig1_success", "prior_dynamics", "kl_traces", "iqm_intervals", "p_improvement", "crafter_achievements")
FORMATS = ("png", "pdf")
FOCUS_ABLATIONS = ("full", "full_noisy", "full_adversarial")
"""Ablations shown in the prior-dynamics figure (the full method and its advisor-quality arms)."""
TEXT_WIDTH_IN = 6.3
"""Figure width in inches: the paper's text width (6.5 in) less a margin for the tight bounding box."""
MIN_FONT_PT = 7.0
"""The smallest text size the paper may print a figure's text at (after LaTeX scales the figure)."""
SMALLEST_FONT_PT = 7.5
"""The smallest text size drawn (ticks, legends): LaTeX may shrink a figure to MIN_FONT_PT / SMALLEST_FONT_PT."""
CALL_DENSITY_STEPS = 1000
"""LLM-call density is counted per this many environment steps."""
BASELINE = "rl_only"


def _pyplot():
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid")
    plt.rcParams.update({"figure.dpi": 150, "savefig.bbox": "tight", "axes.titleweight": "bold",
                         "legend.frameon": False, "pdf.fonttype": 42,
                         "font.size": 8.0, "axes.labelsize": 8.0, "axes.titlesize": 8.0,
                         "xtick.labelsize": SMALLEST_FONT_PT, "ytick.labelsize": SMALLEST_FONT_PT,
                         "legend.fontsize": SMALLEST_FONT_PT,
                         "figure.titlesize": 8.5})
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
        out[name] = (0.2, 0.2, 0.2) if name == BASELINE else colors[idx % 10]
    return out


def _steps_axis(ax, label: str = "Environment steps") -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    from lore.report.latex import fmt_steps

    ax.set_xlabel(label)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
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
    """The figure in every format, each rendered in memory and then written atomically."""
    plt = _pyplot()
    rendered = {}
    try:
        for ext in FORMATS:
            buf = io.BytesIO()
            fig.savefig(buf, format=ext)
            rendered[Path(out_dir) / f"{name}.{ext}"] = buf.getvalue()
    finally:
        plt.close(fig)
    return [write_bytes(path, data) for path, data in rendered.items()]


def figure_paths(out_dir: str | Path) -> list[Path]:
    """The files :func:`make_figures` writes."""
    return [Path(out_dir) / f"{name}.{ext}" for name in FIGURES for ext in FORMATS]


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=8, color="0.4", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _legend_below(fig, axes, ncol: int | None = None) -> None:
    handles, labels = {}, {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels and not lab.startswith("_"):
                labels[lab] = lab
                handles[lab] = h
    ncol = ncol or min(len(handles), 4) or 1
    rows = -(-len(handles) // ncol) if handles else 0
    height = fig.get_size_inches()[1]
    if handles:
        fig.legend(list(handles.values()), list(labels.values()), loc="lower center", ncol=ncol,
                   bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, min(0.4, (0.12 + 0.16 * rows) / height) if rows else 0, 1, 1))


def run_counts(frame: pd.DataFrame) -> dict[tuple[str, str], int]:
    """{(env, ablation): number of runs} of a tidy table."""
    if not len(frame) or "seed" not in frame:
        return {}
    return {k: int(v) for k, v in frame.groupby(["env", "ablation"])["seed"].nunique().items()}


def untrained_level(eval_points: pd.DataFrame, env: str) -> float:
    """Mean eval SR at step 0 over every run of ``env`` (the untrained policy; NaN without one)."""
    if not len(eval_points):
        return float("nan")
    rows = eval_points[(eval_points["env"] == env) & (eval_points["env_step"] == 0)]
    values = rows["success_rate"].dropna().to_numpy(float) if "success_rate" in rows else np.array([])
    return float(values.mean()) if values.size else float("nan")


# --------------------------------------------------------------------------- figure 1


def _curve(ax, data: pd.DataFrame, column: str, color, settings: AnalysisSettings, label: str | None,
           lw: float = 1.4, ls: str = "-", band: bool = True) -> None:
    grid, matrix = curves_on_grid(data, column)
    if not grid.size:
        return
    mean, low, high = bootstrap_band(matrix, settings.confidence, seed=settings.seed)
    ax.plot(grid, mean, color=color, lw=lw, ls=ls, label=label)
    if band and matrix.shape[0] > 1:
        ax.fill_between(grid, low, high, color=color, alpha=0.15, lw=0)


def success_panels(eval_points: pd.DataFrame, baseline: str = BASELINE) -> list[tuple[str, str]]:
    """(env, arm) per panel of the learning-curve figure: every arm but the baseline, each drawn
    against it (the baseline alone when it is the only arm)."""
    panels = []
    envs = sorted(eval_points["env"].unique()) if len(eval_points) else []
    for env in envs:
        arms = ordered_ablations(eval_points.loc[eval_points["env"] == env, "ablation"])
        others = [a for a in arms if a != baseline] or arms
        panels += [(env, a) for a in others]
    return panels


def plot_success_curves(eval_points: pd.DataFrame, settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    """One small panel per arm against the baseline (per environment), so bands never pile up."""
    plt = _pyplot()
    base = settings.baseline
    panels = success_panels(eval_points, base)
    envs = list(dict.fromkeys(env for env, _ in panels))
    ncol = max(1, min(3, max([sum(e == env for e, _ in panels) for env in envs] or [1])))
    layout = []  # (row, col, env, arm)
    row = 0
    for env in envs:
        arms = [a for e, a in panels if e == env]
        for i, arm in enumerate(arms):
            layout.append((row + i // ncol, i % ncol, env, arm))
        row += -(-len(arms) // ncol)
    nrow = max(1, row)
    fig, axes = plt.subplots(nrow, ncol, figsize=(TEXT_WIDTH_IN, 1.55 * nrow + 0.5), squeeze=False,
                             sharey=True)
    colors = palette(eval_points["ablation"].unique() if len(eval_points) else [])
    counts = run_counts(eval_points)
    base_ns = {env: counts[(env, base)] for env in envs if (env, base) in counts}
    base_label = (f"{base} (n={next(iter(base_ns.values()))})" if len(set(base_ns.values())) == 1 else
                  f"{base} (n=" + ", ".join(f"{n} on {env_label(e)}" for e, n in base_ns.items()) + ")")
    used = set()
    for r, c, env, arm in layout:
        ax = axes[r, c]
        used.add((r, c))
        data = eval_points[eval_points["env"] == env]
        if arm != base and (data["ablation"] == base).any():
            _curve(ax, data[data["ablation"] == base], "success_rate", colors[base], settings, base_label, lw=1.2)
        _curve(ax, data[data["ablation"] == arm], "success_rate", colors[arm], settings, f"_{arm}", lw=1.6)
        floor = untrained_level(eval_points, env)
        if np.isfinite(floor):
            ax.axhline(floor, color="0.45", lw=0.8, ls=":", label="untrained policy (step 0)")
        ax.set_title(f"{arm} (n={counts.get((env, arm), 0)})", color=colors[arm], fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        if c == 0:
            what = "achievements (frac.)" if env.lower().startswith("crafter") else "eval SR"
            ax.set_ylabel(f"{env_label(env)}\n{what}")
        _steps_axis(ax, "Env steps")
    for r in range(nrow):
        for c in range(ncol):
            if (r, c) not in used:
                axes[r, c].set_visible(False) if layout else _no_data(axes[r, c], "no evaluation points")
    _legend_below(fig, axes, ncol=2)
    return _save(fig, out_dir, "fig1_success")


# --------------------------------------------------------------------------- prior dynamics


def _focus(candidates: Sequence[str]) -> list[str]:
    chosen = [a for a in FOCUS_ABLATIONS if a in candidates]
    return chosen or ordered_ablations(candidates)


def call_density(calls: pd.DataFrame, last_step: float, bin_steps: float) -> tuple[np.ndarray, np.ndarray]:
    """API calls (cache misses) per CALL_DENSITY_STEPS env steps in bins of ``bin_steps`` -> (bin centres, density)."""
    edges = np.arange(0.0, last_step + bin_steps, bin_steps)
    if edges.size < 2:
        edges = np.array([0.0, max(last_step, 1.0)])
    steps = calls["env_step"].to_numpy(float) if len(calls) else np.array([])
    if len(calls) and "cache_hit" in calls:
        steps = steps[~calls["cache_hit"].fillna(False).astype(bool).to_numpy()]
    counts, _ = np.histogram(steps, bins=edges)
    return (edges[:-1] + edges[1:]) / 2, counts / np.diff(edges) * float(CALL_DENSITY_STEPS)


PRIOR_DYNAMICS_ROWS = (
    ("beta_mean", r"mixing weight $\beta$"),
    ("trust_llm", "advice trust (LLM)"),
    ("trust_act_llm", "act-time trust (LLM)"),
)
TRUST_COLUMNS = ("trust_llm", "trust_act_llm")


def act_trust_differs(metrics: pd.DataFrame) -> bool:
    """Whether any run acted on a trust other than the absorption's (``prior.trust_act_evidence: returns``)."""
    if "trust_act_llm" not in metrics or "trust_llm" not in metrics:
        return False
    both = metrics[["trust_llm", "trust_act_llm"]].dropna()
    return bool(len(both)) and bool((both["trust_llm"] - both["trust_act_llm"]).abs().max() > 1e-9)


def plot_prior_dynamics(runs: list[Run], settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    from lore.report.latex import fmt_steps

    plt = _pyplot()
    metrics = tidy(runs, "metrics")
    envs = sorted({r.env for r in runs})
    # the act-time trust gets a row only where it is not the absorption's trust
    dyn_rows = [row for row in PRIOR_DYNAMICS_ROWS if row[0] != "trust_act_llm" or act_trust_differs(metrics)]
    rows = len(dyn_rows) + 1
    ncol = max(1, len(envs))
    fig, axes = plt.subplots(rows, ncol, figsize=(TEXT_WIDTH_IN, 1.45 * rows + 0.6), squeeze=False, sharex="col")
    with_beta = set(metrics.loc[metrics["beta_mean"].notna(), "ablation"]) if "beta_mean" in metrics else set()
    with_calls = {r.ablation for r in runs if len(r.llm_calls)}
    colors = palette(sorted({r.ablation for r in runs}))
    counts = {(r.env, r.ablation): sum(1 for x in runs if (x.env, x.ablation) == (r.env, r.ablation)) for r in runs}
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
            label = ablation
            data = metrics[(metrics["env"] == env) & (metrics["ablation"] == ablation)]
            for row, (column, _) in enumerate(dyn_rows):
                # trust is drawn only for arms that use it (others log a constant 0.5)
                uses = column not in TRUST_COLUMNS or ablation_uses_trust(data)
                if uses and column in data and data[column].notna().any():
                    _curve(axes[row, col], data, column, colors[ablation], settings, label)
            densities = []
            for run in (r for r in env_runs if r.ablation == ablation):
                centres, density = call_density(run.llm_calls, last, bin_steps)
                densities.append(density)
            if densities:
                mean, low, high = bootstrap_band(np.asarray(densities), settings.confidence, seed=settings.seed)
                ax_calls.plot(centres, mean, color=colors[ablation], label=label, drawstyle="steps-mid")
                ax_calls.fill_between(centres, low, high, color=colors[ablation], alpha=0.15, lw=0, step="mid")
        focus_counts = {k: v for k, v in counts.items() if k[1] in _focus(candidates)}
        axes[0, col].set_title(f"{env_label(env)} ({seeds_text(focus_counts, env)})")
        for row, (column, label) in enumerate(dyn_rows):
            if col == 0:
                axes[row, col].set_ylabel(label)
            if column in TRUST_COLUMNS:
                axes[row, col].axhline(0.5, color="0.6", lw=0.8, ls=":")  # uninformed trust
                axes[row, col].set_ylim(-0.02, 1.02)
        if col == 0:
            ax_calls.set_ylabel(f"API calls / {fmt_steps(CALL_DENSITY_STEPS)} steps")
        _steps_axis(ax_calls)
    _legend_below(fig, axes, ncol=3)
    return _save(fig, out_dir, "prior_dynamics")


def ablation_uses_trust(metrics: pd.DataFrame) -> bool:
    """Whether these metrics rows come from runs whose trust moved (arms without prior.trust log 0.5)."""
    if "trust_llm" not in metrics:
        return False
    values = metrics["trust_llm"].dropna()
    return bool(len(values)) and bool((values - 0.5).abs().max() > 1e-9)


# --------------------------------------------------------------------------- KL, lambda, entropy


def _prior_cfg(run: Run) -> dict:
    prior = run.config.get("prior", {}) if isinstance(run.config, dict) else {}
    return prior if isinstance(prior, dict) else {}


def _lagrangian(run: Run) -> bool:
    prior = _prior_cfg(run)
    return bool(prior.get("enabled")) and prior.get("kl_mode") == "lagrangian"


TRACE_PANELS = (
    ("kl_mix_wm", r"act-time KL($\pi_{mix}\|\pi_{wm}$) (nats)",
     lambda run: bool(_prior_cfg(run).get("enabled"))),
    ("lambda_kl", r"multiplier $\lambda$", _lagrangian),
    ("entropy_wm", r"entropy of $\pi_{wm}$ (nats)", lambda run: True),
)
"""(metrics column, axis label, which runs the panel shows): lambda only where KL control runs, so no
panel carries flat lines of arms the quantity does not apply to. The prior temperature T is a fixed
setting (temperature alignment was retired), so older runs' logged T is not drawn."""


def kl_bounds(runs: list[Run]) -> list[float]:
    """The act-time KL bounds of the runs that use KL control (``kl_mode: lagrangian``)."""
    return sorted({float(_prior_cfg(r)["kl_bound"]) for r in runs if _lagrangian(r) and "kl_bound" in _prior_cfg(r)})


def kl_deltas(runs: list[Run]) -> list[float]:
    """The distillation targets delta of the runs that use KL control."""
    return sorted({float(_prior_cfg(r)["kl_delta"]) for r in runs if _lagrangian(r) and "kl_delta" in _prior_cfg(r)})


def plot_kl_traces(runs: list[Run], settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    """A 2 x 2 block per environment: act-time KL (with the bound and delta), lambda, entropy of pi_wm (the
    fourth axis is left blank)."""
    plt = _pyplot()
    metrics = tidy(runs, "metrics")
    envs = sorted({r.env for r in runs}) or [""]
    fig, axes = plt.subplots(2 * len(envs), 2, figsize=(TEXT_WIDTH_IN, 3.3 * len(envs) + 0.6), squeeze=False)
    colors = palette(sorted({r.ablation for r in runs}))
    counts = run_counts(metrics)
    for block, env in enumerate(envs):
        data_env = metrics[metrics["env"] == env] if len(metrics) else metrics
        env_runs = [r for r in runs if r.env == env]
        for i, (column, label, applies) in enumerate(TRACE_PANELS):
            ax = axes[2 * block + i // 2, i % 2]
            arms = ordered_ablations({r.ablation for r in env_runs if applies(r)})
            present = [a for a in arms if column in data_env
                       and data_env.loc[data_env["ablation"] == a, column].notna().any()]
            if not present:
                _no_data(ax, "no arm of this grid logs it")
            for ablation in present:
                data = data_env[data_env["ablation"] == ablation]
                _curve(ax, data, column, colors[ablation], settings, ablation, lw=1.2)
            if column == "kl_mix_wm" and present:
                for bound in kl_bounds(env_runs):
                    ax.axhline(bound, color="0.25", lw=0.9, ls=":", label="trust-region bound")
                for delta in kl_deltas(env_runs):
                    ax.axhline(delta, color="0.25", lw=0.9, ls="-.", label=r"distillation target $\delta$")
            ax.set_ylabel(label)
            if i < 2 and env:
                ax.set_title(f"{env_label(env)} ({seeds_text(counts, env)})")
            _steps_axis(ax, "Env steps")
        for i in range(len(TRACE_PANELS), 4):
            axes[2 * block + i // 2, i % 2].axis("off")
    _legend_below(fig, axes, ncol=4)
    return _save(fig, out_dir, "kl_traces")


def seeds_text(counts: dict[tuple[str, str], int], env: str) -> str:
    """``n=5`` or ``n=3-5 per arm`` for the arms of ``env`` in :func:`run_counts`."""
    ns = sorted({n for (e, _), n in counts.items() if e == env})
    if not ns:
        return "n=0"
    return f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}\u2013{ns[-1]} per arm"


# --------------------------------------------------------------------------- intervals


def iqm_panels(tables: Tables, settings: AnalysisSettings) -> list[tuple[str, str]]:
    """(env, metric) per panel: each budget with data, and the final SR only where it differs from the
    last budget (when every run ends at that budget the two panels would be identical)."""
    panels = []
    for env in env_names(tables.stats):
        budgets, separate_final = budgets_shown(tables, settings, env)
        panels += [(env, budget_metric(b)) for b in budgets]
        if separate_final and ((tables.stats["env"] == env) & (tables.stats["metric"] == "final_sr")).any():
            panels.append((env, "final_sr"))
    return panels


def plot_iqm_intervals(tables: Tables, settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    """One row of panels per environment (its own arms, n in the tick labels), one panel per budget."""
    from lore.report.latex import fmt_steps

    plt = _pyplot()
    stats = tables.stats
    panels = iqm_panels(tables, settings)
    envs = list(dict.fromkeys(env for env, _ in panels))
    arms = {env: ordered_ablations(stats.loc[stats["env"] == env, "ablation"]) for env in envs}
    ncol = max(1, min(3, max([sum(e == env for e, _ in panels) for env in envs] or [1])))
    layout, heights, row = [], [], 0  # (row, col, env, metric)
    for env in envs:
        metrics = [m for e, m in panels if e == env]
        rows = -(-len(metrics) // ncol)
        layout += [(row + i // ncol, i % ncol, env, m) for i, m in enumerate(metrics)]
        heights += [0.2 * len(arms[env]) + 0.75] * rows
        row += rows
    nrow = max(1, row)
    heights = heights or [1.5]
    fig, axes = plt.subplots(nrow, ncol, figsize=(TEXT_WIDTH_IN, sum(heights) + 0.2), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    colors = palette(ordered_ablations(stats["ablation"]) if len(stats) else [])
    few_runs = any(int(n) < IQM_TRIMS_FROM for n in stats["n"]) if len(stats) else False
    label = f"IQM eval SR (mean if n < {IQM_TRIMS_FROM})" if few_runs else "IQM eval SR"
    used = set()
    for r, c, env, metric in layout:
        ax = axes[r, c]
        used.add((r, c))
        rows = stats[(stats["env"] == env) & (stats["metric"] == metric)].set_index("ablation")
        for y, ablation in enumerate(arms[env]):
            if ablation not in rows.index:
                continue
            s_ = rows.loc[ablation]
            ax.plot([s_["iqm_low"], s_["iqm_high"]], [y, y], color=colors[ablation], lw=5, alpha=0.5,
                    solid_capstyle="butt")
            ax.plot([s_["iqm"]], [y], marker="|", color="k", ms=9, mew=1.8)
        floor = untrained_level(tables.eval_points, env)
        if np.isfinite(floor):
            ax.axvline(floor, color="0.45", lw=0.8, ls=":")
        last = [p for p in panels if p[0] == env][-1]  # the end of training when final is not separate
        when = "final" if metric == "final_sr" else f"at {fmt_steps(int(metric.split('@')[1]))} steps"
        if metric != "final_sr" and (env, metric) == last:
            when += " (final)"
        ax.set_title(f"{env_label(env)}, {when}" if c == 0 else when)
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(len(arms[env]) - 0.5, -0.5)  # first ablation on top
        ax.set_yticks(range(len(arms[env])))
        if c == 0:
            n_of = stats[stats["env"] == env].groupby("ablation")["n_runs"].max()
            ax.set_yticklabels([f"{a} (n={int(n_of[a])})" for a in arms[env]])
        else:
            ax.set_yticklabels([])
        ax.set_xlabel(label)
    for r in range(nrow):
        for c in range(ncol):
            if (r, c) not in used:
                axes[r, c].set_visible(False) if layout else _no_data(axes[r, c], "no statistics")
    fig.tight_layout()
    return _save(fig, out_dir, "iqm_intervals")


def plot_p_improvement(tables: Tables, settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    plt = _pyplot()
    imp = tables.improvement
    envs = list(dict.fromkeys(sorted(e for e in imp["env"].unique() if e != ALL_ENVS) +
                              ([ALL_ENVS] if (imp["env"] == ALL_ENVS).any() else []))) if len(imp) else []
    n_rows = max([imp.loc[imp["env"] == e, "ablation"].nunique() for e in envs] or [1])
    ncol = max(1, min(3, len(envs)))
    nrow = max(1, -(-len(envs) // ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(TEXT_WIDTH_IN, (0.32 * n_rows + 1.0) * nrow), squeeze=False)
    for ax, env in zip(axes.ravel(), envs, strict=False):
        data = imp[(imp["env"] == env) & imp["metric"].isin(["final_sr", "auc"])]
        ablations = ordered_ablations(data["ablation"])
        for offset, metric, color in ((-0.15, "final_sr", "tab:blue"), (0.15, "auc", "tab:orange")):
            rows = data[data["metric"] == metric].set_index("ablation")
            for y, ablation in enumerate(ablations):
                if ablation in rows.index:
                    r = rows.loc[ablation]
                    ax.plot([r["low"], r["high"]], [y + offset] * 2, color=color, lw=4, alpha=0.45,
                            solid_capstyle="butt", label="final SR" if metric == "final_sr" else "AUC")
                    ax.plot([r["p_improve"]], [y + offset], marker="|", color="k", ms=7, mew=1.6)
        ax.axvline(0.5, color="0.5", ls=":", lw=1)
        ax.set_xlim(-0.03, 1.03)
        ax.set_yticks(range(len(ablations)))
        finals = data[data["metric"] == "final_sr"].set_index("ablation")
        ax.set_yticklabels([f"{a} (n={int(finals.loc[a, 'n'])})" if a in finals.index else a for a in ablations])
        ax.set_ylim(len(ablations) - 0.5, -0.5)  # first ablation on top, room for both bars
        ax.set_xlabel(f"P(ablation > {settings.baseline})")
        ax.set_title(env_label(env))
    for ax in axes.ravel()[len(envs):]:
        if envs:
            ax.set_visible(False)
    if not envs:
        _no_data(axes[0, 0], f"no baseline ({settings.baseline}) runs to compare with")
    _legend_below(fig, axes, ncol=2)
    return _save(fig, out_dir, "p_improvement")


def plot_crafter_achievements(tables: Tables, settings: AnalysisSettings, out_dir: Path) -> list[Path]:
    plt = _pyplot()
    ach = tables.achievements
    if ach is None or ach.empty:
        return []  # no Crafter runs in this grid: no figure (the paper leaves its Crafter section out)
    envs = sorted(ach["env"].unique())
    fig, axes = plt.subplots(len(envs), 1, figsize=(TEXT_WIDTH_IN, 2.9 * len(envs) + 0.4), squeeze=False)
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
        ax.set_xticklabels([a.replace("_", " ") for a in order], rotation=60, ha="right")
        ax.set_title(f"{env_label(env)}: achievement success rates (final evaluation)")
    _legend_below(fig, axes, ncol=3)
    return _save(fig, out_dir, "crafter_achievements")


def make_figures(runs: list[Run], tables: Tables, settings: AnalysisSettings, out_dir: str | Path) -> list[Path]:
    out_dir = Path(out_dir)
    written = []
    written += plot_success_curves(tidy(runs, "eval"), settings, out_dir)
    written += plot_prior_dynamics(runs, settings, out_dir)
    written += plot_kl_traces(runs, settings, out_dir)
    written += plot_iqm_intervals(tables, settings, out_dir)
    written += plot_p_improvement(tables, settings, out_dir)
    written += plot_crafter_achievements(tables, settings, out_dir)
    return written
