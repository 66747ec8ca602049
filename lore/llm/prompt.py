"""The prompt shown to the LLM, built from the environment's faithful text description.

:func:`build_prompt` is deterministic (no timestamps, no randomness): the same state gives the
same prompt, so its hash (:func:`prompt_hash`) keys the persistent cache and ``replay``.
Golden copies live in ``tests/golden/`` (``LORE_UPDATE_GOLDEN=1`` regenerates them).
"""

from __future__ import annotations

import hashlib
import json

from lore.llm.schema import DEFAULT_MAX_PLAN_LEN

PROMPT_VERSION = "lore-prompt-v1"
"""Bumped whenever the wording changes, so cached answers to old prompts are not reused."""

FAMILIES = ("minigrid", "crafter")

_ROLE = {
    "minigrid": (
        "You advise a reinforcement-learning agent in a MiniGrid gridworld. The description below is an "
        "exact rendering of the environment's true state (the whole grid, not only the agent's view).\n"
        "Coordinates are (x, y): x grows to the right, y grows downwards, (0, 0) is the top-left corner. "
        "The agent faces one of four directions: right (+x), down (+y), left (-x), up (-y). "
        "'forward' moves one cell in the facing direction if that cell is empty, the goal or an open door; "
        "'pickup' and 'toggle' act on the cell directly in front of the agent; a locked door opens with "
        "'toggle' only while the agent carries the key of the same colour. Reaching the goal ends the "
        "episode with a reward that is larger the fewer steps were taken."
    ),
    "crafter": (
        "You advise a reinforcement-learning agent in Crafter, a 2-D survival and crafting game. The "
        "description below is an exact rendering of the player's surroundings, inventory and vital "
        "statistics. Positions are offsets from the player: x grows to the right, y grows downwards. "
        "Moving into a cell that is not walkable (only grass, sand and path are) just turns the player to "
        "face it; 'do' acts on the facing cell (collect a material, drink water, attack or eat a creature); "
        "placing and crafting need the listed materials in the inventory and, for crafting, a table (and "
        "furnace) within distance 1. The reward is +1 for each achievement unlocked for the first time in "
        "an episode (collect wood, place table, make wood pickaxe, collect stone, ...), and the player must "
        "keep food, drink and energy up to stay alive."
    ),
}

_ACTION_HELP = {
    "minigrid": {
        "left": "turn left (counter-clockwise) in place",
        "right": "turn right (clockwise) in place",
        "forward": "move one cell in the facing direction",
        "pickup": "pick up the object in front",
        "drop": "drop the carried object in front",
        "toggle": "open/close the door in front (unlock it with the matching key)",
        "done": "do nothing",
    },
    "crafter": {
        "noop": "do nothing",
        "move_left": "move (or turn) left, -x",
        "move_right": "move (or turn) right, +x",
        "move_up": "move (or turn) up, -y",
        "move_down": "move (or turn) down, +y",
        "do": "interact with the facing cell: collect, drink, attack, eat",
        "sleep": "sleep (restores energy; dangerous near zombies)",
        "place_stone": "place stone on the facing cell (needs 1 stone)",
        "place_table": "place a table on the facing cell (needs wood)",
        "place_furnace": "place a furnace on the facing cell (needs stone, table nearby)",
        "place_plant": "plant a sapling on the facing grass (needs a sapling)",
        "make_wood_pickaxe": "craft a wood pickaxe (wood, table nearby)",
        "make_stone_pickaxe": "craft a stone pickaxe (wood + stone, table nearby)",
        "make_iron_pickaxe": "craft an iron pickaxe (wood + coal + iron, table and furnace nearby)",
        "make_wood_sword": "craft a wood sword (wood, table nearby)",
        "make_stone_sword": "craft a stone sword (wood + stone, table nearby)",
        "make_iron_sword": "craft an iron sword (wood + coal + iron, table and furnace nearby)",
    },
}

_SNAPSHOT_KEYS = {
    "minigrid": (
        '- obs["grid"]: uint8 array [W, H, 3]; obs["grid"][x][y] = (object, colour, state). Objects: '
        "0 unseen, 1 empty, 2 wall, 3 floor, 4 door, 5 key, 6 ball, 7 box, 8 goal, 9 lava. Colours: "
        "0 red, 1 green, 2 blue, 3 purple, 4 yellow, 5 grey. Door state: 0 open, 1 closed, 2 locked. "
        "The agent is not drawn in the grid.\n"
        '- obs["agent_pos"]: int array [2] = (x, y).\n'
        '- obs["agent_dir"]: int, 0 right, 1 down, 2 left, 3 up.\n'
        '- obs["carrying"]: int array [2] = (object, colour) of the carried object, (0, 0) when empty.'
    ),
    "crafter": (
        '- obs["semantic"]: int array [V, V], the local map centred on the player, indexed '
        '[x][y] with x to the right (ids in the legend below).\n'
        '- obs["inventory"]: int array of item counts (health, food, drink, energy, sapling, wood, stone, '
        "coal, iron, diamond, wood_pickaxe, stone_pickaxe, iron_pickaxe, wood_sword, stone_sword, "
        "iron_sword, in that order).\n"
        '- obs["facing"]: int array [2] = (dx, dy) the player faces.\n'
        '- obs["achievements"]: uint8 array [22], 1 where unlocked this episode.\n'
        '- obs["player_pos"]: int array [2] = (x, y) in the world.'
    ),
}


