"""Environments: factory, observations, rewards/termination, descriptions, seeding, VectorEnv."""

from __future__ import annotations

import re
from collections import deque

import numpy as np
import pytest
from minigrid.core.constants import COLOR_TO_IDX, DIR_TO_VEC, OBJECT_TO_IDX
from minigrid.core.grid import Grid
from minigrid.core.world_object import Door, Goal, Key, Lava

from lore.config import EnvConfig
from lore.envs import VectorEnv, make_env, make_env_from_config, make_vector_env
from lore.envs.crafter import ACHIEVEMENTS, INVENTORY_NAMES, MATERIAL_NAMES, local_semantic
from lore.envs.minigrid import CELL_CHANNELS, N_OBJECT_TYPES, resize_square

DOORKEY = "MiniGrid-DoorKey-5x5-v0"
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = range(6)


def doorkey_grid(door_locked: bool = True) -> Grid:
    """5x5: wall column x=2 with a yellow door at (2, 2), yellow key at (1, 3), goal at (3, 3)."""
    grid = Grid(5, 5)
    grid.wall_rect(0, 0, 5, 5)
    grid.vert_wall(2, 0)
    grid.set(2, 2, Door("yellow", is_locked=door_locked))
    grid.set(1, 3, Key("yellow"))
    grid.set(3, 3, Goal())
    return grid


def hand_built_doorkey(**kwargs):
    env = make_env(DOORKEY, 0, **kwargs)
    env.reset()
    obs = env.set_layout(doorkey_grid(), agent_pos=(1, 1), agent_dir=1)  # at (1, 1) facing down
    return env, obs


def obs_in_space(env, obs) -> bool:
    return set(obs) == set(env.observation_space.spaces) and env.observation_space.contains(obs)


# --------------------------------------------------------------------------- factory and spaces


@pytest.mark.parametrize("obs_mode", ["symbolic", "pixels", "both"])
@pytest.mark.parametrize("view", ["egocentric", "full"])
def test_minigrid_observations_match_spaces(obs_mode, view):
    env = make_env(DOORKEY, 3, obs=obs_mode, view=view)
    assert env.family == "minigrid"
    assert env.action_space.n == len(env.action_names) == 7
    assert env.action_names[:6] == ["left", "right", "forward", "pickup", "drop", "toggle"]
    obs, info = env.reset()
    assert obs_in_space(env, obs) and info["success"] is False
    expected_dim = (49 if view == "egocentric" else 25) * CELL_CHANNELS + 4 + 17
    assert obs["symbolic"].shape == (expected_dim,) and obs["symbolic"].dtype == np.float32
    assert ("pixels" in obs) == (obs_mode != "symbolic")
    for action in [RIGHT, FORWARD, LEFT, FORWARD]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs_in_space(env, obs)
        assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    if "pixels" in obs:
        assert obs["pixels"].shape == (64, 64, 3) and obs["pixels"].dtype == np.uint8
        assert obs["pixels"].std() > 0  # a real picture, not a blank


def test_symbolic_encoding_is_one_hot_and_tracks_direction_and_carrying():
    env, obs = hand_built_doorkey()
    cells = obs["symbolic"][: 49 * CELL_CHANNELS].reshape(49, CELL_CHANNELS)
    # every cell has exactly one object type, one colour and one state
    assert (cells[:, :N_OBJECT_TYPES].sum(1) == 1).all() and (cells.sum(1) == 3).all()
    direction = obs["symbolic"][49 * CELL_CHANNELS: 49 * CELL_CHANNELS + 4]
    assert direction.tolist() == [0, 1, 0, 0]  # facing down
    assert obs["symbolic"][-17:].sum() == 0  # carrying nothing
    env.step(FORWARD)
    obs, *_ = env.step(PICKUP)
    carried = obs["symbolic"][-17:]
    assert carried[OBJECT_TO_IDX["key"]] == 1 and carried[N_OBJECT_TYPES + COLOR_TO_IDX["yellow"]] == 1


def test_full_view_draws_the_agent():
    env = make_env(DOORKEY, 0, view="full")
    env.reset()
    obs = env.set_layout(doorkey_grid(), agent_pos=(1, 1), agent_dir=0)
    cells = obs["symbolic"][: 25 * CELL_CHANNELS].reshape(5, 5, CELL_CHANNELS)  # [x, y, channel]
    assert cells[1, 1, OBJECT_TO_IDX["agent"]] == 1
    assert cells[3, 3, OBJECT_TO_IDX["goal"]] == 1 and cells[1, 3, OBJECT_TO_IDX["key"]] == 1


