"""Offline advisors: answers in the :class:`~lore.llm.schema.Advice` format computed from the env's
true state (``state_snapshot()``), so everything runs without a key or a network.

* MiniGrid: an exact planner. Breadth-first search over (position, facing, carried object, door
  states) with MiniGrid's own action semantics (turn, forward, pickup, toggle — a locked door needs
  the same-coloured key) gives the cost-to-go of every reachable state; the advice favours the next
  action of a shortest path (+4 logit, 0 for the others) and carries the whole remaining path as
  ``plan``. Tasks without a goal cell, or states with no path, get uniform logits and low confidence.
* Crafter: a heuristic over the achievement ladder (wood -> table -> wood pickaxe -> stone -> stone
  pickaxe -> coal / furnace / iron ...; drink and eat when low), walking to the nearest needed
  material in the local semantic map (BFS over walkable cells) and pressing ``do`` when facing it.

Modes (:class:`~lore.config.AdvisorConfig`): ``good``; ``noisy`` (with probability ``1 - accuracy`` a
uniformly drawn *wrong* action is recommended, seeded RNG); ``adversarial`` (the worst action: for
MiniGrid the one with the largest cost-to-go, for Crafter the opposite move or ``noop``). Neither
noisy-wrong nor adversarial advice carries a plan longer than its own bad action sequence.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

GOOD_LOGIT = 4.0
LOW_CONFIDENCE = 0.05
MAX_SEARCH_STATES = 200_000
"""The MiniGrid search gives up (uniform advice) beyond this many states."""

# ----------------------------------------------------------------------------- MiniGrid constants
# minigrid.core.constants, copied so this module needs no minigrid import to plan.
MG_EMPTY, MG_WALL, MG_FLOOR, MG_DOOR, MG_KEY, MG_BALL, MG_BOX, MG_GOAL, MG_LAVA = 1, 2, 3, 4, 5, 6, 7, 8, 9
MG_OPEN, MG_CLOSED, MG_LOCKED = 0, 1, 2
MG_DIR_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))  # right, down, left, up
MG_ACTIONS = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
MG_PASSABLE = (0, MG_EMPTY, MG_FLOOR, MG_GOAL)
_TIE_ORDER = ("forward", "left", "right", "pickup", "toggle", "drop", "done")
"""Preference among equally short paths (deterministic plans)."""

GOAL = "goal"  # terminal pseudo-state of the search


def action_ids(action_names: list[str], expected: tuple[str, ...]) -> dict[str, int]:
    """Name -> id for the names the advisor knows; unknown names are ignored."""
    ids = {name: i for i, name in enumerate(action_names)}
    missing = [n for n in expected if n not in ids]
    if len(missing) == len(expected):
        raise ValueError(f"scripted advisor: none of the expected actions {list(expected)} in {action_names}")
    return {n: ids[n] for n in expected if n in ids}


# ----------------------------------------------------------------------------- MiniGrid planner


@dataclass(frozen=True)
class GridModel:
    """The static part of a MiniGrid state; doors and pickable objects are indexed for the search."""

    width: int
    height: int
    codes: np.ndarray  # [W, H, 3] uint8, the grid with dynamic objects still drawn
    objects: tuple[tuple[int, ...], ...]  # [W][H] object ids as Python ints (fast lookups in the search)
    doors: tuple[tuple[int, int, int], ...]  # (x, y, colour)
    items: tuple[tuple[int, int, int, int], ...]  # (x, y, object, colour) of keys/balls/boxes
    door_at: dict
    item_at: dict
    has_goal: bool


def grid_model(codes: np.ndarray) -> GridModel:
    """``codes [W, H, 3]`` (MiniGrid ``grid.encode()``) -> :class:`GridModel`."""
    codes = np.asarray(codes)
    if codes.ndim != 3 or codes.shape[2] != 3:
        raise ValueError(f"MiniGrid snapshot 'grid' must have shape [W, H, 3], got {codes.shape}")
    doors, items = [], []
    for x, y in zip(*np.nonzero(codes[:, :, 0] == MG_DOOR), strict=True):
        doors.append((int(x), int(y), int(codes[x, y, 1])))
    for x, y in zip(*np.nonzero(np.isin(codes[:, :, 0], (MG_KEY, MG_BALL, MG_BOX))), strict=True):
        items.append((int(x), int(y), int(codes[x, y, 0]), int(codes[x, y, 1])))
    return GridModel(
        width=codes.shape[0], height=codes.shape[1], codes=codes,
        objects=tuple(tuple(int(v) for v in column) for column in codes[:, :, 0]),
        doors=tuple(doors), items=tuple(items),
        door_at={(x, y): i for i, (x, y, _) in enumerate(doors)},
        item_at={(x, y): i for i, (x, y, _, _) in enumerate(items)},
        has_goal=bool((codes[:, :, 0] == MG_GOAL).any()),
    )


# A search state: (x, y, dir, carried item index or -1 (-2: carrying something not on the grid), door states)
MGState = tuple


def initial_state(model: GridModel, snapshot: dict) -> MGState:
    x, y = (int(v) for v in np.asarray(snapshot["agent_pos"]).reshape(-1)[:2])
    direction = int(np.asarray(snapshot["agent_dir"]).reshape(()))
    carrying = np.asarray(snapshot["carrying"]).reshape(-1)
    # A carried object is not on the grid; -2 marks "carrying (type, colour) from the snapshot".
    carried = -1 if int(carrying[0]) == 0 else -2
    doors = tuple(int(model.codes[dx, dy, 2]) for dx, dy, _ in model.doors)
    return (x, y, direction, carried, doors)


def _carried_object(model: GridModel, state: MGState, snapshot_carrying: tuple[int, int]) -> tuple[int, int] | None:
    carried = state[3]
    if carried == -1:
        return None
    if carried == -2:
        return snapshot_carrying
    _, _, obj, colour = model.items[carried]
    return obj, colour


def mg_transition(model: GridModel, state: MGState, action: str,
                  snapshot_carrying: tuple[int, int]) -> MGState | str | None:
    """One MiniGrid step in the model: the next state, :data:`GOAL`, or None (death in lava).

    ``drop`` is modelled as a no-op (it never shortens a path to the goal and would blow up the
    state space); :func:`minigrid_action_costs` evaluates a real drop separately.
    """
    x, y, d, carried, doors = state
    if action == "left":
        return (x, y, (d - 1) % 4, carried, doors)
    if action == "right":
        return (x, y, (d + 1) % 4, carried, doors)
    fx, fy = x + MG_DIR_VEC[d][0], y + MG_DIR_VEC[d][1]
    if not (0 <= fx < model.width and 0 <= fy < model.height):
        return state
    obj = model.objects[fx][fy]
    door = model.door_at.get((fx, fy))
    item = model.item_at.get((fx, fy))
    item_present = item is not None and carried != item
    if action == "forward":
        if door is not None:
            return (fx, fy, d, carried, doors) if doors[door] == MG_OPEN else state
        if item_present:
            return state
        if obj == MG_LAVA:
            return None
        if obj == MG_GOAL:
            return GOAL
        return (fx, fy, d, carried, doors) if obj in MG_PASSABLE or item is not None else state
    if action == "pickup":
        if carried == -1 and item_present:
            return (x, y, d, item, doors)
        return state
    if action == "toggle" and door is not None:
        current = doors[door]
        if current == MG_LOCKED:
            held = _carried_object(model, state, snapshot_carrying)
            if held is None or held != (MG_KEY, model.doors[door][2]):
                return state
            new = MG_OPEN
        else:
            new = MG_CLOSED if current == MG_OPEN else MG_OPEN
        return (x, y, d, carried, doors[:door] + (new,) + doors[door + 1:])
    return state  # drop, done, toggle on a non-door


def cost_to_go(model: GridModel, start: MGState, snapshot_carrying: tuple[int, int],
               actions: tuple[str, ...] = _TIE_ORDER) -> dict | None:
    """Fewest actions from every state reachable from ``start`` to the goal (missing = unreachable).

    Forward BFS enumerates the reachable graph, then a backward BFS from :data:`GOAL` gives the
    distances. Returns None when the search exceeds :data:`MAX_SEARCH_STATES`.
    """
    successors: dict = {}
    frontier = deque([start])
    successors[start] = None
    while frontier:
        state = frontier.popleft()
        nexts = []
        for action in actions:
            nxt = mg_transition(model, state, action, snapshot_carrying)
            nexts.append(nxt)
            if nxt is not None and nxt != GOAL and nxt not in successors:
                successors[nxt] = None
                frontier.append(nxt)
                if len(successors) > MAX_SEARCH_STATES:
                    return None
        successors[state] = nexts
    predecessors: dict = {}
    for state, nexts in successors.items():
        for nxt in nexts:
            if nxt is not None and nxt != state:
                predecessors.setdefault(nxt, []).append(state)
    dist = {GOAL: 0}
    frontier = deque([GOAL])
    while frontier:
        state = frontier.popleft()
        for prev in predecessors.get(state, ()):
            if prev not in dist:
                dist[prev] = dist[state] + 1
                frontier.append(prev)
    return dist


def minigrid_plan(model: GridModel, start: MGState, dist: dict, snapshot_carrying: tuple[int, int],
                  max_len: int) -> list[str]:
    """Greedy descent of the cost-to-go from ``start``: a shortest action sequence (names)."""
    plan: list[str] = []
    state = start
    while state != GOAL and len(plan) < max_len and state in dist:
        best = None
        for action in _TIE_ORDER:
            nxt = mg_transition(model, state, action, snapshot_carrying)
            if nxt is not None and dist.get(nxt, math.inf) == dist[state] - 1:
                best = (action, nxt)
                break
        if best is None:
            break
        plan.append(best[0])
        state = best[1]
    return plan


def minigrid_action_costs(snapshot: dict, names: tuple[str, ...] = MG_ACTIONS) -> dict[str, float]:
    """Fewest actions to the goal after taking each action now (inf: never / death)."""
    model = grid_model(snapshot["grid"])
    carrying = tuple(int(v) for v in np.asarray(snapshot["carrying"]).reshape(-1)[:2])
    start = initial_state(model, snapshot)
    dist = cost_to_go(model, start, carrying)
    costs: dict[str, float] = {}
    for action in names:
        if action == "drop":
            costs[action] = _drop_cost(snapshot, start, carrying, dist)
            continue
        nxt = mg_transition(model, start, action, carrying)
        if nxt is None or dist is None:
            costs[action] = math.inf
        else:
            costs[action] = 1.0 + dist.get(nxt, math.inf) if nxt != GOAL else 1.0
    return costs


def _drop_cost(snapshot: dict, start: MGState, carrying: tuple[int, int], dist: dict | None) -> float:
    x, y, d = start[0], start[1], start[2]
    grid = np.asarray(snapshot["grid"])
    fx, fy = x + MG_DIR_VEC[d][0], y + MG_DIR_VEC[d][1]
    if carrying[0] == 0 or not (0 <= fx < grid.shape[0] and 0 <= fy < grid.shape[1]) \
            or int(grid[fx, fy, 0]) not in (MG_EMPTY, MG_FLOOR):
        return 1.0 + (dist or {}).get(start, math.inf)  # a no-op
    dropped = grid.copy()
    dropped[fx, fy] = (carrying[0], carrying[1], 0)
    after = dict(snapshot, grid=dropped, carrying=np.zeros(2, np.int64))
    model = grid_model(dropped)
    new_start = initial_state(model, after)
    new_dist = cost_to_go(model, new_start, (0, 0))
    return 1.0 + (new_dist or {}).get(new_start, math.inf)


def _subgoal(plan: list[str]) -> str:
    for action in plan:
        if action == "pickup":
            return "pick up the key"
        if action == "toggle":
            return "open the door"
    return "go to the goal"


# ----------------------------------------------------------------------------- Crafter heuristic

CRAFTER_ACTIONS = (
    "noop", "move_left", "move_right", "move_up", "move_down", "do", "sleep", "place_stone", "place_table",
    "place_furnace", "place_plant", "make_wood_pickaxe", "make_stone_pickaxe", "make_iron_pickaxe",
    "make_wood_sword", "make_stone_sword", "make_iron_sword",
)
MOVES = {"move_left": (-1, 0), "move_right": (1, 0), "move_up": (0, -1), "move_down": (0, 1)}
OPPOSITE = {"move_left": "move_right", "move_right": "move_left", "move_up": "move_down",
            "move_down": "move_up"}


def crafter_names() -> tuple[list[str], list[str], list[str]]:
    """(MATERIAL_NAMES, INVENTORY_NAMES, ACHIEVEMENTS) of :mod:`lore.envs.crafter`."""
    from lore.envs.crafter import ACHIEVEMENTS, INVENTORY_NAMES, MATERIAL_NAMES

    return MATERIAL_NAMES, INVENTORY_NAMES, ACHIEVEMENTS


def crafter_costs() -> dict[str, dict[str, int]]:
    """What placing / making needs, from crafter's own data.yaml (e.g. ``{"place_table": {"wood": n}}``)."""
    from crafter import constants

    costs = {f"place_{k}": dict(v["uses"]) for k, v in constants.place.items()}
    costs.update({f"make_{k}": dict(v["uses"]) for k, v in constants.make.items()})
    return costs


