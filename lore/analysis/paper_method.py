"""The paper's sentences about what ran: the grid, the advisor, each arm's parts, and what KL control,
advice trust, temperature alignment and the gate did in the runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from lore.analysis.aggregate import AnalysisSettings, Tables
from lore.analysis.latex import (
    ablation_tex,
    env_label,
    escape,
    few,
    name_tex,
    num,
)
from lore.analysis.paper_numbers import (
    _join,
    _range_text,
    _runs_of,
    _truthy,
    arm_cfg,
    grid_arms,
    seeds_per_arm,
    uses_llm,
)

BACKEND_TEXT = {"scripted": "an offline scripted advisor", "gemini": "Google Gemini",
                "openai": "an open model on an OpenAI-compatible server",
                "replay": "a replay of an earlier run's call ledger"}


def advisor_modes(tables: Tables, env: str | None = None) -> list[tuple[str, list[str]]]:
    """[(advisor quality text, arms)] over the arms that ask an LLM, in the grid's order."""
    out: dict[str, list[str]] = {}
    for ablation in grid_arms(tables, env):
        if not uses_llm(tables, env, ablation):
            continue
        mode = str(arm_cfg(tables, env, ablation, "advisor.mode", "good"))
        if mode == "noisy":
            accuracy = arm_cfg(tables, env, ablation, "advisor.accuracy")
            acc = pd.to_numeric(pd.Series([accuracy]), errors="coerce").iloc[0]
            mode = f"noisy (accuracy {num(f'{acc:g}')})" if np.isfinite(acc) else "noisy"
        out.setdefault(mode, []).append(ablation)
    return list(out.items())


def backends(tables: Tables) -> list[str]:
    runs = tables.runs
    if not len(runs) or "cfg_llm_backend" not in runs:
        return []
    names = runs["cfg_llm_backend"].dropna().astype(str)
    return sorted({n for n in names if n != "none"})


def advisor_sentence(tables: Tables) -> str:
    names = backends(tables)
    if not names:
        return "No arm of this grid asks an LLM."
    which = _join([f"{BACKEND_TEXT.get(n, escape(n))} (backend \\texttt{{{escape(n)}}})" for n in names], "or")
    modes = advisor_modes(tables)
    qualities = _join([f"{mode} in {_join([ablation_tex(a) for a in arms])}" for mode, arms in modes])
    return f"Arms that ask an LLM ask {which}; the advice is {qualities}."


def abstract_grid(tables: Tables) -> str:
    envs = sorted(tables.runs["env"].unique()) if len(tables.runs) else []
    if not envs:
        return "No runs were aggregated."
    arms = grid_arms(tables)
    text = (f"We evaluate on {_join([name_tex(env_label(e)) for e in envs])} with the arms "
            f"{_join([ablation_tex(a) for a in arms])} ({num(_range_text(seeds_per_arm(tables)))} seeds per arm), "
            "with interquartile means and stratified bootstrap confidence intervals")
    names = backends(tables)
    if names:
        qualities = [mode.split(" (")[0] for mode, _ in advisor_modes(tables)]
        text += (f", asking {_join([BACKEND_TEXT.get(n, escape(n)) for n in names], 'or')} whose advice is "
                 f"{_join(qualities, 'or')}")
    return text + "."


def grid_sentence(tables: Tables) -> str:
    runs = tables.runs
    if not len(runs):
        return "No runs were aggregated."
    envs = sorted(runs["env"].unique())
    arms = grid_arms(tables)
    per_arm = seeds_per_arm(tables)

    def plural(n: int, word: str) -> str:
        return f"{num(n)} {word}{'' if n == 1 else 's'}"

    seeds = (f"{plural(per_arm[0], 'seed')} each" if len(per_arm) == 1
             else f"{num(_range_text(per_arm))} seeds per arm (the counts per arm are in the tables)")
    return (f"{plural(len(runs), 'run')}: {plural(len(envs), 'environment')} "
            f"({_join([name_tex(env_label(e)) for e in envs])}), {plural(len(arms), 'arm')} "
            f"({_join([ablation_tex(a) for a in arms])}), {seeds}.")


