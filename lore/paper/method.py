"""The paper's sentences about what ran: the grid, the advisor, each arm's parts, what KL control,
advice trust and the gate did in the runs, how the default method was chosen and whether the claim extends
to Crafter (from the records of the pre-registered comparisons ``decide_default`` and ``crafter_cpu_full``,
where this checkout has them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lore.paper.numbers import (
    arm_cfg,
    grid_arms,
    join,
    mechanisms,
    range_text,
    runs_of,
    seeds_per_arm,
    truthy,
    uses_llm,
)
from lore.report.aggregate import AnalysisSettings, Tables
from lore.report.latex import (
    ablation_tex,
    env_label,
    escape,
    few,
    fmt_signed,
    name_tex,
    num,
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
    which = join([f"{BACKEND_TEXT.get(n, escape(n))} (backend \\texttt{{{escape(n)}}})" for n in names], "or")
    modes = advisor_modes(tables)
    qualities = join([f"{mode} in {join([ablation_tex(a) for a in arms])}" for mode, arms in modes])
    return f"Arms that ask an LLM ask {which}; the advice is {qualities}."


def abstract_grid(tables: Tables) -> str:
    envs = sorted(tables.runs["env"].unique()) if len(tables.runs) else []
    if not envs:
        return "No runs were aggregated."
    arms = grid_arms(tables)
    text = (f"We evaluate on {join([name_tex(env_label(e)) for e in envs])} with the arms "
            f"{join([ablation_tex(a) for a in arms])} ({num(range_text(seeds_per_arm(tables)))} seeds per arm), "
            "with interquartile means and stratified bootstrap confidence intervals")
    names = backends(tables)
    if names:
        qualities = [mode.split(" (")[0] for mode, _ in advisor_modes(tables)]
        text += (f", asking {join([BACKEND_TEXT.get(n, escape(n)) for n in names], 'or')} whose advice is "
                 f"{join(qualities, 'or')}")
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
             else f"{num(range_text(per_arm))} seeds per arm (the counts per arm are in the tables)")
    return (f"{plural(len(runs), 'run')}: {plural(len(envs), 'environment')} "
            f"({join([name_tex(env_label(e)) for e in envs])}), {plural(len(arms), 'arm')} "
            f"({join([ablation_tex(a) for a in arms])}), {seeds}.")


ARM_TEXT = {
    "random": "is the uniform-random policy (it never learns): the floor every arm has to clear",
    "rl_only": "is DreamerV3 alone (no LLM is asked)",
    "prior_only": "mixes the prior at a fixed $\\beta$ without any control",
    "gate": "replaces the fixed $\\beta$ by the uncertainty gate (no KL control)",
    "kl": "adds KL control (trust region and distillation) to a fixed $\\beta$",
    "features": "uses the LLM-written features only, without mixing",
    "full_plan": "adds latent planning seeded by the LLM's plan to \\texttt{full}",
    "full_distill": "adds PriorNet distillation to \\texttt{full}",
}
"""What an arm is, where a fixed sentence says it; ``full`` and ``kl_adversarial`` are described from
the configuration their runs resolved (:func:`full_components`, :func:`arms_text`)."""


def full_components(tables: Tables, env: str | None, ablation: str = "full") -> str:
    """The parts of the prior an arm ran (``full``: a fixed beta, advice trust and KL control), from its
    runs' configuration, so runs made before the default changed are described as what they ran."""
    parts = mechanisms(tables, env, ablation)
    return join(parts) if parts else "no prior component"


def _adversarial_control_text(tables: Tables, env: str | None) -> str:
    """``kl_adversarial``: what it lacks of ``full_adversarial`` (or of ``full``), from the configurations."""
    reference = "full_adversarial" if "full_adversarial" in grid_arms(tables, env) else "full"
    missing = [p for p in mechanisms(tables, env, reference) if p not in mechanisms(tables, env, "kl_adversarial")]
    text = "is \\texttt{kl} under the adversarial advisor: a fixed $\\beta$ and KL control"
    if missing:
        text += f", without the {join([m.removeprefix('the ') for m in missing])} that {ablation_tex(reference)} adds"
    return text


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
        elif arm == "kl_adversarial":
            sentences.append(f"{ablation_tex(arm)} {_adversarial_control_text(tables, env)}")
    text = ("In this grid " + "; ".join(sentences) + ".") if sentences else ""
    advisors = [(mode, a) for mode, a in advisor_modes(tables, env) if mode != "good"]
    if advisors:
        listed = "; ".join(f"{join([ablation_tex(x) for x in a])}: advice that is {mode}" for mode, a in advisors)
        text += (f" The advisor-quality arms ({listed}) test the low-regret claim: with a wrong advisor, the trust "
                 f"and the control episodes should keep the agent close to {ablation_tex(settings.baseline)}.")
    return text.strip()