@dataclass
class CrafterView:
    """The snapshot decoded with names: ``sem [V, V]`` ids indexed [x, y], the player at the centre."""

    sem: np.ndarray
    names: list[str]
    inventory: dict[str, int]
    achievements: dict[str, bool]
    facing: tuple[int, int]

    @property
    def center(self) -> int:
        return self.sem.shape[0] // 2

    def ids(self, *names: str) -> list[int]:
        return [self.names.index(n) for n in names if n in self.names]

    def at(self, dx: int, dy: int) -> str:
        x, y = self.center + dx, self.center + dy
        if not (0 <= x < self.sem.shape[0] and 0 <= y < self.sem.shape[1]):
            return "none"
        return self.names[int(self.sem[x, y])]

    def near(self, name: str, distance: int = 1) -> bool:
        """``name`` within Chebyshev ``distance`` of the player (crafter's 'nearby' for crafting)."""
        c = self.center
        window = self.sem[max(c - distance, 0):c + distance + 1, max(c - distance, 0):c + distance + 1]
        return bool(np.isin(window, self.ids(name)).any())

    def visible(self, name: str) -> bool:
        return bool(np.isin(self.sem, self.ids(name)).any())


def crafter_view(snapshot: dict) -> CrafterView:
    materials, inventory_names, achievements = crafter_names()
    sem = np.asarray(snapshot["semantic"])
    if sem.ndim != 2 or sem.shape[0] != sem.shape[1]:
        raise ValueError(f"Crafter snapshot 'semantic' must be a square [V, V] map, got {sem.shape}")
    counts = np.asarray(snapshot["inventory"]).reshape(-1)
    bits = np.asarray(snapshot["achievements"]).reshape(-1)
    if counts.size != len(inventory_names) or bits.size != len(achievements):
        raise ValueError(f"Crafter snapshot: 'inventory' has {counts.size} entries (expected {len(inventory_names)}), "
                         f"'achievements' {bits.size} (expected {len(achievements)})")
    inventory = dict(zip(inventory_names, (int(v) for v in counts), strict=True))
    unlocked = dict(zip(achievements, (bool(v) for v in bits), strict=True))
    facing = tuple(int(v) for v in np.asarray(snapshot["facing"]).reshape(-1)[:2])
    return CrafterView(sem=sem, names=materials, inventory=inventory, achievements=unlocked, facing=facing)