def _check_family(env_family: str) -> str:
    if env_family not in FAMILIES:
        raise ValueError(f"unknown env_family {env_family!r}; expected one of {list(FAMILIES)}")
    return env_family


def features_spec(env_family: str, n_features: int, legend: str | None = None) -> str:
    """The contract for ``features_code`` that :func:`build_prompt` appends when features are on.

    ``legend`` (optional) adds a line such as the Crafter semantic ids (``"0 unknown, 1 water, ..."``).
    """
    _check_family(env_family)
    if n_features < 1:
        raise ValueError(f"features_spec: n_features must be >= 1, got {n_features}")
    lines = [
        f"Also write `features_code`: Python source defining `def compute_features(obs):` that returns a "
        f"list of exactly {n_features} floats, each roughly in [-1, 1], that help decide the next action in "
        "any state of this task (e.g. normalised distances to the objects that matter, flags for what is "
        "carried or faced). It runs in a sandbox: only `math` and `np` (numpy) are available, no other "
        "imports, no attributes or names starting with '_', no file, network or print; keep it short and "
        "deterministic. `obs` is a dict of numpy arrays:",
        _SNAPSHOT_KEYS[env_family],
    ]
    if legend:
        lines.append(f"- Legend: {legend}")
    return "\n".join(lines)


def default_features_spec(env_family: str, n_features: int) -> str:
    """:func:`features_spec` with the Crafter semantic-id legend filled in from :mod:`lore.envs.crafter`."""
    legend = None
    if _check_family(env_family) == "crafter":
        from lore.envs.crafter import MATERIAL_NAMES

        legend = "semantic ids: " + ", ".join(f"{i} {name}" for i, name in enumerate(MATERIAL_NAMES))
    return features_spec(env_family, n_features, legend)


def build_prompt(
    description: str,
    action_names: list[str],
    env_family: str,
    features_spec: str | None = None,
    max_plan_len: int = DEFAULT_MAX_PLAN_LEN,
    logit_clip: float = 10.0,
) -> str:
    """Instructions + state description + numbered actions + the exact JSON answer format."""
    _check_family(env_family)
    if not action_names:
        raise ValueError("build_prompt: action_names is empty")
    if not description or not description.strip():
        raise ValueError("build_prompt: the state description is empty")
    help_texts = _ACTION_HELP[env_family]
    actions = "\n".join(
        f"{i}: {name}" + (f" - {help_texts[name]}" if name in help_texts else "")
        for i, name in enumerate(action_names)
    )
    n = len(action_names)
    example = {
        "action_prior": {"logits": [0.0] * n},
        "confidence": 0.5,
        "plan": [0],
        "subgoal": "...",
    }
    if features_spec:
        example["features_code"] = "def compute_features(obs): ..."
    example["notes"] = "..."
    fmt = [
        "Answer with ONE JSON object and nothing else, in exactly this format:",
        json.dumps(example),
        f"- action_prior.logits: exactly {n} numbers, one per action id 0..{n - 1} in the order above; "
        f"a higher logit means the action is more recommended now (values are clipped to "
        f"[-{logit_clip:g}, {logit_clip:g}]; e.g. 4 for the best action and 0 for the others).",
        "- confidence: a number in [0, 1], your probability that the highest-logit action is right.",
        f"- plan (optional): the action ids you recommend from now on, in order, at most {max_plan_len}.",
        "- subgoal (optional): the next subgoal in a few words.",
    ]
    if features_spec:
        fmt.append("- features_code: see below.")
    fmt.append("- notes (optional): one short sentence.")
    parts = [
        _ROLE[env_family],
        "## Current state\n" + description.strip(),
        "## Actions (id: name)\n" + actions,
        "## Answer format\n" + "\n".join(fmt),
    ]
    if features_spec:
        parts.append("## Feature code\n" + features_spec.strip())
    return "\n\n".join(parts) + "\n"


def prompt_hash(prompt: str) -> str:
    """Stable hash of a prompt (with :data:`PROMPT_VERSION`): the cache and replay key."""
    return hashlib.sha256(f"{PROMPT_VERSION}\n{prompt}".encode()).hexdigest()[:32]