def _per_arm(tables: Tables, env: str | None, columns: Sequence[str], render) -> list[str]:
    """``render(ablation, *per-run arrays)`` for each arm whose runs logged every column (None skips)."""
    parts = []
    for ablation in grid_arms(tables, env):
        values = [runs_of(tables, env, ablation, column) for column in columns]
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
        bound = runs_of(tables, env, ablation, "cfg_prior_kl_bound")
        if bound.size:
            held = "within" if kl_max.max() <= bound.max() + 1e-6 else "above"
            text += f" ({held} the bound {num(f'{bound.max():g}')})"
        below = runs_of(tables, env, ablation, "lambda_below_max_frac")
        if below.size:
            text += f", $\\lambda<\\lambda_{{\\max}}$ on {num(f'{100 * below.mean():.0f}')}\\% of logged points"
        train = runs_of(tables, env, ablation, "kl_mix_wm_train_avg")
        delta = runs_of(tables, env, ablation, "cfg_prior_kl_delta")
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
        if (trust_on is not None and not truthy(trust_on)) or np.allclose(values, 0.5):
            return None  # arms without trust log the uninformed 0.5
        return (f"{ablation_tex(ablation)} {num(f'{values.mean():.2f}')} ({num(f'{values.min():.2f}--{values.max():.2f}')}, "
                f"$n$ = {num(values.size)}{few(values.size)})")

    parts = _per_arm(tables, env, ("trust_llm_last",), render)
    return ("Trust in the LLM's answers at the end of training: " + "; ".join(parts) + "." if parts
            else "No arm of this grid estimates advice trust, or its trust never left the uninformed value.")


def gate_sentence(tables: Tables, env: str | None) -> str:
    """Does the gate separate states? beta where the advice's top action differs from the policy's vs not."""
    parts = _per_arm(tables, env, ("beta_disagree_avg", "beta_agree_avg"),
                     lambda a, dis, agr: (f"{ablation_tex(a)} {num(f'{dis.mean():.2f}')} vs {num(f'{agr.mean():.2f}')}"
                                          f" ($n$ = {num(dis.size)}{few(dis.size)})"))
    if not parts:
        return ""
    return ("Mean $\\beta$ on advised states where the advice's top action differs from the policy's, vs where "
            "it agrees: " + "; ".join(parts) + ".")


# --------------------------------------------------------------------------- how the default was chosen

DECISION = "decide_default"
"""The pre-registered comparison that chose the default design of ``full``."""
REPO = Path(__file__).resolve().parents[2]
RECORDS = Path("docs/experiments/records")
DECLARATIONS = Path("config/experiments")
DECISION_RECORD = RECORDS / f"{DECISION}.json"
DECISION_DECLARATION = DECLARATIONS / f"{DECISION}.yaml"

DESIGN_TEXT = {
    "simple": "a fixed $\\beta$ scaled by the advice trust, with KL control",
    "gated": "the same with the uncertainty gate",
    "full": "the gated design with temperature alignment and LLM features",
}
"""What each candidate design of ``decide_default`` ran (config/experiments/decide_default.yaml)."""


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _read_yaml(path: Path) -> dict | None:
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except Exception:  # noqa: BLE001 - a missing or unreadable declaration only costs detail
        return None
    return data if isinstance(data, dict) else None


def _rule(decl: dict) -> dict:
    """The ``decision`` section of an experiment declaration, empty where it has none."""
    return decl.get("decision") if isinstance(decl.get("decision"), dict) else {}


def _requirements(rule: dict) -> list[dict]:
    """The well-formed ``require`` entries of a declaration's decision rule."""
    found = rule.get("require")
    return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []


def _first_existing(relative: Path, root: Path | None) -> Path:
    roots = [root] if root is not None else [REPO, Path.cwd()]
    for base in roots:
        if (base / relative).is_file():
            return base / relative
    return roots[0] / relative