WALKABLE = ("grass", "sand", "path")


def path_to_adjacent(view: CrafterView, targets: list[str]) -> list[str] | None:
    """Shortest moves (then a turn if needed, then ``do``) to face the nearest ``targets`` cell.

    BFS over walkable, creature-free cells of the local map; returns action names or None when no
    target is reachable in view.
    """
    target_ids = set(view.ids(*targets))
    if not target_ids:
        return None
    walkable = set(view.ids(*WALKABLE))
    size = view.sem.shape[0]
    start = (view.center, view.center)
    parents: dict = {start: None}
    frontier = deque([start])
    while frontier:
        cell = frontier.popleft()
        for move, (dx, dy) in MOVES.items():
            nx, ny = cell[0] + dx, cell[1] + dy
            if not (0 <= nx < size and 0 <= ny < size):
                continue
            if int(view.sem[nx, ny]) in target_ids:
                moves = _unwind(parents, cell)
                last_dir = MOVES[moves[-1]] if moves else view.facing
                if last_dir != (dx, dy):
                    moves.append(move)  # facing a non-walkable target: the move only turns
                return moves + ["do"]
            if (nx, ny) not in parents and int(view.sem[nx, ny]) in walkable:
                parents[(nx, ny)] = (cell, move)
                frontier.append((nx, ny))
    return None


