"""Environments: MiniGrid and Crafter behind one interface (docs/CONTRACTS.md, "Environments")."""

from lore.envs.base import OBS_MODES, PIXEL_SIZE, VIEWS, LoreEnv
from lore.envs.factory import accepted_names, make_env, make_env_from_config
from lore.envs.vector import VectorEnv, env_seeds, make_vector_env

__all__ = [
    "OBS_MODES",
    "PIXEL_SIZE",
    "VIEWS",
    "LoreEnv",
    "VectorEnv",
    "accepted_names",
    "env_seeds",
    "make_env",
    "make_env_from_config",
    "make_vector_env",
]
