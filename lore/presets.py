"""Model size presets, declared once.

Every field of :class:`ModelConfig` (a section of :class:`lore.config.RunConfig`) left as ``None`` is filled from the
chosen preset, so the resolved config of a run lists every dimension it used.

=========  =====  =====  =======  =====  ======  =========  ===================================
preset     deter  units  layers   stoch  classes cnn_depth  use
=========  =====  =====  =======  =====  ======  =========  ===================================
debug      32     32     1        4      4       4          unit tests (milliseconds per update)
xs         256    256    1        32     16      16         symbolic MiniGrid and Crafter on CPU (default)
s          512    512    2        32     32      32         pixels on GPU (symbolic Crafter: ~3x xs per update)
m          1024   640    3        32     32      48         pixel Crafter on GPU (DreamerV3 "M")
=========  =====  =====  =======  =====  ======  =========  ===================================

``stoch`` x ``classes`` is the categorical latent. DreamerV3 uses 32 latents of 32 classes at
every size; ``xs`` keeps the 32 latents but has 16 classes each (half the latent width, for CPU
cost), so it is not the paper's XS, and ``debug`` shrinks both only to keep tests fast. ``bins`` is the two-hot support size (255),
``value_heads`` the bootstrapped critic heads (their spread is the gate's value signal; their draws
score the advice), ``ensemble`` the member count of a one-step latent ensemble whose initial weights the
world model draws and drops (so the weights drawn after them stay as every recorded run had them; nothing
trains or reads the ensemble), ``feature_units`` the width of the late-fusion encoder for LLM features.

An update costs roughly 3x more per preset step (debug < xs < s < m); on CPU use debug or xs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lore.validation import ConfigError, Limit, ranged


@dataclass
class ModelConfig:
    """Network sizes. ``preset`` fills every field left as None (see :mod:`lore.presets`)."""

    preset: str = "xs"
    # Ranges of the network sizes (after the preset is applied): ~8-16x the largest preset ("m"). The total
    # is also capped by lore.config.MAX_PARAMETERS, since a layer count and a width that are each fine can
    # multiply out of memory.
    deter: int | None = ranged(None, Limit(1, 16_384))
    stoch: int | None = ranged(None, Limit(1, 1024))
    classes: int | None = ranged(None, Limit(1, 1024))
    units: int | None = ranged(None, Limit(1, 16_384))
    layers: int | None = ranged(None, Limit(1, 64))
    cnn_depth: int | None = ranged(None, Limit(1, 1024))
    bins: int | None = ranged(None, Limit(3, 4095))  # odd (so 0 is a bin), see lore.dreamer.math
    value_heads: int | None = ranged(None, Limit(1, 64))
    ensemble: int | None = ranged(None, Limit(1, 64))
    feature_units: int | None = ranged(None, Limit(1, 16_384))


PRESETS: dict[str, dict[str, int]] = {
    "debug": dict(deter=32, stoch=4, classes=4, units=32, layers=1, cnn_depth=4, bins=255,
                  value_heads=3, ensemble=3, feature_units=8),
    "xs": dict(deter=256, stoch=32, classes=16, units=256, layers=1, cnn_depth=16, bins=255,
               value_heads=3, ensemble=3, feature_units=32),
    "s": dict(deter=512, stoch=32, classes=32, units=512, layers=2, cnn_depth=32, bins=255,
              value_heads=3, ensemble=4, feature_units=64),
    "m": dict(deter=1024, stoch=32, classes=32, units=640, layers=3, cnn_depth=48, bins=255,
              value_heads=3, ensemble=5, feature_units=64),
}


def resolve_model(model: ModelConfig) -> ModelConfig:
    """Fill the ``None`` fields of ``model`` from its preset (explicit values win)."""
    if model.preset not in PRESETS:
        raise ConfigError(f"model.preset: unknown preset '{model.preset}' (valid: {', '.join(PRESETS)})")
    values = dict(PRESETS[model.preset])
    for f in dataclasses.fields(model):
        current = getattr(model, f.name)
        if f.name != "preset" and current is not None:
            if current <= 0:
                raise ConfigError(f"model.{f.name} must be > 0, got {current}")
            values[f.name] = current
    return ModelConfig(preset=model.preset, **values)