def _unwind(parents: dict, cell) -> list[str]:
    moves = []
    while parents[cell] is not None:
        cell, move = parents[cell]
        moves.append(move)
    return moves[::-1]


def explore_move(view: CrafterView) -> str:
    """Keep going the way the player faces if free, else towards the most open free neighbour."""
    walkable = set(view.ids(*WALKABLE))
    c = view.center
    free = {m: int(view.sem[c + dx, c + dy]) in walkable for m, (dx, dy) in MOVES.items()}
    ahead = next((m for m, v in MOVES.items() if v == view.facing), "move_left")
    if free.get(ahead):
        return ahead

    def openness(move: str) -> int:
        dx, dy = MOVES[move]
        xs = slice(c + 1, None) if dx > 0 else slice(0, c) if dx < 0 else slice(None)
        ys = slice(c + 1, None) if dy > 0 else slice(0, c) if dy < 0 else slice(None)
        return int(np.isin(view.sem[xs, ys], list(walkable)).sum())

    # Boxed in: a move into a blocked (non-lava) cell only turns the player; never walk into lava.
    options = [m for m in MOVES if free[m]] or [m for m, (dx, dy) in MOVES.items()
                                                 if view.at(dx, dy) != "lava"] or ["noop"]
    if options == ["noop"]:
        return "noop"
    return max(options, key=lambda m: (openness(m), -list(MOVES).index(m)))