ARM_TEXT = {
    "random": "is the uniform-random policy (it never learns): the floor every arm has to clear",
    "rl_only": "is DreamerV3 alone (no LLM is asked)",
    "prior_only": "mixes the prior at a fixed $\\beta$ without any control",
    "gate": "adds the uncertainty gate (no KL control)",
    "kl": "adds KL control (trust region and distillation) to a fixed $\\beta$",
    "features": "uses the LLM-written features only, without mixing",
    "full_plan": "adds latent planning seeded by the LLM's plan to \\texttt{full}",
    "full_distill": "adds PriorNet distillation to \\texttt{full}",
    "kl_adversarial": ("is \\texttt{kl} under the adversarial advisor: a fixed $\\beta$ and KL control, without the "
                       "gate, the advice trust, temperature alignment or features that \\texttt{full} adds"),
}


def _temperature_ran(tables: Tables, env: str | None, ablation: str) -> str:
    """What temperature alignment did in an arm's runs, as a clause."""
    refits = _runs_of(tables, env, ablation, "temperature_refits_last")
    if not refits.size:
        return "temperature alignment (its refits were not logged)"
    if refits.sum() == 0:
        return "temperature alignment, which never refitted $T$ in these runs"
    return f"temperature alignment (on average {num(f'{refits.mean():.1f}')} refits per run)"


def full_components(tables: Tables, env: str | None, ablation: str = "full") -> str:
    parts = []
    if str(arm_cfg(tables, env, ablation, "prior.gate", "")) == "uncertainty":
        parts.append("the uncertainty gate")
    if _truthy(arm_cfg(tables, env, ablation, "prior.trust", False)):
        parts.append("advice trust")
    if str(arm_cfg(tables, env, ablation, "prior.kl_mode", "none")) == "lagrangian":
        parts.append("KL control")
    if _truthy(arm_cfg(tables, env, ablation, "prior.align_temperature", False)):
        parts.append(_temperature_ran(tables, env, ablation))
    if _truthy(arm_cfg(tables, env, ablation, "features.enabled", False)):
        parts.append("LLM features")
    return _join(parts) if parts else "no prior component"


def arms_text(tables: Tables, settings: AnalysisSettings, env: str | None) -> str:
    """What each arm of this grid is, from its configuration (only arms that ran)."""
    arms = grid_arms(tables)
    if not arms:
        return "No runs were aggregated."
    sentences = []
    for arm in arms:
        if arm in ARM_TEXT:
            sentences.append(f"{ablation_tex(arm)} {ARM_TEXT[arm]}")
        elif arm == "full":
            sentences.append(f"{ablation_tex(arm)} combines {full_components(tables, env, arm)}")
    text = ("In this grid " + "; ".join(sentences) + ".") if sentences else ""
    advisors = [(mode, a) for mode, a in advisor_modes(tables, env) if mode != "good"]
    if advisors:
        listed = "; ".join(f"{_join([ablation_tex(x) for x in a])}: advice that is {mode}" for mode, a in advisors)
        text += (f" The advisor-quality arms ({listed}) test the low-regret claim: with a wrong advisor, the trust "
                 f"and the control episodes should keep the agent close to {ablation_tex(settings.baseline)}.")
    return text.strip()


def _per_arm(tables: Tables, env: str | None, columns: Sequence[str], render) -> list[str]:
    """``render(ablation, *per-run arrays)`` for each arm whose runs logged every column (None skips)."""
    parts = []
    for ablation in grid_arms(tables, env):
        values = [_runs_of(tables, env, ablation, column) for column in columns]
        if all(v.size for v in values):
            text = render(ablation, *values)
            if text:
                parts.append(text)
    return parts


