"""The feature-code sandbox (lore/sandbox/): legitimate code gives the right numbers, every
escape attempt comes back ok=False within its time limit and leaves nothing behind, and the OS layer
holds even when the Python layer is bypassed."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from lore.sandbox import FAILURE_KINDS, FeatureResult, FeatureSandbox, code_id
from lore.sandbox.hardening import harden
from lore.sandbox.results import MAX_NAME_CHARS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

N = 4  # features per result in these tests
TIMEOUT = 1.0
GRACE = 0.5
# How long a failing call may take: its timeout, the kill grace, and slack for a loaded 2-core box.
SLACK = TIMEOUT + GRACE + 2.5
SECRET = "LORE_SECRET_TEST_7f3a9c"
KEY_IDX, DOOR_IDX, WALL_IDX = 5, 4, 2


def minigrid_snapshot(agent=(1, 1), key=(3, 2), size=6, direction=0) -> dict:
    """A MiniGrid-like state_snapshot: walls round the edge, one key, one locked door."""
    grid = np.zeros((size, size, 3), np.uint8)
    grid[:, :, 0] = 1  # empty
    grid[0, :, 0] = grid[-1, :, 0] = grid[:, 0, 0] = grid[:, -1, 0] = WALL_IDX
    grid[key[0], key[1]] = (KEY_IDX, 4, 0)
    grid[size - 1, size // 2] = (DOOR_IDX, 4, 2)
    return {"grid": grid, "agent_pos": np.array(agent, np.int64), "agent_dir": np.array(direction, np.int64),
            "carrying": np.zeros(2, np.int64)}


FEATURES_LIST = """
import numpy as np

KEY = 5

def compute_features(obs):
    grid = obs["grid"]
    kx, ky = np.argwhere(grid[:, :, 0] == KEY)[0]
    ax, ay = obs["agent_pos"]
    return [abs(kx - ax) + abs(ky - ay), float(obs["agent_dir"]), float((grid[:, :, 0] == 2).sum()),
            float(obs["carrying"][0] == KEY)]
"""
FEATURES_DICT = """
import math
import numpy as np

def compute_features(obs):
    grid = obs["grid"]
    kx, ky = np.argwhere(grid[:, :, 0] == 5)[0]
    ax, ay = obs["agent_pos"]
    return {"key_distance": int(abs(kx - ax) + abs(ky - ay)), "euclid": math.hypot(kx - ax, ky - ay),
            "has_key": obs["carrying"][0] == 5, "door_locked": np.any(grid[:, :, 2] == 2)}
"""


def expected_list(obs: dict) -> list[float]:
    kx, ky = np.argwhere(obs["grid"][:, :, 0] == KEY_IDX)[0]
    ax, ay = obs["agent_pos"]
    return [abs(kx - ax) + abs(ky - ay), float(obs["agent_dir"]), float((obs["grid"][:, :, 0] == WALL_IDX).sum()),
            0.0]


@pytest.fixture(scope="module", autouse=True)
def secret_in_parent_env():
    os.environ["LORE_SECRET_TEST"] = SECRET  # set before any sandbox starts
    yield
    os.environ.pop("LORE_SECRET_TEST", None)


@pytest.fixture(scope="module")
def sandbox(secret_in_parent_env):
    with FeatureSandbox(N, timeout_s=TIMEOUT, memory_mb=256, kill_grace_s=GRACE) as sb:
        sb.start()
        yield sb


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# --------------------------------------------------------------------------- legitimate code


def test_list_features_match_hand_computed(sandbox):
    for agent, key in [((1, 1), (3, 2)), ((4, 4), (1, 3)), ((2, 3), (2, 3))]:
        obs = minigrid_snapshot(agent, key)
        result = sandbox.run(FEATURES_LIST, obs)
        assert result.ok, result.error
        assert result.error is None and result.code_id == code_id(FEATURES_LIST)
        assert result.features.dtype == np.float32 and result.features.shape == (N,)
        np.testing.assert_allclose(result.features, expected_list(obs))
        assert result.features[0] == abs(agent[0] - key[0]) + abs(agent[1] - key[1])


def test_dict_features_in_insertion_order(sandbox):
    obs = minigrid_snapshot((1, 4), (4, 1))
    result = sandbox.run(FEATURES_DICT, obs)
    assert result.ok, result.error
    assert result.names == ("key_distance", "euclid", "has_key", "door_locked")
    np.testing.assert_allclose(result.features, [6.0, np.hypot(3, 3), 0.0, 1.0], rtol=1e-6)


def test_run_batch_equals_run(sandbox):
    rng = np.random.default_rng(0)
    batch = [minigrid_snapshot(tuple(rng.integers(1, 5, 2)), tuple(rng.integers(1, 5, 2)), direction=i % 4)
             for i in range(25)]
    batch_results = sandbox.run_batch(FEATURES_LIST, batch)
    single = [sandbox.run(FEATURES_LIST, obs) for obs in batch]
    assert len(batch_results) == 25
    for b, s, obs in zip(batch_results, single, batch, strict=True):
        assert b.ok and s.ok
        np.testing.assert_array_equal(b.features, s.features)
        np.testing.assert_allclose(b.features, expected_list(obs))
    assert sandbox.run_batch(FEATURES_LIST, []) == []


def test_batch_failure_is_per_observation(sandbox):
    code = "def compute_features(obs):\n    return [[0.5, 1.5, 2.5][int(obs['x'])], 0, 0, 0]\n"
    results = sandbox.run_batch(code, [{"x": 0}, {"x": 7}, {"x": 2}])
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error.startswith("exception: IndexError")
    np.testing.assert_array_equal(results[1].features, np.zeros(N, np.float32))
    assert results[2].features[0] == 2.5


def test_values_are_clipped_after_finiteness_check():
    with FeatureSandbox(3, timeout_s=TIMEOUT, clip=10.0) as sb:
        result = sb.run("def compute_features(obs):\n    return [1e9, -1e9, 3.5]\n", {})
        assert result.ok
        np.testing.assert_array_equal(result.features, [10.0, -10.0, 3.5])


def test_state_does_not_leak_between_observations(sandbox):
    # A mutable top-level constant is rebuilt for every observation.
    code = "SEEN = []\n\ndef compute_features(obs):\n    SEEN.append(1)\n    return [len(SEEN), 0, 0, 0]\n"
    results = sandbox.run_batch(code, [{}] * 5) + [sandbox.run(code, {})]
    assert [r.features[0] for r in results] == [1.0] * 6
    # Writing into one observation's arrays does not touch the next one's.
    code = "def compute_features(obs):\n    s = obs['g'].sum()\n    obs['g'][:] = 100\n    return [s, 0, 0, 0]\n"
    results = sandbox.run_batch(code, [{"g": np.full(3, i)} for i in range(4)])
    assert [r.features[0] for r in results] == [0.0, 3.0, 6.0, 9.0]


def test_dict_keys_come_back_as_clean_short_text(sandbox):
    code = _fn("return {'\\ud800bad': 1.0, 'k' * 500: 2.0, 'émoji 🙂': 3.0, 'line\\nbreak': 4.0}")
    result = sandbox.run(code, {})
    assert result.ok, result.error
    assert all(len(name) <= MAX_NAME_CHARS for name in result.names)
    for name in result.names:
        name.encode("utf-8")  # no lone surrogates
    assert result.names[2] == "émoji 🙂" and result.names[3] == "line break"


TYPICAL_LLM_CODE = """
from __future__ import annotations