def test_crafter_steps_through_the_factory():
    env = make_env("crafter", 1, obs="both")
    assert env.family == "crafter" and env.action_space.n == len(env.action_names) == 17
    obs, info = env.reset()
    assert obs_in_space(env, obs)
    assert obs["symbolic"].shape == (9 * 9 * len(MATERIAL_NAMES) + len(INVENTORY_NAMES) + 4 + 2,)
    assert obs["pixels"].shape == (64, 64, 3) and obs["pixels"].dtype == np.uint8
    assert list(info["achievements"]) == ACHIEVEMENTS and len(ACHIEVEMENTS) == 22 and info["success"] == 0.0
    for action in range(10):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs_in_space(env, obs)
        assert isinstance(info["success"], float)
    snap = env.state_snapshot()
    assert snap["semantic"].shape == (9, 9) and snap["semantic"].dtype == np.int64
    assert snap["semantic"][4, 4] == MATERIAL_NAMES.index("player")
    assert snap["inventory"].shape == (len(INVENTORY_NAMES),) and snap["inventory"].dtype == np.int64
    assert snap["facing"].dtype == np.int64 and np.abs(snap["facing"]).sum() == 1
    assert snap["achievements"].shape == (22,) and snap["achievements"].dtype == np.uint8
    assert snap["player_pos"].shape == (2,) and snap["player_pos"].dtype == np.int64
    # the symbolic vector encodes exactly the snapshot's semantic map and inventory
    n_cells = 81 * len(MATERIAL_NAMES)
    one_hot = obs["symbolic"][:n_cells].reshape(81, len(MATERIAL_NAMES))
    assert (one_hot.sum(1) == 1).all() and np.array_equal(one_hot.argmax(1), snap["semantic"].ravel())
    inventory = obs["symbolic"][n_cells: n_cells + len(INVENTORY_NAMES)]
    np.testing.assert_allclose(inventory, snap["inventory"] / 9.0)


def test_local_semantic_marks_cells_outside_the_world():
    mat_map = np.arange(1, 17, dtype=np.uint8).reshape(4, 4)  # [x, y]
    obj_map = np.zeros((4, 4), np.uint32)
    out = local_semantic(mat_map, obj_map, [None], center=np.array([0, 1]), view=3)
    assert out[0].tolist() == [0, 0, 0]  # x = -1 lies outside
    assert out[1:].tolist() == mat_map[0:2, 0:3].tolist()


def test_resize_square_pads_then_resizes():
    image = np.full((30, 60, 3), 200, np.uint8)  # wide: padded top and bottom with black
    out = resize_square(image)
    assert out.shape == (64, 64, 3) and out.dtype == np.uint8
    assert out[0, 32].tolist() == [0, 0, 0] and out[32, 32].tolist() == [200, 200, 200]
    same = np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3)
    assert resize_square(same) is same  # already the right size: untouched


def test_crafter_view_size_and_symbolic_only_skip_rendering():
    env = make_env("crafter", 0, crafter_view=5, crafter_area=32)
    obs, _ = env.reset()
    assert obs_in_space(env, obs) and set(obs) == {"symbolic"}
    assert obs["symbolic"].shape == (5 * 5 * len(MATERIAL_NAMES) + len(INVENTORY_NAMES) + 6,)
    assert env.state_snapshot()["semantic"].shape == (5, 5)
    assert env.state_snapshot()["player_pos"].tolist() == [16, 16]
    assert env.render().shape == (64, 64, 3)  # rendering on demand still works


def test_make_env_from_config():
    cfg = EnvConfig(name=DOORKEY, view="full", max_episode_steps=7)
    env = make_env_from_config(cfg, seed=0)
    env.reset()
    assert env.max_steps == 7 and env.view == "full"


# --------------------------------------------------------------------------- errors