def _number(value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _path_tex(path: Path) -> str:
    """A repository path in typewriter type that may break after each slash."""
    return "\\texttt{" + "/\\allowbreak ".join(escape(part) for part in path.parts) + "}"


def _missing_record_text() -> str:
    return (f"The comparison that chose this default (\\texttt{{{escape(DECISION)}}}, declared before its runs "
            f"in {_path_tex(DECISION_DECLARATION)}) has no record in this checkout "
            f"({_path_tex(DECISION_RECORD)}), so its outcome is not quoted here.")


def _fell_below(rows: list, arm: str, vs: str, metric: str) -> list[str]:
    """Envs where ``arm`` is below ``vs`` beyond the paired interval (its upper end below zero)."""
    return _failed_envs(rows, arm, {"vs": vs, "metric": metric, "test": "not_below"}, None)


def default_choice_sentence(tables: Tables, root: Path | None = None) -> str:
    """How the default ``full`` was chosen, from the record of ``decide_default`` (and its declaration):
    the designs compared, the requirement under adversarial advice, the verdict of the rule and the
    good-advice scores. Without the record, a sentence saying so (no number is quoted)."""
    record = _read_json(_first_existing(DECISION_RECORD, root))
    if record is None or not isinstance(record.get("verdict"), str):
        return _missing_record_text()
    decl = _read_yaml(_first_existing(DECISION_DECLARATION, root)) or {}
    rule = _rule(decl)
    candidates = rule.get("candidates") if isinstance(rule.get("candidates"), dict) else {}
    scores = record.get("scores") if isinstance(record.get("scores"), dict) else {}
    names = list(candidates) or list(scores)
    if not names:
        return _missing_record_text()
    rows = record.get("comparison") if isinstance(record.get("comparison"), list) else []
    envs = sorted({str(r["env"]) for r in rows if isinstance(r, dict) and r.get("env")})
    seeds = [int(n) for r in rows if isinstance(r, dict) and isinstance(n := r.get("n_arm"), (int, float))
             and math.isfinite(n)]

    def design(name: str) -> str:
        what = DESIGN_TEXT.get(name)
        return f"{ablation_tex(name)} ({what})" if what else ablation_tex(name)

    scope = ""
    if envs:
        scope = f" on {num(len(envs))} environments"
        if seeds:
            scope += f" with {num(range_text(sorted(set(seeds))))} seeds each"
    text = (f"The default was chosen by a comparison declared before its runs were trained "
            f"(\\texttt{{{escape(DECISION)}}}){scope}, between {num(len(names))} designs: "
            f"{join([design(n) for n in names])}.")
    requires = _requirements(rule)
    adversarial = [r for r in requires if r.get("role") == "adversarial" and r.get("test") == "not_below"]
    tie = _number(rule.get("tie"))
    if adversarial:
        req = adversarial[0]
        text += (f" Its rule required that under adversarial advice a design not fall below "
                 f"{ablation_tex(str(req.get('vs')))} beyond the paired confidence interval of the "
                 f"{'AUC' if req.get('metric') == 'auc' else escape(str(req.get('metric')))} on any environment, "
                 f"and took the highest good-advice AUC averaged over environments among the designs that met it")
        text += (f", designs within {num(f'{tie:g}')} of it tied in favour of fewer mechanisms." if math.isfinite(tie)
                 else ".")
    verdict = record["verdict"]
    if verdict == "none":
        failures = []
        for name in names:
            roles = candidates.get(name) if isinstance(candidates.get(name), dict) else {}
            arm = str(roles.get("adversarial", f"{name}_adversarial"))
            for req in adversarial:
                below = _fell_below(rows, arm, str(req.get("vs")), str(req.get("metric")))
                if below:
                    failures.append(f"for {ablation_tex(name)} on {join([name_tex(env_label(e)) for e in below])}")
        text += " No design met the requirement"
        text += (": under adversarial advice it failed " + join(failures) + "." if failures else ".")
    elif verdict.startswith("select "):
        text += f" The rule selected {ablation_tex(verdict.removeprefix('select '))}."
    else:
        text += f" The comparison has not decided (its verdict is \\emph{{{escape(verdict)}}})."
    finite = {n: _number(scores.get(n)) for n in names}
    finite = {n: v for n, v in finite.items() if math.isfinite(v)}
    if finite:
        text += (" On good advice the AUC averaged over environments was "
                 + join([f"{num(f'{v:.3f}')} for {ablation_tex(n)}" for n, v in finite.items()]) + ".")
    fewest = None
    if candidates and all(isinstance(c, dict) and isinstance(c.get("mechanisms"), int) for c in candidates.values()):
        fewest = min(candidates, key=lambda n: candidates[n]["mechanisms"])
    tied = (len(finite) == len(names) and math.isfinite(tie) and max(finite.values()) - min(finite.values()) <= tie)
    if verdict == "none" and tied and fewest is not None:
        text += (f" As these were tied, the design with the fewest mechanisms, {ablation_tex(fewest)}, became the "
                 f"default, which {ablation_tex('full')} now runs.")
    elif verdict.startswith("select "):
        text += f" {ablation_tex('full')} now runs it."
    if fewest is not None or verdict.startswith("select "):
        chosen = fewest if not verdict.startswith("select ") else verdict.removeprefix("select ")
        if chosen == "simple" and "full" in grid_arms(tables):
            extra = [m for m in mechanisms(tables, None, "full") if m in ("the uncertainty gate", "LLM features")]
            if extra:
                text += (f" The {ablation_tex('full')} runs aggregated here predate that choice and ran with "
                         f"{join(extra)}.")
    return text


# --------------------------------------------------------------------------- whether a bound on regret is shown

REGRET = "low_regret"
"""The pre-registered comparison that asks which design bounds what an adversarial advisor costs."""

ROLE_TEXT = {"adversarial": "under adversarial advice", "good": "with good advice", "noisy": "with noisy advice"}
"""How the paper names the advice a candidate's arm of each role ran with."""


def _failed_envs(rows: list, arm: str, req: dict, envs: set[str] | None) -> list[str]:
    """The envs (among ``envs``, all where None) where ``arm`` fails the requirement ``req`` of a decision rule:
    ``not_below``: the paired interval's upper end below 0; ``lower_at_least``: its lower end below the value;
    ``above``: its lower end not above 0."""
    test, value = str(req.get("test")), _number(req.get("value"))
    out = []
    for row in rows:
        if not isinstance(row, dict) or (row.get("arm"), row.get("vs"), row.get("metric")) != (
                arm, req.get("vs"), req.get("metric")) or (envs is not None and row.get("env") not in envs):
            continue
        low, high = _number(row.get("low")), _number(row.get("high"))
        failed = {"not_below": high < 0, "lower_at_least": low < value, "above": not low > 0}.get(test, False)
        if failed and row.get("env") not in out:
            out.append(str(row.get("env")))
    return out


def _requirement_text(req: dict, failed: bool) -> str:
    """What the requirement ``req`` of a decision rule asks of a candidate's arm, in words (``its AUC not below
    rl_only beyond the paired interval``), or with ``failed`` how the arm failed it (``fell below rl_only``)."""
    metric = METRIC_TEXT.get(str(req.get("metric")), escape(str(req.get("metric"))))
    vs, value, test = ablation_tex(str(req.get("vs"))), num(fmt_signed(req.get("value"))), str(req.get("test"))
    if test == "lower_at_least":
        return (f"the lower end of its interval against {vs} lay below {value}" if failed else
                f"the lower end of the paired interval of its {metric} against {vs} at least {value}")
    ask, fail = {"not_below": ("not below", "fell below"), "above": ("above", "was not above")}.get(
        test, (escape(test), f"failed {escape(test)} against"))
    return f"it {fail} {vs}" if failed else f"its {metric} {ask} {vs} beyond the paired interval"


def regret_sentence(root: Path | None = None) -> str:
    """Whether a bound on what a bad advisor costs is shown, from the record of ``low_regret``: the envs and
    seeds, the bound the rule asks for, each candidate's failed requirements and the verdict. Without the
    record, a sentence saying that no bound is claimed (no number is quoted)."""
    record = _read_json(_first_existing(RECORDS / f"{REGRET}.json", root))
    rows = record.get("comparison") if record is not None else None
    verdict = record.get("verdict") if record is not None else None
    decl = _read_yaml(_first_existing(DECLARATIONS / f"{REGRET}.yaml", root)) or {}
    rule = _rule(decl)
    candidates = rule.get("candidates") if isinstance(rule.get("candidates"), dict) else {}
    if not isinstance(verdict, str) or not isinstance(rows, list) or not candidates:
        return (f"The comparison that asks for a bound on what a bad advisor costs (\\texttt{{{escape(REGRET)}}}, "
                f"declared in {_path_tex(DECLARATIONS / f'{REGRET}.yaml')}) has no record in this checkout, so "
                f"this paper claims no such bound.")
    envs = {str(e) for e in rule["envs"]} if isinstance(rule.get("envs"), list) else None
    requires = [r for r in _requirements(rule) if r.get("role") in ROLE_TEXT]
    seeds = {str(r.get("role")): sorted({int(n) for row in rows if isinstance(row, dict)
                                         and row.get("vs") == r.get("vs") and isinstance(n := row.get("n_paired"), int)
                                         and any(row.get("arm") == c.get(r.get("role")) for c in candidates.values()
                                                 if isinstance(c, dict))})
             for r in requires}
    bound = next((_number(r.get("value")) for r in requires if r.get("test") == "lower_at_least"), math.nan)
    text = (f"A second comparison declared before its runs (\\texttt{{{escape(REGRET)}}}) asked for a bound: on "
            + (f"each of {join([name_tex(env_label(e)) for e in sorted(envs)])}" if envs else "each environment")
            + f", between {num(len(candidates))} designs ({join([ablation_tex(n) for n in candidates])}), ")
    wanted = []
    for req in requires:
        role = str(req.get("role"))
        n = seeds.get(role) or []
        wanted.append(f"{ROLE_TEXT[role]}, {_requirement_text(req, failed=False)}"
                      + (f" ({num(range_text(n))} paired seeds)" if n else ""))
    text += "a design had to pass every one of: " + "; ".join(wanted) + "."
    failures = []
    for name, roles in candidates.items():
        roles = roles if isinstance(roles, dict) else {}
        by_role: dict[str, list[str]] = {}
        for req in requires:
            role = str(req.get("role"))
            where = _failed_envs(rows, str(roles.get(role, "")), req, envs)
            if where:
                on = ("on every one" if envs is not None and set(where) == envs
                      else "on " + join([name_tex(env_label(e)) for e in where]))
                by_role.setdefault(role, []).append(f"{_requirement_text(req, failed=True)} {on}")
        if by_role:
            failures.append(f"{ablation_tex(name)}: " + "; ".join(f"{ROLE_TEXT[role]} {join(parts)}"
                                                                    for role, parts in by_role.items()) + ".")
    if failures:
        text += " The failures, paired by seed, were these. " + " ".join(failures)
    if verdict == "none":
        text += (" No design met every requirement, so this paper claims no bound on what a bad advisor costs, "
                 f"and {ablation_tex('full')} stays the default.")
    elif verdict.startswith("select "):
        chosen = verdict.removeprefix("select ")
        text += (f" The rule selected {ablation_tex(chosen)}, which {ablation_tex('full')} now runs"
                 + (f": on these environments, under adversarial advice, the lower end of the paired interval of its "
                    f"AUC against {ablation_tex('rl_only')} was at least {num(fmt_signed(bound))}, the bound this "
                    f"paper claims there." if math.isfinite(bound) else "."))
    else:
        text += f" The comparison has not decided (its verdict is \\emph{{{escape(verdict)}}}); no bound is claimed."
    return text


def regret_summary(root: Path | None = None) -> str:
    """The abstract's one sentence on ``low_regret``: the bound its rule selected a design for, or that none is
    claimed (also without its record)."""
    record = _read_json(_first_existing(RECORDS / f"{REGRET}.json", root))
    verdict = record.get("verdict") if record is not None else None
    rule = _rule(_read_yaml(_first_existing(DECLARATIONS / f"{REGRET}.yaml", root)) or {})
    bound = next((_number(r.get("value")) for r in _requirements(rule) if r.get("test") == "lower_at_least"), math.nan)
    if isinstance(verdict, str) and verdict.startswith("select ") and math.isfinite(bound):
        return (f"A second comparison, on environments where DreamerV3 alone learns, selected "
                f"{ablation_tex(verdict.removeprefix('select '))}: there an adversarial advisor cost at most "
                f"{num(f'{abs(bound):g}')} AUC at the lower end of the paired interval, and good advice helped as "
                f"much as with plain KL control.")
    if verdict == "none":
        return ("A second comparison, on environments where DreamerV3 alone learns, found no design that kept what "
                "an adversarial advisor costs within its declared bound while using good advice as well as plain "
                "KL control, so no such bound is claimed.")
    return "No bound on what an adversarial advisor costs is claimed."


# --------------------------------------------------------------------------- whether the claim extends to Crafter

CRAFTER = "crafter_cpu_full"
"""The pre-registered comparison whose verdict decides whether the paper claims the method for Crafter."""

QUOTED_RECORDS = tuple(RECORDS / f"{name}.json" for name in (DECISION, REGRET, CRAFTER))
"""The experiment records the paper quotes (the workflow rebuilds the paper when one changes)."""

METRIC_TEXT = {"crafter_score": "Crafter score", "final_sr": "achievement rate", "auc": "AUC"}
"""How the paper names a compared metric (on Crafter, the success rate is the mean achievement rate)."""


def _difference_text(row: dict) -> str:
    """``Crafter score +0.41 [$-$0.03, +0.97]``: a paired difference with its interval."""
    metric = str(row.get("metric"))
    return (f"{METRIC_TEXT.get(metric, escape(metric))} {num(fmt_signed(row.get('difference')))} "
            f"[{num(fmt_signed(row.get('low')))}, {num(fmt_signed(row.get('high')))}]")


def crafter_claim_sentence(root: Path | None = None) -> str:
    """Whether the paper's claim extends to Crafter, from the record of ``crafter_cpu_full``: its paired
    differences per comparison and the verdict of its rule (``adopt``: the rule is the paper's claim for
    Crafter; otherwise the claim is limited to MiniGrid). Without the record, a sentence saying so (no number is quoted)."""
    record = _read_json(_first_existing(RECORDS / f"{CRAFTER}.json", root))
    rows = record.get("comparison") if record is not None else None
    if record is None or not isinstance(record.get("verdict"), str) or not isinstance(rows, list):
        return (f"The comparison on Crafter (\\texttt{{{escape(CRAFTER)}}}, declared in "
                f"{_path_tex(DECLARATIONS / f'{CRAFTER}.yaml')}) has no record in this checkout, so this paper "
                f"makes no claim for Crafter.")
    decl = _read_yaml(_first_existing(DECLARATIONS / f"{CRAFTER}.yaml", root)) or {}
    base = f" ({_path_tex(Path(decl['base']))})" if isinstance(decl.get("base"), str) else ""
    rows = [r for r in rows if isinstance(r, dict) and r.get("arm") and r.get("vs")]
    pairs = list(dict.fromkeys((str(r["arm"]), str(r["vs"])) for r in rows))
    seeds = sorted({int(n) for r in rows if isinstance(n := r.get("n_paired"), (int, float)) and math.isfinite(n)})
    found = "; ".join(f"{ablation_tex(arm)} $-$ {ablation_tex(vs)}: "
                      + ", ".join(_difference_text(r) for r in rows if (r["arm"], r["vs"]) == (arm, vs))
                      for arm, vs in pairs)
    text = (f"On Crafter, a comparison declared before its runs (\\texttt{{{escape(CRAFTER)}}}: "
            f"{ablation_tex('full')} with the scripted Crafter advisor at the CPU configuration{base}"
            + (f", {num(range_text(seeds))} seeds per arm paired by seed" if seeds else "")
            + (f") found {found}." if found else ") compared nothing."))
    tests = {"not_below": "not fall below", "above": "lie above"}
    wanted = join([f"{ablation_tex(str(r.get('arm')))} {tests.get(str(r.get('test')), escape(str(r.get('test'))))} "
                    f"{ablation_tex(str(r.get('vs')))} beyond the paired interval of the "
                    f"{METRIC_TEXT.get(str(r.get('metric')), escape(str(r.get('metric'))))}" for r in _requirements(_rule(decl))])
    rule_text = f" Its rule, that {wanted}," if wanted else " Its rule"
    if record["verdict"] == "adopt":
        text += f"{rule_text} held; that is the claim this paper makes for Crafter at this budget."
    else:
        text += (f"{rule_text} did not hold (verdict \\emph{{{escape(record['verdict'])}}}), so the claim of this "
                 f"paper is limited to MiniGrid.")
    return text
