"""Checkpoints: loaded without running code, checked against the config before any work, written so that a
full disk or a kill mid-write keeps the previous one, sized by what they hold; ``lore train`` writes only
inside its run directory.

One tiny ``rl_only`` run is trained once for the module; each test works on a copy of it.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from workflow_helpers import HANG_GUARD_S

from lore import cli
from lore.train.checkpoint import (
    CheckpointError,
    compact_replay,
    expand_replay,
    from_plain,
    load_checkpoint,
    load_envs,
    save_checkpoint,
    to_plain,
)
from lore.train.replay import SequenceReplay, empty_row_spec
from lore.train.trainer import train

sys.path.insert(0, str(Path(__file__).parent))
from test_train import TINY, tiny_cfg  # noqa: E402

MARKER = "pwned"


class Evil:
    """Unpickling this creates ``self.path`` (through builtins.open)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ckpt") / "run"
    train(tiny_cfg(), run, show_progress=False)
    return run


@pytest.fixture
def run(finished, tmp_path) -> Path:
    """A copy of the finished run without its ``done`` marker: ``lore train`` on it resumes."""
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    (copy / "done").unlink()
    return copy


def snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != ".lock"}


def lore(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main([*map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def lore_train(capsys, run: Path, *extra: str) -> tuple[int, str, str]:
    return lore(capsys, "train", "--run-dir", run, "--ablation", "rl_only", "--no-progress",
                *[a for s in [*TINY, *extra] for a in ("--set", s)])


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lore: error: "), err
    return lines[0]


# --------------------------------------------------------------------------- plain form


def test_plain_form_round_trips_numpy_values_and_module_metadata():
    state = OrderedDict(w=torch.arange(3.0))
    state._metadata = {"": {"version": 2}}
    value = {"a": np.arange(6, dtype=np.uint32).reshape(2, 3), "b": np.float32(0.5),
             "c": (np.bool_(True), [1, None]), "rng": np.random.get_state(), "m": state}
    buf = io.BytesIO()
    torch.save(to_plain(value), buf)
    buf.seek(0)
    back = from_plain(torch.load(buf, weights_only=True))
    assert back["a"].dtype == np.uint32 and (back["a"] == value["a"]).all()
    assert type(back["b"]) is np.float32 and back["b"] == 0.5
    assert back["c"] == (True, [1, None]) and type(back["c"][0]) is np.bool_
    assert back["rng"][0] == "MT19937" and (back["rng"][1] == value["rng"][1]).all()
    assert isinstance(back["m"], OrderedDict) and back["m"]._metadata == {"": {"version": 2}}


def test_plain_form_refuses_objects():
    with pytest.raises(TypeError, match=r"checkpoint\.x: a Evil cannot be stored"):
        to_plain({"x": Evil(Path("nowhere"))})


def test_compacted_replay_stores_the_filled_rows_only_and_restores_them_exactly():
    spec = empty_row_spec({"symbolic": (50,)}, {"symbolic": torch.float32}, 3, 2)
    capacity = 400
    replay = SequenceReplay(spec, 1, capacity, batch_size=2, batch_length=4)
    rng = np.random.default_rng(0)
    for t in range(70):
        row = {k: np.zeros(shape, np.float32) for k, (shape, _) in spec.items()}
        row["obs.symbolic"] = (rng.random(50) < 0.1).astype(np.float32)
        row.update(action=np.int64(t % 3), is_first=t == 0, is_terminal=False, is_last=False)
        replay.add(0, row)
    state = replay.state_dict()
    filled = state["buffer"]["_storage"]["_len"]
    assert 0 < filled < capacity
    compact = compact_replay(state)
    full_bytes = sum(t.numel() * t.element_size() for t in state["buffer"]["_storage"]["_storage"].values())
    stored = sum(len(v["zlib"]) for v in compact["buffer"]["_storage"]["_storage"].values())
    assert stored < full_bytes * filled / capacity  # the filled rows only, and compressed
    restored = expand_replay(compact)["buffer"]["_storage"]["_storage"]
    for key, tensor in state["buffer"]["_storage"]["_storage"].items():
        assert restored[key].dtype == tensor.dtype and restored[key].shape == tensor.shape, key
        assert torch.equal(restored[key][:filled], tensor[:filled]), key
    assert restored._metadata == state["buffer"]["_storage"]["_storage"]._metadata


# --------------------------------------------------------------------------- envs


def _same_obs(x: dict, y: dict) -> bool:
    return all((x[k] == y[k]).all() for k in x)


@pytest.mark.parametrize("name", ["MiniGrid-DoorKey-5x5-v0", "crafter"])
def test_saved_envs_are_restored_and_continue_identically(name):
    from lore.config import build_config
    from lore.envs import make_vector_env

    envs = make_vector_env(build_config(overrides=[f"env.name={name}", "env.num_envs=2"]).env, 3)
    envs.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(30):
        envs.step(rng.integers(0, envs.action_space.n, size=2))
    copy = load_envs(pickle.dumps(envs), "test")
    for _ in range(30):
        actions = rng.integers(0, envs.action_space.n, size=2)
        a, b = envs.step(actions), copy.step(actions)
        assert _same_obs(a[0], b[0]) and (a[1] == b[1]).all()


def test_every_minigrid_env_is_restored_and_continues_identically():
    """Every registered MiniGrid id that can be built here resumes: its mission function, whatever its name
    (``_gen_mission_lava``, ``_gen_mission_wall``, ...), is resolved, and the copy steps like the original."""
    from lore.envs.factory import make_env
    from lore.envs.minigrid import minigrid_ids

    restored, failed = [], {}
    for name in minigrid_ids():
        try:
            env = make_env(name, 0)
            env.reset(seed=0)
        except FileNotFoundError:  # the MiniGrid-WFC-* ids: the wheel lacks their pattern images
            continue
        rng = np.random.default_rng(0)
        if any(env.step(int(rng.integers(env.action_space.n)))[2:4]):
            env.reset()
        try:
            copy = load_envs(pickle.dumps(env), "test")
        except CheckpointError as e:
            failed[name] = str(e)
            continue
        for _ in range(5):
            action = int(rng.integers(env.action_space.n))
            a, b = env.step(action), copy.step(action)
            assert _same_obs(a[0], b[0]) and a[1:4] == b[1:4], name
            if any(a[2:4]):  # the episode ended: the next one must be drawn the same from both
                a, b = env.reset(), copy.reset()
                assert _same_obs(a[0], b[0]), name
        restored.append(name)
    assert not failed, failed
    assert {"MiniGrid-LavaGapS5-v0", "MiniGrid-SimpleCrossingS9N1-v0", "MiniGrid-DoorKey-5x5-v0"} <= set(restored)


INST_GRID = b"(iminigrid.core.grid\nGrid\n(dp0\nb."


@pytest.mark.parametrize("case, needle", [
    ("open", "global io.open is not part of an environment"),
    ("call_class", "calling Env is not allowed"),
    ("inst", "INST/OBJ"),
])
def test_env_unpickler_runs_no_code(tmp_path, case, needle):
    marker = tmp_path / MARKER
    if case == "open":
        data = pickle.dumps(Evil(marker))
    elif case == "call_class":  # an env package's class may be named, but not called (its __init__)
        import crafter

        class CallsEnv:
            def __reduce__(self):
                return crafter.Env, ()

        data = pickle.dumps(CallsEnv())
    else:
        data = INST_GRID
    with pytest.raises(CheckpointError, match=needle):
        load_envs(data, tmp_path / "checkpoint.pt")
    assert not marker.exists()


# --------------------------------------------------------------------------- tampered checkpoints


def _tamper(run: Path, how: str) -> None:
    path, marker = run / "checkpoint.pt", run.parent / MARKER
    if how == "pickle_file":
        path.write_bytes(pickle.dumps({"env_step": 1, "agent": Evil(marker)}))
    elif how == "torch_file":
        torch.save({"env_step": 1, "agent": Evil(marker)}, path)
    else:  # a checkpoint that loads, with a code-running object where the pickled envs go
        payload = load_checkpoint(path)
        save_checkpoint(path, {**payload, "envs": pickle.dumps(Evil(marker))})


@pytest.mark.parametrize("command, how", [
    ("train", "pickle_file"), ("train", "torch_file"), ("train", "envs"), ("eval", "pickle_file"),
    ("eval", "torch_file"),
])
def test_a_checkpoint_that_would_run_code_is_refused_unrun(run, capsys, command, how):
    _tamper(run, how)
    before = snapshot(run)
    if command == "train":
        rc, out, err = lore_train(capsys, run)
    else:
        rc, out, err = lore(capsys, "eval", "--run-dir", run, "--episodes", 1)
    line = one_error_line(err)
    assert rc == 2 and str(run / "checkpoint.pt") in line and out == ""
    assert not (run.parent / MARKER).exists()
    assert snapshot(run) == before


def _rewrite(run: Path, change) -> None:
    payload = load_checkpoint(run / "checkpoint.pt")
    change(payload)
    save_checkpoint(run / "checkpoint.pt", payload)


def _first_wm_parameter(payload: dict) -> str:
    return next(iter(payload["agent"]["wm"]))


MISFITS = {
    "other_config": (lambda p: p["config"]["env"].update(name="MiniGrid-DoorKey-5x5-v0"),
                     "env.name: 'MiniGrid-DoorKey-5x5-v0' -> 'MiniGrid-Empty-5x5-v0'"),
    "parameter_shape": (lambda p: p["agent"]["wm"].update({_first_wm_parameter(p): torch.zeros(3)}),
                        "has shape (3,), the config needs"),
    "parameter_missing": (lambda p: p["agent"]["wm"].pop(_first_wm_parameter(p)), "is missing"),
    "agent_entry_missing": (lambda p: p["agent"].pop("critic_opt"), "agent state lacks critic_opt"),
    "no_agent": (lambda p: p.pop("agent"), "the agent state is missing"),
    "negative_step": (lambda p: p.update(env_step=-5), "env_step is -5"),
    "text_step": (lambda p: p.update(env_step="240"), "env_step is '240'"),
    "other_preset": (lambda p: p["config"]["model"].update(preset="xs"), "model.preset: 'xs' -> 'debug'"),
}


@pytest.mark.parametrize("command", ["train", "eval"])
@pytest.mark.parametrize("case", sorted(MISFITS))
def test_a_checkpoint_that_does_not_fit_is_refused_before_any_work(run, tmp_path, capsys, command, case):
    change, needle = MISFITS[case]
    _rewrite(run, change)
    before, outside = snapshot(run), sorted(p.name for p in tmp_path.iterdir())
    if command == "train":
        rc, out, err = lore_train(capsys, run)
    else:
        rc, out, err = lore(capsys, "eval", "--run-dir", run, "--episodes", 1)
    line = one_error_line(err)
    assert rc == 2 and str(run / "checkpoint.pt") in line and needle in line, line
    assert out == "" and snapshot(run) == before and sorted(p.name for p in tmp_path.iterdir()) == outside


def test_a_finished_run_asked_for_other_settings_names_them_instead_of_being_complete(finished, capsys):
    before = snapshot(finished)
    rc, out, err = lore_train(capsys, finished, "env.name=MiniGrid-Empty-6x6-v0", "train.steps=480")
    line = one_error_line(err)
    assert rc == 2 and "env.name" in line and "train.steps: 240 -> 480" in line and out == ""
    rc, out, err = lore_train(capsys, finished)
    assert rc == 0 and "already complete" in out, err
    assert snapshot(finished) == before


# --------------------------------------------------------------------------- writing


def _fail_checkpoint_fsync(monkeypatch) -> None:
    import lore.utils.io as io_module

    real_fsync = io_module.os.fsync

    def fsync(fd):
        if ".checkpoint.pt." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(io_module.os, "fsync", fsync)


def test_a_full_disk_during_a_checkpoint_write_keeps_the_previous_checkpoint(run, monkeypatch, capsys):
    old = (run / "checkpoint.pt").read_bytes()
    _fail_checkpoint_fsync(monkeypatch)
    rc, _, err = lore_train(capsys, run)
    line = err.strip().splitlines()[-1]
    assert rc == 1 and line == (f"lore: error: no space left on device writing {run / 'checkpoint.pt'}; "
                                f"the previous checkpoint is kept"), err
    assert (run / "checkpoint.pt").read_bytes() == old and not list(run.glob(".*.tmp"))
    assert not (run / "done").exists()


def _tmpfs(path: Path, size_kib: int) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)],
                         capture_output=True)
    return res.returncode == 0