def test_unknown_id_and_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown environment 'MiniGrid-DoorKey-4x4-v0'.*crafter.*MiniGrid-Empty-5x5"):
        make_env("MiniGrid-DoorKey-4x4-v0", 0)
    with pytest.raises(ValueError, match="unknown environment 'CartPole-v1'"):
        make_env("CartPole-v1", 0)
    with pytest.raises(ValueError, match="obs='rgb'"):
        make_env(DOORKEY, 0, obs="rgb")
    with pytest.raises(ValueError, match="view='top'"):
        make_env(DOORKEY, 0, view="top")
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env(DOORKEY, 0, max_episode_steps=0)
    with pytest.raises(ValueError, match="crafter_view"):
        make_env("crafter", 0, crafter_view=8)
    env = make_env(DOORKEY, 0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset()
    with pytest.raises(ValueError, match="out of range"):
        env.step(7)


# --------------------------------------------------------------------------- MiniGrid semantics


def test_describe_tracks_key_door_and_goal():
    env, _ = hand_built_doorkey()
    text = env.describe()
    assert "Mission: use the key to open the door and then get to the goal." in text
    assert "x increasing to the right and y increasing downwards" in text
    assert "Agent: at (1, 1), facing down (+y)" in text
    assert "Carrying: nothing." in text
    assert "Keys: yellow key at (1, 3)." in text
    assert "Doors: locked yellow door at (2, 2)." in text
    assert "Goal: at (3, 3)." in text
    assert "vertical wall at x=2" in text
    assert "Directly in front of the agent, at (1, 2): empty floor." in text
    key_before = env.state_key()

    env.step(FORWARD)  # (1, 2), the key is in front
    assert "Directly in front of the agent, at (1, 3): yellow key." in env.describe()
    env.step(PICKUP)
    text = env.describe()
    assert "Carrying: a yellow key." in text and "Keys:" not in text and "(1, 3): empty floor" in text
    snap = env.state_snapshot()
    assert snap["carrying"].tolist() == [OBJECT_TO_IDX["key"], COLOR_TO_IDX["yellow"]]
    assert snap["grid"][1, 3, 0] == OBJECT_TO_IDX["empty"]

    env.step(LEFT)  # facing right, the door is in front
    assert "Directly in front of the agent, at (2, 2): locked yellow door." in env.describe()
    env.step(TOGGLE)
    text = env.describe()
    assert "Doors: open yellow door at (2, 2)." in text
    assert env.state_snapshot()["grid"][2, 2].tolist() == [OBJECT_TO_IDX["door"], COLOR_TO_IDX["yellow"], 0]
    assert env.state_key() != key_before and "|key:yellow|O|" in env.state_key()


def test_snapshot_layout_and_types():
    env, _ = hand_built_doorkey()
    snap = env.state_snapshot()
    assert snap["grid"].shape == (5, 5, 3) and snap["grid"].dtype == np.uint8
    assert snap["grid"][3, 3, 0] == OBJECT_TO_IDX["goal"] and snap["grid"][2, 2].tolist() == [4, 4, 2]
    assert snap["grid"][1, 1, 0] == OBJECT_TO_IDX["empty"]  # the agent is not drawn
    assert snap["agent_pos"].tolist() == [1, 1] and snap["agent_pos"].dtype == np.int64
    assert snap["agent_dir"].shape == () and int(snap["agent_dir"]) == 1
    assert snap["carrying"].tolist() == [0, 0] and snap["carrying"].dtype == np.int64
    snap["grid"][0, 0] = 0  # callers get copies
    assert env.state_snapshot()["grid"][0, 0, 0] == OBJECT_TO_IDX["wall"]


def plan_doorkey(snap: dict) -> list[int]:
    """Shortest action sequence to the goal by BFS over (x, y, dir, has_key, door_open)."""
    grid = snap["grid"]
    door = tuple(np.argwhere(grid[:, :, 0] == OBJECT_TO_IDX["door"])[0])
    key = tuple(np.argwhere(grid[:, :, 0] == OBJECT_TO_IDX["key"])[0])
    start = (*snap["agent_pos"].tolist(), int(snap["agent_dir"]), False, False)
    queue, parent = deque([start]), {start: None}
    while queue:
        state = queue.popleft()
        x, y, d, has_key, door_open = state
        fx, fy = x + DIR_TO_VEC[d][0], y + DIR_TO_VEC[d][1]
        kind = OBJECT_TO_IDX["empty"] if (fx, fy) == key and has_key else grid[fx, fy, 0]
        for action in (LEFT, RIGHT, FORWARD, PICKUP, TOGGLE):
            nxt = None
            if action == LEFT:
                nxt = (x, y, (d - 1) % 4, has_key, door_open)
            elif action == RIGHT:
                nxt = (x, y, (d + 1) % 4, has_key, door_open)
            elif action == FORWARD:
                if kind == OBJECT_TO_IDX["goal"]:
                    path = [FORWARD]
                    while parent[state] is not None:
                        state, taken = parent[state]
                        path.append(taken)
                    return path[::-1]
                if kind == OBJECT_TO_IDX["empty"] or ((fx, fy) == door and door_open):
                    nxt = (fx, fy, d, has_key, door_open)
            elif action == PICKUP and (fx, fy) == key and not has_key:
                nxt = (x, y, d, True, door_open)
            elif action == TOGGLE and (fx, fy) == door and has_key and not door_open:
                nxt = (x, y, d, has_key, True)
            if nxt is not None and nxt not in parent:
                parent[nxt] = (state, action)
                queue.append(nxt)
    raise AssertionError("no path to the goal")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_success_exactly_when_the_goal_is_reached(seed):
    env = make_env(DOORKEY, seed)
    env.reset()
    plan = plan_doorkey(env.state_snapshot())
    assert PICKUP in plan and TOGGLE in plan
    for i, action in enumerate(plan, start=1):
        _, reward, terminated, truncated, info = env.step(action)
        last = i == len(plan)
        assert info["success"] is last and terminated is last and not truncated
        assert (reward > 0) is last
    assert reward == pytest.approx(1 - 0.9 * len(plan) / env.max_steps)
    x, y = env.state_snapshot()["agent_pos"]
    assert env.state_snapshot()["grid"][x, y, 0] == OBJECT_TO_IDX["goal"]


def test_time_limit_truncates_and_does_not_terminate():
    env = make_env(DOORKEY, 0, max_episode_steps=4)
    env.reset()
    results = [env.step(LEFT) for _ in range(4)]
    assert [r[3] for r in results] == [False, False, False, True]
    assert not any(r[2] for r in results) and not any(r[4]["success"] for r in results)
    with pytest.raises(RuntimeError, match="episode ended"):
        env.step(LEFT)
    assert make_env(DOORKEY, 0).max_steps == 250  # None keeps the env's own limit


def test_lava_terminates_without_success():
    env = make_env("MiniGrid-LavaGapS5-v0", 0)
    env.reset()
    grid = Grid(5, 5)
    grid.wall_rect(0, 0, 5, 5)
    grid.set(2, 1, Lava())
    grid.set(3, 3, Goal())
    env.set_layout(grid, agent_pos=(1, 1), agent_dir=0)
    assert "Lava at: (2, 1)." in env.describe()
    _, reward, terminated, truncated, info = env.step(FORWARD)
    assert terminated and not truncated and reward == 0 and info["success"] is False


def test_seeding_reproduces_episode_sequences():
    def layouts(env, episodes=4):
        out = []
        for _ in range(episodes):
            env.reset()
            out.append(env.state_snapshot())
        return out

    a, b, c = (layouts(make_env(DOORKEY, s)) for s in (5, 5, 6))
    same = [all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b, strict=True)]
    assert all(same)
    assert not all(all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, c, strict=True))
    env = make_env(DOORKEY, 6)
    env.reset()
    env.reset(seed=5)  # reseeding restarts seed 5's sequence
    assert all(np.array_equal(env.state_snapshot()[k], a[0][k]) for k in a[0])


