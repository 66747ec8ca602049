"""Building a :class:`~lore.config.sections.RunConfig` (defaults <- YAML <- ablation <- ``--set``), loading
it from a file, and saving and reloading the resolved config written next to every run."""

from __future__ import annotations

from pathlib import Path

import yaml

from lore.ablations import ablation_overrides
from lore.config.overrides import deep_merge, nested_from_dotted, parse_override
from lore.config.retired import drop_retired
from lore.config.sections import RunConfig
from lore.config.typecheck import from_dict, to_dict
from lore.config.validate import check_advisor_settings, validate_semantics
from lore.config.yaml_loading import load_yaml
from lore.presets import resolve_model
from lore.validation import ConfigError


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
    cfg = from_dict(RunConfig, data)
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


def shown_config(cfg: RunConfig) -> dict:
    """``cfg`` as the dict that is shown or saved: every API key masked, and ``llm.base_url`` with what may
    hold a key masked (:func:`~lore.validation.masked_url`)."""
    from lore.llm.secrets import redact_value
    from lore.validation import masked_url

    data = redact_value(to_dict(cfg))
    if data["llm"].get("base_url"):
        data["llm"]["base_url"] = masked_url(data["llm"]["base_url"])
    return data


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """Write ``cfg`` as YAML (:func:`shown_config`)."""
    from lore.utils.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(shown_config(cfg), sort_keys=False))


def config_from_saved(path: str | Path) -> RunConfig:
    """Reload a resolved ``config.yaml`` written by :func:`save_config`, validated like a new one.

    A saved config edited by hand (or damaged) is refused with the key that is wrong, before a
    resume or ``lore eval`` acts on it.
    """
    data = load_yaml(path)
    try:
        cfg = from_dict(RunConfig, drop_retired(data))
        cfg.model = resolve_model(cfg.model)
        validate_semantics(cfg)
    except ConfigError as e:
        raise ConfigError(f"{path} (a saved run config): {e}") from None
    return cfg
