"""Dotted overrides (``--set train.steps=20000``) and the nested mappings they merge into."""

from __future__ import annotations

from typing import Any

from lore.config.yaml_loading import parse_yaml
from lore.validation import ConfigError, show


def parse_override(text: str) -> dict:
    """``"a.b.c=1"`` -> ``{"a": {"b": {"c": 1}}}`` (value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"bad override {show(text)}: expected KEY=VALUE, e.g. train.steps=20000")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part.isidentifier() for part in key.split(".")):
        raise ConfigError(f"bad override {show(text)}: {show(key)} is not a dotted key like train.steps")
    try:
        value = parse_yaml(raw) if raw.strip() else ""
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