def _placeable_ahead(view: CrafterView, where: tuple[str, ...] = WALKABLE) -> bool:
    return view.at(*view.facing) in where


def _place_plan(view: CrafterView, action: str) -> list[str]:
    """Place something on the facing cell, after stepping so that a free cell is ahead if needed."""
    if _placeable_ahead(view):
        return [action]
    for move, (dx, dy) in MOVES.items():
        if view.at(dx, dy) in WALKABLE and view.at(2 * dx, 2 * dy) in WALKABLE:
            return [move, action]
    return [explore_move(view)]


def crafter_good_plan(view: CrafterView) -> tuple[list[str], str]:
    """(actions, subgoal) of the ladder heuristic; the first action is the advice."""
    inv, done = view.inventory, view.achievements
    costs = crafter_costs()
    table_wood = costs["place_table"].get("wood", 1)
    furnace_stone = costs["place_furnace"].get("stone", 1)

    def go(targets: list[str], subgoal: str) -> tuple[list[str], str] | None:
        path = path_to_adjacent(view, targets)
        return (path, subgoal) if path else None

    def wood_or_explore() -> tuple[list[str], str]:
        return go(["tree"], "collect wood") or ([explore_move(view)], "explore to find trees")

    # Survival first: fight an adjacent zombie (it hits hard, and defeat_zombie is an achievement).
    for move, (dx, dy) in MOVES.items():
        if view.at(dx, dy) == "zombie":
            return ([] if view.facing == (dx, dy) else [move]) + ["do"], "defeat the zombie"
    if inv.get("drink", 9) <= 3 and (step := go(["water"], "drink water")):
        return step
    if inv.get("food", 9) <= 3 and (step := go(["cow"], "eat a cow")):
        return step
    if inv.get("energy", 9) <= 1 and not view.visible("zombie"):
        return ["sleep"], "sleep to restore energy"

    def craft(action: str, subgoal: str) -> tuple[list[str], str]:
        """Make ``action`` at a table: gather wood, reach or place a table, then craft."""
        needs = costs[action]
        for item, count in needs.items():
            if inv.get(item, 0) < count:
                if item == "wood":
                    return wood_or_explore()
                return go([item], f"collect {item}") or ([explore_move(view)], f"explore to find {item}")
        if view.near("table"):
            return [action], subgoal
        if view.visible("table") and (step := go(["table"], "walk to the table")):
            return step[0][:-1] or [action], step[1]  # arrive next to it; no 'do' on a table
        if inv.get("wood", 0) >= table_wood + needs.get("wood", 0):
            return _place_plan(view, "place_table"), "place a table"
        return wood_or_explore()

    if inv.get("wood_pickaxe", 0) == 0:
        return craft("make_wood_pickaxe", "make a wood pickaxe")
    if not done.get("make_wood_sword") and inv.get("wood", 0) >= 1 and view.near("table"):
        return ["make_wood_sword"], "make a wood sword"
    if not done.get("collect_drink") and (step := go(["water"], "drink water")):
        return step
    if inv.get("stone_pickaxe", 0) == 0:
        return craft("make_stone_pickaxe", "make a stone pickaxe")
    if not done.get("place_stone") and inv.get("stone", 0) >= 1:
        if view.at(*view.facing) in (*WALKABLE, "water", "lava"):
            return ["place_stone"], "place a stone"
    if not done.get("make_stone_sword") and inv.get("wood", 0) >= 1 and inv.get("stone", 0) >= 1 \
            and view.near("table"):
        return ["make_stone_sword"], "make a stone sword"
    if not done.get("eat_cow") and (step := go(["cow"], "eat a cow")):
        return step
    if inv.get("coal", 0) == 0 and (step := go(["coal"], "collect coal")):
        return step
    if not done.get("place_furnace"):
        if inv.get("stone", 0) < furnace_stone:
            return go(["stone"], "collect stone for a furnace") or wood_or_explore()
        if view.near("table"):
            return _place_plan(view, "place_furnace"), "place a furnace"
        return craft("make_stone_pickaxe", "walk to a table") if view.visible("table") else wood_or_explore()
    if inv.get("iron", 0) == 0 and (step := go(["iron"], "collect iron")):
        return step
    if inv.get("iron", 0) >= 1 and inv.get("iron_pickaxe", 0) == 0:
        if view.near("table") and view.near("furnace") and inv.get("coal", 0) >= 1 and inv.get("wood", 0) >= 1:
            return ["make_iron_pickaxe"], "make an iron pickaxe"
    if inv.get("iron_pickaxe", 0) and (step := go(["diamond"], "collect diamond")):
        return step
    return go(["tree"], "collect wood") or go(["stone"], "collect stone") or (
        [explore_move(view)], "explore")


