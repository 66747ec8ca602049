"""LoRe: DreamerV3 with a gated, KL-controlled LLM action prior."""

__version__ = "0.1.0"
