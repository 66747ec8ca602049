"""``make_env``: one entry point for every environment LoRe runs on."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from lore.envs.base import LoreEnv, check_max_episode_steps, check_obs_mode, check_view
from lore.envs.crafter import CRAFTER_NAMES, CrafterLoreEnv
from lore.envs.minigrid import MiniGridLoreEnv, minigrid_ids

if TYPE_CHECKING:
    from lore.config import EnvConfig


def accepted_names() -> list[str]:
    return [*CRAFTER_NAMES, *minigrid_ids()]


def make_env(name: str, seed: int, obs: str = "symbolic", view: str = "egocentric",
             max_episode_steps: int | None = None, crafter_area: int = 64, crafter_view: int = 9) -> LoreEnv:
    """Build a :class:`LoreEnv` for a ``MiniGrid-*`` id or a Crafter name.

    ``seed`` seeds the first ``reset()`` (later resets continue the env's own stream, so the
    episode sequence is reproducible); ``view`` applies to MiniGrid, ``crafter_*`` to Crafter;
    ``max_episode_steps=None`` keeps the environment's own limit.
    """
    check_obs_mode(obs)
    check_view(view)
    check_max_episode_steps(max_episode_steps)
    if not isinstance(name, str):
        raise ValueError(f"environment name must be a string, got {name!r}")
    if name in CRAFTER_NAMES:
        return CrafterLoreEnv(name, seed, obs=obs, max_episode_steps=max_episode_steps,
                              area=crafter_area, view=crafter_view)
    grid_ids = minigrid_ids()
    if name in grid_ids:
        return MiniGridLoreEnv(name, seed, obs=obs, view=view, max_episode_steps=max_episode_steps)
    close = difflib.get_close_matches(name, accepted_names(), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"unknown environment '{name}'.{hint} Accepted: the Crafter names {', '.join(CRAFTER_NAMES)}, "
        f"or a registered MiniGrid id ({len(grid_ids)}): {', '.join(grid_ids)}"
    )


def make_env_from_config(env_cfg: EnvConfig, seed: int) -> LoreEnv:
    """:func:`make_env` with the fields of ``cfg.env``."""
    return make_env(env_cfg.name, seed, obs=env_cfg.obs, view=env_cfg.view,
                    max_episode_steps=env_cfg.max_episode_steps,
                    crafter_area=env_cfg.crafter_area, crafter_view=env_cfg.crafter_view)


def probe_env(env_cfg: EnvConfig) -> None:
    """Build ``env_cfg``'s environment and reset it once; ``ValueError`` naming it if that fails.

    A registered id is not proof that the environment can run here: the ``MiniGrid-WFC-*`` ids of the
    minigrid 3.0 wheel, for one, load pattern images that the wheel does not ship. Called before a run
    writes anything (``lore train``) and when the workflow checks its grid, so such an env fails with one
    line instead of a traceback after the run directory exists.
    """
    try:
        env = make_env_from_config(env_cfg, seed=0)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of a third-party constructor is reported as such
        raise ValueError(f"{env_cfg.name} cannot be built here ({type(e).__name__}: {e})") from None
    try:
        env.reset(seed=0)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{env_cfg.name} cannot be reset here ({type(e).__name__}: {e})") from None
    finally:
        env.close()