import math
import numpy as np
from numpy import argwhere

KEY, DOOR = 5, 4
SCALE = 1.0 / 3.0


def _distance(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).sum())


def compute_features(obs: dict) -> list[float]:
    \"\"\"Key distance, door open, carrying the key, facing.\"\"\"
    grid = obs["grid"]
    keys = argwhere(grid[:, :, 0] == KEY)
    doors = np.argwhere(grid[:, :, 0] == DOOR)
    key_dist = _distance(keys[0], obs["agent_pos"]) if len(keys) > 0 else -1.0
    door_open = float(grid[doors[0][0], doors[0][1], 2] == 0) if len(doors) else 0.0
    try:
        facing = float(obs["agent_dir"]) * SCALE
    except (KeyError, ValueError):
        facing = 0.0
    cells = sum(1 for row in grid[:, :, 0] for c in row if c == 1)
    return [key_dist, door_open, float(obs["carrying"][0] == KEY), facing + 0 * math.log1p(cells)]
"""


def test_typical_llm_code_passes(sandbox):
    assert sandbox.check(TYPICAL_LLM_CODE) is None
    result = sandbox.run(TYPICAL_LLM_CODE, minigrid_snapshot((1, 1), (3, 2), direction=3))
    assert result.ok, result.error
    np.testing.assert_allclose(result.features, [3.0, 0.0, 0.0, 1.0])
    assert sandbox.check("from __future__ import braces\n" + FEATURES_LIST).startswith("rejected")
    assert sandbox.check("from typing import List\n" + FEATURES_LIST).startswith("rejected")


def test_numpy_array_and_tuple_results(sandbox):
    assert sandbox.run("import numpy as np\ndef compute_features(o):\n    return np.arange(4)\n", {}).ok
    assert sandbox.run("def compute_features(o):\n    return (1, 2.5, True, 0)\n", {}).ok


def test_string_sets_iterate_the_same_in_every_worker():
    # Fixed PYTHONHASHSEED in the worker: features do not depend on which process computed them.
    code = ("def compute_features(obs):\n    order = list({'alpha', 'beta', 'gamma', 'delta', 'eps'})\n"
            "    return [order.index(n) for n in ('alpha', 'beta', 'gamma')]\n")
    answers = []
    for _ in range(2):
        with FeatureSandbox(3) as sb:
            answers.append(sb.run(code, {}).features.tolist())
    assert answers[0] == answers[1]


# --------------------------------------------------------------------------- escape attempts


def _fn(body: str, header: str = "") -> str:
    """Feature code whose compute_features runs ``body`` (indented for you)."""
    return f"{header}\ndef compute_features(obs):\n{textwrap.indent(textwrap.dedent(body).strip(), '    ')}\n"


ESCAPES: dict[str, tuple[str, set[str]]] = {
    "import_os": (_fn("return [0.0] * 4", "import os"), {"rejected"}),
    "import_subprocess": (_fn("return [float(subprocess.call(['id']))] * 4", "import subprocess"), {"rejected"}),
    "import_socket": (_fn("socket.create_connection(('1.1.1.1', 80))\nreturn [0.0] * 4", "import socket"),
                      {"rejected"}),
    "import_ctypes": (_fn("return [float(ctypes.CDLL(None).getpid())] * 4", "import ctypes"), {"rejected"}),
    "import_inside_function": (_fn("import os\nreturn [float(os.getpid())] * 4"), {"rejected"}),
    "from_os_import": (_fn("return [float(system('id'))] * 4", "from os import system"), {"rejected"}),
    "import_numpy_submodule": (_fn("return [0.0] * 4", "import numpy.ctypeslib"), {"rejected"}),
    "dunder_import": (_fn("os = __import__('os')\nreturn [float(os.getpid())] * 4"), {"rejected"}),
    "lambda_dunder_import": (_fn("f = lambda: __import__('os')\nreturn [float(f().getpid())] * 4"), {"rejected"}),
    "open_read": (_fn("return [float(len(open('/etc/passwd').read()))] * 4"), {"rejected"}),
    "subclasses_walk": (_fn("for c in ().__class__.__base__.__subclasses__():\n    pass\nreturn [0.0] * 4"),
                        {"rejected"}),
    "getattr_built_string": (_fn("c = getattr((), '__cl' + 'ass__')\nreturn [0.0] * 4"), {"rejected"}),
    "globals_call": (_fn("g = globals()\nreturn [float(len(g))] * 4"), {"rejected"}),
    "vars_call": (_fn("return [float(len(vars()))] * 4"), {"rejected"}),
    "eval_exec_compile": (_fn("exec(compile('x=1', 'f', 'exec'))\nreturn [eval('1.0')] * 4"), {"rejected"}),
    "builtins_name": (_fn("b = __builtins__\nreturn [0.0] * 4"), {"rejected"}),
    "environ_via_os": (_fn("return [float(len(os.environ['LORE_SECRET_TEST']))] * 4", "import os"), {"rejected"}),
    "os_fork": (_fn("pid = os.fork()\nreturn [float(pid)] * 4", "import os"), {"rejected"}),
    "type_new_class": (_fn("T = type('T', (), {})\nreturn [0.0] * 4"), {"rejected"}),
    "type_of_obs": (_fn("t = type(obs)\nreturn [0.0] * 4"), {"rejected"}),
    "class_with_float_hook": ("class F:\n    def __float__(self):\n        return 1.0\n"
                              "def compute_features(obs):\n    return [F()] * 4\n", {"rejected"}),
    "format_attribute_walk": (_fn("s = '{0.__class__.__mro__}'.format(obs)\nreturn [float(len(s))] * 4"),
                              {"rejected"}),
    "generator_frame_walk": (_fn("g = (x for x in [1])\nf = g.gi_frame.f_back\nreturn [0.0] * 4"), {"rejected"}),
    "mro_call": (_fn("m = ValueError.mro()\nreturn [0.0] * 4"), {"rejected"}),
    "np_save": (_fn("np.save('/tmp/lore_sandbox_np_save.npy', obs['grid'])\nreturn [0.0] * 4"), {"rejected"}),
    "np_load": (_fn("a = np.load('/etc/passwd')\nreturn [0.0] * 4"), {"rejected"}),
    "np_fromfile": (_fn("a = np.fromfile('/etc/passwd', dtype=np.uint8)\nreturn [0.0] * 4"), {"rejected"}),
    "np_lib_as_strided": (_fn("a = np.lib.stride_tricks.as_strided(obs['grid'], (10**6,), (8,))\n"
                              "return [0.0] * 4"), {"rejected"}),
    "np_ctypeslib": (_fn("p = np.ctypeslib.as_array\nreturn [0.0] * 4"), {"rejected"}),
    "np_random": (_fn("return list(np.random.rand(4))"), {"rejected"}),
    "array_tofile": (_fn("obs['grid'].tofile('/tmp/lore_sandbox_tofile')\nreturn [0.0] * 4"), {"rejected"}),
    "array_ctypes": (_fn("p = obs['grid'].ctypes.data\nreturn [float(p)] * 4"), {"rejected"}),
    "array_resize_dangling": (_fn("a = np.zeros(8)\nb = a[:]\na.resize(10**6, refcheck=False)\n"
                                  "return list(b[:4])"), {"rejected"}),
    "attribute_assignment": (_fn("g = obs['grid']\ng.strides = (0, 0, 0)\nreturn [0.0] * 4"), {"rejected"}),
    "patch_numpy": (_fn("np.sum = max\nreturn [0.0] * 4"), {"rejected"}),
    "bare_except_swallows_timeout": (_fn("while True:\n    try:\n        pass\n    except:\n        pass"),
                                     {"rejected"}),
    "except_baseexception": (_fn("try:\n    pass\nexcept BaseException:\n    pass\nreturn [0.0] * 4"),
                             {"rejected"}),
    "global_statement": (_fn("global X\nX = 1\nreturn [0.0] * 4"), {"rejected"}),
    "yield_generator": (_fn("yield [0.0] * 4"), {"rejected"}),
    "with_statement": (_fn("with obs:\n    pass\nreturn [0.0] * 4"), {"rejected"}),
    "match_class_pattern": (_fn("match obs:\n    case dict(__class__=c):\n        pass\nreturn [0.0] * 4"),
                            {"rejected"}),
    "decorator": ("@print\ndef compute_features(obs):\n    return [0.0] * 4\n", {"rejected"}),
    "print_call": (_fn("print(obs)\nreturn [0.0] * 4"), {"rejected"}),
    "breakpoint_call": (_fn("breakpoint()\nreturn [0.0] * 4"), {"rejected"}),
    "memoryview_call": (_fn("m = memoryview(b'x')\nreturn [0.0] * 4"), {"rejected"}),
    "top_level_call": ("import numpy as np\nX = np.ones(10**10)\n" + _fn("return [0.0] * 4"), {"rejected"}),
    "top_level_loop": ("while True:\n    pass\n" + _fn("return [0.0] * 4"), {"rejected"}),
    "call_in_default_argument": ("def compute_features(obs, x=[0 for _ in range(10**9)]):\n    return [0.0] * 4\n",
                                 {"rejected"}),
    "call_in_annotation": ("def compute_features(obs: sum(range(10**9))):\n    return [0.0] * 4\n", {"rejected"}),
    "hash_call": (_fn("return [float(hash(compute_features) % 7)] * 4"), {"rejected"}),
    "object_array_pointer_bytes": (_fn("b = np.array([obs, obs]).tobytes()\nreturn [float(b[0])] * 4"),
                                   {"rejected"}),
    "object_array_buffer": (_fn("m = np.array([obs, obs]).data\nreturn [0.0] * 4"), {"rejected"}),
    "no_entry_point": ("def features(obs):\n    return [0.0] * 4\n", {"rejected"}),
    "syntax_error": (_fn("return [0.0] * 4 +"), {"rejected"}),
    "compile_time_error": (_fn("break"), {"rejected"}),
    "oversized_source": ("X = 1\n" + "# padding\n" * 3000 + _fn("return [0.0] * 4"), {"rejected"}),
    # Past the static check: stopped at run time.
    "infinite_loop": (_fn("while True:\n    pass"), {"timeout"}),
    "catch_timeout_and_loop": (_fn("while True:\n    try:\n        while True:\n            pass\n"
                                   "    except Exception:\n        pass"), {"timeout"}),
    "loop_in_finally": (_fn("try:\n    while True:\n        pass\nfinally:\n    while True:\n        pass"),
                        {"timeout"}),
    "return_in_finally_swallows_timeout": (_fn("try:\n    while True:\n        pass\nfinally:\n"
                                               "    return [1.0] * 4"), {"timeout"}),
    # BLAS never checks for signals: only the parent's SIGKILL stops this one.
    # One long C call the alarm cannot interrupt: a naive 4-index einsum (400^4 = 2.6e10 steps, ~20 s),
    # independent of BLAS speed (a big matmul finished inside the timeout on an idle CI machine).
    "uninterruptible_c_call": (_fn("a = np.ones((400, 400))\nreturn [float(np.einsum('ij,jk,kl->il', a, a, a).sum())] * 4"),
                               {"timeout"}),
    "deep_recursion": ("def f(n):\n    return f(n + 1) + 1\n" + _fn("return [f(0)] * 4"), {"exception"}),
    "memory_bomb_list": (_fn("x = [0] * 10**10\nreturn [0.0] * 4"), {"memory"}),
    "memory_bomb_numpy": (_fn("x = np.ones(10**10)\nreturn [0.0] * 4"), {"memory"}),
    "memory_bomb_bytes": (_fn("x = b'a' * (600 * 2**20)\nreturn [0.0] * 4"), {"memory"}),
    "huge_output": (_fn("return [0.5] * 10**6"), {"output_too_large"}),
    "huge_array_output": (_fn("return np.zeros(10**6)"), {"output_too_large"}),
    "nan_result": (_fn("return [float('nan'), 0, 0, 0]"), {"nonfinite"}),
    "inf_result": (_fn("return [0, 0, math.inf, 0]", "import math"), {"nonfinite"}),
    "numpy_division_inf": (_fn("return list(np.array([1.0, 0, 0, 0]) / 0.0)"), {"nonfinite"}),
    "int_too_big_for_float": (_fn("return [10**400, 0, 0, 0]"), {"nonfinite"}),
    "string_result": (_fn("return 'abcd'"), {"wrong_type"}),
    "none_result": (_fn("return None"), {"wrong_type"}),
    "nested_list": (_fn("return [[1, 2], [3, 4], [5], [6]]"), {"wrong_type"}),
    "string_element": (_fn("return [1.0, 'x', 2.0, 3.0]"), {"wrong_type"}),
    "complex_element": (_fn("return [1j, 0, 0, 0]"), {"wrong_type"}),
    "non_str_dict_keys": (_fn("return {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}"), {"wrong_type"}),
    "two_d_array": (_fn("return np.zeros((2, 2))"), {"wrong_type"}),
    "short_list": (_fn("return [1.0, 2.0]"), {"wrong_length"}),
    "long_list": (_fn("return [1.0] * 5"), {"wrong_length"}),
    "short_dict": (_fn("return {'a': 1.0}"), {"wrong_length"}),
    "raises_value_error": (_fn("raise ValueError('bad state')"), {"exception"}),
    "index_error": (_fn("return [obs['grid'][99, 99, 0]] * 4"), {"exception"}),
    "missing_key": (_fn("return [obs['nope']] * 4"), {"exception"}),
    "prebound_math_control": (_fn("return [math.floor(2.5)] * 4"), {"ok"}),  # control: pre-bound math works
}


@pytest.mark.parametrize("name", list(ESCAPES))
def test_escape_corpus(sandbox, name, tmp_path):
    source, kinds = ESCAPES[name]
    obs = minigrid_snapshot()
    start = time.monotonic()
    result = sandbox.run(source, obs)
    elapsed = time.monotonic() - start
    assert isinstance(result, FeatureResult)
    if kinds == {"ok"}:
        assert result.ok, result.error
        return
    assert not result.ok
    kind = result.error.split(":", 1)[0]
    assert kind in FAILURE_KINDS
    assert kind in kinds, f"{name}: expected {kinds}, got {result.error}"
    np.testing.assert_array_equal(result.features, np.zeros(N, np.float32))
    assert elapsed < SLACK, f"{name} took {elapsed:.2f} s"
    assert SECRET not in result.error
    # the sandbox keeps serving legitimate code afterwards
    after = sandbox.run(FEATURES_LIST, obs)
    assert after.ok, after.error


def test_ten_million_floats_are_refused_not_shipped():
    with FeatureSandbox(N, timeout_s=10.0) as sb:  # building the list itself takes a while on a busy box
        result = sb.run(_fn("return [0.5] * 10**7"), {})
        assert result.error.startswith("output_too_large")
        assert sb.counters()["worker_kills"] == 0  # refused inside the worker, never sent


def test_static_rejection_runs_nothing(sandbox):
    before = sandbox.counters()
    assert sandbox.check("import os\ndef compute_features(obs):\n    return []\n").startswith(
        "rejected: import of 'os' is not allowed")
    assert sandbox.check(FEATURES_LIST) is None
    assert "line 3" in sandbox.check("import numpy as np\ndef compute_features(obs):\n    return np.load('x')\n")
    assert sandbox.counters() == before  # check() neither runs code nor counts


def test_file_writes_leave_no_file(sandbox, tmp_path):
    targets = [tmp_path / f"escape_{i}" for i in range(4)]
    attempts = [
        _fn(f"f = open({str(targets[0])!r}, 'w')\nf.write('x')\nreturn [0.0] * 4"),
        _fn(f"np.save({str(targets[1])!r}, obs['grid'])\nreturn [0.0] * 4"),
        _fn(f"obs['grid'].tofile({str(targets[2])!r})\nreturn [0.0] * 4"),
        _fn(f"np.savetxt({str(targets[3])!r}, obs['grid'][0])\nreturn [0.0] * 4"),
    ]
    for source in attempts:
        result = sandbox.run(source, minigrid_snapshot())
        assert not result.ok and result.error.startswith("rejected")
    assert not any(t.exists() for t in targets)
    assert list(tmp_path.iterdir()) == []


def test_timeout_kills_and_replaces_worker(sandbox):
    pid_before = sandbox.worker_pids()[0]
    start = time.monotonic()
    result = sandbox.run(ESCAPES["uninterruptible_c_call"][0], {})
    assert result.error.startswith("timeout") and time.monotonic() - start < SLACK
    assert not _pid_alive(pid_before)
    fresh = {**minigrid_snapshot(), "nonce": np.array(time.monotonic_ns())}  # never seen: not from the cache
    assert sandbox.run(FEATURES_LIST, fresh).ok
    assert sandbox.worker_pids() and sandbox.worker_pids()[0] != pid_before


def test_soft_timeout_keeps_the_worker(sandbox):
    pid_before = sandbox.worker_pids()[0]
    assert sandbox.run(ESCAPES["infinite_loop"][0], {}).error.startswith("timeout: feature code ran longer")
    assert sandbox.worker_pids() == [pid_before]  # interrupted in the worker, no restart needed


def test_counters_count_by_kind():
    with FeatureSandbox(2, timeout_s=TIMEOUT) as sb:
        sb.run("def compute_features(o):\n    return [1, 2]\n", {})
        sb.run_batch("def compute_features(o):\n    return [1]\n", [{}, {}])
        sb.run("import os\ndef compute_features(o):\n    return [1, 2]\n", {})
        sb.run(_fn("while True:\n    pass"), {})
        c = sb.counters()
    assert c["calls"] == 5 and c["ok"] == 1 and c["failures"] == 4
    assert c["failures_wrong_length"] == 2 and c["failures_rejected"] == 1 and c["failures_timeout"] == 1
    assert c["worker_starts"] == 1 and c["worker_kills"] == 0


# --------------------------------------------------------------------------- issue-tracker fixes


def test_observations_share_no_memory_with_the_batch(sandbox):
    # A stacked batch arrives as one array per key: each observation was a view whose `.base` reached
    # the rows of the observations after it.
    code = _fn("""
        s = float(obs['g'].sum())
        base = obs['g'].base
        if base is not None:
            base[...] = 100
        return [s, float(base is None), 0, 0]
    """)
    results = sandbox.run_batch(code, [{"g": np.full(3, i)} for i in range(4)])
    assert [r.features[0] for r in results] == [0.0, 3.0, 6.0, 9.0]
    assert all(r.features[1] == 1.0 for r in results)
    # Mixed layouts travel as a list, where pickle sends an array given twice only once.
    shared = np.arange(3.0)
    batch = [{"g": shared}, {"g": shared, "h": np.zeros(1)}, {"g": shared}]
    code = _fn("s = float(obs['g'].sum())\nobs['g'][...] = 100\nreturn [s, 0, 0, 0]")
    assert [r.features[0] for r in sandbox.run_batch(code, batch)] == [3.0, 3.0, 3.0]


ADDRESS_TEXT_CODE = _fn("""
    f = lambda: 0
    texts = [repr(f), str(obs.get), f'{compute_features}', f'{f!r:>5}', '%r' % (iter([]),), '%s' % f,
             '%(a)s' % {'a': f}, str(ValueError(f)), repr([f, len]), str(np.sum)]
    joined = ''.join(sorted(texts, key=str))
    return [float('0x' in joined), float(len(joined)), float(sum(ord(c) for c in joined) % 997),
            float(len(set(texts)))]
