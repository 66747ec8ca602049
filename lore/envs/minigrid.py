"""MiniGrid behind the :class:`~lore.envs.base.LoreEnv` interface.

Symbolic observation (float32, MLP-ready):

* ``view="egocentric"`` (default): the agent's ``V x V`` view (``V = agent_view_size``, 7) from
  MiniGrid's own ``image`` observation, each cell one-hot encoded as object type (11) + colour (6)
  + state (3) = 20 channels, flattened in ``[x, y, channel]`` order; then the facing direction
  one-hot (4); then the carried object's type (11) and colour (6) one-hot (all zero when empty).
  ``D = V*V*20 + 4 + 17`` (1001 for V = 7).
* ``view="full"``: the same per-cell encoding over the whole ``W x H`` grid, with the agent drawn as
  object type ``agent`` (its direction is in the direction one-hot); ``D = W*H*20 + 21``.

``"pixels"``: the agent's view (egocentric) or the whole grid (full) rendered by MiniGrid, padded
to a square and resized to 64x64x3 uint8.

Reward, termination and the time limit are MiniGrid's own (reward ``1 - 0.9 * steps / max_steps``
on success; ``terminated`` at the goal or in lava; ``truncated`` at ``max_steps``).
``info["success"]`` is True exactly on the step that reaches the goal (for goal-free tasks such as
``Unlock``: the step that ends the episode with a positive reward).

``state_snapshot()`` keys: ``grid`` uint8 ``[W, H, 3]`` (``grid.encode()``; the agent is not drawn),
``agent_pos`` int64 ``[2]`` (x, y), ``agent_dir`` int64 ``[]`` (0 right, 1 down, 2 left, 3 up),
``carrying`` int64 ``[2]`` = ``[OBJECT_TO_IDX[type], COLOR_TO_IDX[color]]``, ``[0, 0]`` when
empty (index 0 is "unseen", which a carried object never is).

``set_layout(grid, agent_pos, agent_dir, carrying=None)`` starts an episode from a hand-built
state (tests and scripted scenarios).
"""

from __future__ import annotations

import hashlib

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
import numpy as np
from gymnasium import spaces
from minigrid.core.constants import COLOR_TO_IDX, IDX_TO_COLOR, IDX_TO_OBJECT, OBJECT_TO_IDX
from minigrid.core.grid import Grid
from minigrid.core.world_object import WorldObj
from minigrid.minigrid_env import MiniGridEnv
from PIL import Image

from lore.envs.base import PIXEL_SIZE, LoreEnv, check_max_episode_steps, check_view, observation_space

N_OBJECT_TYPES = len(OBJECT_TO_IDX)  # 11
N_COLORS = len(COLOR_TO_IDX)  # 6
N_STATES = 3  # open, closed, locked
CELL_CHANNELS = N_OBJECT_TYPES + N_COLORS + N_STATES  # 20
CARRY_CHANNELS = N_OBJECT_TYPES + N_COLORS  # 17
DIRECTION_NAMES = ("right", "down", "left", "up")
DIRECTION_AXES = ("+x", "+y", "-x", "-y")
DOOR_STATE_NAMES = ("open", "closed", "locked")
AGENT_IDX = OBJECT_TO_IDX["agent"]
MAP_CHARS = {"wall": "#", "empty": ".", "floor": ".", "goal": "G", "key": "K", "ball": "B", "box": "X",
             "lava": "~"}
DOOR_CHARS = ("/", "d", "D")  # open, closed, locked
AGENT_CHARS = (">", "v", "<", "^")


def minigrid_ids() -> list[str]:
    """Every ``MiniGrid-*`` id registered with gymnasium (sorted)."""
    return sorted(k for k in gym.registry if k.startswith("MiniGrid-"))


# --------------------------------------------------------------------------- encoding (pure functions)


