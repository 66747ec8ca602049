"""Offline advisors: answers in the :class:`~lore.llm.schema.Advice` format computed from the env's
true state (``state_snapshot()``), so everything runs without a key or a network.

One module per environment family; this package holds what they share and the advisor itself
(:class:`ScriptedAdvisor`, :func:`features_code`).

* MiniGrid (:mod:`lore.llm.scripted.minigrid`): an exact planner. Breadth-first search over (position,
  facing, carried object, door states) with MiniGrid's own action semantics (turn, forward, pickup,
  toggle — a locked door needs the same-coloured key) gives the cost-to-go of every reachable state; the
  advice favours the next action of a shortest path (+4 logit, 0 for the others) and carries the whole
  remaining path as ``plan``. Tasks without a goal cell, or states with no path, get uniform logits and
  low confidence.
* Crafter (:mod:`lore.llm.scripted.crafter`): a heuristic over the achievement ladder (the cheap ones
  first: one sleep while nothing hostile is in view, a sapling from the grass, planted; then wood ->
  table -> wood pickaxe -> stone -> stone pickaxe -> coal / furnace / iron ...; drink and eat when low),
  walking to the nearest needed material in the local semantic map (BFS over walkable cells) and pressing
  ``do`` when facing it.

Each family module also holds its feature template for the sandbox (``MINIGRID_FEATURES``,
``CRAFTER_FEATURES``), which :func:`features_code` fills in.

Modes (:class:`~lore.config.AdvisorConfig`): ``good``; ``noisy`` (with probability ``1 - accuracy`` a
uniformly drawn *wrong* action is recommended, seeded RNG); ``adversarial`` (the worst action: for
MiniGrid the one with the largest cost-to-go, for Crafter the opposite move or ``noop``). Neither
noisy-wrong nor adversarial advice carries a plan longer than its own bad action sequence.
"""

from __future__ import annotations

import numpy as np

from lore.llm.scripted.crafter import (
    CRAFTER_ACTIONS,
    CRAFTER_FEATURES,
    OPPOSITE,
    crafter_good_plan,
    crafter_names,
    crafter_view,
)
from lore.llm.scripted.minigrid import (
    MG_ACTIONS,
    MINIGRID_FEATURES,
    TIE_ORDER,
    cost_to_go,
    grid_model,
    initial_state,
    minigrid_action_costs,
    minigrid_plan,
    subgoal_of,
)

__all__ = [
    "GOOD_LOGIT",
    "LOW_CONFIDENCE",
    "ScriptedAdvisor",
    "action_ids",
    "features_code",
    "grid_model",
    "initial_state",
    "minigrid_action_costs",
]

GOOD_LOGIT = 4.0
LOW_CONFIDENCE = 0.05


def action_ids(action_names: list[str], expected: tuple[str, ...]) -> dict[str, int]:
    """Name -> id for the names the advisor knows; unknown names are ignored."""
    ids = {name: i for i, name in enumerate(action_names)}
    missing = [n for n in expected if n not in ids]
    if len(missing) == len(expected):
        raise ValueError(f"scripted advisor: none of the expected actions {list(expected)} in {action_names}")
    return {n: ids[n] for n in expected if n in ids}


# ----------------------------------------------------------------------------- feature code


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
        dist = cost_to_go(model, start, carrying, tuple(a for a in TIE_ORDER if a in ids))
        if dist is None or start not in dist:
            return self._uniform(n, "no path to the goal found")
        plan = minigrid_plan(model, start, dist, carrying, self.max_plan_len)
        plan_ids = [ids[a] for a in plan]
        if not plan_ids:
            return self._uniform(n, "no path to the goal found")
        if self._noisy_wrong():
            wrong = self._wrong_action(n, plan_ids[0])
            return self._answer(n, wrong, [wrong], self.confidence, "", "noisy advice")
        return self._answer(n, plan_ids[0], plan_ids, self.confidence, subgoal_of(plan),
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
