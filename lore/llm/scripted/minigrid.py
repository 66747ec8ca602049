"""MiniGrid advice: an exact planner over MiniGrid's own action semantics, and the MiniGrid feature
template for the sandbox.

Breadth-first search over (position, facing, carried object, door states) gives the cost-to-go of every
reachable state (:func:`cost_to_go`); :func:`minigrid_plan` descends it to a shortest action sequence and
:func:`minigrid_action_costs` prices every action now (the adversarial mode takes the worst). The advisor
itself, and the modes, are in :mod:`lore.llm.scripted`.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np

MAX_SEARCH_STATES = 200_000
"""The MiniGrid search gives up (uniform advice) beyond this many states."""

# ----------------------------------------------------------------------------- MiniGrid constants
# minigrid.core.constants, copied so this module needs no minigrid import to plan.
MG_EMPTY, MG_WALL, MG_FLOOR, MG_DOOR, MG_KEY, MG_BALL, MG_BOX, MG_GOAL, MG_LAVA = 1, 2, 3, 4, 5, 6, 7, 8, 9
MG_OPEN, MG_CLOSED, MG_LOCKED = 0, 1, 2
MG_DIR_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))  # right, down, left, up
MG_ACTIONS = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
MG_PASSABLE = (0, MG_EMPTY, MG_FLOOR, MG_GOAL)
TIE_ORDER = ("forward", "left", "right", "pickup", "toggle", "drop", "done")
"""Preference among equally short paths (deterministic plans)."""

GOAL = "goal"  # terminal pseudo-state of the search


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


_SEARCH_CACHE: OrderedDict = OrderedDict()
"""(grid bytes, shape, carrying, actions) -> (states explored, cost-to-go) of the latest searches."""
SEARCH_CACHE_SIZE = 4


def cost_to_go(model: GridModel, start: MGState, snapshot_carrying: tuple[int, int],
               actions: tuple[str, ...] = TIE_ORDER) -> dict | None:
    """Fewest actions from every state reachable from ``start`` to the goal (missing = unreachable).

    Forward BFS enumerates the reachable graph, then a backward BFS from :data:`GOAL` gives the
    distances. Returns None when the search exceeds :data:`MAX_SEARCH_STATES`. The returned dict is
    shared with later calls: read it, do not change it.

    A search covers every state reachable from its start, so a later call on the same grid whose start
    was explored (the agent moved; nothing on the grid changed) reuses it: the distances are exact for
    every explored state. Measured on MiniGrid-LockedRoom-v0 (19 x 19, six doors): 3-6 s per search,
    repeated at every call of an episode before this cache.
    """
    key = (model.codes.tobytes(), model.codes.shape, tuple(snapshot_carrying), tuple(actions))
    cached = _SEARCH_CACHE.get(key)
    if cached is not None and start in cached[0]:
        _SEARCH_CACHE.move_to_end(key)
        return cached[1]
    result = _search(model, start, snapshot_carrying, actions)
    if result is None:
        return None
    _SEARCH_CACHE[key] = result
    while len(_SEARCH_CACHE) > SEARCH_CACHE_SIZE:
        _SEARCH_CACHE.popitem(last=False)
    return result[1]


def _search(model: GridModel, start: MGState, snapshot_carrying: tuple[int, int],
            actions: tuple[str, ...]) -> tuple[frozenset, dict] | None:
    """``(explored states, cost-to-go)`` of one search from ``start`` (see :func:`cost_to_go`)."""
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
    return frozenset(successors), dist


def minigrid_plan(model: GridModel, start: MGState, dist: dict, snapshot_carrying: tuple[int, int],
                  max_len: int) -> list[str]:
    """Greedy descent of the cost-to-go from ``start``: a shortest action sequence (names)."""
    plan: list[str] = []
    state = start
    while state != GOAL and len(plan) < max_len and state in dist:
        best = None
        for action in TIE_ORDER:
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


def subgoal_of(plan: list[str]) -> str:
    """The subgoal a MiniGrid plan pursues first: the key, the door, or the goal."""
    for action in plan:
        if action == "pickup":
            return "pick up the key"
        if action == "toggle":
            return "open the door"
    return "go to the goal"


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