def one_hot_cells(encoded: np.ndarray) -> np.ndarray:
    """MiniGrid cell codes ``[..., 3]`` (type, colour, state) -> float32 one-hot ``[n_cells * 20]``."""
    codes = encoded.reshape(-1, 3).astype(np.intp)  # [n, 3]
    if codes.size and (codes[:, 0].max() >= N_OBJECT_TYPES or codes[:, 1].max() >= N_COLORS
                       or codes[:, 2].max() >= N_STATES):
        raise ValueError(f"MiniGrid cell code out of range (max type/colour/state {codes.max(axis=0).tolist()})")
    n = codes.shape[0]
    out = np.zeros((n, CELL_CHANNELS), np.float32)  # [n, 20]
    rows = np.arange(n)
    out[rows, codes[:, 0]] = 1.0
    out[rows, N_OBJECT_TYPES + codes[:, 1]] = 1.0
    out[rows, N_OBJECT_TYPES + N_COLORS + codes[:, 2]] = 1.0
    return out.reshape(-1)


def one_hot_direction(direction: int) -> np.ndarray:
    out = np.zeros(4, np.float32)
    out[direction] = 1.0
    return out


def one_hot_carrying(carrying: np.ndarray) -> np.ndarray:
    """``[type_idx, colour_idx]`` (``[0, 0]`` = nothing) -> float32 ``[17]`` (zeros when empty)."""
    out = np.zeros(CARRY_CHANNELS, np.float32)
    if carrying[0] != 0:
        out[carrying[0]] = 1.0
        out[N_OBJECT_TYPES + carrying[1]] = 1.0
    return out


def carrying_code(obj) -> np.ndarray:
    if obj is None:
        return np.zeros(2, np.int64)
    return np.array([OBJECT_TO_IDX[obj.type], COLOR_TO_IDX[obj.color]], np.int64)


def resize_square(image: np.ndarray, size: int = PIXEL_SIZE) -> np.ndarray:
    """Pad an ``[H, W, 3]`` uint8 image to a centred square with black, then resize to ``size``."""
    h, w = image.shape[:2]
    side = max(h, w)
    if h != w:
        canvas = np.zeros((side, side, 3), np.uint8)
        top, left = (side - h) // 2, (side - w) // 2
        canvas[top:top + h, left:left + w] = image
        image = canvas
    if side != size:
        image = np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.BILINEAR))
    return image


# --------------------------------------------------------------------------- text description helpers


def _cell_name(code: np.ndarray) -> str:
    """Short English name of one encoded cell, e.g. 'locked yellow door', 'wall', 'empty floor'."""
    kind = IDX_TO_OBJECT[int(code[0])]
    color = IDX_TO_COLOR[int(code[1])]
    if kind in ("empty", "floor"):
        return "empty floor"
    if kind in ("wall", "goal", "lava"):
        return {"goal": "the goal", "lava": "lava"}.get(kind, kind)
    if kind == "door":
        return f"{DOOR_STATE_NAMES[int(code[2])]} {color} door"
    return f"{color} {kind}"


def _ranges(values: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3, 5'."""
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)


def wall_summary(grid_codes: np.ndarray) -> list[str]:
    """Sentences about the walls of a ``[W, H, 3]`` encoded grid: border, wall lines, stray cells."""
    wall = grid_codes[:, :, 0] == OBJECT_TO_IDX["wall"]  # [W, H]
    width, height = wall.shape
    lines = []
    border = np.ones_like(wall)
    border[1:-1, 1:-1] = False
    if wall[border].all():
        lines.append(f"The outer border (x=0, x={width - 1}, y=0, y={height - 1}) is wall.")
    else:
        gaps = [(int(x), int(y)) for x, y in zip(*np.nonzero(border & ~wall), strict=True)]
        if len(gaps) <= 8:
            lines.append(f"The outer border is wall except at {', '.join(map(str, gaps))}.")
        else:
            lines.append(f"The outer border is not closed: {len(gaps)} of its cells are not wall (see the map).")
    inner = wall.copy()
    inner[border] = False
    covered = np.zeros_like(wall)

    def describe_line(axis_name: str, fixed: int, cells: np.ndarray, other: str, size: int) -> str:
        # cells: the interior cells of this line; openings are the interior non-wall cells
        openings = []
        for k in range(1, size - 1):
            x, y = (fixed, k) if axis_name == "x" else (k, fixed)
            if not wall[x, y]:
                openings.append(f"({x}, {y}) {_cell_name(grid_codes[x, y])}")
        where = "vertical wall at x" if axis_name == "x" else "horizontal wall at y"
        text = f"A {where}={fixed} covers {other}={_ranges(sorted(int(c) for c in cells))}"
        if openings:
            text += "; openings: " + ", ".join(openings)
        return text + "."

    for x in range(1, width - 1):
        ys = np.nonzero(inner[x])[0]
        if len(ys) >= 2 and len(ys) >= (height - 2) / 2:
            lines.append(describe_line("x", x, ys, "y", height))
            covered[x, ys] = True
    for y in range(1, height - 1):
        xs = np.nonzero(inner[:, y] & ~covered[:, y])[0]
        if len(xs) >= 2 and len(xs) >= (width - 2) / 2:
            lines.append(describe_line("y", y, xs, "x", width))
            covered[xs, y] = True
    rest = [(int(x), int(y)) for x, y in zip(*np.nonzero(inner & ~covered), strict=True)]
    if rest and len(rest) <= 10:
        lines.append("Other wall cells: " + ", ".join(map(str, rest)) + ".")
    elif rest:
        lines.append(f"{len(rest)} other interior wall cells (see the map).")
    return lines


