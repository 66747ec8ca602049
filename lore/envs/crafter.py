"""Crafter behind the :class:`~lore.envs.base.LoreEnv` interface.

Symbolic observation (float32, ``D = V*V*19 + 16 + 4 + 2``, 1561 for ``V = 9``):

* the local semantic map, ``V x V`` cells centred on the player (``V = crafter_view``), indexed
  ``[x, y]`` like Crafter's own maps (x to the right, y downwards), one-hot over
  :data:`MATERIAL_NAMES` (12 materials, the player and 5 creature/object kinds, and ``none`` for
  cells outside the world), flattened;
* the inventory in :data:`INVENTORY_NAMES` order, each count divided by its maximum (9);
* the facing direction one-hot in :data:`FACING_NAMES` order (left, right, up, down);
* the daylight level in [0, 1] and whether the player is asleep (both visible in the pixels,
  so the symbolic observation does not lose them).

``"pixels"``: Crafter's own 64x64x3 rendering (local view plus inventory bar).

Crafter's ``done`` is split: ``terminated`` when the player dies (health 0), ``truncated`` when the
episode length limit (``length``, default 10000, or ``max_episode_steps``) is reached alive.
``info["achievements"]``: the 22 :data:`ACHIEVEMENTS` -> unlocked so far this episode;
``info["success"]``: the fraction of them unlocked.

``state_snapshot()`` keys: ``semantic`` int64 ``[V, V]`` (ids index :data:`MATERIAL_NAMES`),
``inventory`` int64 ``[16]``, ``facing`` int64 ``[2]`` (dx, dy), ``achievements`` uint8 ``[22]``
(1 = unlocked this episode), ``player_pos`` int64 ``[2]`` (x, y in world coordinates).
"""

from __future__ import annotations

import collections

import crafter
import numpy as np
from crafter import constants as crafter_constants
from crafter import engine as crafter_engine
from crafter import objects as crafter_objects
from gymnasium import spaces

from lore.envs.base import PIXEL_SIZE, LoreEnv, check_max_episode_steps, observation_space

CRAFTER_NAMES = {"crafter": True, "CrafterReward-v1": True, "CrafterNoReward-v1": False}
"""Accepted names -> whether the env gives Crafter's reward (NoReward gives 0 every step)."""

# Crafter's semantic ids: 0 = no material (outside the world), then the materials of data.yaml,
# then the object classes in the order crafter.Env passes them to SemanticView.
_OBJECT_CLASSES = (crafter_objects.Player, crafter_objects.Cow, crafter_objects.Zombie,
                   crafter_objects.Skeleton, crafter_objects.Arrow, crafter_objects.Plant)
MATERIAL_NAMES: list[str] = ["none", *crafter_constants.materials, *(c.__name__.lower() for c in _OBJECT_CLASSES)]
INVENTORY_NAMES: list[str] = list(crafter_constants.items)
ACHIEVEMENTS: list[str] = list(crafter_constants.achievements)
ACTION_NAMES: list[str] = list(crafter_constants.actions)
FACING_NAMES = ("left", "right", "up", "down")
FACING_VECTORS = ((-1, 0), (1, 0), (0, -1), (0, 1))
VITALS = ("health", "food", "drink", "energy")
_INVENTORY_MAX = np.array([crafter_constants.items[n]["max"] for n in INVENTORY_NAMES], np.float32)
_OBJECT_IDS = {cls: len(crafter_constants.materials) + 1 + i for i, cls in enumerate(_OBJECT_CLASSES)}
N_SEMANTIC = len(MATERIAL_NAMES)  # 19
PLAYER_ID = MATERIAL_NAMES.index("player")


# --------------------------------------------------------------------------- pure functions


def local_semantic(mat_map: np.ndarray, obj_map: np.ndarray, objects: list, center: np.ndarray,
                   view: int) -> np.ndarray:
    """Semantic ids ``[view, view]`` around ``center`` (indexed [x, y]); 0 outside the world.

    ``mat_map`` ``[W, H]`` material ids, ``obj_map`` ``[W, H]`` indices into ``objects`` (0 = none).
    """
    radius = view // 2
    out = np.zeros((view, view), np.int64)
    width, height = mat_map.shape
    x0, y0 = int(center[0]) - radius, int(center[1]) - radius
    xa, xb = max(x0, 0), min(x0 + view, width)
    ya, yb = max(y0, 0), min(y0 + view, height)
    if xa >= xb or ya >= yb:
        return out
    out[xa - x0:xb - x0, ya - y0:yb - y0] = mat_map[xa:xb, ya:yb]
    window = obj_map[xa:xb, ya:yb]
    for wx, wy in zip(*np.nonzero(window), strict=True):
        obj = objects[window[wx, wy]]
        if obj is not None:
            out[xa - x0 + wx, ya - y0 + wy] = _OBJECT_IDS[type(obj)]
    return out