# --------------------------------------------------------------------------- Crafter semantics


def test_crafter_seeding_and_time_limit():
    runs = []
    for _ in range(2):
        env = make_env("crafter", 11, max_episode_steps=3)
        obs, _ = env.reset()
        trace = [obs["symbolic"]]
        for action in (1, 3, 5):
            obs, _, terminated, truncated, _ = env.step(action)
            trace.append(obs["symbolic"])
        runs.append((np.stack(trace), terminated, truncated, env.state_snapshot()["player_pos"]))
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][3], runs[1][3])
    assert runs[0][1] is False and runs[0][2] is True  # time limit: truncated, not terminated


def test_crafter_episodes_are_reproducible_across_env_instances():
    """crafter despawns a creature picked from a set of objects (memory-address order); the wrapper keeps
    each chunk's objects in insertion order, so the same seed and actions give the same episode."""

    def episode(seed: int) -> list:
        env = make_env("crafter", seed=seed)
        env.reset(seed=seed)
        rng, trace, done = np.random.default_rng(0), [], False
        while not done:
            _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
            trace.append((reward, tuple(env.player.pos), env.player.health))
            done = terminated or truncated
        chunk_sets = {type(objs).__name__ for objs in env.raw_env._world._chunks.values()}
        env.close()
        return trace, chunk_sets

    for seed in (10_002_000, 7):
        runs = [episode(seed) for _ in range(4)]
        assert all(trace == runs[0][0] for trace, _ in runs), seed
        assert runs[0][1] == {"_InsertionOrderedSet"}  # after a reset too
    import pickle

    env = make_env("crafter", seed=3)
    env.reset(seed=3)
    copy = pickle.loads(pickle.dumps(env))  # vector envs ship envs to workers: it still pickles, still ordered
    copy.reset(seed=3)
    assert {type(objs).__name__ for objs in copy.raw_env._world._chunks.values()} == {"_InsertionOrderedSet"}


