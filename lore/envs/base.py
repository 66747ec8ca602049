"""The common face of every LoRe environment (see docs/CONTRACTS.md, "Environments").

A :class:`LoreEnv` is a ``gymnasium.Env`` with a dict observation (``"symbolic"`` always,
``"pixels"`` when asked for), separate termination and truncation, ``info["success"]``, and three
extra views of the state for the LLM side: :meth:`~LoreEnv.describe` (text),
:meth:`~LoreEnv.state_snapshot` (arrays) and :meth:`~LoreEnv.state_key` (a short cache key).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

OBS_MODES = ("symbolic", "pixels", "both")
VIEWS = ("egocentric", "full")
PIXEL_SIZE = 64
"""Side of the square ``"pixels"`` observation."""

Family = Literal["minigrid", "crafter"]


def check_obs_mode(obs: str) -> str:
    if obs not in OBS_MODES:
        raise ValueError(f"unknown observation mode obs={obs!r}; expected one of {list(OBS_MODES)}")
    return obs


def check_view(view: str) -> str:
    if view not in VIEWS:
        raise ValueError(f"unknown view={view!r}; expected one of {list(VIEWS)}")
    return view


def check_max_episode_steps(max_episode_steps: int | None) -> int | None:
    if max_episode_steps is None:
        return None
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, (int, np.integer)):
        raise ValueError(f"max_episode_steps must be None or a positive int, got {max_episode_steps!r}")
    if max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    return int(max_episode_steps)


def observation_space(symbolic_dim: int, with_pixels: bool) -> spaces.Dict:
    """``{"symbolic": Box(float32, (D,))}`` plus ``"pixels": Box(uint8, (64, 64, 3))`` if asked."""
    entries: dict[str, spaces.Space] = {
        "symbolic": spaces.Box(-np.inf, np.inf, (symbolic_dim,), np.float32),
    }
    if with_pixels:
        entries["pixels"] = spaces.Box(0, 255, (PIXEL_SIZE, PIXEL_SIZE, 3), np.uint8)
    return spaces.Dict(entries)


class LoreEnv(gym.Env, abc.ABC):
    """Base class: seeding, reset-before-step bookkeeping and action checks.

    Subclasses implement ``_reset(seed) -> (obs, info)``, ``_step(action) -> 5-tuple``,
    ``describe``, ``state_snapshot``, ``state_key`` and ``render``.

    Seeding: the seed given at construction is used by the first ``reset()``; later resets
    without a seed continue the environment's own random stream, so the sequence of episodes
    after ``make_env(name, seed)`` is reproducible. ``reset(seed=s)`` reseeds.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 10}
    family: ClassVar[Family]

    def __init__(self, name: str, seed: int | None, obs: str):
        super().__init__()
        self.name = name
        self.obs_mode = check_obs_mode(obs)
        self.render_mode = "rgb_array"
        self._pending_seed = None if seed is None else int(seed)
        self._needs_reset = True
        self.action_names: list[str] = []

    @property
    def with_pixels(self) -> bool:
        return self.obs_mode in ("pixels", "both")

    # ------------------------------------------------------------------ gymnasium API

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        else:
            self._pending_seed = None
        obs, info = self._reset(None if seed is None else int(seed))
        self._needs_reset = False
        return obs, info

    def step(self, action):
        if self._needs_reset:
            raise RuntimeError(
                f"{self.name}: step() called before reset() or after the episode ended; call reset() first"
            )
        action = self._check_action(action)
        obs, reward, terminated, truncated, info = self._step(action)
        if terminated or truncated:
            self._needs_reset = True
        return obs, float(reward), bool(terminated), bool(truncated), info

    def _check_action(self, action) -> int:
        if isinstance(action, np.ndarray):
            if action.size != 1:
                raise ValueError(f"{self.name}: expected one discrete action, got an array of shape {action.shape}")
            action = action.reshape(()).item()
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
            raise ValueError(f"{self.name}: action must be an int, got {action!r}")
        n = self.action_space.n
        if not 0 <= int(action) < n:
            raise ValueError(f"{self.name}: action {action} out of range [0, {n})")
        return int(action)

    # ------------------------------------------------------------------ subclass hooks

    @abc.abstractmethod
    def _reset(self, seed: int | None) -> tuple[dict[str, np.ndarray], dict]: ...

    @abc.abstractmethod
    def _step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]: ...

    @abc.abstractmethod
    def describe(self) -> str:
        """Faithful, short English description of the current state (for the LLM prompt)."""

    @abc.abstractmethod
    def state_snapshot(self) -> dict[str, np.ndarray]:
        """The full symbolic state as arrays (keys documented in docs/CONTRACTS.md)."""

    @abc.abstractmethod
    def state_key(self) -> str:
        """Short stable key of the decision-relevant state (LLM cache and novelty key)."""