def one_hot_semantic(semantic: np.ndarray) -> np.ndarray:
    """int ids ``[V, V]`` -> float32 ``[V * V * N_SEMANTIC]``."""
    flat = semantic.reshape(-1)
    out = np.zeros((flat.size, N_SEMANTIC), np.float32)
    out[np.arange(flat.size), flat] = 1.0
    return out.reshape(-1)


def facing_index(facing) -> int:
    return FACING_VECTORS.index((int(facing[0]), int(facing[1])))


def offset_text(dx: int, dy: int) -> str:
    """(-2, 1) -> '2 left 1 down'; (0, 0) -> 'here'."""
    parts = []
    if dx:
        parts.append(f"{abs(dx)} {'left' if dx < 0 else 'right'}")
    if dy:
        parts.append(f"{abs(dy)} {'up' if dy < 0 else 'down'}")
    return " ".join(parts) or "here"


def nearest_by_kind(semantic: np.ndarray) -> dict[int, tuple[int, int, int]]:
    """For each semantic id in a centred ``[V, V]`` map: (dx, dy, count) of its nearest cell.

    Nearest = smallest Manhattan distance from the centre, ties broken by (dy, dx) order;
    the player's own cell and ``none`` are skipped.
    """
    view = semantic.shape[0]
    radius = view // 2
    dxs, dys = np.meshgrid(np.arange(view) - radius, np.arange(view) - radius, indexing="ij")  # [V, V]
    order = np.lexsort((dxs.ravel(), dys.ravel(), np.abs(dxs).ravel() + np.abs(dys).ravel()))
    ids = semantic.ravel()[order]
    result: dict[int, tuple[int, int, int]] = {}
    counts = np.bincount(semantic.ravel(), minlength=N_SEMANTIC)
    for idx, sid in zip(order, ids, strict=True):
        sid = int(sid)
        if sid in result or sid == 0 or (sid == PLAYER_ID and dxs.ravel()[idx] == 0 and dys.ravel()[idx] == 0):
            continue
        result[sid] = (int(dxs.ravel()[idx]), int(dys.ravel()[idx]), int(counts[sid]))
    return result


class _InsertionOrderedSet(dict):
    """The ``set`` operations crafter's world uses on a chunk's objects (add, remove, iterate), iterating
    in insertion order: a plain set of objects iterates in memory-address order."""

    def add(self, item) -> None:
        self[item] = None

    def remove(self, item) -> None:
        del self[item]


class _OrderedWorld(crafter_engine.World):
    """crafter's world with each chunk's objects kept in insertion order (see :func:`_order_chunks_by_insertion`)."""

    def reset(self, seed=None):
        super().reset(seed)
        self._chunks = collections.defaultdict(_InsertionOrderedSet)


def _order_chunks_by_insertion(world) -> None:
    """Make ``world``'s creature balancing reproducible.

    crafter keeps each chunk's objects in a ``set`` and despawns ``creatures[random.randint(n)]`` from a
    list built by iterating it, so which zombie or cow goes depends on where the objects sit in memory:
    the same seed and actions gave different episodes in two env instances (measured: lengths 148 vs
    154). Every world reset rebuilds the chunks, so the world's class becomes one whose reset builds
    ordered ones (a module-level class: the env still pickles).
    """
    world.__class__ = _OrderedWorld
    world._chunks = collections.defaultdict(_InsertionOrderedSet)


def _no_image() -> None:
    """Stands in for ``crafter.Env._obs`` when no pixels are wanted (a module function pickles)."""
    return None


# --------------------------------------------------------------------------- the environment


