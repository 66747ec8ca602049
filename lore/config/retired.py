"""Retired settings, retired values and renamed values: an older config (such as the saved ``config.yaml`` of an
earlier run) still loads when it holds a removed setting at the value at which it changed nothing; one that
chose a removed variant (a retired setting away from that value, or a retired value) is named as such."""

from __future__ import annotations

from typing import Any

import yaml

from lore.validation import ConfigError

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
    "dreamer.ensemble_scale": 1.0,
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
    "prior.align_temperature": False,
    "prior.temperature_refit_every": 1000,
    "prior.temperature_min": 0.1,
    "prior.temperature_max": 10.0,
    "prior.temperature_min_labels": 128,
    "prior.ema_decay": 0.99,
    "prior.trust_step_failures": True,
}
"""Removed settings, each with its old default (the value at which it changed nothing): a config that holds one
at that value, such as the saved ``config.yaml`` of an older run, loads with the key dropped."""


def yaml_text(value: Any) -> str:
    """A scalar as YAML writes it (``false``, ``0.1``, ``'combined'``)."""
    return yaml.safe_dump(value, default_style=None).removesuffix("\n...\n").strip()


def _is_neutral(value: Any, neutral: Any) -> bool:
    """``value`` equals the retired key's neutral value, booleans and numbers not mixed (``0 != false``)."""
    if isinstance(neutral, bool) or isinstance(value, bool):
        return value is neutral
    if isinstance(neutral, (int, float)):
        return isinstance(value, (int, float)) and value == neutral
    return value == neutral


_ABSENT = object()

RETIRED_VALUES: dict[str, tuple[Any, ...]] = {}
"""Removed choices of a setting that stays: a config that holds one is a removed variant's (a retired entry's)
and does not load; the setting's other values are unaffected."""

RENAMED_VALUES: dict[str, dict[Any, Any]] = {"train.compile": {False: "off", True: "networks"}}
"""Values a setting used to take, with the value that means the same today (old runs' saved configs load)."""


def _lookup(data: dict, key: str) -> Any:
    """The value at the dotted ``key`` of the nested ``data``, or :data:`_ABSENT` where a section or the key is
    missing."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def without_keys(data: dict, keys) -> dict:
    """A copy of the nested ``data`` without the dotted ``keys`` it holds (the sections on their path copied)."""
    out = dict(data)
    for key in keys:
        *parents, name = key.split(".")
        node = out
        for part in parents:
            if not isinstance(node.get(part), dict):
                break
            node[part] = node = dict(node[part])
        else:
            node.pop(name, None)
    return out


def _is_retired_value(key: str, value: Any) -> bool:
    return any(_is_neutral(value, gone) for gone in RETIRED_VALUES.get(key, ()))


def retired_values(data: dict, *, changed_only: bool = False) -> dict[str, Any]:
    """``{dotted key: value}`` of the :data:`RETIRED` settings the nested ``data`` holds (with ``changed_only``,
    only those away from their neutral value), and of the settings it holds at one of their
    :data:`RETIRED_VALUES` (never neutral)."""
    found = {}
    for key, default in RETIRED.items():
        value = _lookup(data, key)
        if value is not _ABSENT and not (changed_only and _is_neutral(value, default)):
            found[key] = value
    for key in RETIRED_VALUES:
        value = _lookup(data, key)
        if value is not _ABSENT and _is_retired_value(key, value):
            found[key] = value
    return found


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
    for key, value in retired_values(out, changed_only=True).items():
        if key in RETIRED:
            raise ConfigError(f"{key}: retired setting; only its default {yaml_text(RETIRED[key])} is accepted "
                              f"(the variant was removed)")
        raise ConfigError(f"{key}: {yaml_text(value)} is a retired value (the variant was removed)")
    return without_keys(out, retired_values(out))  # only neutral retired settings are left
