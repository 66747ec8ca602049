"""DreamerV3 in plain PyTorch: world model (RSSM), actor-critic in imagination, LoRe hooks.

Public entry point: :class:`lore.dreamer.agent.DreamerAgent` (contract in docs/CONTRACTS.md).
Modules: ``math`` (pure DreamerV3 maths), ``networks``, ``rssm``, ``world_model``, ``behavior``, ``agent``.
"""

from lore.dreamer.agent import ActOutput, DreamerAgent

__all__ = ["ActOutput", "DreamerAgent"]