# ----------------------------------------------------------------------------- feature code

MINIGRID_FEATURES = """\
N = {n}


def compute_features(obs):
    grid = obs["grid"]
    width = len(grid)
    height = len(grid[0])
    ax = int(obs["agent_pos"][0])
    ay = int(obs["agent_pos"][1])
    direction = int(obs["agent_dir"])
    fx = ax + [1, 0, -1, 0][direction]
    fy = ay + [0, 1, 0, -1][direction]
    scale = float(width + height)
    key_d = 1.0
    door_d = 1.0
    goal_d = 1.0
    door_open = 0.0
    for x in range(width):
        for y in range(height):
            kind = int(grid[x][y][0])
            d = (abs(x - ax) + abs(y - ay)) / scale
            if kind == 5:
                key_d = min(key_d, d)
            elif kind == 4:
                door_d = min(door_d, d)
                if int(grid[x][y][2]) == 0:
                    door_open = 1.0
            elif kind == 8:
                goal_d = min(goal_d, d)
    front = 0
    if 0 <= fx < width and 0 <= fy < height:
        front = int(grid[fx][fy][0])
    has_key = 1.0 if int(obs["carrying"][0]) == 5 else 0.0
    if has_key > 0:
        key_d = 0.0
    feats = [key_d, door_d, goal_d, has_key, door_open,
             1.0 if front == 5 else 0.0, 1.0 if front == 4 else 0.0, 1.0 if front == 8 else 0.0]
    feats = feats + [0.0] * N
    return feats[:N]
"""

