"""One typed configuration tree for a LoRe run.

Defaults live in the dataclasses below (the single source of truth); a YAML file
and dotted command-line overrides (``--set train.steps=20000``) are applied on top
and validated strictly: an unknown key or a value of the wrong type is an error
that names the key. Model size presets live in :mod:`lore.presets` and ablations in
:mod:`lore.ablations`; both are applied through the same override mechanism, so the
resolved config written next to every run shows exactly what ran.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from lore.ablations import ablation_overrides
from lore.presets import ModelConfig, resolve_model
from lore.validation import ConfigError, show, shown_url, url_problem

# --------------------------------------------------------------------------- sections


@dataclass
class EnvConfig:
    name: str = "MiniGrid-DoorKey-5x5-v0"
    """Any ``MiniGrid-*`` id, or ``crafter`` / ``CrafterReward-v1`` / ``CrafterNoReward-v1``."""
    num_envs: int = 1
    obs: Literal["symbolic", "pixels", "both"] = "symbolic"
    """``symbolic`` is the CPU default; a pixel world model costs ~2.3 s per update on 2 cores."""
    view: Literal["egocentric", "full"] = "egocentric"
    """MiniGrid only: the agent's 7x7 egocentric view (standard) or the full grid."""
    max_episode_steps: int | None = None
    """None keeps the environment's own limit (DoorKey-5x5: 250, Crafter: 10000)."""
    crafter_area: int = 64
    crafter_view: int = 9
    """Side of the local semantic map around the player (Crafter)."""


@dataclass
class DreamerConfig:
    """DreamerV3 hyper-parameters (2023 paper settings unless stated)."""

    gamma: float = 1.0 - 1.0 / 333.0
    lam: float = 0.95
    horizon: int = 15
    imag_last: int = 0
    """Imagine only from the last N steps of each replayed sequence (0 = every posterior state,
    DreamerV3's default). A CPU speed knob: the critic ensemble on B*T*H states dominates an update."""
    ensemble_scale: float = 1.0
    """Loss scale of the one-step disagreement ensemble (trained on stopped WM features)."""
    value_bootstrap: float = 0.5
    """Probability that a critic head trains on an imagination start state (bootstrapped heads, so
    their spread measures value uncertainty; 1 = every head on every state, no spread)."""
    actor_entropy: float = 3e-4
    free_bits: float = 1.0
    kl_dyn: float = 0.5
    kl_rep: float = 0.1
    unimix: float = 0.01
    retnorm_decay: float = 0.99
    retnorm_low: float = 5.0
    retnorm_high: float = 95.0
    slow_critic_fraction: float = 0.02
    slow_critic_reg: float = 1.0
    decoder_scale: float = 1.0
    reward_scale: float = 1.0
    continue_scale: float = 1.0
    wm_lr: float = 1e-4
    wm_eps: float = 1e-8
    wm_clip: float = 1000.0
    ac_lr: float = 3e-5
    ac_eps: float = 1e-5
    ac_clip: float = 100.0


@dataclass
class TrainConfig:
    steps: int = 50_000
    """Total environment steps (summed over vectorised envs)."""
    prefill: int = 1_000
    """Random-policy env steps collected before the first update."""
    train_ratio: float = 512.0
    """Replayed steps per env step; updates per env step = train_ratio / (batch_size * batch_length)."""
    batch_size: int = 16
    batch_length: int = 64
    replay_capacity: int = 1_000_000
    replay_memmap: bool = False
    checkpoint_every: int = 5_000
    save_replay: bool = True
    """Store the replay buffer in checkpoints (exact resume); off saves disk on big runs."""
    torch_threads: int = 1
    """Intra-op threads for torch (0 = torch's default). 1 is fastest for these small networks and
    keeps parallel jobs (snakemake --cores N) from stalling each other (OpenMP threads spin-wait when a
    core is taken)."""
    log_every: int = 500
    tensorboard: bool = True
    progress: bool = True
    precision: Literal["float32", "bfloat16"] = "float32"
    """Autocast dtype of the update's forward passes. ``bfloat16`` runs matmuls and convolutions in bf16
    (softmaxes, norms and the losses stay float32 under autocast); a GPU option: on most CPUs bf16 is
    slower. Acting stays float32 (``benchmarks/bench_precision.py`` times both)."""
    policy: Literal["dreamer", "random"] = "dreamer"
    """``random``: the uniform-random baseline (``--ablation random``): it acts at random, never updates, and is
    evaluated by the same code as an agent."""
    compile: Literal["off", "networks", "update"] = "off"
    """``update``: the world-model losses, the imagination with the actor and critic losses, and the act-time
    policy forward each as one compiled graph (backward included; CUDA graphs on a GPU); ``networks``: each
    network compiled on its own; ``off``: eager. Both compiled modes pay a compile time on the first updates
    (seconds to minutes per distinct batch shape; ``benchmarks/bench_compile.py`` measures it)."""


@dataclass
class EvalConfig:
    every: int = 2_500
    episodes: int = 10
    greedy: bool = False
    """Evaluate with the mode of the policy instead of a sample."""
    parallel: int = 20
    """Eval episodes run side by side, one batched agent forward per step (1: one after another). The
    agent's draws depend on it, so ``lore eval`` uses the run's value to reproduce eval.csv."""


@dataclass
class ControllerConfig:
    """When the LLM is asked (see :mod:`lore.llm.controller`)."""

    budget: int = 500
    cooldown: int = 100
    cooldown_after_success: int = 250
    """Env steps, counted from the step a question was asked, without a new question: ``cooldown`` after any
    question, ``cooldown_after_success`` after one that got a valid answer (from the LLM, the answer cache or
    PriorNet), whether or not that answer led to a reward."""
    cache_ttl: int = 5_000
    """Env steps an answer for a state key stays valid."""
    trigger_beta: float = 0.5
    trigger_episode_start: bool = True
    trigger_novelty: bool = True
    trigger_plateau: int = 0
    """Call when no reward was seen for this many env steps (0 disables)."""


