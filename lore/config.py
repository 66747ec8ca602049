"""One typed configuration tree for a LoRe run.

Defaults live in the dataclasses below (the single source of truth); a YAML file
and dotted command-line overrides (``--set train.steps=20000``) are applied on top
and validated strictly: an unknown key or a value of the wrong type is an error
that names the key. Model size presets live in :mod:`lore.presets` and ablations in
:mod:`lore.ablations`; both are applied through the same override mechanism, so the
resolved config written next to every run shows exactly what ran.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


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
class ModelConfig:
    """Network sizes. ``preset`` fills every field left as None (see :mod:`lore.presets`)."""

    preset: str = "xs"
    deter: int | None = None
    stoch: int | None = None
    classes: int | None = None
    units: int | None = None
    layers: int | None = None
    cnn_depth: int | None = None
    bins: int | None = None
    value_heads: int | None = None
    ensemble: int | None = None
    feature_units: int | None = None


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
    keeps parallel jobs (snakemake --cores N) from stalling each other: OpenMP threads spin-wait
    when a core is taken, making 2-thread ops ~30x slower on a loaded 2-core machine (measured)."""
    log_every: int = 500
    tensorboard: bool = True
    progress: bool = True


@dataclass
class EvalConfig:
    every: int = 2_500
    episodes: int = 10
    greedy: bool = False
    """Evaluate with the mode of the policy instead of a sample."""


@dataclass
class ControllerConfig:
    """When the LLM is asked (see :mod:`lore.llm.controller`)."""

    budget: int = 500
    cooldown: int = 100
    cooldown_after_success: int = 250
    """Env steps without a new call (per env) after a call / after an answer that was followed to a
    reward. Measured (DoorKey, 10k steps): 20/50 made ~112 calls per run, 100/250 ~37 at equal SR."""
    cache_ttl: int = 5_000
    """Env steps an answer for a state key stays valid."""
    trigger_beta: float = 0.5
    trigger_episode_start: bool = True
    trigger_novelty: bool = True
    trigger_plateau: int = 0
    """Call when no reward was seen for this many env steps (0 disables)."""


@dataclass
class LLMConfig:
    backend: Literal["none", "scripted", "gemini", "replay"] = "scripted"
    model: str = "gemini-2.5-flash-lite"
    base_url: str | None = None
    """Overrides the Gemini endpoint; the SDK also honours GOOGLE_GEMINI_BASE_URL."""
    api_version: str | None = None
    timeout_s: float = 20.0
    retries: int = 3
    backoff_s: float = 0.5
    max_wait_ms: float = 0.0
    """The env loop waits at most this long for an answer; 0 = never blocks."""
    cache_path: str | None = "results/llm_cache.sqlite"
    """Persistent (backend, model, prompt) cache shared across runs; None disables."""
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
    beta_max: float = 1.0
    gate: Literal["fixed", "uncertainty"] = "uncertainty"
    """``fixed``: beta = beta_max; ``uncertainty``: beta = beta_max * min(1, u(s) / gate_full_at) (lore.prior.gate)."""
    gate_full_at: float = 0.5
    """Uncertainty u in [0, 1] at and above which the gate is fully open (0.5 = a typical state)."""
    trust: bool = False
    """Scale beta by the per-source advice trust (lore.prior.trust): advice the critic rates worse
    than an average action loses its influence, and through beta its KL pull on the actor."""
    trust_gain: float = 3.0
    """trust = sigmoid(trust_gain * (EMA of the advice's value z-score + advised-vs-control episode t)); 0.5 without evidence."""
    trust_decay: float = 0.99
    """EMA decay of the trust evidence, per update."""
    trust_min_gap: float = 1e-3
    """Q spread (in return-scale units) below which a state cannot tell the actions apart."""
    trust_states: int = 256
    """Advised replay states scored per update (one imagined step per action each)."""
    warmup_steps: int = 0
    """Env steps over which beta_max ramps linearly from 0."""
    dropout: float = 0.1
    """Probability of forcing beta = 0 for an act step (keeps the base policy exercised)."""
    control_episodes: float = 0.25
    """Probability that an episode runs without the prior (beta = 0 throughout). Bounds the regret of
    bad advice: the agent keeps exploring on its own in this share of episodes, which is where the
    reward that lets the critic (and so the trust) judge the advice comes from."""
    w_entropy: float = 1.0
    w_value: float = 1.0
    w_disagreement: float = 1.0
    ema_decay: float = 0.99
    temperature: float = 1.0
    align_temperature: bool = False
    temperature_refit_every: int = 1_000
    temperature_min: float = 0.1
    temperature_max: float = 10.0
    temperature_min_labels: int = 128
    """Calibration labels (states with an unambiguous best action by one-step value) needed before T is refitted."""
    kl_mode: Literal["none", "lagrangian", "prior_reg", "bonus"] = "none"
    kl_bound: float = 2.0
    """lagrangian: hard act-time trust region, KL(pi_mix || pi_wm) <= kl_bound nats per state."""
    kl_delta: float = 0.1
    """lagrangian: the absorption term pulls the actor until the replay-state KL(pi_mix || pi_wm) is within delta."""
    kl_eta: float = 0.05
    lambda_max: float = 10.0
    lambda_kl: float = 0.1
    beta_bonus: float = 0.1
    mix_in_imagination: bool = False
    anneal: Literal["none", "linear", "cosine"] = "none"
    anneal_end: int = 0
    """Env step at which an annealed beta_max reaches 0 (0 = train.steps)."""


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
    min_samples: int = 64
    holdout_frac: float = 0.2
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


