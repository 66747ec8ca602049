"""``VectorEnv``: N :class:`LoreEnv` stepped one after another, with auto-reset.

Gymnasium-style API on stacked numpy arrays:
``reset(seed=None) -> (obs, info)`` and ``step(actions [N]) -> (obs, reward, terminated, truncated, info)``
with ``obs`` a dict of ``[N, ...]`` arrays, ``reward`` float32 ``[N]``, ``terminated`` / ``truncated``
bool ``[N]``, and ``info`` a dict of per-env entries:

* ``info["is_first"]``: bool ``[N]``, True where ``obs[i]`` is the first observation of an episode
  (all True after ``reset``);
* ``info["infos"]``: list of N info dicts belonging to ``obs[i]``;
* ``info["final_obs"]``, ``info["final_info"]``: lists of N, ``None`` unless env i's episode ended.

Semantics for env ``i`` at one ``step`` call:

* The episode goes on: ``obs[i]`` is the new observation, ``reward[i]``, ``terminated[i]``,
  ``truncated[i]`` those of the step, ``is_first[i] = False``, ``infos[i]`` the step's info.
* The step ends the episode (``terminated[i] or truncated[i]``): the env is reset at once and
  ``obs[i]`` is the **first observation of the next episode** with ``is_first[i] = True``, while
  ``reward[i]``, ``terminated[i]``, ``truncated[i]`` still belong to the last step of the ended
  episode. That episode's last observation is ``final_obs[i]`` (a dict like one ``obs`` entry) and
  its step info is ``final_info[i]`` with ``"episode_return"`` and ``"episode_length"`` added;
  ``infos[i]`` is the reset info of the new episode.

So a replay writer stores, for an env whose episode ended, the final row from ``final_obs`` (with
``is_last``; ``is_terminal = terminated``) and then the returned row (``is_first``, reward 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lore.envs.base import LoreEnv
from lore.envs.factory import make_env

if TYPE_CHECKING:
    from lore.config import EnvConfig


def env_seeds(seed: int, num_envs: int) -> list[int]:
    """Independent per-env seeds derived from one run seed (stable across machines)."""
    return [int(np.random.SeedSequence([int(seed), i]).generate_state(1)[0]) for i in range(num_envs)]


def stack_obs(observations: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.stack([o[key] for o in observations]) for key in observations[0]}


class VectorEnv:
    """Steps a list of :class:`LoreEnv` sequentially with auto-reset (see the module docstring)."""

    def __init__(self, envs: list[LoreEnv]):
        if not envs:
            raise ValueError("VectorEnv needs at least one environment")
        first = envs[0]
        for i, env in enumerate(envs[1:], start=1):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise ValueError(f"VectorEnv: env {i} ({env.name}) has different spaces from env 0 ({first.name})")
        self.envs = list(envs)
        self.num_envs = len(envs)
        # One env's spaces (every ``obs`` entry gains a leading [N]); also under gymnasium.vector's names.
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.action_names = first.action_names
        self.family = first.family
        self._returns = np.zeros(self.num_envs, np.float64)
        self._lengths = np.zeros(self.num_envs, np.int64)
        self._started = False

    def __len__(self) -> int:
        return self.num_envs

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict]:
        """Reset every env (``seed`` given: env i gets ``env_seeds(seed, N)[i]``)."""
        seeds = env_seeds(seed, self.num_envs) if seed is not None else [None] * self.num_envs
        results = [env.reset(seed=s) for env, s in zip(self.envs, seeds, strict=True)]
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._started = True
        n = self.num_envs
        info = {"is_first": np.ones(n, bool), "infos": [info for _, info in results],
                "final_obs": [None] * n, "final_info": [None] * n}
        return stack_obs([obs for obs, _ in results]), info

    def step(self, actions) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict]:
        if not self._started:
            raise RuntimeError("VectorEnv.step() called before reset()")
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"VectorEnv.step expects actions of shape ({self.num_envs},), got {actions.shape}")
        n = self.num_envs
        observations, infos = [], []
        final_obs: list = [None] * n
        final_info: list = [None] * n
        reward = np.zeros(n, np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        is_first = np.zeros(n, bool)
        for i, env in enumerate(self.envs):
            obs, r, term, trunc, info = env.step(actions[i])
            reward[i], terminated[i], truncated[i] = r, term, trunc
            self._returns[i] += r
            self._lengths[i] += 1
            if term or trunc:
                final_obs[i] = obs
                final_info[i] = {**info, "episode_return": float(self._returns[i]),
                                 "episode_length": int(self._lengths[i])}
                self._returns[i], self._lengths[i] = 0.0, 0
                obs, info = env.reset()
                is_first[i] = True
            observations.append(obs)
            infos.append(info)
        info = {"is_first": is_first, "infos": infos, "final_obs": final_obs, "final_info": final_info}
        return stack_obs(observations), reward, terminated, truncated, info

    def describe(self, i: int) -> str:
        return self.envs[i].describe()

    def state_snapshot(self, i: int) -> dict[str, np.ndarray]:
        return self.envs[i].state_snapshot()

    def state_key(self, i: int) -> str:
        return self.envs[i].state_key()

    def close(self) -> None:
        for env in self.envs:
            env.close()


def make_vector_env(env_cfg: EnvConfig, seed: int, num_envs: int | None = None) -> VectorEnv:
    """``num_envs`` (default ``env_cfg.num_envs``) envs from ``cfg.env``, env i seeded with ``env_seeds(seed, N)[i]``."""
    n = env_cfg.num_envs if num_envs is None else num_envs
    if n < 1:
        raise ValueError(f"num_envs must be >= 1, got {n}")
    return VectorEnv([
        make_env(env_cfg.name, s, obs=env_cfg.obs, view=env_cfg.view, max_episode_steps=env_cfg.max_episode_steps,
                 crafter_area=env_cfg.crafter_area, crafter_view=env_cfg.crafter_view)
        for s in env_seeds(seed, n)
    ])