@dataclass
class LLMConfig:
    backend: Literal["none", "scripted", "gemini", "openai", "replay"] = "scripted"
    model: str = "gemini-2.5-flash-lite"
    """The model's name at its endpoint (``openai``: as the server lists it under ``GET /v1/models``)."""
    base_url: str | None = None
    """``gemini``: overrides the Gemini endpoint (the SDK also honours GOOGLE_GEMINI_BASE_URL); ``openai``: the
    OpenAI-compatible server, e.g. ``http://127.0.0.1:8000/v1`` (or OPENAI_BASE_URL)."""
    api_version: str | None = None
    """Gemini API version (``gemini`` only)."""
    timeout_s: float = 20.0
    retries: int = 3
    backoff_s: float = 0.5
    max_wait_ms: float = 0.0
    """The env loop waits at most this long for an answer; 0 = never blocks."""
    cache_path: str | None = "{run_dir}/llm_cache.sqlite"
    """Writable persistent (backend, model, prompt) answer cache; ``{run_dir}`` stands for the run directory;
    None disables (lore.llm.cache explains the scope)."""
    shared_cache: str | None = None
    """Read-only answer cache consulted after ``cache_path`` (never written; must not change while runs read it)."""
    replay_ledger: str | None = None
    """``llm_calls.jsonl`` of an earlier run, for ``backend: replay``."""
    simulated_latency_ms: float = 0.0
    """Scripted backend only: sleep this long per call (cost benchmarks)."""
    logit_clip: float = 10.0
    plan_max_len: int = 32
    """Longest plan accepted from (and asked of) the LLM."""
    plan_logit: float = 4.0
    """Logit given to the plan's next action while the agent follows a plan."""
    max_inflight: int = 1
    """Background calls that may run at once."""
    ask_before_act: bool = False
    """Ask about the state being acted in, before acting, so that an answer that comes back in time steers
    this step; ``false``: ask after the act, and the answer applies when the state key recurs."""
    controller: ControllerConfig = field(default_factory=ControllerConfig)


@dataclass
class AdvisorConfig:
    """The offline scripted advisor."""

    mode: Literal["good", "noisy", "adversarial"] = "good"
    accuracy: float = 1.0
    """Probability the advice is right (``noisy`` draws a wrong action otherwise)."""
    confidence: float = 0.9


@dataclass
class PriorConfig:
    """Logit mixing ``l_mix = l_wm + beta(s) * stopgrad(l_llm / T)`` and its controls."""

    enabled: bool = False
    """Mix the LLM prior into the acting policy (off: beta = 0 at every step)."""
    beta_max: float = 1.0
    """Largest mixing weight beta, in [0, 1000]: the multiplier of the tempered prior logits."""
    gate: Literal["fixed", "uncertainty"] = "uncertainty"
    """``fixed``: beta = beta_max; ``uncertainty``: beta = beta_max * min(1, u(s) / gate_full_at) (lore.prior.gate)."""
    gate_full_at: float = 0.5
    """Policy uncertainty u in (0, 1] (entropy / log A) at and above which the gate is fully open."""
    trust: bool = False
    """Scale beta and the KL absorption by the per-source advice trust in [0, 1] (lore.prior.trust)."""
    trust_gain: float = 3.0
    """trust = sigmoid(trust_gain * evidence), gain > 0; the evidence is in z / t units (0.5 without evidence)."""
    trust_dead_zone: float = 1.0
    """Standard errors in [0, 100] of the episode t and the step-failure z that count as no evidence."""
    trust_value_weight: float = 1.0
    """Weight in [0, 100] of the critic's value z-score of the advice in the trust evidence (0 leaves it out)."""
    trust_step_failures: bool = True
    """Count the advice's steps ending the episode without reward more often than the agent's own as harm evidence."""
    trust_decay: float = 0.99
    """EMA decay in [0, 1) of the value z-score evidence, per update."""
    trust_min_gap: float = 1e-3
    """Q spread across actions (return-scale units, > 0) below which a state cannot tell the actions apart."""
    trust_states: int = 128
    """Advised replay states scored per update, in [1, 1e6]."""
    advice_samples: int = 4
    """Imagined latent samples per (state, action) when scoring advice, in [1, 64]."""
    dropout: float = 0.1
    """Probability in [0, 1) of forcing beta = 0 for an act step (keeps the base policy exercised)."""
    control_episodes: float = 0.25
    """Probability in [0, 1) that an episode runs without the prior: the control group of the trust's episode t."""
    ema_decay: float = 0.99
    """EMA decay in [0, 1) of the running means that the logged value-spread and disagreement ratios divide by."""
    temperature: float = 1.0
    """Initial temperature T in (0, 1000] dividing the prior logits (clipped to [temperature_min, temperature_max])."""
    align_temperature: bool = False
    """Refit T by temperature scaling on the agent's own best-action labels (lore.prior.temperature)."""
    temperature_refit_every: int = 1_000
    """Env steps between refits of T (>= 1)."""
    temperature_min: float = 0.1
    """Lower bound of T, in (0, 1000] and <= temperature_max."""
    temperature_max: float = 10.0
    """Upper bound of T, in (0, 1000]."""
    temperature_min_labels: int = 128
    """Calibration labels (states with an unambiguous best action by one-step value) needed before T is refitted."""
    kl_mode: Literal["none", "lagrangian"] = "none"
    """``lagrangian``: act-time KL trust region and the absorption term with a dual-ascent multiplier; ``none``: neither."""
    kl_bound: float = 2.0
    """lagrangian: act-time trust region, KL(pi_mix || pi_wm) <= kl_bound nats per state, in (0, 1000]."""
    kl_delta: float = 0.1
    """lagrangian: nats of replay-state KL(pi_mix || pi_wm) the absorption term tolerates, in [0, 1000]."""
    kl_eta: float = 0.05
    """lagrangian: dual step size of the multiplier per update, lambda += kl_eta * (KL - kl_delta), in [0, 1000]."""
    lambda_max: float = 10.0
    """lagrangian: upper clip of the multiplier lambda, in [0, 1e6]."""