# --------------------------------------------------------------------------- strict (de)serialisation


def _check_value(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: {value!r} is not one of {list(choices)}")
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
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
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
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads "1e-3" (no dot) as a string; accept any float literal.
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported type {tp}")


def _from_dict(cls: type, data: Any, prefix: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__} {data!r}")
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


def _deep_merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> dict:
    """``"a.b.c=1"`` -> ``{"a": {"b": {"c": 1}}}`` (value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"bad override '{text}': expected KEY=VALUE, e.g. train.steps=20000")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part.isidentifier() for part in key.split(".")):
        raise ConfigError(f"bad override '{text}': '{key}' is not a dotted key like train.steps")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"bad override '{text}': value is not valid YAML ({e.__class__.__name__})") from e
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
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def build_config(
    file_data: dict | None = None,
    overrides: list[str] | None = None,
    ablation: str | None = None,
) -> RunConfig:
    """defaults <- YAML <- ablation overrides <- ``--set`` overrides, then preset resolution."""
    from lore.ablations import ablation_overrides
    from lore.presets import resolve_model

    data = dict(file_data or {})
    override_tree: dict = {}
    for text in overrides or []:
        override_tree = _deep_merge(override_tree, parse_override(text))
    name = ablation or override_tree.get("ablation") or data.get("ablation") or RunConfig.ablation
    data = _deep_merge(data, nested_from_dotted(ablation_overrides(name)))
    data["ablation"] = name
    data = _deep_merge(data, override_tree)
    cfg = _from_dict(RunConfig, data)
    cfg.model = resolve_model(cfg.model)
    validate_semantics(cfg)
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                ablation: str | None = None) -> RunConfig:
    return build_config(load_yaml(path) if path else None, overrides, ablation)


def validate_semantics(cfg: RunConfig) -> None:
    """Cross-field checks that types alone cannot express."""
    checks = [
        (cfg.env.num_envs >= 1, "env.num_envs must be >= 1"),
        (cfg.train.steps > 0, "train.steps must be > 0"),
        (cfg.train.prefill >= 0, "train.prefill must be >= 0"),
        (cfg.train.prefill < cfg.train.steps,
         f"train.prefill ({cfg.train.prefill}) must be < train.steps ({cfg.train.steps}): the run would only "
         f"collect random steps and never train"),
        (cfg.train.train_ratio >= 0, "train.train_ratio must be >= 0"),
        (cfg.train.batch_size >= 1 and cfg.train.batch_length >= 2, "train.batch_size >= 1 and train.batch_length >= 2"),
        (cfg.eval.every > 0 and cfg.eval.episodes >= 1, "eval.every > 0 and eval.episodes >= 1"),
        (0.0 <= cfg.advisor.accuracy <= 1.0, "advisor.accuracy must be in [0, 1]"),
        (0.0 <= cfg.prior.dropout < 1.0, "prior.dropout must be in [0, 1)"),
        (0.0 <= cfg.prior.control_episodes < 1.0, "prior.control_episodes must be in [0, 1)"),
        (cfg.prior.kl_bound > 0 and cfg.prior.kl_delta >= 0, "prior.kl_bound must be > 0 and prior.kl_delta >= 0"),
        (cfg.prior.gate_full_at > 0, "prior.gate_full_at must be > 0"),
        (cfg.prior.trust_gain > 0 and 0 <= cfg.prior.trust_decay < 1, "prior.trust_gain > 0 and trust_decay in [0, 1)"),
        (cfg.prior.trust_min_gap > 0 and cfg.prior.trust_states >= 1, "prior.trust_min_gap > 0 and trust_states >= 1"),
        (cfg.prior.beta_max >= 0, "prior.beta_max must be >= 0"),
        (0 < cfg.prior.temperature_min <= cfg.prior.temperature_max, "prior.temperature_min/max out of order"),
        (cfg.plan.elites <= cfg.plan.samples, "plan.elites must be <= plan.samples"),
        (cfg.llm.backend != "replay" or cfg.llm.replay_ledger, "llm.backend=replay needs llm.replay_ledger"),
        (0.0 < cfg.dreamer.gamma <= 1.0, "dreamer.gamma must be in (0, 1]"),
        (0.0 < cfg.dreamer.value_bootstrap <= 1.0, "dreamer.value_bootstrap must be in (0, 1]"),
        (cfg.features.n_features >= 1, "features.n_features must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def save_config(cfg: RunConfig, path: str | Path) -> None:
    from lore.utils.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


def config_from_saved(path: str | Path) -> RunConfig:
    """Reload a resolved ``config.yaml`` written by :func:`save_config`."""
    data = load_yaml(path)
    cfg = _from_dict(RunConfig, data)
    from lore.presets import resolve_model

    cfg.model = resolve_model(cfg.model)
    return cfg