def test_a_really_full_tmpfs_keeps_the_previous_checkpoint(run, tmp_path, capsys):
    disk = tmp_path / "disk"
    used_kib = sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) // 1024
    if not _tmpfs(disk, used_kib + 512):
        pytest.skip("needs root and a working `mount -t tmpfs` (not available without CAP_SYS_ADMIN)")
    try:
        shutil.copytree(run, disk / "run")
        old = (disk / "run" / "checkpoint.pt").read_bytes()
        rc, _, err = lore_train(capsys, disk / "run")
        assert rc == 1 and "no space left on device writing" in err, err
        assert "previous checkpoint is kept" in err
        assert (disk / "run" / "checkpoint.pt").read_bytes() == old
        assert load_checkpoint(disk / "run" / "checkpoint.pt")["env_step"] == 240
    finally:
        subprocess.run(["umount", str(disk)], check=False)


SLOW_WRITER = textwrap.dedent("""
    import sys, time
    import lore.train.checkpoint as ck
    from lore.utils.io import atomic_write

    def slow_write(path, data):
        def write(tmp):
            with open(tmp, "wb") as fh:
                for i in range(0, len(data), 4096):
                    fh.write(data[i:i + 4096])
                    fh.flush()
                    time.sleep(0.002)
        atomic_write(path, write)

    ck.atomic_write_bytes = slow_write
    payload = ck.load_checkpoint(sys.argv[1])
    payload["env_step"] += 1
    ck.save_checkpoint(sys.argv[1], payload)
""")