def kl_sentence(tables: Tables, env: str | None) -> str:
    """What KL control held: the act-time KL per arm against the bound, lambda, and the replay-state
    KL the distillation term acts on against its target delta."""
    def render(ablation, kl_max, kl_avg):
        arm = ablation_tex(ablation)
        lagrangian = str(arm_cfg(tables, env, ablation, "prior.kl_mode", "none")) == "lagrangian"
        text = (f"in {arm} the act-time KL averaged {num(f'{kl_avg.mean():.2f}')} nats and peaked at "
                f"{num(f'{kl_max.max():.2f}')}")
        if not lagrangian:
            return text + " (no KL control)"
        bound = _runs_of(tables, env, ablation, "cfg_prior_kl_bound")
        if bound.size:
            held = "within" if kl_max.max() <= bound.max() + 1e-6 else "above"
            text += f" ({held} the bound {num(f'{bound.max():g}')})"
        below = _runs_of(tables, env, ablation, "lambda_below_max_frac")
        if below.size:
            text += f", $\\lambda<\\lambda_{{\\max}}$ on {num(f'{100 * below.mean():.0f}')}\\% of logged points"
        train = _runs_of(tables, env, ablation, "kl_mix_wm_train_avg")
        delta = _runs_of(tables, env, ablation, "cfg_prior_kl_delta")
        if train.size and delta.size:
            side = "above" if train.mean() > delta.max() + 1e-9 else "within"
            text += (f", and the replay-state KL that the distillation term acts on averaged "
                     f"{num(f'{train.mean():.2f}')} nats, {side} its target $\\delta$ = {num(f'{delta.max():g}')}")
        return text + f" ($n$ = {num(kl_max.size)}{few(kl_max.size)})"

    parts = _per_arm(tables, env, ("kl_act_max", "kl_mix_wm_avg"), render)
    return "Measured: " + "; ".join(parts) + "." if parts else "No arm of this grid mixes a prior."


def trust_sentence(tables: Tables, env: str | None) -> str:
    """Final trust in the LLM's answers per arm that uses trust (mean and range over seeds)."""
    def render(ablation, values):
        trust_on = arm_cfg(tables, env, ablation, "prior.trust", None)
        if (trust_on is not None and not _truthy(trust_on)) or np.allclose(values, 0.5):
            return None  # arms without trust log the uninformed 0.5
        return (f"{ablation_tex(ablation)} {num(f'{values.mean():.2f}')} ({num(f'{values.min():.2f}--{values.max():.2f}')}, "
                f"$n$ = {num(values.size)}{few(values.size)})")

    parts = _per_arm(tables, env, ("trust_llm_last",), render)
    return ("Trust in the LLM's answers at the end of training: " + "; ".join(parts) + "." if parts
            else "No arm of this grid estimates advice trust, or its trust never left the uninformed value.")


def temperature_sentence(tables: Tables, env: str | None) -> str:
    """What temperature alignment did per arm that enables it: refits, how many at a bound, T range."""
    parts = []
    for ablation in grid_arms(tables, env):
        if not _truthy(arm_cfg(tables, env, ablation, "prior.align_temperature", False)):
            continue
        arm = ablation_tex(ablation)
        refits = _runs_of(tables, env, ablation, "temperature_refits_last")
        at_bound = _runs_of(tables, env, ablation, "temperature_refits_at_bound_last")
        lo, hi = (_runs_of(tables, env, ablation, c) for c in ("temperature_lo", "temperature_hi"))
        t_range = (f"$T$ between {num(f'{lo.min():.2f}')} and {num(f'{hi.max():.2f}')}" if lo.size and hi.size
                   else "$T$ not logged")
        n = max(refits.size, lo.size)
        if not refits.size:
            parts.append(f"{arm}: refits not logged, {t_range} ($n$ = {num(n)})")
        elif refits.sum() == 0:
            parts.append(f"{arm}: enabled but never refitted in any run, so it did not act ({t_range}; "
                         f"$n$ = {num(n)}{few(n)})")
        else:
            share = (f"{num(f'{100 * at_bound.sum() / refits.sum():.0f}')}\\% of them at a bound of the range"
                     if at_bound.size else "none logged at a bound")
            parts.append(f"{arm}: {num(f'{refits.mean():.1f}')} refits per run "
                         f"({num(f'{refits.min():.0f}--{refits.max():.0f}')}), {share}, {t_range} "
                         f"($n$ = {num(n)}{few(n)})")
    if not parts:
        return "No arm of this grid aligns the temperature."
    return "Temperature alignment, as it ran: " + "; ".join(parts) + "."


def gate_sentence(tables: Tables, env: str | None) -> str:
    """Does the gate separate states? beta where the advice's top action differs from the policy's vs not."""
    parts = _per_arm(tables, env, ("beta_disagree_avg", "beta_agree_avg"),
                     lambda a, dis, agr: (f"{ablation_tex(a)} {num(f'{dis.mean():.2f}')} vs {num(f'{agr.mean():.2f}')}"
                                          f" ($n$ = {num(dis.size)}{few(dis.size)})"))
    if not parts:
        return ""
    return ("Mean $\\beta$ on advised states where the advice's top action differs from the policy's, vs where "
            "it agrees: " + "; ".join(parts) + ".")