def ascii_map(grid_codes: np.ndarray, agent_pos: tuple[int, int], agent_dir: int) -> list[str]:
    """One text row per y (top first), one character per cell."""
    width, height = grid_codes.shape[:2]
    rows = []
    for y in range(height):
        row = []
        for x in range(width):
            if (x, y) == tuple(agent_pos):
                row.append(AGENT_CHARS[agent_dir])
                continue
            kind = IDX_TO_OBJECT[int(grid_codes[x, y, 0])]
            row.append(DOOR_CHARS[int(grid_codes[x, y, 2])] if kind == "door" else MAP_CHARS.get(kind, "?"))
        rows.append("".join(row))
    return rows


# --------------------------------------------------------------------------- the environment


class MiniGridLoreEnv(LoreEnv):
    """A MiniGrid task (any registered ``MiniGrid-*`` id) as a :class:`LoreEnv`."""

    family = "minigrid"

    def __init__(self, name: str, seed: int | None = None, obs: str = "symbolic", view: str = "egocentric",
                 max_episode_steps: int | None = None):
        super().__init__(name, seed, obs)
        self.view = check_view(view)
        max_episode_steps = check_max_episode_steps(max_episode_steps)
        # The raw env, without gymnasium's checker/order wrappers (they cost per step and we do
        # our own checks); MiniGrid registrations add no TimeLimit wrapper.
        try:
            env = gym.make(name, disable_env_checker=True).unwrapped
        except Exception as e:  # e.g. the WFC tasks need pattern files some minigrid wheels lack
            raise RuntimeError(f"minigrid could not build '{name}': {type(e).__name__}: {e}") from e
        if not isinstance(env, MiniGridEnv):
            raise ValueError(f"environment '{name}' is not a MiniGrid environment ({type(env).__name__})")
        self._env: MiniGridEnv = env
        if max_episode_steps is not None:
            env.max_steps = max_episode_steps  # MiniGrid's reward uses it too
        self.action_space = spaces.Discrete(int(env.action_space.n))
        self.action_names = [a.name for a in env.actions][: self.action_space.n]
        if view == "egocentric":
            cells = env.agent_view_size ** 2
        else:
            cells = env.width * env.height
        self.observation_space = observation_space(cells * CELL_CHANNELS + 4 + CARRY_CHANNELS, self.with_pixels)
        self._has_goal = False
        self._grid_cache: np.ndarray | None = None  # grid.encode() of the current step

    # ------------------------------------------------------------------ properties

    @property
    def raw_env(self) -> MiniGridEnv:
        """The raw MiniGrid env (read it; changing it changes the episode)."""
        return self._env

    @property
    def max_steps(self) -> int:
        return int(self._env.max_steps)

    @property
    def step_count(self) -> int:
        return int(self._env.step_count)

    # ------------------------------------------------------------------ gymnasium hooks

    def _reset(self, seed):
        raw_obs, _ = self._env.reset(seed=seed)
        self._grid_cache = None
        self._has_goal = any(cell is not None and cell.type == "goal" for cell in self._env.grid.grid)
        return self._observation(raw_obs), {"success": False}

    def _step(self, action):
        raw_obs, reward, terminated, truncated, _ = self._env.step(action)
        self._grid_cache = None
        success = bool(terminated and reward > 0)
        if success and self._has_goal:
            cell = self._env.grid.get(*self._env.agent_pos)
            success = cell is not None and cell.type == "goal"
        return self._observation(raw_obs), float(reward), bool(terminated), bool(truncated), {"success": success}

    def set_layout(self, grid: Grid, agent_pos: tuple[int, int], agent_dir: int, carrying: WorldObj | None = None,
                   mission: str | None = None) -> dict[str, np.ndarray]:
        """Start an episode from a hand-built state (tests, scripted scenarios); returns its observation.

        ``grid`` must have the env's size; the agent's cell must be free or walkable. The step
        count restarts at 0; reward, termination and time limit then follow MiniGrid as usual.
        """
        env = self._env
        if (grid.width, grid.height) != (env.width, env.height):
            raise ValueError(f"set_layout: grid is {grid.width}x{grid.height}, the env is {env.width}x{env.height}")
        x, y = (int(v) for v in agent_pos)
        if not (0 <= x < grid.width and 0 <= y < grid.height):
            raise ValueError(f"set_layout: agent_pos {agent_pos} is outside the {grid.width}x{grid.height} grid")
        cell = grid.get(x, y)
        if cell is not None and not cell.can_overlap():
            raise ValueError(f"set_layout: the agent cannot stand on the {cell.type} at ({x}, {y})")
        if agent_dir not in (0, 1, 2, 3):
            raise ValueError(f"set_layout: agent_dir must be 0 (right), 1 (down), 2 (left) or 3 (up), got {agent_dir!r}")
        env.grid, env.agent_pos, env.agent_dir, env.carrying = grid, (x, y), int(agent_dir), carrying
        if mission is not None:
            env.mission = mission
        env.step_count = 0
        self._grid_cache = None
        self._has_goal = any(c is not None and c.type == "goal" for c in grid.grid)
        self._needs_reset = False
        self._pending_seed = None
        return self._observation(env.gen_obs())

    def render(self) -> np.ndarray:
        """Full-grid RGB frame (MiniGrid's own rendering, 32 px per cell)."""
        return self._env.get_frame(highlight=True)

    def close(self):
        self._env.close()

    # ------------------------------------------------------------------ observations

    def _grid_codes(self) -> np.ndarray:
        if self._grid_cache is None:
            self._grid_cache = self._env.grid.encode()
        return self._grid_cache

    def _observation(self, raw_obs: dict) -> dict[str, np.ndarray]:
        env = self._env
        if self.view == "egocentric":
            cells = raw_obs["image"]  # [V, V, 3], carried object drawn at the agent's cell
        else:
            cells = self._grid_codes().copy()  # [W, H, 3]
            cells[env.agent_pos[0], env.agent_pos[1]] = (AGENT_IDX, 0, 0)
        symbolic = np.concatenate([
            one_hot_cells(cells),
            one_hot_direction(env.agent_dir),
            one_hot_carrying(carrying_code(env.carrying)),
        ])
        out = {"symbolic": symbolic}
        if self.with_pixels:
            out["pixels"] = self._pixels()
        return out

    def _pixels(self) -> np.ndarray:
        env = self._env
        if self.view == "egocentric":
            size = env.agent_view_size
            tile = -(-PIXEL_SIZE // size)
            grid, vis_mask = env.gen_obs_grid()
            image = grid.render(tile, agent_pos=(size // 2, size - 1), agent_dir=3, highlight_mask=vis_mask)
        else:
            tile = -(-PIXEL_SIZE // max(env.width, env.height))
            image = env.grid.render(tile, env.agent_pos, env.agent_dir, highlight_mask=None)
        return resize_square(image)

    # ------------------------------------------------------------------ LLM-side views

    def state_snapshot(self) -> dict[str, np.ndarray]:
        env = self._env
        return {
            "grid": self._grid_codes().copy(),
            "agent_pos": np.array(env.agent_pos, np.int64),
            "agent_dir": np.array(env.agent_dir, np.int64),
            "carrying": carrying_code(env.carrying),
        }

    def state_key(self) -> str:
        """``"x,y,dir|carried|door states|grid digest"``, e.g. ``"1,2,0|key:yellow|L|3fa9c2d1"``.

        The digest (of ``grid.encode()``) pins the layout and every object on the grid, so a key
        from one episode's layout never matches another layout's.
        """
        env = self._env
        codes = self._grid_codes()
        carried = "-" if env.carrying is None else f"{env.carrying.type}:{env.carrying.color}"
        door_cells = codes[codes[:, :, 0] == OBJECT_TO_IDX["door"]]
        doors = "".join("OCL"[int(s)] for s in door_cells[:, 2]) or "-"
        digest = hashlib.blake2b(codes.tobytes(), digest_size=4).hexdigest()
        x, y = env.agent_pos
        return f"{x},{y},{env.agent_dir}|{carried}|{doors}|{digest}"

    def describe(self, include_map: bool = True) -> str:
        env = self._env
        codes = self._grid_codes()
        width, height = codes.shape[:2]
        x, y = (int(v) for v in env.agent_pos)
        direction = int(env.agent_dir)
        lines = [
            f"Mission: {env.mission}.",
            f"Grid: {width}x{height} cells. Coordinates are (x, y) with x increasing to the right and "
            f"y increasing downwards; (0, 0) is the top-left corner.",
            f"Agent: at ({x}, {y}), facing {DIRECTION_NAMES[direction]} ({DIRECTION_AXES[direction]}). "
            "Directions: right = +x, down = +y, left = -x, up = -y; 'forward' moves one cell in the facing "
            "direction, 'left'/'right' turn 90 degrees in place.",
            "Carrying: nothing." if env.carrying is None
            else f"Carrying: a {env.carrying.color} {env.carrying.type}.",
        ]
        by_kind: dict[str, list[str]] = {}
        for cx, cy in zip(*np.nonzero(~np.isin(codes[:, :, 0], [OBJECT_TO_IDX[k] for k in
                                                                ("empty", "floor", "wall", "unseen")])), strict=True):
            code = codes[cx, cy]
            kind = IDX_TO_OBJECT[int(code[0])]
            by_kind.setdefault(kind, []).append(f"{_cell_name(code)} at ({cx}, {cy})")
        headings = {"key": "Keys", "door": "Doors", "goal": "Goal", "ball": "Balls", "box": "Boxes",
                    "lava": "Lava"}
        for kind, heading in headings.items():
            items = by_kind.pop(kind, [])
            if kind == "lava" and len(items) > 16:
                lines.append(f"Lava: {len(items)} cells (see the map).")
            elif kind == "lava" and items:
                lines.append("Lava at: " + ", ".join(i.split(" at ")[1] for i in items) + ".")
            elif kind == "goal" and items:
                lines.append("Goal: at " + ", ".join(i.split(" at ")[1] for i in items) + ".")
            elif items:
                lines.append(f"{heading}: " + "; ".join(items) + ".")
        for kind, items in by_kind.items():
            lines.append(f"{kind.capitalize()}: " + "; ".join(items) + ".")
        lines.extend(wall_summary(codes))
        fx, fy = (int(v) for v in env.front_pos)
        if 0 <= fx < width and 0 <= fy < height:
            lines.append(f"Directly in front of the agent, at ({fx}, {fy}): {_cell_name(codes[fx, fy])}.")
        # No step counter: it would make every prompt unique and defeat the persistent LLM cache.
        if include_map:
            lines.append("Map (row y=0 first; # wall, . floor, G goal, K key, D locked door, d closed door, "
                         "/ open door, B ball, X box, ~ lava, agent >v<^ by facing):")
            lines.extend(ascii_map(codes, (x, y), direction))
        return "\n".join(lines)
