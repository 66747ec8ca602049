"""The offline advisors: the MiniGrid planner solves DoorKey, the adversarial one never does, the
Crafter heuristic climbs the achievement ladder, and their feature code runs in the sandbox."""

import numpy as np
import pytest

from lore.envs import make_env
from lore.llm.schema import validate_advice
from lore.llm.scripted import (
    ScriptedAdvisor,
    features_code,
    grid_model,
    initial_state,
    minigrid_action_costs,
)

DOORKEY = "MiniGrid-DoorKey-5x5-v0"


def follow(env, advisor: ScriptedAdvisor, max_steps: int):
    """Greedy rollout: ask every step, take the argmax of the logits. Returns (success, steps, info)."""
    env.reset()
    info: dict = {}
    for t in range(max_steps):
        raw = advisor.advise(env.state_snapshot(), env.family, env.action_names)
        advice, failure = validate_advice(raw, env.action_space.n)
        assert failure is None, (failure, raw)
        action = int(np.argmax(advice.action_prior.logits))
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return bool(info.get("success")), t + 1, info
    return False, max_steps, info


def test_good_minigrid_advisor_solves_doorkey_5x5():
    advisor = ScriptedAdvisor("good", seed=0)
    results = [follow(make_env(DOORKEY, seed=seed), advisor, 250) for seed in range(40)]
    solved = sum(ok for ok, _, _ in results)
    assert solved / 40 >= 0.95
    # shortest paths: DoorKey-5x5 never needs more than ~20 actions
    assert max(steps for ok, steps, _ in results if ok) <= 25


def test_adversarial_minigrid_advisor_never_solves_and_never_helps():
    advisor = ScriptedAdvisor("adversarial", seed=0)
    for seed in range(40):
        ok, _, _ = follow(make_env(DOORKEY, seed=seed), advisor, 40)  # 2x the longest shortest path
        assert not ok
    env = make_env(DOORKEY, seed=1)
    env.reset()
    names = env.action_names
    for _ in range(30):  # along the adversarial trajectory, every recommended action is a worst one
        snapshot = env.state_snapshot()
        costs = minigrid_action_costs(snapshot)
        raw = advisor.advise(snapshot, "minigrid", names)
        action = int(np.argmax(raw["action_prior"]["logits"]))
        assert costs[names[action]] == max(costs.values())
        assert costs[names[action]] > min(costs.values())
        env.step(action)


def test_noisy_advisor_is_valid_and_seeded():
    env = make_env(DOORKEY, seed=5)
    env.reset()
    snapshot = env.state_snapshot()
    a = ScriptedAdvisor("noisy", accuracy=0.5, seed=1)
    b = ScriptedAdvisor("noisy", accuracy=0.5, seed=1)
    good = int(np.argmax(ScriptedAdvisor("good").advise(snapshot, "minigrid", env.action_names)
                         ["action_prior"]["logits"]))
    picks = []
    for _ in range(200):
        raw_a = a.advise(snapshot, "minigrid", env.action_names)
        assert raw_a == b.advise(snapshot, "minigrid", env.action_names)  # same seed, same answers
        assert validate_advice(raw_a, 7)[1] is None
        picks.append(int(np.argmax(raw_a["action_prior"]["logits"])))
    right = np.mean([p == good for p in picks])
    assert 0.35 < right < 0.65
    assert len(set(picks)) >= 5  # wrong picks are spread over the other actions


def test_plan_is_the_shortest_action_sequence():
    env = make_env(DOORKEY, seed=2)
    env.reset(seed=2)
    raw = ScriptedAdvisor("good", max_plan_len=64).advise(env.state_snapshot(), "minigrid", env.action_names)
    plan = raw["plan"]
    for action in plan:
        _, _, terminated, _, info = env.step(action)
    assert terminated and info["success"]
    names = [env.action_names[a] for a in plan]
    assert "pickup" in names and "toggle" in names and names.index("pickup") < names.index("toggle")
    env.reset(seed=2)
    short = ScriptedAdvisor("good", max_plan_len=3).advise(env.state_snapshot(), "minigrid", env.action_names)
    assert short["plan"] == plan[:3]