CRAFTER_FEATURES = """\
N = {n}
TREE = {tree}
STONE = {stone}
WATER = {water}
COW = {cow}
WOOD = {wood}
WOOD_PICKAXE = {wood_pickaxe}
STONE_PICKAXE = {stone_pickaxe}


def compute_features(obs):
    sem = obs["semantic"]
    size = len(sem)
    c = size // 2
    counts = {{TREE: 0, STONE: 0, WATER: 0, COW: 0}}
    tree_d = 1.0
    for x in range(size):
        for y in range(size):
            kind = int(sem[x][y])
            if kind in counts:
                counts[kind] = counts[kind] + 1
            if kind == TREE:
                tree_d = min(tree_d, (abs(x - c) + abs(y - c)) / float(2 * size))
    inv = obs["inventory"]
    feats = [tree_d, min(counts[TREE] / 10.0, 1.0), min(counts[STONE] / 10.0, 1.0),
             min(counts[WATER] / 10.0, 1.0), min(counts[COW] / 3.0, 1.0),
             min(int(inv[WOOD]) / 5.0, 1.0), 1.0 if int(inv[WOOD_PICKAXE]) > 0 else 0.0,
             1.0 if int(inv[STONE_PICKAXE]) > 0 else 0.0]
    feats = feats + [0.0] * N
    return feats[:N]
"""


def features_code(env_family: str, n_features: int) -> str:
    """Feature code for the sandbox: only ``obs[...]``, builtins and plain arithmetic; ``n`` floats."""
    if n_features < 1:
        raise ValueError(f"features_code: n_features must be >= 1, got {n_features}")
    if env_family == "minigrid":
        return MINIGRID_FEATURES.format(n=n_features)
    if env_family == "crafter":
        materials, inventory, _ = crafter_names()
        return CRAFTER_FEATURES.format(
            n=n_features, tree=materials.index("tree"), stone=materials.index("stone"),
            water=materials.index("water"), cow=materials.index("cow"), wood=inventory.index("wood"),
            wood_pickaxe=inventory.index("wood_pickaxe"), stone_pickaxe=inventory.index("stone_pickaxe"))
    raise ValueError(f"features_code: unknown env_family {env_family!r}")


# ----------------------------------------------------------------------------- the advisor


