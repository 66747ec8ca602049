"""The LoRe method in one room: :class:`LoReAgent` composes a DreamerV3 agent (:mod:`lore.dreamer`) with the
LLM prior (:mod:`lore.prior`), the advisor (LLM calls, feature sandbox, planner: :mod:`lore.method.advisor`)
and the terms it plugs into DreamerV3's extension points (:mod:`lore.method.terms`)."""

from lore.method.agent import ActOutput, LoReAgent

__all__ = ["ActOutput", "LoReAgent"]