def test_minigrid_without_goal_or_path_gives_uniform_low_confidence():
    env = make_env(DOORKEY, seed=0)
    env.reset()
    snapshot = env.state_snapshot()
    no_goal = dict(snapshot, grid=snapshot["grid"].copy())
    no_goal["grid"][no_goal["grid"][:, :, 0] == 8] = (1, 0, 0)
    raw = ScriptedAdvisor("good").advise(no_goal, "minigrid", env.action_names)
    assert len(set(raw["action_prior"]["logits"])) == 1 and raw["confidence"] <= 0.05
    walled = dict(snapshot, grid=snapshot["grid"].copy())
    walled["grid"][walled["grid"][:, :, 0] == 5] = (2, 5, 0)  # the key becomes wall: the door stays locked
    raw = ScriptedAdvisor("good").advise(walled, "minigrid", env.action_names)
    assert len(set(raw["action_prior"]["logits"])) == 1 and raw["confidence"] <= 0.05


def test_empty_room_goes_to_goal():
    ok, steps, _ = follow(make_env("MiniGrid-Empty-5x5-v0", seed=0), ScriptedAdvisor("good"), 100)
    assert ok and steps <= 8


def test_search_state_reads_the_snapshot():
    env = make_env(DOORKEY, seed=4)
    env.reset()
    snapshot = env.state_snapshot()
    model = grid_model(snapshot["grid"])
    x, y, d, carried, doors = initial_state(model, snapshot)
    assert (x, y) == tuple(snapshot["agent_pos"]) and d == int(snapshot["agent_dir"])
    assert carried == -1 and doors == (2,)  # one locked door
    with pytest.raises(ValueError, match="shape"):
        grid_model(np.zeros((5, 5)))


def test_crafter_advisor_unlocks_wood_and_table():
    env = make_env("crafter", seed=1)
    ok, _, info = follow(env, ScriptedAdvisor("good", seed=0), 300)
    assert info["achievements"]["collect_wood"]
    assert info["achievements"]["place_table"]


def test_crafter_advisor_takes_the_cheap_achievements_sleep_sapling_and_plant():
    from lore.envs.crafter import ACHIEVEMENTS, INVENTORY_NAMES
    from lore.llm.scripted.crafter import crafter_good_plan, crafter_view

    env = make_env("crafter", seed=1)
    ok, _, info = follow(env, ScriptedAdvisor("good", seed=0), 300)
    for name in ("wake_up", "collect_sapling", "place_plant"):
        assert info["achievements"][name], name
    env.reset(seed=3)
    snapshot = env.state_snapshot()
    names = list(crafter_view(snapshot).names)
    inventory = np.asarray(snapshot["inventory"]).copy()
    energy, sapling = (INVENTORY_NAMES.index(n) for n in ("energy", "sapling"))
    sem = np.full_like(snapshot["semantic"], names.index("grass"))
    tired = dict(snapshot, semantic=sem, inventory=np.where(np.arange(inventory.size) == energy, 5, inventory))
    assert crafter_good_plan(crafter_view(tired))[0] == ["sleep"]
    sem_zombie = sem.copy()
    sem_zombie[0, 0] = names.index("zombie")  # a zombie in view: no nap
    plan, _ = crafter_good_plan(crafter_view(dict(tired, semantic=sem_zombie)))
    assert plan[0] != "sleep"
    rested = dict(tired, achievements=np.where(np.arange(22) == ACHIEVEMENTS.index("wake_up"), 1,
                                               np.asarray(snapshot["achievements"])))
    assert crafter_good_plan(crafter_view(rested))[0] == ["do"]  # facing grass, no sapling yet
    holding = dict(rested, inventory=np.where(np.arange(inventory.size) == sapling, 1, rested["inventory"]))
    assert crafter_good_plan(crafter_view(holding))[0] == ["place_plant"]


def test_crafter_adversarial_is_never_the_good_move():
    env = make_env("crafter", seed=2)
    env.reset()
    good, bad = ScriptedAdvisor("good"), ScriptedAdvisor("adversarial")
    for _ in range(50):
        snapshot = env.state_snapshot()
        g = int(np.argmax(good.advise(snapshot, "crafter", env.action_names)["action_prior"]["logits"]))
        b = int(np.argmax(bad.advise(snapshot, "crafter", env.action_names)["action_prior"]["logits"]))
        assert g != b
        env.step(g)


