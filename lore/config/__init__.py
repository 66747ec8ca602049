"""One typed configuration tree for a LoRe run.

Defaults live in the dataclasses of :mod:`lore.config.sections` (the single source of truth, each numeric
setting with its accepted range); a YAML file and dotted command-line overrides (``--set train.steps=20000``)
are applied on top and validated strictly: an unknown key or a value of the wrong type is an error that names
the key. Model size presets live in :mod:`lore.presets` and ablations in :mod:`lore.ablations`; both are
applied through the same override mechanism, so the resolved config written next to every run shows exactly
what ran.

The modules, in the order a config passes through them:

- :mod:`lore.config.sections`: the dataclasses, their defaults and the ranges of the numeric settings.
- :mod:`lore.config.yaml_loading`: YAML text and files -> data (safe loader, duplicate keys, alias bombs).
- :mod:`lore.config.overrides`: ``--set KEY=VALUE`` parsing and the merging of nested mappings.
- :mod:`lore.config.retired`: removed settings and renamed values that older configs may still hold.
- :mod:`lore.config.typecheck`: a nested mapping -> the dataclass tree, every key and type checked.
- :mod:`lore.config.validate`: the ranges of the numeric settings and the cross-field checks.
- :mod:`lore.config.build`: :func:`build_config`, :func:`load_config`, :func:`save_config`,
  :func:`config_from_saved`.

Import from ``lore.config``: the names below are its public interface.
"""

from lore.config.build import build_config, config_from_saved, load_config, save_config
from lore.config.overrides import deep_merge, dotted, nested_from_dotted, parse_override
from lore.config.retired import RENAMED_VALUES, RETIRED, RETIRED_VALUES, drop_retired
from lore.config.sections import (
    MAX_COUNT,
    MAX_SCALE,
    MAX_STEPS,
    AdvisorConfig,
    ControllerConfig,
    DistillConfig,
    DreamerConfig,
    EnvConfig,
    EvalConfig,
    FeaturesConfig,
    LLMConfig,
    PlanConfig,
    PriorConfig,
    RunConfig,
    TrainConfig,
)
from lore.config.typecheck import from_dict, to_dict
from lore.config.validate import (
    ADVISED_SETTINGS,
    CRAFTER_ENV_NAMES,
    CRAFTER_PIXEL_VIEW,
    MAX_PARAMETERS,
    MAX_PLAN_WORK,
    check_advisor_settings,
    check_crafter_settings,
    check_ranges,
    estimated_parameters,
    limits,
    numeric_keys,
    validate_semantics,
)
from lore.config.yaml_loading import MAX_CONFIG_BYTES, MAX_YAML_VALUES, load_yaml, parse_yaml
from lore.presets import ModelConfig
from lore.validation import ConfigError, Limit, ranged

__all__ = [
    "ADVISED_SETTINGS", "CRAFTER_ENV_NAMES", "CRAFTER_PIXEL_VIEW", "MAX_CONFIG_BYTES", "MAX_COUNT", "MAX_PARAMETERS",
    "MAX_PLAN_WORK", "MAX_SCALE", "MAX_STEPS", "MAX_YAML_VALUES", "RENAMED_VALUES", "RETIRED", "RETIRED_VALUES",
    "AdvisorConfig", "ConfigError", "ControllerConfig", "DistillConfig", "DreamerConfig", "EnvConfig", "EvalConfig",
    "FeaturesConfig", "LLMConfig", "Limit", "ModelConfig", "PlanConfig", "PriorConfig", "RunConfig", "TrainConfig",
    "build_config", "check_advisor_settings", "check_crafter_settings", "check_ranges", "config_from_saved",
    "deep_merge", "dotted", "drop_retired", "estimated_parameters", "from_dict", "limits", "load_config",
    "load_yaml", "nested_from_dotted", "numeric_keys", "parse_override", "parse_yaml", "ranged", "save_config",
    "to_dict", "validate_semantics",
]