@dataclass
class FeaturesConfig:
    """LLM-written feature code run in the sandbox and fused late into the encoder."""

    enabled: bool = False
    n_features: int = 8
    timeout_s: float = 1.0
    memory_mb: int = 256
    workers: int = 1
    clip: float = 1000.0
    """Feature values are clipped to [-clip, clip] after the finiteness check."""


@dataclass
class PlanConfig:
    """CEM in latent space seeded by the LLM plan."""

    enabled: bool = False
    every: int = 1
    horizon: int = 8
    samples: int = 64
    elites: int = 8
    iterations: int = 4
    init: Literal["llm", "prior", "uniform"] = "llm"
    smoothing: float = 0.1
    act: Literal["plan", "mix"] = "plan"
    mix_weight: float = 1.0


@dataclass
class DistillConfig:
    """PriorNet: distil the LLM prior into a head on the latent."""

    enabled: bool = False
    trust_kl: float = 0.3
    min_samples: int = 16
    """Held-out comparisons (distinct LLM answers) before PriorNet may answer."""
    check_every: int = 10
    """Every n-th due LLM call is still made and compared with PriorNet (held-out KL)."""
    loss_scale: float = 1.0


@dataclass
class RunConfig:
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    ablation: str = "rl_only"
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    dreamer: DreamerConfig = field(default_factory=DreamerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    advisor: AdvisorConfig = field(default_factory=AdvisorConfig)
    prior: PriorConfig = field(default_factory=PriorConfig)
    features: FeaturesConfig = field(default_factory=FeaturesConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)


# --------------------------------------------------------------------------- retired settings

RETIRED: dict[str, Any] = {
    "prior.gate_trust_floor": False,
    "prior.trust_act_evidence": "combined",
    "prior.trust_act_floor": 0.0,
    "prior.trust_act_uninformed": 1.0,
    "prior.trust_act_pooled": False,
    "prior.trust_failures": False,
    "prior.trust_model_failures": False,
    "prior.trust_episode_acted": False,
    "prior.trust_episode_strength": False,
    "prior.trust_familywise": False,
    "prior.warmup_steps": 0,
    "prior.control_allocation": "fixed",
    "prior.w_entropy": 1.0,
    "prior.w_value": 0.0,
    "prior.w_disagreement": 0.0,
    "prior.absorb_over": "advised",
    "prior.absorb_trust": "loss",
    "prior.lambda_kl": 0.1,
    "prior.beta_bonus": 0.1,
    "prior.mix_in_imagination": False,
    "prior.anneal": "none",
    "prior.anneal_end": 0,
    "distill.holdout_frac": 0.2,
    "dreamer.critic_trunk": "separate",
    "dreamer.uncertainty_head_steps": 0,
}
"""Removed settings, each with its old default (the value at which it changed nothing): a config that holds one
at that value, such as the saved ``config.yaml`` of an older run, loads with the key dropped."""


def _yaml_text(value: Any) -> str:
    """A scalar as YAML writes it (``false``, ``0.1``, ``'combined'``)."""
    return yaml.safe_dump(value, default_style=None).removesuffix("\n...\n").strip()


def _is_neutral(value: Any, neutral: Any) -> bool:
    """``value`` equals the retired key's neutral value, booleans and numbers not mixed (``0 != false``)."""
    if isinstance(neutral, bool) or isinstance(value, bool):
        return value is neutral
    if isinstance(neutral, (int, float)):
        return isinstance(value, (int, float)) and value == neutral
    return value == neutral


RENAMED_VALUES: dict[str, dict[Any, Any]] = {"train.compile": {False: "off", True: "networks"}}
"""Values a setting used to take, with the value that means the same today (old runs' saved configs load)."""


def drop_retired(data: dict) -> dict:
    """``data`` without the :data:`RETIRED` keys it holds at their neutral value (a copy; ``data`` is untouched),
    and with the :data:`RENAMED_VALUES` of older configs translated.

    A retired key at any other value is a :class:`ConfigError` that names it: the variant it chose is gone.
    """
    out = dict(data)
    for key, renames in RENAMED_VALUES.items():
        section, name = key.split(".")
        node = out.get(section)
        if isinstance(node, dict) and isinstance(node.get(name), bool) and node[name] in renames:
            out[section] = {**node, name: renames[node[name]]}
    for key, neutral in RETIRED.items():
        *parents, name = key.split(".")
        node = out
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                break
            node[part] = child = dict(child)
            node = child
        else:
            if name not in node:
                continue
            if not _is_neutral(node[name], neutral):
                raise ConfigError(f"{key}: retired setting; only its default {_yaml_text(neutral)} is accepted "
                                  f"(the variant was removed)")
            del node[name]
    return out


# --------------------------------------------------------------------------- strict (de)serialisation

def _check_value(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: {show(value)} is not one of {list(choices)}")
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_value(arg, value, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {show(value)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {show(value)}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_check_value(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return _from_dict(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {show(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {show(value)}")
        return value
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads "1e-3" (no dot) as a string; accept any float literal.
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{key}: expected a number, got {show(value)}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {show(value)}")
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range (10**400)
            raise ConfigError(f"{key}: {show(value)} is out of range") from None
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {show(value)}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {show(value)}")
        return value
    raise ConfigError(f"{key}: unsupported type {tp}")


def _from_dict(cls: type, data: Any, prefix: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__} {show(data)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            where = f"{prefix}.{key}" if prefix else key
            raise ConfigError(f"unknown config key '{where}' (valid: {', '.join(sorted(names))})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            where = f"{prefix}.{f.name}" if prefix else f.name
            kwargs[f.name] = _check_value(hints[f.name], data[f.name], where)
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def dotted(d: dict, prefix: str = "") -> dict:
    """A nested mapping -> ``{"section.key": value}`` (as ``--set`` takes them)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(dotted(v, key + "."))
        else:
            out[key] = v
    return out


def deep_merge(base: dict, update: dict) -> dict:
    """``update`` over ``base``, nested mappings key by key (as ``snakemake --configfile A B`` merges)."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- YAML text -> data

MAX_CONFIG_BYTES = 1 << 20
"""A run config is a few KB (a resolved one ~3 KB); a bigger file is not a config (and PyYAML's pure-Python
loader would take seconds on it)."""


def _yaml_problem(e: Exception, text: str = "") -> str:
    """One line for a PyYAML error in ``text``: the problem and where (``str(e)`` spans several lines)."""
    if isinstance(e, yaml.MarkedYAMLError):
        problem = e.problem or e.context or type(e).__name__
        mark = e.problem_mark or e.context_mark
        at_tab = mark is not None and text[mark.index:mark.index + 1] == "\t"
        if at_tab or "'\\t'" in problem or "\t" in problem:
            problem = "a tab character where YAML expects spaces (YAML indents with spaces only)"
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{problem}{where}"
    if isinstance(e, yaml.reader.ReaderError):
        return f"{e.reason} at character position {e.position}"
    return " ".join(str(e).split())


def _check_duplicate_keys(root: yaml.Node) -> None:
    """Reject a mapping that names a key twice (PyYAML silently keeps the last one).

    Iterative and visiting each node once, so neither deep nesting nor an alias bomb costs more
    than the document's size.
    """
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    name = f"{path}.{key_node.value}" if path else str(key_node.value)
                    if key_node.value in keys:
                        raise ConfigError(f"duplicate key '{show(name)[1:-1]}' "
                                          f"(line {key_node.start_mark.line + 1})")
                    keys.add(key_node.value)
                    stack.append((value_node, name))
                else:
                    stack.append((value_node, path))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))


MAX_YAML_VALUES = 100_000
"""Values (scalars, lists and mappings) a YAML document may hold once its aliases are expanded: a config holds
a few hundred, and a reader that walks the data (a schema check, a repr) pays for every expanded copy."""


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _node_name(root: yaml.Node, target: yaml.Node) -> str:
    """Where ``target`` sits in the document, as ``train.steps`` or ``grid[0].envs`` (the first way found)."""
    queue: collections.deque[tuple[yaml.Node, str]] = collections.deque([(root, "")])
    seen: set[int] = set()
    while queue:
        node, name = queue.popleft()
        if node is target:
            return name or "top level"
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = show(key_node.value)[1:-1] if isinstance(key_node, yaml.ScalarNode) else "?"
                queue.append((value_node, f"{name}.{key}" if name else key))
        elif isinstance(node, yaml.SequenceNode):
            queue.extend((item, f"{name}[{i}]") for i, item in enumerate(node.value))
    return "top level"


def _check_expansion(root: yaml.Node) -> None:
    """Reject an alias that contains itself, and a document that expands to more than :data:`MAX_YAML_VALUES`
    values (an alias bomb), counting each node once (memoised), so the check costs the document's size."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _yaml_children(node))
            if sizes[id(node)] > MAX_YAML_VALUES:
                raise ConfigError(f"{_node_name(root, node)}: more than {MAX_YAML_VALUES:_} values once its aliases "
                                  f"are expanded (line {node.start_mark.line + 1}; an alias bomb?)")
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            raise ConfigError(f"{_node_name(root, node)}: an alias that contains itself "
                              f"(line {node.start_mark.line + 1})")
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in _yaml_children(node) if id(child) not in sizes)


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (about 15x faster on a large file), else the pure-Python one."""


def _parse_yaml(text: str) -> Any:
    """Parse one YAML document strictly; every failure is a :class:`ConfigError` with a one-line message."""
    loader = None
    try:
        loader = _SAFE_LOADER(text)  # safe: no Python tags; the reader rejects control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        _check_duplicate_keys(node)
        return loader.construct_document(node)
    except ConfigError:
        raise
    except yaml.YAMLError as e:
        raise ConfigError(f"not valid YAML: {_yaml_problem(e, text)}") from None
    except RecursionError:
        raise ConfigError("not valid YAML for a config: nested too deeply") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"not valid YAML for a config: {' '.join(str(e).split())[:200]}") from None
    finally:
        if loader is not None:
            loader.dispose()


def parse_override(text: str) -> dict:
    """``"a.b.c=1"`` -> ``{"a": {"b": {"c": 1}}}`` (value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"bad override {show(text)}: expected KEY=VALUE, e.g. train.steps=20000")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part.isidentifier() for part in key.split(".")):
        raise ConfigError(f"bad override {show(text)}: {show(key)} is not a dotted key like train.steps")
    try:
        value = _parse_yaml(raw) if raw.strip() else ""
    except ConfigError as e:
        raise ConfigError(f"{key}: bad value in --set {show(text)}: {e}") from None
    node: dict = {}
    cursor = node
    parts = key.split(".")
    for part in parts[:-1]:
        cursor[part] = {}
        cursor = cursor[part]
    cursor[parts[-1]] = value
    return node


def nested_from_dotted(flat: dict[str, Any]) -> dict:
    """``{"prior.enabled": True}`` -> ``{"prior": {"enabled": True}}``."""
    out: dict = {}
    for key, value in flat.items():
        cursor = out
        parts = key.split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = value
    return out


def load_yaml(path: str | Path) -> dict:
    """A YAML file whose top level is a non-empty mapping; any other content is a one-line :class:`ConfigError`."""
    if not str(path).strip():
        raise ConfigError("config file: empty file name")
    path = Path(path)
    try:
        if path.is_dir():
            raise ConfigError(f"config file {path} is a directory")
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {path} is too large ({path.stat().st_size} bytes; a config is a few KB)")
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"config file {path}: cannot read it ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}; "
                          f"a binary file?)") from None
    try:
        data = _parse_yaml(text)
    except ConfigError as e:
        raise ConfigError(f"config file {path}: {e}") from None
    if data is None:
        raise ConfigError(f"config file {path} is empty (expected a mapping of settings, e.g. 'train: {{steps: 1000}}')")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping of settings, got {type(data).__name__}")
    return data


def build_config(
    file_data: dict | None = None,
    overrides: list[str] | None = None,
    ablation: str | None = None,
) -> RunConfig:
    """defaults <- YAML <- ablation overrides <- ``--set`` overrides, then preset resolution."""
    data = dict(file_data or {})
    override_tree: dict = {}
    for text in overrides or []:
        override_tree = deep_merge(override_tree, parse_override(text))
    name = ablation or override_tree.get("ablation") or data.get("ablation") or RunConfig.ablation
    data = deep_merge(data, nested_from_dotted(ablation_overrides(name)))
    data["ablation"] = name
    data = drop_retired(deep_merge(data, override_tree))
    cfg = _from_dict(RunConfig, data)
    cfg.model = resolve_model(cfg.model)
    validate_semantics(cfg)
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                ablation: str | None = None) -> RunConfig:
    """:func:`build_config` on the YAML file at ``path`` (a retired setting in it is reported with the file)."""
    data = load_yaml(path) if path else None
    if data is not None:
        try:
            data = drop_retired(data)
        except ConfigError as e:
            raise ConfigError(f"config file {path}: {e}") from None
    cfg = build_config(data, overrides, ablation)
    check_advisor_settings(cfg)
    return cfg


# --------------------------------------------------------------------------- ranges of the numeric keys

MAX_STEPS = 10**12
"""Env-step counts and intervals stay below 10**12: at 10**5 steps/s that is 300 years of training, so
anything larger is a typo (or an attempt at an overflow)."""
MAX_COUNT = 10**9
"""Counts of calls, samples or labels: 10**9 is beyond what one run can use."""
MAX_SCALE = 1e6
"""Loss scales and mixing weights are relative: at 1e6 every other term has already vanished."""
MAX_PARAMETERS = 2 * 10**9
"""Rough cap on the model size (see :func:`estimated_parameters`): 2e9 fp32 parameters are 8 GB of weights
and 32 GB with gradients and Adam's two moments -- about what one 80 GB GPU holds with activations."""
CRAFTER_ENV_NAMES = ("crafter", "CrafterReward-v1", "CrafterNoReward-v1")
"""The Crafter names :func:`lore.envs.make_env` accepts (the keys of ``lore.envs.crafter.CRAFTER_NAMES``)."""


@dataclass(frozen=True)
class Limit:
    """The accepted range of one numeric key (ends open or closed)."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, x: float) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below

    def __str__(self) -> str:
        return (f"{'(' if self.lo_open else '['}{_number(self.lo)}, {_number(self.hi)}"
                f"{')' if self.hi_open else ']'}")


def _number(x: float) -> str:
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:_}" if abs(x) >= 100_000 else str(x)
    return f"{x:g}"


def _closed(lo: float, hi: float) -> Limit:
    return Limit(lo, hi)


_UNIT = Limit(0.0, 1.0)                               # a probability or a fraction
_DECAY = Limit(0.0, 1.0, hi_open=True)                # an EMA decay: 1 would never move
_SCALE = Limit(0.0, MAX_SCALE)                        # a loss scale or weight (0 switches the term off)
_POSITIVE = Limit(0.0, 1e3, lo_open=True)             # temperatures, KL bounds (nats), gains
_LR = Limit(0.0, 1.0, lo_open=True)                   # Adam: a step of ~lr per parameter; > 1 diverges at once
_EPS = Limit(0.0, 1.0, lo_open=True)
_CLIP = Limit(0.0, 1e12, lo_open=True)                # gradient-norm clips (1e12 = effectively off)
_STEPS = Limit(0, MAX_STEPS, hi_open=True)            # env-step counts where 0 means "off" / "from the start"
_INTERVAL = Limit(1, MAX_STEPS, hi_open=True)         # every N env steps: 0 or less never advances
_COUNT = Limit(1, MAX_COUNT)
_SECONDS = Limit(0.0, 3600.0)                         # waits: an hour is already a hung run
_MILLISECONDS = Limit(0.0, 3_600_000.0)

LIMITS: dict[str, Limit] = {
    # Seeds: numpy's SeedSequence (per-env seeds) rejects negatives; Crafter draws worlds from a 31-bit
    # seed and the evaluation envs use seed + 10_000_000, which must stay below 2**32 for numpy.
    "seed": _closed(0, 2**31 - 1),
    # Envs are stepped one after another in this process, each with its own replay stream.
    "env.num_envs": _closed(1, 1024),
    "env.max_episode_steps": Limit(1, MAX_STEPS, hi_open=True),
    # Crafter's world generator needs >= 16 cells a side and costs area**2 per reset (1024 = 256x the default).
    "env.crafter_area": _closed(16, 1024),
    # The local map is view**2 one-hot cells per step in replay (odd: the player sits in the centre).
    "env.crafter_view": _closed(1, 63),
    # Network sizes (after the preset is applied); ~8-16x the largest preset ("m"). The total is also
    # capped by MAX_PARAMETERS, since a layer count and a width that are each fine can multiply out of memory.
    "model.deter": _closed(1, 16_384),
    "model.stoch": _closed(1, 1024),
    "model.classes": _closed(1, 1024),
    "model.units": _closed(1, 16_384),
    "model.layers": _closed(1, 64),
    "model.cnn_depth": _closed(1, 1024),
    "model.bins": _closed(3, 4095),                   # odd (so 0 is a bin), see lore.dreamer.math
    "model.value_heads": _closed(1, 64),
    "model.ensemble": _closed(1, 64),
    "model.feature_units": _closed(1, 16_384),
    "dreamer.gamma": Limit(0.0, 1.0, lo_open=True),
    "dreamer.lam": _UNIT,
    "dreamer.horizon": _closed(1, 1000),              # imagined steps: activations grow B*T*H
    "dreamer.imag_last": _closed(0, 65_536),          # and <= train.batch_length
    "dreamer.ensemble_scale": _SCALE,
    "dreamer.value_bootstrap": Limit(0.0, 1.0, lo_open=True),
    "dreamer.actor_entropy": _SCALE,
    "dreamer.free_bits": _closed(0.0, 1e3),           # nats; 32 latents x ln(1024) classes is only 222
    "dreamer.kl_dyn": _SCALE,
    "dreamer.kl_rep": _SCALE,
    "dreamer.unimix": Limit(0.0, 1.0, hi_open=True),  # 1 would be a uniform policy
    "dreamer.retnorm_decay": _DECAY,
    "dreamer.retnorm_low": _closed(0.0, 100.0),       # percentiles
    "dreamer.retnorm_high": _closed(0.0, 100.0),
    "dreamer.slow_critic_fraction": _UNIT,
    "dreamer.slow_critic_reg": _SCALE,
    "dreamer.decoder_scale": _SCALE,
    "dreamer.reward_scale": _SCALE,
    "dreamer.continue_scale": _SCALE,
    "dreamer.wm_lr": _LR,
    "dreamer.wm_eps": _EPS,
    "dreamer.wm_clip": _CLIP,
    "dreamer.ac_lr": _LR,
    "dreamer.ac_eps": _EPS,
    "dreamer.ac_clip": _CLIP,
    "train.steps": Limit(1, MAX_STEPS, hi_open=True),
    "train.prefill": _STEPS,                          # and < train.steps
    "train.train_ratio": _closed(0.0, 1e6),           # 1e6 is ~1000 updates per env step at the default batch
    "train.batch_size": _closed(1, 65_536),           # and batch_size * batch_length <= 2**20
    "train.batch_length": _closed(2, 65_536),         # and <= train.steps
    "train.replay_capacity": _closed(1, 10**10),      # and >= 4 * train.batch_length
    "train.checkpoint_every": _INTERVAL,
    "train.torch_threads": _closed(0, 1024),
    "train.log_every": _INTERVAL,
    "eval.every": _INTERVAL,
    "eval.episodes": _closed(1, 100_000),
    "eval.parallel": _closed(1, 1024),
    "llm.timeout_s": Limit(0.0, 3600.0, lo_open=True),
    "llm.retries": _closed(0, 100),
    "llm.backoff_s": _SECONDS,
    "llm.max_wait_ms": _MILLISECONDS,
    "llm.simulated_latency_ms": _MILLISECONDS,
    "llm.logit_clip": _POSITIVE,
    "llm.plan_max_len": _closed(1, 4096),
    "llm.plan_logit": _closed(0.0, 1e3),
    "llm.max_inflight": _closed(1, 64),
    "llm.controller.budget": _closed(0, MAX_COUNT),
    "llm.controller.cooldown": _STEPS,
    "llm.controller.cooldown_after_success": _STEPS,
    "llm.controller.cache_ttl": _STEPS,
    "llm.controller.trigger_beta": _closed(0.0, 1e3),  # compared with beta <= prior.beta_max
    "llm.controller.trigger_plateau": _STEPS,
    "advisor.accuracy": _UNIT,
    "advisor.confidence": _UNIT,
    "prior.beta_max": _closed(0.0, 1e3),
    "prior.gate_full_at": Limit(0.0, 1.0, lo_open=True),  # the uncertainty u lies in [0, 1]
    "prior.trust_gain": _POSITIVE,
    "prior.trust_decay": _DECAY,
    "prior.trust_dead_zone": _closed(0.0, 100.0),
    "prior.trust_value_weight": _closed(0.0, 100.0),
    "prior.trust_min_gap": Limit(0.0, MAX_SCALE, lo_open=True),
    "prior.trust_states": _closed(1, 1_000_000),
    "prior.advice_samples": _closed(1, 64),
    "prior.dropout": Limit(0.0, 1.0, hi_open=True),
    "prior.control_episodes": Limit(0.0, 1.0, hi_open=True),
    "prior.ema_decay": _DECAY,
    "prior.temperature": _POSITIVE,
    "prior.temperature_refit_every": _INTERVAL,
    "prior.temperature_min": _POSITIVE,               # and <= temperature_max
    "prior.temperature_max": _POSITIVE,
    "prior.temperature_min_labels": _COUNT,
    "prior.kl_bound": _POSITIVE,
    "prior.kl_delta": _closed(0.0, 1e3),
    "prior.kl_eta": _closed(0.0, 1e3),
    "prior.lambda_max": _SCALE,
    # The feature sandbox's own limits (lore.sandbox.runner.FeatureSandbox): at most 4096 features, a
    # positive per-observation timeout (a worker's CPU lifetime is 600 s), >= 16 MB of address space for
    # the worker (up to 1 TB), 1..64 worker processes, clip <= 1e30 (float32 range).
    "features.n_features": _closed(1, 4096),
    "features.timeout_s": Limit(0.0, 600.0, lo_open=True),
    "features.memory_mb": _closed(16, 1 << 20),
    "features.workers": _closed(1, 64),
    "features.clip": Limit(0.0, 1e30, lo_open=True),
    "plan.every": _INTERVAL,
    "plan.horizon": _closed(1, 1000),
    "plan.samples": _closed(1, 100_000),              # CEM rolls out samples x horizon latent steps per call
    "plan.elites": _closed(1, 100_000),               # and <= plan.samples
    "plan.iterations": _closed(1, 1000),
    "plan.smoothing": _UNIT,
    "plan.mix_weight": _closed(0.0, 1e3),
    "distill.trust_kl": _POSITIVE,
    "distill.min_samples": _COUNT,
    "distill.check_every": _COUNT,
    "distill.loss_scale": _SCALE,
}
"""The accepted range of every numeric key, checked after the preset is applied. A key missing here still
has to be finite and fit in 64 bits (see :func:`check_ranges`); tests/test_bad_input.py requires an entry."""


@functools.cache
def numeric_keys(cls: type = RunConfig, prefix: str = "") -> dict[str, type]:
    """Every int/float field of ``cls`` (nested dataclasses as dotted keys) -> ``int`` or ``float``."""
    out: dict[str, type] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], prefix + f.name
        if dataclasses.is_dataclass(tp):
            out.update(numeric_keys(tp, key + "."))
            continue
        args = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
        base = [a for a in args if a is not type(None)]
        if base in ([int], [float]):
            out[key] = base[0]
    return out


def _get(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def check_ranges(cfg: RunConfig) -> None:
    """Every numeric key finite and inside its :data:`LIMITS` range (None = "not set" is fine)."""
    for key in numeric_keys():
        value = _get(cfg, key)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}: expected a finite number, got {value}")
        limit = LIMITS.get(key) or Limit(-(2**63), 2**63 - 1)
        if value not in limit:
            raise ConfigError(f"{key} must be in {limit}, got {show(value)}")


def estimated_parameters(model: ModelConfig, num_actions: int = 20, obs_dim: int = 2048) -> int:
    """A rough (within ~2x) parameter count of the DreamerV3 networks for a resolved ``model``."""
    units, layers = model.units, model.layers
    latent = model.stoch * model.classes
    feat = model.deter + latent

    def mlp(inp: int, out: int) -> int:
        return inp * units + (layers - 1) * units * units + units * out

    rssm = 3 * model.deter * (units + model.deter) + units * (latent + num_actions) + 2 * units * latent \
        + units * (model.deter + obs_dim)
    heads = mlp(obs_dim, obs_dim) + mlp(feat, obs_dim) + mlp(feat, model.bins) + mlp(feat, 1) + mlp(feat, num_actions)
    critic = 2 * model.value_heads * mlp(feat, model.bins)  # critic + slow copy (separate trunks: the upper bound)
    ensemble = model.ensemble * mlp(feat + num_actions, latent)
    cnn = 2 * 9 * model.cnn_depth ** 2 * (2 + 8 + 32)  # encoder + decoder, depths d, 2d, 4d, 8d
    return rssm + heads + critic + ensemble + cnn + mlp(model.feature_units, model.feature_units)


def _check_env_name(name: str) -> None:
    """``env.name`` is a Crafter name or a registered ``MiniGrid-*`` id (checked without building the env)."""
    if name in CRAFTER_ENV_NAMES:
        return
    import difflib

    import gymnasium
    import minigrid  # noqa: F401  (registers the MiniGrid-* ids)

    grid_ids = sorted(k for k in gymnasium.registry if k.startswith("MiniGrid-"))
    if name in grid_ids:
        return
    close = difflib.get_close_matches(name, [*CRAFTER_ENV_NAMES, *grid_ids], n=3) if len(name) < 200 else []
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(f"env.name: unknown environment {show(name)}.{hint} Accepted: {', '.join(CRAFTER_ENV_NAMES)} "
                      f"or a registered MiniGrid-* id ({len(grid_ids)} of them, e.g. MiniGrid-DoorKey-5x5-v0)")


MAX_PLAN_WORK = 2**20
"""Most imagined latent steps (``plan.samples * plan.horizon * plan.iterations``) one planning call may take."""


def validate_semantics(cfg: RunConfig) -> None:
    """Ranges of every numeric key, then the cross-field checks that types alone cannot express."""
    check_ranges(cfg)
    t, m, env = cfg.train, cfg.model, cfg.env
    checks = [
        (t.prefill < t.steps,
         f"train.prefill ({t.prefill}) must be < train.steps ({t.steps}): the run would only "
         f"collect random steps and never train"),
        (t.batch_length <= t.steps,
         f"train.batch_length ({t.batch_length}) must be <= train.steps ({t.steps}): no sequence that long "
         f"is ever collected, so the run would never train"),
        (t.replay_capacity >= 4 * t.batch_length,
         f"train.replay_capacity ({t.replay_capacity}) must be >= 4 * train.batch_length ({4 * t.batch_length}): "
         f"replay stores each env's steps in chunks of 4 sequences"),
        (t.batch_size * t.batch_length <= 2**20,
         f"train.batch_size * train.batch_length ({t.batch_size} * {t.batch_length}) must be <= 2**20 steps "
         f"per batch (a bigger batch does not fit in memory)"),
        (cfg.dreamer.imag_last <= t.batch_length,
         f"dreamer.imag_last ({cfg.dreamer.imag_last}) must be <= train.batch_length ({t.batch_length}): "
         f"it counts steps of one replayed sequence"),
        (cfg.dreamer.retnorm_low < cfg.dreamer.retnorm_high,
         f"dreamer.retnorm_low ({cfg.dreamer.retnorm_low:g}) must be < dreamer.retnorm_high "
         f"({cfg.dreamer.retnorm_high:g})"),
        (cfg.prior.temperature_min <= cfg.prior.temperature_max,
         f"prior.temperature_min ({cfg.prior.temperature_min:g}) must be <= prior.temperature_max "
         f"({cfg.prior.temperature_max:g})"),
        (cfg.plan.elites <= cfg.plan.samples,
         f"plan.elites ({cfg.plan.elites}) must be <= plan.samples ({cfg.plan.samples})"),
        (cfg.plan.samples * cfg.plan.horizon * cfg.plan.iterations <= MAX_PLAN_WORK,
         f"plan.samples * plan.horizon * plan.iterations ({cfg.plan.samples} * {cfg.plan.horizon} * "
         f"{cfg.plan.iterations}) must be <= {MAX_PLAN_WORK:,} imagined latent steps per planning call: each env "
         f"step would take minutes"),
        (env.num_envs <= t.steps - t.prefill,
         f"env.num_envs ({env.num_envs}) must be <= train.steps - train.prefill ({t.steps} - {t.prefill}): one "
         f"step of all envs would end the run before it trained"),
        (env.num_envs * t.batch_length <= t.steps,
         f"env.num_envs * train.batch_length ({env.num_envs} * {t.batch_length}) must be <= train.steps "
         f"({t.steps}): each env would collect fewer steps than one sequence, so the run would never train"),
        (cfg.llm.backend != "replay" or cfg.llm.replay_ledger, "llm.backend=replay needs llm.replay_ledger"),
        (cfg.llm.backend != "openai" or cfg.llm.api_version is None,
         "llm.api_version: a Gemini API version, not read by llm.backend=openai; drop it"),
        (env.crafter_view % 2 == 1,
         f"env.crafter_view must be odd (the player sits in the centre), got {env.crafter_view}"),
        (env.crafter_view <= env.crafter_area,
         f"env.crafter_view ({env.crafter_view}) must be <= env.crafter_area ({env.crafter_area}): "
         f"the view would be wider than the world"),
        (m.bins % 2 == 1, f"model.bins must be odd (so that 0 is a bin), got {m.bins}"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    params = estimated_parameters(m)
    if params > MAX_PARAMETERS:
        raise ConfigError(f"model: ~{params:.2g} parameters (model.deter={m.deter}, units={m.units}, "
                          f"layers={m.layers}, stoch={m.stoch}, classes={m.classes}, cnn_depth={m.cnn_depth}) is "
                          f"more than {MAX_PARAMETERS:.0e}, which does not fit in one GPU's memory")
    if t.policy == "random":
        for key in ("llm.backend", *ADVISED_SETTINGS):
            if _get(cfg, key) not in ("none", False):
                raise ConfigError(f"{key}: {show(_get(cfg, key))} has no effect with train.policy=random (the "
                                  f"uniform-random baseline asks no LLM); use --ablation random")
    _check_base_url(cfg.llm.base_url)
    _check_env_name(env.name)
    check_crafter_settings(cfg)


def _check_base_url(url: str | None) -> None:
    """``llm.base_url`` is unset or an ``http(s)://host[:port][/path]`` endpoint."""
    problem = None if url is None else url_problem(url)
    if problem:
        raise ConfigError(f"llm.base_url: {shown_url(url)}: {problem}")


ADVISED_SETTINGS = ("prior.enabled", "features.enabled", "plan.enabled", "distill.enabled")
"""Switches that act only through the LLM's answers (with ``llm.backend: none`` nothing is asked)."""


def check_advisor_settings(cfg: RunConfig) -> None:
    """Refuse a switch of :data:`ADVISED_SETTINGS` that is on while ``llm.backend`` is ``none``: the run would
    train without the advice it claims to use."""
    if cfg.llm.backend != "none":
        return
    for key in ADVISED_SETTINGS:
        if _get(cfg, key):
            raise ConfigError(f"{key}: true needs advice, but llm.backend is 'none' (ablation {cfg.ablation} asks "
                              f"no LLM); set llm.backend to scripted, gemini, openai or replay, or drop {key}")


# --------------------------------------------------------------------------- Crafter-specific settings
# A setting that only one environment family reads is rejected where it would be silently ignored.
# (The ranges of env.crafter_* live in LIMITS; odd view and view <= area in validate_semantics.)

CRAFTER_PIXEL_VIEW = 9
"""Crafter's pixel frame always shows its 9x9 local view; ``env.crafter_view`` sizes the symbolic map only."""


def check_crafter_settings(cfg: RunConfig) -> None:
    """``env.view`` is MiniGrid's; ``env.crafter_area`` / ``env.crafter_view`` are Crafter's (the view only
    for the symbolic observation): a value the chosen environment would ignore is an error."""
    env = cfg.env
    defaults = EnvConfig()
    if env.name in CRAFTER_ENV_NAMES:
        if env.view != defaults.view:
            raise ConfigError(f"env.view: {env.view!r} is a MiniGrid setting; Crafter ({env.name}) sees the "
                              f"env.crafter_view x env.crafter_view map around the player (symbolic) or its own "
                              f"9x9 frame (pixels)")
        if env.obs == "pixels" and env.crafter_view != CRAFTER_PIXEL_VIEW:
            raise ConfigError(f"env.crafter_view ({env.crafter_view}) sizes Crafter's symbolic map, which "
                              f"env.obs=pixels does not use (the pixel frame is always the 9x9 view); use "
                              f"env.obs=both or leave env.crafter_view at {CRAFTER_PIXEL_VIEW}")
        return
    for key in ("crafter_area", "crafter_view"):
        if getattr(env, key) != getattr(defaults, key):
            raise ConfigError(f"env.{key} ({getattr(env, key)}) only applies to Crafter, not to {env.name}; "
                              f"remove it (in a workflow config, set it under env_run.crafter)")


def save_config(cfg: RunConfig, path: str | Path) -> None:
    from lore.utils.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


def config_from_saved(path: str | Path) -> RunConfig:
    """Reload a resolved ``config.yaml`` written by :func:`save_config`, validated like a new one.

    A saved config edited by hand (or damaged) is refused with the key that is wrong, before a
    resume or ``lore eval`` acts on it.
    """
    data = load_yaml(path)
    try:
        cfg = _from_dict(RunConfig, drop_retired(data))
        cfg.model = resolve_model(cfg.model)
        validate_semantics(cfg)
    except ConfigError as e:
        raise ConfigError(f"{path} (a saved run config): {e}") from None
    return cfg