def test_bad_modes_and_inputs_raise():
    with pytest.raises(ValueError, match="mode"):
        ScriptedAdvisor("random")
    with pytest.raises(ValueError, match="accuracy"):
        ScriptedAdvisor("noisy", accuracy=1.5)
    with pytest.raises(ValueError, match="snapshot"):
        ScriptedAdvisor().advise(None, "minigrid", ["left"])
    with pytest.raises(ValueError, match="env_family"):
        ScriptedAdvisor().advise({}, "atari", ["left"])


def test_feature_code_runs_in_the_sandbox_with_the_right_values():
    sandbox_module = pytest.importorskip("lore.sandbox", reason="the feature sandbox is not built yet")
    env = make_env(DOORKEY, seed=0)
    env.reset()
    snapshot = env.state_snapshot()
    grid = snapshot["grid"]
    width, height = grid.shape[:2]
    ax, ay = snapshot["agent_pos"]
    kx, ky = np.argwhere(grid[:, :, 0] == 5)[0]
    gx, gy = np.argwhere(grid[:, :, 0] == 8)[0]
    crafter = make_env("crafter", seed=0)
    crafter.reset()
    with sandbox_module.FeatureSandbox(n_features=8) as sandbox:
        for family in ("minigrid", "crafter"):
            assert sandbox.check(features_code(family, 8)) is None
        result = sandbox.run(features_code("minigrid", 8), snapshot)
        assert result.ok, result.error
        assert result.features.shape == (8,)
        np.testing.assert_allclose(result.features[0], (abs(kx - ax) + abs(ky - ay)) / (width + height), rtol=1e-6)
        np.testing.assert_allclose(result.features[2], (abs(gx - ax) + abs(gy - ay)) / (width + height), rtol=1e-6)
        assert result.features[3] == 0.0  # not carrying the key
        crafter_result = sandbox.run(features_code("crafter", 8), crafter.state_snapshot())
        assert crafter_result.ok, crafter_result.error
        assert np.all((crafter_result.features >= 0) & (crafter_result.features <= 1))
    with sandbox_module.FeatureSandbox(n_features=3) as small:  # padding/truncation to n_features
        assert small.run(features_code("minigrid", 3), snapshot).ok


def test_scripted_answer_carries_features_code_when_asked():
    env = make_env(DOORKEY, seed=0)
    env.reset()
    advisor = ScriptedAdvisor("good", n_features=8)
    raw = advisor.advise(env.state_snapshot(), "minigrid", env.action_names)
    assert "def compute_features(obs)" in raw["features_code"]
    raw = advisor.advise(env.state_snapshot(), "minigrid", env.action_names, with_features=False)
    assert "features_code" not in raw


@pytest.mark.parametrize("name", ["MiniGrid-DoorKey-6x6-v0", "MiniGrid-KeyCorridorS3R1-v0", "MiniGrid-LavaGapS5-v0"])
def test_the_search_cache_gives_the_distances_of_a_fresh_search(name, monkeypatch):
    """Along a random walk that picks up keys and opens doors (the grid changes), the cached cost-to-go of the
    agent's state and of every successor equals a search made from scratch at that state."""
    from lore.llm.scripted import minigrid as mg

    env = make_env(name, seed=11)
    env.reset(seed=11)
    rng = np.random.default_rng(3)
    search, searches = mg._search, []
    monkeypatch.setattr(mg, "_search", lambda *args: searches.append(1) or search(*args))
    for _ in range(60):
        snapshot = env.state_snapshot()
        model = mg.grid_model(snapshot["grid"])
        carrying = tuple(int(v) for v in np.asarray(snapshot["carrying"]).reshape(-1)[:2])
        start = mg.initial_state(model, snapshot)
        cached = mg.cost_to_go(model, start, carrying)
        fresh = search(model, start, carrying, mg.TIE_ORDER)
        assert (cached is None) == (fresh is None)
        if fresh is not None:
            for action in mg.TIE_ORDER:
                nxt = mg.mg_transition(model, start, action, carrying)
                assert cached.get(nxt) == fresh[1].get(nxt), (action, nxt)
            assert cached.get(start) == fresh[1].get(start)
        # forward, turns, pickup and toggle: the walk changes the grid now and then
        _, _, terminated, truncated, _ = env.step(int(rng.choice([0, 1, 2, 2, 3, 5])))
        if terminated or truncated:
            env.reset(seed=int(rng.integers(1000)))
    assert 0 < len(searches) < 30  # the walk reused searches, and searched again when the grid changed
