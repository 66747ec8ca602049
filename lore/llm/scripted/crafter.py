"""Crafter advice: a heuristic over the achievement ladder, and the Crafter feature template for the
sandbox.

:func:`crafter_view` decodes a snapshot into a :class:`CrafterView` (named local map, inventory,
achievements); :func:`crafter_good_plan` walks (BFS over walkable cells, :func:`path_to_adjacent`) to the
nearest material the ladder needs next and presses ``do`` when facing it. The advisor itself, and the
modes, are in :mod:`lore.llm.scripted`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

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

    def visible(self, *names: str) -> bool:
        return bool(np.isin(self.sem, self.ids(*names)).any())


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


Plan = tuple[list[str], str]
"""(actions, subgoal): the first action is the advice."""


class _Ladder:
    """The ladder heuristic over one view, in the order it is consulted: survive, take the cheap
    achievements, then climb the tool ladder. Each step returns a plan, or None to pass on."""

    def __init__(self, view: CrafterView):
        self.view, self.inv, self.done = view, view.inventory, view.achievements
        self.costs = crafter_costs()

    def go(self, targets: list[str], subgoal: str) -> Plan | None:
        path = path_to_adjacent(self.view, targets)
        return (path, subgoal) if path else None

    def wood_or_explore(self) -> Plan:
        return self.go(["tree"], "collect wood") or ([explore_move(self.view)], "explore to find trees")

    def survive(self) -> Plan | None:
        """Fight an adjacent zombie (it hits hard, and defeat_zombie is an achievement), drink, eat, sleep."""
        view, inv = self.view, self.inv
        for move, (dx, dy) in MOVES.items():
            if view.at(dx, dy) == "zombie":
                return ([] if view.facing == (dx, dy) else [move]) + ["do"], "defeat the zombie"
        if inv.get("drink", 9) <= 3 and (step := self.go(["water"], "drink water")):
            return step
        if inv.get("food", 9) <= 3 and (step := self.go(["cow"], "eat a cow")):
            return step
        if inv.get("energy", 9) <= 1 and not view.visible("zombie"):
            return ["sleep"], "sleep to restore energy"
        return None

    def cheap_achievements(self) -> Plan | None:
        """Each weighs as much in the Crafter score as a diamond: one sleep while nothing hostile is in view
        (waking up with energy restored unlocks wake_up) and a sapling from the grass, planted."""
        view, inv, done = self.view, self.inv, self.done
        if not done.get("wake_up") and inv.get("energy", 9) < 9 and not view.visible("zombie", "skeleton"):
            return ["sleep"], "sleep once to wake up rested"
        if not done.get("place_plant"):
            grass_ahead = view.at(*view.facing) == "grass"
            if inv.get("sapling", 0) >= 1 and grass_ahead:
                return ["place_plant"], "plant the sapling"
            if not done.get("collect_sapling") or inv.get("sapling", 0) >= 1:
                # 'do' on grass yields a sapling now and then; a step onto grass faces more grass
                if grass_ahead and inv.get("sapling", 0) == 0:
                    return ["do"], "collect a sapling from the grass"
                if step := self.go(["grass"], "find grass"):
                    return step
        return None

    def craft(self, action: str, subgoal: str) -> Plan:
        """Make ``action`` at a table: gather wood, reach or place a table, then craft."""
        view, inv, needs = self.view, self.inv, self.costs[action]
        for item, count in needs.items():
            if inv.get(item, 0) < count:
                if item == "wood":
                    return self.wood_or_explore()
                return self.go([item], f"collect {item}") or ([explore_move(view)], f"explore to find {item}")
        if view.near("table"):
            return [action], subgoal
        if view.visible("table") and (step := self.go(["table"], "walk to the table")):
            return step[0][:-1] or [action], step[1]  # arrive next to it; no 'do' on a table
        if inv.get("wood", 0) >= self.costs["place_table"].get("wood", 1) + needs.get("wood", 0):
            return _place_plan(view, "place_table"), "place a table"
        return self.wood_or_explore()

    def climb(self) -> Plan:
        """The tool ladder: wood pickaxe, stone pickaxe, furnace, iron pickaxe, diamond."""
        view, inv, done, go = self.view, self.inv, self.done, self.go
        if inv.get("wood_pickaxe", 0) == 0:
            return self.craft("make_wood_pickaxe", "make a wood pickaxe")
        if not done.get("make_wood_sword") and inv.get("wood", 0) >= 1 and view.near("table"):
            return ["make_wood_sword"], "make a wood sword"
        if not done.get("collect_drink") and (step := go(["water"], "drink water")):
            return step
        if inv.get("stone_pickaxe", 0) == 0:
            return self.craft("make_stone_pickaxe", "make a stone pickaxe")
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
            return self.furnace()
        if inv.get("iron", 0) == 0 and (step := go(["iron"], "collect iron")):
            return step
        if inv.get("iron", 0) >= 1 and inv.get("iron_pickaxe", 0) == 0:
            if view.near("table") and view.near("furnace") and inv.get("coal", 0) >= 1 and inv.get("wood", 0) >= 1:
                return ["make_iron_pickaxe"], "make an iron pickaxe"
        if inv.get("iron_pickaxe", 0) and (step := go(["diamond"], "collect diamond")):
            return step
        return go(["tree"], "collect wood") or go(["stone"], "collect stone") or (
            [explore_move(view)], "explore")

    def furnace(self) -> Plan:
        """Gather the stone, then place a furnace next to a table."""
        view = self.view
        if self.inv.get("stone", 0) < self.costs["place_furnace"].get("stone", 1):
            return self.go(["stone"], "collect stone for a furnace") or self.wood_or_explore()
        if view.near("table"):
            return _place_plan(view, "place_furnace"), "place a furnace"
        return self.craft("make_stone_pickaxe", "walk to a table") if view.visible("table") else self.wood_or_explore()


def crafter_good_plan(view: CrafterView) -> Plan:
    """(actions, subgoal) of the ladder heuristic; the first action is the advice."""
    ladder = _Ladder(view)
    return ladder.survive() or ladder.cheap_achievements() or ladder.climb()


# ----------------------------------------------------------------------------- feature code

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
