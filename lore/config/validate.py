"""Validation of a built config: every numeric setting inside the range its field declares, then the
cross-field checks that types alone cannot express (train, model size, environment, LLM, advice)."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, Union

from lore.config.sections import EnvConfig, RunConfig
from lore.presets import ModelConfig
from lore.validation import RANGE, ConfigError, Limit, show, shown_url, url_problem

MAX_PARAMETERS = 2 * 10**9
"""Rough cap on the model size (see :func:`estimated_parameters`): 2e9 fp32 parameters are 8 GB of weights
and 32 GB with gradients and Adam's two moments -- about what one 80 GB GPU holds with activations."""
CRAFTER_ENV_NAMES = ("crafter", "CrafterReward-v1", "CrafterNoReward-v1")
"""The Crafter names :func:`lore.envs.make_env` accepts (the keys of ``lore.envs.crafter.CRAFTER_NAMES``)."""


@functools.cache
def _numeric_fields(cls: type = RunConfig, prefix: str = "") -> dict[str, tuple[type, Limit | None]]:
    """Every int/float field of ``cls`` (nested dataclasses as dotted keys) -> (``int`` or ``float``, the range
    its field declares with :func:`lore.validation.ranged`, or None)."""
    out: dict[str, tuple[type, Limit | None]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], prefix + f.name
        if dataclasses.is_dataclass(tp):
            out.update(_numeric_fields(tp, key + "."))
            continue
        args = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
        base = [a for a in args if a is not type(None)]
        if base in ([int], [float]):
            out[key] = (base[0], f.metadata.get(RANGE))
    return out


@functools.cache
def numeric_keys(cls: type = RunConfig, prefix: str = "") -> dict[str, type]:
    """Every int/float field of ``cls`` (nested dataclasses as dotted keys) -> ``int`` or ``float``."""
    return {key: tp for key, (tp, _) in _numeric_fields(cls, prefix).items()}


def limits(cls: type = RunConfig) -> dict[str, Limit]:
    """The accepted range of every numeric key of ``cls`` whose field declares one, as ``{dotted key: Limit}``
    (checked after the preset is applied). A key without one still has to be finite and fit in 64 bits (see
    :func:`check_ranges`); tests/test_bad_input.py requires a range for every key."""
    return {key: limit for key, (_, limit) in _numeric_fields(cls).items() if limit is not None}


_INT64 = Limit(-(2**63), 2**63 - 1)
"""The range of a numeric key whose field declares none."""


def _get(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def check_ranges(cfg: RunConfig) -> None:
    """Every numeric key finite and inside the range its field declares (None = "not set" is fine)."""
    for key, (_, limit) in _numeric_fields().items():
        value = _get(cfg, key)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}: expected a finite number, got {value}")
        limit = limit or _INT64
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
    cnn = 2 * 9 * model.cnn_depth ** 2 * (2 + 8 + 32)  # encoder + decoder, depths d, 2d, 4d, 8d
    return rssm + heads + critic + cnn + mlp(model.feature_units, model.feature_units)


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
# (The ranges of env.crafter_* live in their fields; odd view and view <= area in validate_semantics.)

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