def test_crafter_death_terminates_and_achievements_are_reported():
    env = make_env("crafter", 0)
    env.reset()
    env.player.achievements["collect_wood"] = 1  # as if a tree had just been chopped
    env.player.health = 0
    _, _, terminated, truncated, info = env.step(0)
    assert terminated and not truncated
    assert info["achievements"]["collect_wood"] is True and sum(info["achievements"].values()) == 1
    assert info["success"] == pytest.approx(1 / 22)
    assert env.state_snapshot()["achievements"][ACHIEVEMENTS.index("collect_wood")] == 1
    assert "collect_wood" in env.describe()


def test_crafter_description_lists_what_the_semantic_map_holds():
    env = make_env("crafter", 4)
    env.reset()
    for action in (1, 1, 3, 3, 2):
        env.step(action)
    text = env.describe()
    snap = env.state_snapshot()
    semantic = snap["semantic"]
    near_line = next(line for line in text.splitlines() if line.startswith("Nearby"))
    listed = dict(re.findall(r"(\w+) ((?:\d+ (?:left|right|up|down) ?)+|here) \(\d+ in view\)", near_line))
    in_map = {MATERIAL_NAMES[i] for i in np.unique(semantic)} - {"none", "player"}
    assert set(listed) == in_map
    for name, offset in listed.items():
        dx = dy = 0
        for amount, word in re.findall(r"(\d+) (left|right|up|down)", offset):
            dx += {"left": -1, "right": 1}.get(word, 0) * int(amount)
            dy += {"up": -1, "down": 1}.get(word, 0) * int(amount)
        assert MATERIAL_NAMES[semantic[4 + dx, 4 + dy]] == name
    vitals = f"health {snap['inventory'][0]}, food {snap['inventory'][1]}"
    assert vitals in text and "facing" in text


# --------------------------------------------------------------------------- VectorEnv


def test_vector_env_auto_reset_and_is_first():
    envs = [make_env(DOORKEY, 0, max_episode_steps=2), make_env(DOORKEY, 1, max_episode_steps=3)]
    twins = [make_env(DOORKEY, 0, max_episode_steps=2), make_env(DOORKEY, 1, max_episode_steps=3)]
    vec = VectorEnv(envs)
    obs, info = vec.reset()
    assert obs["symbolic"].shape == (2, 1001) and info["is_first"].tolist() == [True, True]
    for twin in twins:
        twin.reset()
    expected_first = [[False, False], [True, False], [False, True]]
    for t in range(3):
        obs, reward, terminated, truncated, info = vec.step(np.array([LEFT, LEFT]))
        assert reward.dtype == np.float32 and terminated.dtype == bool and reward.shape == (2,)
        assert info["is_first"].tolist() == expected_first[t]
        assert truncated.tolist() == expected_first[t] and not terminated.any()
        for i, twin in enumerate(twins):
            twin_obs, *_ , twin_trunc, _ = twin.step(LEFT)
            if twin_trunc:
                assert np.array_equal(info["final_obs"][i]["symbolic"], twin_obs["symbolic"])
                assert info["final_info"][i]["episode_length"] == [2, 3][i]
                twin_obs, _ = twin.reset()  # the returned obs is the next episode's first
            else:
                assert info["final_obs"][i] is None and info["final_info"][i] is None
            assert np.array_equal(obs["symbolic"][i], twin_obs["symbolic"])
            assert vec.state_key(i) == twin.state_key() and vec.describe(i) == twin.describe()


def test_make_vector_env_uses_distinct_seeds():
    vec = make_vector_env(EnvConfig(name=DOORKEY, num_envs=3), seed=0)
    vec.reset()
    keys = {vec.state_key(i) for i in range(3)}
    assert len(vec) == 3 and len(keys) > 1
    with pytest.raises(ValueError, match="shape"):
        vec.step(np.zeros(2, np.int64))