""")


def test_features_do_not_depend_on_memory_addresses():
    assert FeatureSandbox(N).check(_fn("return [float(hash(obs.get) % 7)] * 4")).startswith(
        "rejected: use of 'hash'")
    assert FeatureSandbox(N).check(_fn("return [float(id(obs) % 7)] * 4")).startswith("rejected: use of 'id'")
    answers = []
    for _ in range(2):  # two fresh worker processes: different heap addresses
        with FeatureSandbox(N) as sb:
            results = sb.run_batch(ADDRESS_TEXT_CODE, [{}, {}])
            assert all(r.ok for r in results), results[0].error
            answers += [r.features.tolist() for r in results]
    assert answers[0][0] == 0.0, "text of a function still shows its address"
    assert all(a == answers[0] for a in answers)


def test_text_builtins_still_work(sandbox):
    code = _fn("""
        a = np.array(['ab', 'c'], dtype=str)
        x = np.arange(4)
        y = x
        y %= 3  # in place, as before the rewrite
        n = 7
        n %= 4
        s = '%d-%s-%.1f' % (3, 'x', 2.25) + f'{2.5:.2f}{n:>3}' + str.join(',', ['a', 'b']) + str(1.5)
        return [float(isinstance('a', str) and isinstance(1, (int, str))), float(a.dtype.kind == 'U'),
                float(x[3] + n), float(len(s))]
    """)
    result = sandbox.run(code, {})
    assert result.ok, result.error
    assert result.features.tolist() == [1.0, 1.0, 3.0, float(len("3-x-2.2" + "2.50  3" + "a,b" + "1.5"))]


@pytest.mark.parametrize("ending", ["return [1.0] * 4", "raise ValueError('not a timeout')"])
def test_swallowed_timeout_is_still_a_timeout(ending):
    swallow_by_return = _fn(f"try:\n    while True:\n        pass\nfinally:\n    {ending}")
    swallow_by_break = _fn(f"""
        for _ in range(2):
            try:
                while True:
                    pass
            finally:
                break
        {ending}
    """)
    with FeatureSandbox(N, timeout_s=0.3) as sb:
        for code in (swallow_by_return, swallow_by_break):
            result = sb.run(code, {})
            assert not result.ok and result.error.startswith("timeout: feature code ran longer"), result.error
        assert sb.counters()["worker_kills"] == 0  # caught in the worker, no hard kill needed


def test_nothing_runs_when_the_module_body_runs(sandbox):
    evaluated_at_import = {
        "default": "def compute_features(obs, n=len(range(10**9))):\n    return [0.0] * 4\n",
        "keyword_default": "def compute_features(obs, *, f=(lambda: 0)):\n    return [0.0] * 4\n",
        "argument_annotation": "def compute_features(obs: [0 for _ in range(10**9)]):\n    return [0.0] * 4\n",
        "return_annotation": "def compute_features(obs) -> sum(range(10**9)):\n    return [0.0] * 4\n",
        "helper_annotation": "def g(x: min(1, 2)):\n    return x\n" + _fn("return [0.0] * 4"),
        "variable_annotation": "X: sum(range(10**9)) = 1\n" + _fn("return [0.0] * 4"),
    }
    for name, code in evaluated_at_import.items():
        error = sandbox.check(code)
        assert error and error.startswith("rejected: ") and "module body runs" in error, (name, error)
        start = time.monotonic()
        assert sandbox.run(code, {}).error.startswith("rejected"), name
        assert time.monotonic() - start < SLACK, name  # the body (seconds of work) never ran
    ordinary = ("KEY: int = 5\n\n"
                "def compute_features(obs: dict, scale: float = 1.0, axes=(0, 1), *, key: int | None = KEY,\n"
                "                     eps=-1e-6) -> dict[str, float] | list[float]:\n"
                "    return [scale, float(len(axes)), float(key), eps]\n")
    assert sandbox.check(ordinary) is None
    result = sandbox.run(ordinary, {})
    assert result.ok, result.error
    np.testing.assert_allclose(result.features, [1.0, 2.0, 5.0, -1e-6])


def test_code_that_keeps_failing_is_disabled():
    looping = _fn("while True:\n    pass")
    with FeatureSandbox(N, timeout_s=0.2, max_consecutive_failures=3) as sb:
        for _ in range(3):
            assert sb.run(looping, {}).error.startswith("timeout")
        assert sb.is_disabled(looping) and list(sb.disabled_codes()) == [code_id(looping)]
        results = sb.run_batch(looping, [{}, {}])  # no longer pays its timeout: the counters below say so
        assert all(r.error.startswith("disabled: feature code failed 3 calls in a row (last: timeout")
                   for r in results)
        np.testing.assert_array_equal(results[0].features, np.zeros(N, np.float32))
        c = sb.counters()
        assert c["codes_disabled"] == 1 and c["failures_disabled"] == 2 and c["failures_timeout"] == 3
        assert sb.run(FEATURES_LIST, minigrid_snapshot()).ok  # other code is unaffected

        # A call with any ok observation resets the count; rejected code never counts.
        flaky = _fn("return [1.0 / obs['x']] * 4")
        for x in (0, 0, 1, 0, 0):
            sb.run(flaky, {"x": x})
        assert not sb.run_batch(flaky, [{"x": 0}, {"x": 1}])[0].ok
        assert not sb.is_disabled(flaky)
        rejected = "import os\n" + _fn("return [0.0] * 4")
        for _ in range(4):
            assert sb.run(rejected, {}).error.startswith("rejected")
        assert not sb.is_disabled(rejected)
    with FeatureSandbox(N, max_consecutive_failures=None) as sb:
        for _ in range(4):
            assert sb.run(flaky, {"x": 0}).error.startswith("nonfinite")
        assert not sb.is_disabled(flaky) and sb.counters()["codes_disabled"] == 0


def test_llm_bridge_drops_disabled_feature_code():
    from types import SimpleNamespace

    from lore.method.advisor import LLMBridge

    looping = _fn("while True:\n    pass")
    advice = SimpleNamespace(prior_logits=np.zeros(3, np.float32), confidence=1.0, source="llm",
                             features_code=looping)
    with FeatureSandbox(N, timeout_s=0.2, max_consecutive_failures=2) as sb:
        bridge = LLMBridge.__new__(LLMBridge)  # only what inputs() needs: no model, no env
        bridge.__dict__.update(
            num_envs=1, num_actions=3, n_features=N, sandbox=sb, feature_code=None, feature_code_id=None,
            feature_failures=0, dropped_feature_codes=set(), monitor=None, planner=None, act_steps=0,
            controller=SimpleNamespace(current=lambda i, key, step: advice, counters=dict, state_dict=dict),
            envs=SimpleNamespace(state_key=lambda i: "s", state_snapshot=lambda i: {}))
        for step in range(2):
            assert bridge.inputs(step)["features_mask"][0] == 0.0
        assert bridge.feature_code is None and bridge.dropped_feature_codes == {code_id(looping)}
        before = sb.counters()
        assert bridge.inputs(2)["features_mask"][0] == 0.0
        assert bridge.feature_code is None  # the same code offered again is not re-adopted
        assert sb.counters() == before  # nor run: no call, no timeout paid
        assert bridge.metrics()["feature_programs_dropped"] == 1.0
        assert bridge.state_dict()["dropped_feature_codes"] == [code_id(looping)]


# --------------------------------------------------------------------------- process isolation


def test_worker_environment_is_empty_of_parent_secrets(sandbox):
    assert os.environ["LORE_SECRET_TEST"] == SECRET
    pid = sandbox.worker_pids()[0]
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode()
    assert SECRET not in environ and "LORE_SECRET_TEST" not in environ
    keys = {item.split("=", 1)[0] for item in environ.split("\0") if item}
    assert keys <= {"LC_ALL", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED"}
    assert "PATH" not in keys and "HOME" not in keys
    assert set(sandbox.isolation["environ_keys"]) == keys
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert SECRET.encode() not in cmdline


def test_worker_isolation_report(sandbox):
    info = sandbox.isolation
    limits = info["rlimits"]
    assert limits["RLIMIT_FSIZE"] == 0 and limits["RLIMIT_CORE"] == 0 and limits["RLIMIT_NPROC"] == 0
    assert limits["RLIMIT_NOFILE"] <= 8 and limits["RLIMIT_CPU"] > 0
    assert limits["RLIMIT_AS"] >= 256 * 2**20
    assert isinstance(sandbox.network_isolated, bool)
    assert sandbox.network_isolated == bool(info["netns"] or info["seccomp"])
    if os.geteuid() == 0:
        assert info["uid"] == 65534, info["notes"]
        assert info["netns"] and info["chroot"], info["notes"]
    pid = sandbox.worker_pids()[0]
    status = Path(f"/proc/{pid}/status").read_text()
    if info["seccomp"]:
        assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status
    if info["chroot"]:
        assert os.readlink(f"/proc/{pid}/root").startswith(tempfile.gettempdir())


def test_close_leaves_no_process_and_no_directory():
    sb = FeatureSandbox(N, timeout_s=TIMEOUT, workers=2)
    results = sb.run_batch(FEATURES_LIST, [minigrid_snapshot()] * 6)
    assert all(r.ok for r in results)
    pids = sb.worker_pids()
    assert len(pids) == 2  # both workers took a share
    roots = [os.readlink(f"/proc/{pid}/root") for pid in pids]
    sb.close()
    sb.close()  # idempotent
    assert not any(_pid_alive(pid) for pid in pids)
    assert sb.worker_pids() == []
    for root in roots:
        if root != "/":
            assert not os.path.exists(root)
    with pytest.raises(RuntimeError, match="closed"):
        sb.run(FEATURES_LIST, minigrid_snapshot())


def test_two_workers_split_a_batch_like_one():
    batch = [minigrid_snapshot((1 + i % 4, 1 + (i // 4) % 4), (4, 4)) for i in range(11)]
    with FeatureSandbox(N, workers=2) as two, FeatureSandbox(N, workers=1) as one:
        a = two.run_batch(FEATURES_LIST, batch)
        b = one.run_batch(FEATURES_LIST, batch)
    assert [r.features.tolist() for r in a] == [r.features.tolist() for r in b]


def test_worker_killed_from_outside_is_reported_and_replaced():
    with FeatureSandbox(N, timeout_s=2.0) as sb:
        sb.start()
        pid = sb.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        # A dead idle worker is noticed before sending: the call simply gets a fresh one.
        assert sb.run(FEATURES_LIST, minigrid_snapshot()).ok
        assert sb.counters()["worker_starts"] == 2


def test_hardening_holds_without_the_python_layer(tmp_path):
    """Run harden() in a forked child, then try the escapes directly with the real os module."""
    root = tempfile.mkdtemp()
    os.chmod(root, 0o755)
    read_fd, write_fd = os.pipe()
    target = tmp_path / "written_by_child"
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            os.close(read_fd)
            report = harden({"root_dir": root, "memory_mb": 64, "cpu_lifetime_s": 30})
            attempts = {}

            def attempt(name, action):
                try:
                    action()
                    attempts[name] = "succeeded"
                except OSError as e:
                    attempts[name] = f"blocked: {e.strerror}"
                except ValueError as e:  # resource.setrlimit reports EPERM as ValueError
                    attempts[name] = f"blocked: {e}"

            attempt("read_passwd", lambda: open("/etc/passwd").read())
            attempt("write_file", lambda: open(str(target), "w").write("x"))
            attempt("write_in_root", lambda: open("/escape", "w").write("x"))
            attempt("socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            attempt("fork", lambda: os.waitpid(os.fork() or os._exit(0), 0))
            attempt("exec", lambda: os.execv("/bin/sh", ["sh", "-c", "true"]))
            attempt("kill_parent", lambda: os.kill(os.getppid(), 0))
            attempt("raise_rlimit", lambda: __import__("resource").setrlimit(
                __import__("resource").RLIMIT_NOFILE, (64, 64)))
            os.write(write_fd, json.dumps({"report": report, "attempts": attempts}).encode())
        except BaseException as e:
            os.write(write_fd, json.dumps({"error": repr(e)}).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    data = b""
    while chunk := os.read(read_fd, 65536):
        data += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    os.rmdir(root)
    outcome = json.loads(data)
    assert "error" not in outcome, outcome
    report, attempts = outcome["report"], outcome["attempts"]
    assert not target.exists()
    assert attempts["write_file"].startswith("blocked") and attempts["write_in_root"].startswith("blocked")
    if report["chroot"]:
        assert attempts["read_passwd"].startswith("blocked")
    if report["network_isolated"]:
        assert attempts["socket"].startswith("blocked")
    if report["seccomp"]:
        for name in ("socket", "fork", "exec", "kill_parent"):
            assert attempts[name] == "blocked: Operation not permitted", (name, attempts)
        assert attempts["raise_rlimit"].startswith("blocked"), attempts
    if os.geteuid() == 0:
        assert report["seccomp"] and report["chroot"] and report["netns"], report["notes"]


# --------------------------------------------------------------------------- API edges


def test_code_id_is_stable_short_sha256():
    assert code_id(FEATURES_LIST) == code_id(FEATURES_LIST)
    assert code_id(FEATURES_LIST) != code_id(FEATURES_DICT)
    assert len(code_id("x")) == 16 and int(code_id("x"), 16) >= 0
    with pytest.raises(TypeError, match="str"):
        code_id(None)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"n_features": 0}, "n_features"), ({"n_features": 4, "timeout_s": 0}, "timeout_s"),
     ({"n_features": 4, "memory_mb": 1}, "memory_mb"), ({"n_features": 4, "workers": 0}, "workers"),
     ({"n_features": 4, "clip": float("inf")}, "clip"),
     ({"n_features": 4, "max_consecutive_failures": 0}, "max_consecutive_failures")],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FeatureSandbox(**kwargs)


def test_bad_observations_raise(sandbox):
    with pytest.raises(TypeError, match="dtype"):
        sandbox.run(FEATURES_LIST, {"grid": np.array([object()])})
    with pytest.raises(TypeError, match="dict"):
        sandbox.run(FEATURES_LIST, [1, 2])
    with pytest.raises(TypeError, match="str"):
        sandbox.run(None, {})


def test_from_config_uses_the_features_section():
    from lore.config import FeaturesConfig

    cfg = FeaturesConfig(n_features=3, timeout_s=0.7, memory_mb=128, workers=2)
    with FeatureSandbox.from_config(cfg) as sb:
        assert (sb.n_features, sb.timeout_s, sb.memory_mb, len(sb._workers)) == (3, 0.7, 128, 2)
        assert sb.worker_pids() == []  # nothing started until needed


# --------------------------------------------------------------------------- a misbehaving worker

FAKE_WORKER = '''
import json, os, pickle, struct, sys

BEHAVIOUR = {behaviour!r}
MARKER = {marker!r}


class Payload:  # unpickling this in the parent would create MARKER
    def __reduce__(self):
        return (os.mkdir, (MARKER,))


def send(data):
    os.write(1, struct.pack("<I", len(data)) + data)


def main(config_text):
    if BEHAVIOUR == "no_handshake":
        return
    send(json.dumps({{"ready": True, "notes": []}}).encode())
    while True:
        header = os.read(0, 4)
        if not header:
            return
        (length,) = struct.unpack("<I", header)
        body = b""
        while len(body) < length:
            body += os.read(0, length - len(body))
        n = 1
        if BEHAVIOUR == "pickle":
            send(pickle.dumps(Payload()))
        elif BEHAVIOUR == "huge_header":
            os.write(1, struct.pack("<I", 2**31))
        elif BEHAVIOUR == "wrong_count":
            send(json.dumps({{"results": []}}).encode())
        elif BEHAVIOUR == "bad_values":
            send(json.dumps({{"results": [["ok", "", ["x", None, 1, 2], None]] * n}}).encode())
        elif BEHAVIOUR == "unknown_kind":
            send(json.dumps({{"results": [["pwned", "", None, None]] * n}}).encode())
        elif BEHAVIOUR == "exit":
            sys.exit(3)
'''


@pytest.mark.parametrize("behaviour, kind", [("pickle", "worker_crashed"), ("huge_header", "output_too_large"),
                                             ("wrong_count", "worker_crashed"), ("bad_values", "worker_crashed"),
                                             ("unknown_kind", "worker_crashed"), ("exit", "worker_crashed")])
def test_parent_survives_a_compromised_worker(tmp_path, monkeypatch, behaviour, kind):
    import lore.sandbox.process as process_module

    marker = tmp_path / "unpickled_in_parent"
    fake = tmp_path / "fake_worker.py"
    fake.write_text(FAKE_WORKER.format(behaviour=behaviour, marker=str(marker)))
    monkeypatch.setattr(process_module, "_WORKER_FILE", str(fake))
    with FeatureSandbox(N, timeout_s=TIMEOUT) as sb:
        start = time.monotonic()
        result = sb.run(FEATURES_LIST, minigrid_snapshot())
        assert time.monotonic() - start < SLACK
        assert not result.ok and result.error.split(":", 1)[0] == kind, result.error
        assert sb.counters()["worker_kills"] == 1
        assert sb.worker_pids() == []  # the misbehaving worker is gone
    assert not marker.exists()


def test_worker_that_never_starts_raises_sandbox_error(tmp_path, monkeypatch):
    import lore.sandbox.process as process_module
    from lore.sandbox import SandboxError

    fake = tmp_path / "fake_worker.py"
    fake.write_text(FAKE_WORKER.format(behaviour="no_handshake", marker=""))
    monkeypatch.setattr(process_module, "_WORKER_FILE", str(fake))
    with FeatureSandbox(N) as sb:
        with pytest.raises(SandboxError, match="failed to start"):
            sb.start()
        assert sb.counters()["worker_starts"] == 2  # one retry


def test_a_repeated_observation_is_answered_from_the_cache_and_a_failure_is_retried():
    obs = minigrid_snapshot(agent=(2, 2))
    with FeatureSandbox(N, timeout_s=TIMEOUT, kill_grace_s=GRACE, result_cache=2) as sb:
        first = sb.run(FEATURES_LIST, obs)
        expected = first.features.tolist()
        first.features[:] = -1.0  # the caller's copy: the cache keeps its own
        again = sb.run_batch(FEATURES_LIST, [obs, minigrid_snapshot(agent=(1, 1))])
        assert again[0].ok and again[0].features.tolist() == expected != again[1].features.tolist()
        assert sb.counters()["cache_hits"] == 1 and sb.counters()["calls"] == 3
        # an equal observation built anew hits; another dtype of the same numbers does not
        same = {k: np.array(v) for k, v in obs.items()}
        other_dtype = {**obs, "agent_dir": np.array(0, np.int32)}
        sb.run_batch(FEATURES_LIST, [same, other_dtype])
        assert sb.counters()["cache_hits"] == 2
        # at most result_cache entries: the oldest (obs) was evicted
        sb.run(FEATURES_LIST, minigrid_snapshot(agent=(1, 4)))
        sb.run(FEATURES_LIST, obs)
        assert sb.counters()["cache_hits"] == 2
        # a failure is never cached: the same observation runs again (and fails again)
        failing = _fn("while True:\n    pass")
        assert not sb.run(failing, obs).ok and not sb.run(failing, obs).ok
        assert sb.counters()["failures_timeout"] == 2 and sb.counters()["cache_hits"] == 2
    with FeatureSandbox(N, timeout_s=TIMEOUT, result_cache=0) as sb:
        sb.run(FEATURES_LIST, obs)
        sb.run(FEATURES_LIST, obs)
        assert sb.counters()["cache_hits"] == 0