class ScriptedAdvisor:
    """Answers from the true state; holds only the RNG of the ``noisy`` mode."""

    def __init__(self, mode: str = "good", accuracy: float = 1.0, confidence: float = 0.9, seed: int = 0,
                 max_plan_len: int = 32, n_features: int | None = None):
        if mode not in ("good", "noisy", "adversarial"):
            raise ValueError(f"advisor mode must be good|noisy|adversarial, got {mode!r}")
        if not 0.0 <= accuracy <= 1.0:
            raise ValueError(f"advisor accuracy must be in [0, 1], got {accuracy}")
        if not 0.0 <= confidence <= 1.0:
            raise ValueError(f"advisor confidence must be in [0, 1], got {confidence}")
        self.mode = mode
        self.accuracy = accuracy
        self.confidence = confidence
        self.max_plan_len = max_plan_len
        self.n_features = n_features
        self.rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x11AD]))

    def advise(self, snapshot: dict, env_family: str, action_names: list[str],
               with_features: bool | None = None) -> dict:
        """A raw answer dict in the :class:`~lore.llm.schema.Advice` format."""
        if snapshot is None:
            raise ValueError("scripted advisor needs the env's state_snapshot() (request.snapshot is None)")
        if env_family == "minigrid":
            answer = self._minigrid(snapshot, action_names)
        elif env_family == "crafter":
            answer = self._crafter(snapshot, action_names)
        else:
            raise ValueError(f"scripted advisor: unknown env_family {env_family!r}")
        want = self.n_features is not None if with_features is None else with_features
        if want and self.n_features:
            answer["features_code"] = features_code(env_family, self.n_features)
        return answer

    # ------------------------------------------------------------------ shared

    def _answer(self, num_actions: int, best: int | None, plan: list[int] | None, confidence: float,
                subgoal: str, notes: str = "") -> dict:
        logits = [0.0] * num_actions
        if best is not None:
            logits[best] = GOOD_LOGIT
        answer = {"action_prior": {"logits": logits}, "confidence": float(confidence), "subgoal": subgoal,
                  "notes": notes}
        if plan:
            answer["plan"] = plan[: self.max_plan_len]
        return answer

    def _uniform(self, num_actions: int, why: str) -> dict:
        return self._answer(num_actions, None, None, min(LOW_CONFIDENCE, self.confidence), "", why)

    def _noisy_wrong(self) -> bool:
        return self.mode == "noisy" and self.rng.random() >= self.accuracy

    def _wrong_action(self, num_actions: int, right: int) -> int:
        choice = int(self.rng.integers(num_actions - 1))
        return choice + (choice >= right)

    # ------------------------------------------------------------------ MiniGrid

    def _minigrid(self, snapshot: dict, action_names: list[str]) -> dict:
        n = len(action_names)
        ids = action_ids(action_names, MG_ACTIONS)
        model = grid_model(snapshot["grid"])
        if not model.has_goal:
            return self._uniform(n, "no goal cell in this task: no advice")
        known = tuple(a for a in MG_ACTIONS if a in ids)
        if self.mode == "adversarial":
            costs = minigrid_action_costs(snapshot, known)
            worst = max(known, key=lambda a: (costs[a], ids[a]))
            return self._answer(n, ids[worst], [ids[worst]], self.confidence, "", "adversarial advice")
        carrying = tuple(int(v) for v in np.asarray(snapshot["carrying"]).reshape(-1)[:2])
        start = initial_state(model, snapshot)
        dist = cost_to_go(model, start, carrying, tuple(a for a in _TIE_ORDER if a in ids))
        if dist is None or start not in dist:
            return self._uniform(n, "no path to the goal found")
        plan = minigrid_plan(model, start, dist, carrying, self.max_plan_len)
        plan_ids = [ids[a] for a in plan]
        if not plan_ids:
            return self._uniform(n, "no path to the goal found")
        if self._noisy_wrong():
            wrong = self._wrong_action(n, plan_ids[0])
            return self._answer(n, wrong, [wrong], self.confidence, "", "noisy advice")
        return self._answer(n, plan_ids[0], plan_ids, self.confidence, _subgoal(plan),
                            f"{dist[start]} actions to the goal")

    # ------------------------------------------------------------------ Crafter

    def _crafter(self, snapshot: dict, action_names: list[str]) -> dict:
        n = len(action_names)
        ids = action_ids(action_names, CRAFTER_ACTIONS)
        view = crafter_view(snapshot)
        plan, subgoal = crafter_good_plan(view)
        plan = [a for a in plan if a in ids]
        if not plan:
            return self._uniform(n, "no applicable action")
        exploring = subgoal.startswith("explore")
        confidence = self.confidence * (0.5 if exploring else 1.0)
        if self.mode == "adversarial":
            bad = OPPOSITE.get(plan[0], "noop")
            bad_id = ids.get(bad, ids.get("noop", 0))
            return self._answer(n, bad_id, [bad_id], confidence, "", "adversarial advice")
        plan_ids = [ids[a] for a in plan]
        if self._noisy_wrong():
            wrong = self._wrong_action(n, plan_ids[0])
            return self._answer(n, wrong, [wrong], confidence, "", "noisy advice")
        return self._answer(n, plan_ids[0], plan_ids, confidence, subgoal)