class CrafterLoreEnv(LoreEnv):
    """Crafter (``crafter``, ``CrafterReward-v1``, ``CrafterNoReward-v1``) as a :class:`LoreEnv`."""

    family = "crafter"

    def __init__(self, name: str = "crafter", seed: int | None = None, obs: str = "symbolic",
                 max_episode_steps: int | None = None, area: int = 64, view: int = 9):
        super().__init__(name, seed, obs)
        if name not in CRAFTER_NAMES:
            raise ValueError(f"unknown Crafter name '{name}'; expected one of {list(CRAFTER_NAMES)}")
        if isinstance(view, bool) or not isinstance(view, (int, np.integer)) or view < 1 or view % 2 == 0:
            raise ValueError(f"crafter_view must be a positive odd int (the player sits in the centre), got {view!r}")
        if isinstance(area, bool) or not isinstance(area, (int, np.integer)) or area < 16:
            raise ValueError(f"crafter_area must be an int >= 16, got {area!r}")
        length = check_max_episode_steps(max_episode_steps) or 10_000
        self.view = int(view)
        self.area = int(area)
        self._env = crafter.Env(area=(self.area, self.area), view=(9, 9), size=(PIXEL_SIZE, PIXEL_SIZE),
                                reward=CRAFTER_NAMES[name], length=length,
                                seed=0 if seed is None else int(seed))
        _order_chunks_by_insertion(self._env._world)
        self._check_crafter_layout()
        if not self.with_pixels:
            # Crafter renders an image on every step; skip it when nobody looks at it.
            self._env._obs = _no_image
        self.action_space = spaces.Discrete(len(ACTION_NAMES))
        self.action_names = list(ACTION_NAMES)
        dim = self.view * self.view * N_SEMANTIC + len(INVENTORY_NAMES) + len(FACING_NAMES) + 2
        self.observation_space = observation_space(dim, self.with_pixels)
        self._semantic_cache: np.ndarray | None = None

    def _check_crafter_layout(self) -> None:
        """Fail loudly if this crafter version numbers its semantic ids differently."""
        sem = self._env._sem_view
        expected = {name: i for i, name in enumerate(MATERIAL_NAMES[: len(crafter_constants.materials) + 1])}
        got = {("none" if k is None else k): v for k, v in sem._mat_ids.items()}
        if got != expected or sem._obj_ids != _OBJECT_IDS:
            raise RuntimeError(f"unsupported crafter version {getattr(crafter, '__version__', '?')}: "
                               "semantic ids differ from lore.envs.crafter.MATERIAL_NAMES")

    # ------------------------------------------------------------------ properties

    @property
    def raw_env(self) -> crafter.Env:
        """The wrapped ``crafter.Env`` (read it; changing it changes the episode)."""
        return self._env

    @property
    def max_steps(self) -> int:
        return int(self._env._length)

    @property
    def step_count(self) -> int:
        return int(self._env._step or 0)

    @property
    def player(self):
        return self._env._player

    # ------------------------------------------------------------------ gymnasium hooks

    def _reset(self, seed):
        if seed is not None:
            # crafter seeds episode k's world with hash((seed, k)); restart the count.
            self._env._seed = seed
            self._env._episode = 0
        image = self._env.reset()
        self._semantic_cache = None
        return self._observation(image), self._info()

    def _step(self, action):
        image, reward, _done, _ = self._env.step(action)
        self._semantic_cache = None
        dead = self.player.health <= 0
        over = bool(self._env._length) and self._env._step >= self._env._length
        return self._observation(image), float(reward), dead, over and not dead, self._info()

    def _info(self) -> dict:
        unlocked = self._unlocked()
        return {"achievements": dict(zip(ACHIEVEMENTS, unlocked.astype(bool).tolist(), strict=True)),
                "success": float(unlocked.mean())}

    def _unlocked(self) -> np.ndarray:
        counts = self.player.achievements
        return np.array([counts[name] > 0 for name in ACHIEVEMENTS], np.uint8)

    def render(self) -> np.ndarray:
        """Crafter's own RGB frame (64x64x3)."""
        return self._env.render()

    # ------------------------------------------------------------------ observations

    def _semantic(self) -> np.ndarray:
        if self._semantic_cache is None:
            world = self._env._world
            self._semantic_cache = local_semantic(world._mat_map, world._obj_map, world._objects,
                                                  self.player.pos, self.view)
        return self._semantic_cache

    def _inventory(self) -> np.ndarray:
        inventory = self.player.inventory
        return np.array([inventory[name] for name in INVENTORY_NAMES], np.int64)

    def _observation(self, image) -> dict[str, np.ndarray]:
        facing = np.zeros(len(FACING_NAMES), np.float32)
        facing[facing_index(self.player.facing)] = 1.0
        extras = np.array([self._env._world.daylight, float(self.player.sleeping)], np.float32)
        symbolic = np.concatenate([
            one_hot_semantic(self._semantic()),
            self._inventory().astype(np.float32) / _INVENTORY_MAX,
            facing,
            extras,
        ])
        out = {"symbolic": symbolic}
        if self.with_pixels:
            out["pixels"] = np.asarray(image, np.uint8)
        return out

    # ------------------------------------------------------------------ LLM-side views

    def state_snapshot(self) -> dict[str, np.ndarray]:
        return {
            "semantic": self._semantic().copy(),
            "inventory": self._inventory(),
            "facing": np.array(self.player.facing, np.int64),
            "achievements": self._unlocked(),
            "player_pos": np.array(self.player.pos, np.int64),
        }

    def _front(self) -> str:
        target = np.array(self.player.pos) + np.array(self.player.facing)
        material, obj = self._env._world[target]
        if obj is not None:
            return type(obj).__name__.lower()
        return "none" if material is None else material

    def state_key(self) -> str:
        """``front|inventory|low vitals|nearest kinds|achievement bits|sleeping``.

        E.g. ``"f=tree|i=wood2|v=-|n=grass0,1;tree0,1;water-3,2|a=000040|s0"``; nearest offsets
        are relative to the player (dx, dy), so advice such as "move left to the tree" stays valid.
        """
        inventory = self._inventory()
        items = ",".join(f"{n}{c}" for n, c in zip(INVENTORY_NAMES, inventory, strict=True) if c and n not in VITALS) or "-"
        low = ",".join(n for n, c in zip(INVENTORY_NAMES, inventory, strict=True) if n in VITALS and c <= 3) or "-"
        near = ";".join(f"{MATERIAL_NAMES[sid]}{dx},{dy}" for sid, (dx, dy, _) in sorted(
            nearest_by_kind(self._semantic()).items()))
        bits = int("".join(str(b) for b in self._unlocked()[::-1]), 2)
        return f"f={self._front()}|i={items}|v={low}|n={near}|a={bits:06x}|s{int(self.player.sleeping)}"

    def describe(self) -> str:
        player = self.player
        inventory = self._inventory()
        daylight = float(self._env._world.daylight)
        lines = [
            # No step counter: it would make every prompt unique and defeat the persistent LLM cache.
            f"Crafter. Daylight {daylight:.2f} ({'day' if daylight > 0.5 else 'night'}; 1 = full day, 0 = darkest night).",
            f"Player at world position ({player.pos[0]}, {player.pos[1]}), facing "
            f"{FACING_NAMES[facing_index(player.facing)]}; directly in front: {self._front()}."
            + (" The player is asleep." if player.sleeping else ""),
            "Vitals (0-9): " + ", ".join(f"{n} {inventory[INVENTORY_NAMES.index(n)]}" for n in VITALS) + ".",
        ]
        items = [f"{c} {n}" for n, c in zip(INVENTORY_NAMES, inventory, strict=True) if c and n not in VITALS]
        lines.append("Inventory: " + (", ".join(items) if items else "empty") + ".")
        nearest = nearest_by_kind(self._semantic())
        near_text = [f"{MATERIAL_NAMES[sid]} {offset_text(dx, dy)} ({count} in view)"
                     for sid, (dx, dy, count) in sorted(nearest.items(), key=lambda kv: abs(kv[1][0]) + abs(kv[1][1]))]
        lines.append(f"Nearby within the {self.view}x{self.view} view (nearest of each kind; left/right is x, "
                     "up/down is y): " + ("; ".join(near_text) if near_text else "nothing") + ".")
        if (self._semantic() == 0).any():
            lines.append("Part of the view lies outside the world.")
        unlocked = [name for name, bit in zip(ACHIEVEMENTS, self._unlocked(), strict=True) if bit]
        lines.append(f"Achievements this episode ({len(unlocked)}/{len(ACHIEVEMENTS)}): "
                     + (", ".join(unlocked) if unlocked else "none yet") + ".")
        return "\n".join(lines)


def crafter_score(success_rates: np.ndarray) -> float:
    """Crafter score in percent: exp(mean ln(1 + s_i)) - 1 with s_i the 22 achievement success
    rates in percent (Hafner 2021). ``success_rates`` are rates in [0, 1]."""
    rates = np.asarray(success_rates, dtype=float).ravel()
    if rates.size == 0:
        raise ValueError("crafter_score: no achievement rates")
    if np.any((rates < 0) | (rates > 1)) or not np.all(np.isfinite(rates)):
        raise ValueError("crafter_score: achievement success rates must be finite and in [0, 1]")
    return float(np.exp(np.mean(np.log1p(100.0 * rates))) - 1.0)