def test_sigkill_mid_checkpoint_write_keeps_the_previous_loadable_and_the_next_start_cleans_up(run, capsys):
    old = (run / "checkpoint.pt").read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(run / "checkpoint.pt")])
    deadline = time.time() + HANG_GUARD_S
    while not any(p.stat().st_size > 0 for p in run.glob(".checkpoint.pt.*.tmp")) and time.time() < deadline:
        assert proc.poll() is None, "the writer ended before writing"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list(run.glob(".checkpoint.pt.*.tmp")), "killed before a temporary was left"
    assert (run / "checkpoint.pt").read_bytes() == old
    assert load_checkpoint(run / "checkpoint.pt")["env_step"] == 240
    (run / ".metrics.csv.k2j4.tmp").write_text("half a table")  # another atomic_write's leftover
    (run / "notes.tmp").write_text("not ours")
    rc, _, err = lore_train(capsys, run)
    assert rc == 0, err
    assert not list(run.glob(".*.tmp")) and (run / "done").exists() and (run / "notes.tmp").exists()


# --------------------------------------------------------------------------- size


def test_checkpoint_size_is_bounded_by_the_model_and_the_filled_replay(finished):
    """Parameters, optimiser moments and the rows written (uncompressed) bound the file; the replay's unused
    capacity is not stored."""
    payload = load_checkpoint(finished / "checkpoint.pt")
    tensors = [t for t in _leaves(payload["agent"]) if torch.is_tensor(t)]
    agent_bytes = sum(t.numel() * t.element_size() for t in tensors)
    storage = payload["replay"]["buffer"]["_storage"]
    rows = storage["_len"]
    row_bytes = sum(torch.Size(v["shape"][1:]).numel() * getattr(torch, v["dtype"]).itemsize
                    for v in storage["_storage"].values())
    capacity = next(iter(storage["_storage"].values()))["shape"][0]
    assert rows < capacity
    envs_and_tables = len(payload["envs"]) + 256 * 1024
    size = (finished / "checkpoint.pt").stat().st_size
    assert size <= agent_bytes + rows * row_bytes + envs_and_tables
    assert size < agent_bytes + capacity * row_bytes / 4


def _leaves(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


# --------------------------------------------------------------------------- run directory


def test_train_writes_nothing_outside_its_run_directory(tmp_path, monkeypatch, capsys):
    """The default answer cache of an LLM arm is the run directory's llm_cache.sqlite."""
    scratch = tmp_path / "cwd"
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    overrides = [s for s in TINY if not s.startswith("llm.cache_path")]
    overrides += ["train.steps=160", "eval.every=160"]
    rc, _, err = lore(capsys, "train", "--run-dir", "run", "--ablation", "prior_only", "--no-progress",
                      *[a for s in overrides for a in ("--set", s)])
    assert rc == 0, err
    assert sorted(p.name for p in scratch.iterdir()) == ["run"]
    assert (scratch / "run" / "llm_cache.sqlite").stat().st_size > 0
    assert "{run_dir}/llm_cache.sqlite" in (scratch / "run" / "config.yaml").read_text()
