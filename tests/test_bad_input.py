"""A corpus of bad command lines and config files for ``lore train`` / ``lore config``.

Every case must be rejected the same way: exit status 2, exactly one line ``lore: error: ...`` on
stderr that names the offending key (or file), no traceback, and nothing written: the run directory
does not exist afterwards and nothing else appeared. Most cases call ``lore.cli.main`` in-process
(milliseconds each); a few go through a real ``python -m lore.cli`` subprocess.

The numeric cases are generated from the config schema (every int/float field of
:class:`lore.config.RunConfig`), so a new key is covered the day it is added.
"""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
from workflow_helpers import HANG_GUARD_S

from lore import cli
from lore.config import RunConfig

# --------------------------------------------------------------------------- the schema's numeric keys


def _numeric_keys(cls: type = RunConfig, prefix: str = "") -> list[tuple[str, type]]:
    out: list[tuple[str, type]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], prefix + f.name
        if dataclasses.is_dataclass(tp):
            out += _numeric_keys(tp, key + ".")
            continue
        args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
        base = [a for a in args if a is not type(None)]
        if base in ([int], [float]):
            out.append((key, base[0]))
    return out


NUMERIC_KEYS = _numeric_keys()

# Values that are wrong for every numeric key (the YAML text after ``KEY=``).
BAD_FOR_ANY_NUMBER = {
    "nan": ".nan",
    "inf": ".inf",
    "-inf": "-.inf",
    "nan-string": "nan",
    "inf-string": "1e400",
    "1e308": "1.0e+308",
    "-1e308": "-1.0e+308",
    "1e400-int": str(10**400),
    "5000-digits": "9" * 5000,
    "bool": "true",
    "string": "lots",
    "list": "[1, 2]",
    "mapping": "{a: 1}",
}
BAD_FOR_ANY_INT = {
    "fraction": "2.5",
    "1e30": str(10**30),
    "-1e30": str(-(10**30)),
}


def _bad_values(tp: type) -> dict[str, str]:
    return dict(BAD_FOR_ANY_NUMBER, **(BAD_FOR_ANY_INT if tp is int else {}))


# --------------------------------------------------------------------------- running the CLI


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A scratch cwd and output folder; a Trainer that is never reached (validation must stop first)."""
    import lore.train.trainer as trainer

    class NoTrainer:
        def __init__(self, *args, **kwargs):
            raise AssertionError("bad input reached the Trainer: it was not rejected up front")

    monkeypatch.setattr(trainer, "Trainer", NoTrainer)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    (tmp_path / "inputs").mkdir()
    (tmp_path / "out").mkdir()
    return tmp_path


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _run_in_process(capsys, argv: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse
        rc = e.code
    out, err = capsys.readouterr()
    return rc, err


def _assert_rejected(rc, err: str, needle: str, root: Path, before: set[str], run_dir: Path) -> None:
    assert "Traceback" not in err, err
    assert rc == 2, f"exit status {rc}, stderr: {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err[:2000]!r}"
    assert lines[0].startswith("lore: error: "), lines[0]
    assert needle in lines[0], f"{needle!r} not named in: {lines[0][:2000]}"
    assert not run_dir.exists(), f"{run_dir} was created"
    assert _snapshot(root) == before, f"files appeared: {sorted(_snapshot(root) - before)}"


def reject(capsys, root: Path, args: list[str], needle: str, command: str = "train") -> None:
    run_dir = root / "out" / "run"
    before = _snapshot(root)
    argv = [command, *args] + (["--run-dir", str(run_dir)] if command == "train" else [])
    rc, err = _run_in_process(capsys, argv)
    _assert_rejected(rc, err, needle, root, before, run_dir)


def write_config(root: Path, name: str, content: str | bytes) -> Path:
    path = root / "inputs" / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


# --------------------------------------------------------------------------- generated: every numeric key


def test_the_schema_has_numeric_keys_in_every_section():
    sections = {key.split(".")[0] for key, _ in NUMERIC_KEYS if "." in key}
    assert {"env", "model", "dreamer", "train", "eval", "llm", "advisor", "prior", "features", "plan",
            "distill"} <= sections
    assert ("seed", int) in NUMERIC_KEYS and ("llm.controller.budget", int) in NUMERIC_KEYS


@pytest.mark.parametrize("key, tp", NUMERIC_KEYS, ids=[k for k, _ in NUMERIC_KEYS])
def test_bad_number_on_the_command_line(sandbox, capsys, key, tp):
    """Every value of :data:`BAD_FOR_ANY_NUMBER` (and ``BAD_FOR_ANY_INT``) for every numeric key."""
    failures = []
    for label, text in _bad_values(tp).items():
        try:
            reject(capsys, sandbox, ["--set", f"{key}={text}"], key)
        except AssertionError as e:
            failures.append(f"{key}={label}: {str(e)[:300]}")
    assert not failures, "\n".join(failures)


def _outside(limit, tp) -> list:
    """Values just outside ``limit`` (an int key's neighbours; a float's open end or a step beyond)."""
    if tp is int:
        return [limit.lo - 1, limit.hi + 1]
    lo = limit.lo if limit.lo_open else (limit.lo - max(1.0, abs(limit.lo)) if limit.lo else -1e-9)
    hi = limit.hi if limit.hi_open else limit.hi * 2 if limit.hi else 1e-9
    return [lo, hi]


def _inside(limit, tp) -> list:
    values = []
    if not limit.lo_open:
        values.append(limit.lo)
    if not limit.hi_open:
        values.append(limit.hi)
    return values


@pytest.mark.parametrize("key, tp", NUMERIC_KEYS, ids=[k for k, _ in NUMERIC_KEYS])
def test_just_outside_the_documented_range(sandbox, capsys, key, tp):
    from lore.config import limits

    failures = []
    for value in _outside(limits()[key], tp):
        try:
            reject(capsys, sandbox, ["--set", f"{key}={value!r}"], key)
        except AssertionError as e:
            failures.append(f"{key}={value!r}: {str(e)[:300]}")
    assert not failures, "\n".join(failures)


def test_every_numeric_key_has_a_documented_range():
    from lore.config import limits

    ranges = limits()
    keys = {k for k, _ in NUMERIC_KEYS}
    assert keys - set(ranges) == set(), "declare the new keys' ranges in their fields: ranged(default, Limit(...))"
    assert set(ranges) - keys == set(), "limits() names keys that are not numeric settings"
    types_ = dict(NUMERIC_KEYS)
    for key, limit in ranges.items():
        assert limit.lo <= limit.hi, key
        if types_[key] is int:  # an int key's range fits in int64 (numpy, torch)
            assert all(isinstance(x, int) and abs(x) < 2**63 for x in (limit.lo, limit.hi)), key


@pytest.mark.parametrize("key, tp", NUMERIC_KEYS, ids=[k for k, _ in NUMERIC_KEYS])
def test_the_ends_of_each_range_are_accepted(key, tp):
    """A closed end of a range is valid for that key (other keys may still object to the combination)."""
    from lore.config import ConfigError, build_config, limits

    for value in _inside(limits()[key], tp):
        try:
            build_config(overrides=[f"{key}={value!r}"])
        except ConfigError as e:
            assert not str(e).startswith(f"{key} must be in") and f"{key}: expected" not in str(e), str(e)


@pytest.mark.parametrize("key, text", [
    ("dreamer.wm_lr", ".nan"), ("prior.kl_delta", ".inf"), ("train.steps", str(10**30)), ("seed", "1.0e+308"),
    ("model.deter", str(10**30)), ("features.memory_mb", "-1"), ("llm.controller.cooldown", "-.inf"),
])
def test_bad_number_in_a_config_file(sandbox, capsys, key, text):
    *sections, leaf = key.split(".")
    lines, indent = [], ""
    for section in sections:
        lines.append(f"{indent}{section}:")
        indent += "  "
    lines.append(f"{indent}{leaf}: {text}")
    path = write_config(sandbox, "bad.yaml", "\n".join(lines) + "\n")
    reject(capsys, sandbox, ["--config", str(path)], key)


# --------------------------------------------------------------------------- hand-written: ranges


@pytest.mark.parametrize("override, needle", [
    # zero or negative where a positive count or interval is needed
    ("train.steps=0", "train.steps"),
    ("train.steps=-100", "train.steps"),
    ("train.prefill=-1", "train.prefill"),
    ("train.batch_size=0", "train.batch_size"),
    ("train.batch_length=1", "train.batch_length"),
    ("train.replay_capacity=0", "train.replay_capacity"),
    ("train.checkpoint_every=0", "train.checkpoint_every"),
    ("train.checkpoint_every=-5", "train.checkpoint_every"),
    ("train.log_every=0", "train.log_every"),
    ("train.torch_threads=-1", "train.torch_threads"),
    ("train.train_ratio=-1", "train.train_ratio"),
    ("eval.every=0", "eval.every"),
    ("eval.every=-2500", "eval.every"),
    ("eval.episodes=0", "eval.episodes"),
    ("env.num_envs=0", "env.num_envs"),
    ("env.max_episode_steps=0", "env.max_episode_steps"),
    ("model.deter=0", "model.deter"),
    ("model.layers=-1", "model.layers"),
    ("model.bins=4", "model.bins"),
    ("model.bins=1", "model.bins"),
    ("dreamer.horizon=0", "dreamer.horizon"),
    ("dreamer.imag_last=-1", "dreamer.imag_last"),
    ("dreamer.wm_lr=0", "dreamer.wm_lr"),
    ("dreamer.ac_lr=-3e-5", "dreamer.ac_lr"),
    ("dreamer.wm_eps=0", "dreamer.wm_eps"),
    ("dreamer.wm_clip=0", "dreamer.wm_clip"),
    ("dreamer.lam=1.5", "dreamer.lam"),
    ("dreamer.unimix=1", "dreamer.unimix"),
    ("dreamer.retnorm_decay=1", "dreamer.retnorm_decay"),
    ("dreamer.retnorm_high=101", "dreamer.retnorm_high"),
    ("dreamer.free_bits=-1", "dreamer.free_bits"),
    ("dreamer.kl_dyn=-0.5", "dreamer.kl_dyn"),
    ("dreamer.gamma=0", "dreamer.gamma"),
    ("llm.timeout_s=0", "llm.timeout_s"),
    ("llm.retries=-1", "llm.retries"),
    ("llm.retries=30", "llm.retries"),  # with the pauses, a call against a closed port would not end for long
    ("llm.timeout_s=3600", "llm.timeout_s"),
    ("llm.backoff_s=60", "llm.backoff_s"),
    ("llm.max_wait_ms=-1", "llm.max_wait_ms"),
    ("llm.simulated_latency_ms=-5", "llm.simulated_latency_ms"),
    ("llm.logit_clip=0", "llm.logit_clip"),
    ("llm.plan_max_len=0", "llm.plan_max_len"),
    ("llm.max_inflight=0", "llm.max_inflight"),
    ("llm.ask_before_act=3", "llm.ask_before_act"),
    ("llm.controller.budget=-1", "llm.controller.budget"),
    ("llm.controller.cooldown=-1", "llm.controller.cooldown"),
    ("llm.controller.cache_ttl=-1", "llm.controller.cache_ttl"),
    ("llm.controller.trigger_plateau=-1", "llm.controller.trigger_plateau"),
    ("advisor.accuracy=1.5", "advisor.accuracy"),
    ("advisor.confidence=-0.1", "advisor.confidence"),
    ("prior.beta_max=-1", "prior.beta_max"),
    ("prior.temperature=0", "prior.temperature"),
    ("prior.temperature_refit_every=0", "prior.temperature_refit_every"),
    ("prior.temperature_min_labels=0", "prior.temperature_min_labels"),
    ("prior.ema_decay=1", "prior.ema_decay"),
    ("prior.warmup_steps=-1", "prior.warmup_steps"),
    ("prior.anneal_end=-1", "prior.anneal_end"),
    ("prior.kl_delta=-0.1", "prior.kl_delta"),
    ("prior.w_value=-1", "prior.w_value"),
    ("prior.trust_states=0", "prior.trust_states"),
    ("plan.every=0", "plan.every"),
    ("plan.horizon=0", "plan.horizon"),
    ("plan.samples=0", "plan.samples"),
    ("plan.elites=0", "plan.elites"),
    ("plan.iterations=0", "plan.iterations"),
    ("plan.smoothing=1.5", "plan.smoothing"),
    ("distill.trust_kl=0", "distill.trust_kl"),
    ("distill.min_samples=0", "distill.min_samples"),
    ("distill.holdout_frac=1.5", "distill.holdout_frac"),
    ("distill.check_every=0", "distill.check_every"),
    ("seed=-1", "seed"),
    ("seed=4294967296", "seed"),
    # absurdly large but finite
    ("train.steps=1000000000000000", "train.steps"),
    ("train.batch_size=100000000", "train.batch_size"),
    ("model.units=10000000", "model.units"),
    ("dreamer.wm_lr=1e30", "dreamer.wm_lr"),
    ("prior.kl_delta=1e200", "prior.kl_delta"),
    ("env.num_envs=1000000", "env.num_envs"),
    ("eval.episodes=1000000000", "eval.episodes"),
    # sandbox limits
    ("features.n_features=0", "features.n_features"),
    ("features.n_features=100000", "features.n_features"),
    ("features.timeout_s=0", "features.timeout_s"),
    ("features.timeout_s=1e9", "features.timeout_s"),
    ("features.memory_mb=8", "features.memory_mb"),
    ("features.memory_mb=1000000000", "features.memory_mb"),
    ("features.workers=0", "features.workers"),
    ("features.workers=65", "features.workers"),
    ("features.clip=0", "features.clip"),
    ("features.clip=1e31", "features.clip"),
])
def test_out_of_range(sandbox, capsys, override, needle):
    reject(capsys, sandbox, ["--set", override], needle)


# --------------------------------------------------------------------------- contradictions


@pytest.mark.parametrize("overrides, needle", [
    (["train.batch_length=64", "train.replay_capacity=100"], "train.replay_capacity"),
    (["train.batch_length=64", "train.replay_capacity=32"], "train.replay_capacity"),
    (["train.steps=500", "train.prefill=0", "train.batch_length=1000"], "train.batch_length"),
    (["plan.samples=4", "plan.elites=8"], "plan.elites"),
    (["train.steps=1000", "train.prefill=5000"], "train.prefill"),
    (["train.steps=1000", "train.prefill=1000"], "train.prefill"),
    (["prior.temperature_min=5", "prior.temperature_max=1"], "prior.temperature_min"),
    (["dreamer.retnorm_low=95", "dreamer.retnorm_high=5"], "dreamer.retnorm_low"),
    (["prior.w_entropy=0", "prior.w_value=0", "prior.w_disagreement=0"], "prior.w_entropy"),
    (["dreamer.imag_last=100", "train.batch_length=64"], "dreamer.imag_last"),
    (["env.name=crafter", "env.crafter_view=8"], "env.crafter_view"),
    (["env.name=crafter", "env.crafter_view=0"], "env.crafter_view"),
    (["env.name=crafter", "env.crafter_view=33", "env.crafter_area=16"], "env.crafter_view"),
    (["env.name=crafter", "env.crafter_area=8"], "env.crafter_area"),
    (["env.name=crafter", "env.crafter_area=1000000"], "env.crafter_area"),
    (["env.name=crafter", "env.max_episode_steps=-10"], "env.max_episode_steps"),
    (["env.name=crafter", "env.max_episode_steps=10000000000000"], "env.max_episode_steps"),
    (["llm.backend=replay"], "llm.replay_ledger"),
])
def test_contradictions(sandbox, capsys, overrides, needle):
    reject(capsys, sandbox, [a for o in overrides for a in ("--set", o)], needle)


# --------------------------------------------------------------------------- unknown names


@pytest.mark.parametrize("args, needle", [
    (["--set", "env.name=MiniGrid-NoSuchThing-v0"], "env.name"),
    (["--set", "env.name=Crafter"], "env.name"),
    (["--set", "env.name=CartPole-v1"], "env.name"),
    (["--set", "env.name="], "env.name"),
    (["--set", 'env.name="crafter\\nxyz"'], "env.name"),
    (["--ablation", "everything"], "ablation"),
    (["--set", "ablation=[1, 2]"], "ablation"),
    (["--set", "model.preset=huge"], "model.preset"),
    (["--set", "train.stepz=5"], "train.stepz"),
    (["--set", "nosuch.key=1"], "nosuch"),
    (["--set", "env.obs=rgb"], "env.obs"),
    (["--set", "dreamer.critic_trunk=tied"], "dreamer.critic_trunk"),
    (["--set", "dreamer.uncertainty_head_steps=99"], "dreamer.uncertainty_head_steps"),
    (["--set", "train.compile=graph"], "train.compile"),
    (["--set", "llm.backend=anthropic"], "llm.backend"),
    (["--set", "train=5"], "train"),
    (["--set", "train.steps"], "KEY=VALUE"),
    (["--set", "=3"], "dotted key"),
    (["--set", "train..steps=3"], "train..steps"),
    (["--set", "train.steps=[[[["], "train.steps"),
    (["--set", "train.steps=" + "[" * 10_000 + "]" * 10_000], "train.steps"),
    (["--set", "train.steps={a: 1}"], "train.steps"),
])
def test_unknown_or_malformed_names(sandbox, capsys, args, needle):
    reject(capsys, sandbox, args, needle)


# --------------------------------------------------------------------------- the command line itself


@pytest.mark.parametrize("args, needle", [
    (["--seed", "nan"], "--seed"),
    (["--seed", "1.5"], "--seed"),
    (["--seed", "-1"], "seed"),
    (["--seed", str(10**30)], "seed"),
    (["--device", "tpu"], "--device"),
    (["--no-such-flag"], "--no-such-flag"),
])
def test_bad_flags(sandbox, capsys, args, needle):
    reject(capsys, sandbox, args, needle)


def test_missing_run_dir_flag(sandbox, capsys):
    before = _snapshot(sandbox)
    rc, err = _run_in_process(capsys, ["train", "--set", "train.steps=10"])
    _assert_rejected(rc, err, "--run-dir", sandbox, before, sandbox / "out" / "run")


def test_empty_run_dir_is_rejected(sandbox, capsys):
    before = _snapshot(sandbox)
    rc, err = _run_in_process(capsys, ["train", "--run-dir", ""])
    _assert_rejected(rc, err, "--run-dir", sandbox, before, sandbox / "out" / "run")


# --------------------------------------------------------------------------- malformed YAML files

_RNG = random.Random(1234)
_BINARY = bytes(_RNG.randrange(256) for _ in range(4096))
_LEVELS = ["&l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"] + [
    f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
_BOMB = f"train:\n  steps: [{', '.join(_LEVELS)}]\n"  # "billion laughs": 10**10 ones by reference


@pytest.mark.parametrize("name, content, needle", [
    ("binary.yaml", _BINARY, "binary.yaml"),
    ("nul.yaml", "train:\n  steps: 1\x00\x01\n", "nul.yaml"),
    ("latin1.yaml", "env:\n  name: caf\xe9\n".encode("latin-1"), "latin1.yaml"),
    ("deep_list.yaml", "train: " + "[" * 10_000 + "]" * 10_000 + "\n", "deep_list.yaml"),
    ("deep_flow_map.yaml", "train: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n", "deep_flow_map.yaml"),
    ("deep_block.yaml", "".join(" " * i + f"k{i}:\n" for i in range(3_000)) + " " * 3_000 + "x: 1\n",
     "deep_block.yaml"),
    ("tabs.yaml", "train:\n\tsteps: 10\n", "tab"),
    ("tabs_only.yaml", "train:\n\t\tsteps: 10\n\t\tprefill: 1\n", "tabs_only.yaml"),
    ("empty.yaml", "", "empty.yaml"),
    ("comments.yaml", "# nothing but a comment\n", "comments.yaml"),
    ("null.yaml", "null\n", "null.yaml"),
    ("list.yaml", "- train\n- eval\n", "list.yaml"),
    ("scalar.yaml", "hello\n", "scalar.yaml"),
    ("number.yaml", "12\n", "number.yaml"),
    ("duplicate_key.yaml", "train:\n  steps: 20000\n  steps: 30000\n", "train.steps"),
    ("duplicate_nested.yaml", "llm:\n  controller:\n    budget: 5\n    budget: 6\n", "llm.controller.budget"),
    ("duplicate_section.yaml", "train:\n  steps: 10\ntrain:\n  prefill: 5\n", "train"),
    ("unclosed.yaml", "train: {steps: 10\n", "unclosed.yaml"),
    ("bad_indent.yaml", "train:\n  steps: 10\n prefill: 5\n", "bad_indent.yaml"),
    ("python_tag.yaml", "train: !!python/object/apply:os.system ['true']\n", "python_tag.yaml"),
    ("unhashable_key.yaml", "? [1, 2]\n: 3\n", "unhashable_key.yaml"),
    ("section_scalar.yaml", "train: 5\n", "train"),
    ("section_list.yaml", "env: [a, b]\n", "env"),
    ("unknown_section.yaml", "trian:\n  steps: 10\n", "trian"),
    ("newline_key.yaml", '"bad\\nkey": 1\n', "bad"),
    ("alias_bomb.yaml", _BOMB, "train.steps"),
    ("ablation_list.yaml", "ablation: [full]\n", "ablation"),
    ("nan_lr.yaml", "dreamer:\n  wm_lr: .nan\n", "dreamer.wm_lr"),
    ("huge_seed.yaml", f"seed: {10**30}\n", "seed"),
    ("multi_doc.yaml", "train:\n  steps: 10\n---\ntrain:\n  steps: 20\n", "multi_doc.yaml"),
])
def test_malformed_config_file(sandbox, capsys, name, content, needle):
    path = write_config(sandbox, name, content)
    reject(capsys, sandbox, ["--config", str(path)], needle)


def test_missing_or_unreadable_config_file(sandbox, capsys):
    reject(capsys, sandbox, ["--config", str(sandbox / "inputs" / "missing.yaml")], "missing.yaml")
    reject(capsys, sandbox, ["--config", str(sandbox / "inputs")], "inputs")
    reject(capsys, sandbox, ["--config", ""], "--config")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_config_file(sandbox, capsys):
    path = write_config(sandbox, "secret.yaml", "train:\n  steps: 10\n")
    path.chmod(0)
    try:
        reject(capsys, sandbox, ["--config", str(path)], "secret.yaml")
    finally:
        path.chmod(0o644)


# --------------------------------------------------------------------------- files named in the config


def test_missing_replay_ledger(sandbox, capsys):
    missing = sandbox / "inputs" / "nope.jsonl"
    reject(capsys, sandbox, ["--set", "llm.backend=replay", "--set", f"llm.replay_ledger={missing}"],
           "llm.replay_ledger")


def test_replay_ledger_is_a_directory(sandbox, capsys):
    reject(capsys, sandbox, ["--set", "llm.backend=replay", "--set", f"llm.replay_ledger={sandbox / 'inputs'}"],
           "llm.replay_ledger")


def test_empty_replay_ledger(sandbox, capsys):
    ledger = write_config(sandbox, "llm_calls.jsonl", "")
    reject(capsys, sandbox, ["--set", "llm.backend=replay", "--set", f"llm.replay_ledger={ledger}"],
           "llm.replay_ledger")


def test_cache_path_is_a_directory(sandbox, capsys):
    reject(capsys, sandbox, ["--ablation", "full", "--set", f"llm.cache_path={sandbox / 'inputs'}"], "llm.cache_path")


def test_cache_path_below_a_file(sandbox, capsys):
    blocker = write_config(sandbox, "blocker", "not a directory")
    reject(capsys, sandbox, ["--ablation", "full", "--set", f"llm.cache_path={blocker / 'cache.sqlite'}"],
           "llm.cache_path")


def test_missing_shared_cache(sandbox, capsys):
    missing = sandbox / "inputs" / "shared.sqlite"
    reject(capsys, sandbox, ["--ablation", "full", "--set", "llm.cache_path=null",
                             "--set", f"llm.shared_cache={missing}"], "llm.shared_cache")


def test_gemini_without_a_key(sandbox, capsys, monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    reject(capsys, sandbox, ["--ablation", "full", "--set", "llm.backend=gemini", "--set", "llm.cache_path=null"],
           "GEMINI_API_KEY")


def test_cuda_without_a_gpu(sandbox, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is available here")
    reject(capsys, sandbox, ["--device", "cuda"], "device")


@pytest.mark.parametrize("fault", ["build", "reset"])
def test_a_registered_env_that_cannot_run_here(sandbox, capsys, broken_minigrid_ids, fault):
    """The registry accepts the id; building or resetting it fails: one line naming env.name, nothing written."""
    reject(capsys, sandbox, ["--set", f"env.name={broken_minigrid_ids[fault]}"],
           f"env.name: {broken_minigrid_ids[fault]} cannot be {'built' if fault == 'build' else 'reset'} here")


# --------------------------------------------------------------------------- `lore config` rejects the same input


@pytest.mark.parametrize("args, needle", [
    (["--set", "dreamer.wm_lr=.nan"], "dreamer.wm_lr"),
    (["--set", f"seed={10**30}"], "seed"),
    (["--set", "env.name=MiniGrid-NoSuchThing-v0"], "env.name"),
    (["--set", "plan.samples=4", "--set", "plan.elites=8"], "plan.elites"),
    (["--set", "eval.every=0"], "eval.every"),
])
def test_config_command_rejects_the_same_input(sandbox, capsys, args, needle):
    reject(capsys, sandbox, args, needle, command="config")


def test_config_command_rejects_a_malformed_file(sandbox, capsys):
    path = write_config(sandbox, "deep.yaml", "[" * 10_000)
    reject(capsys, sandbox, ["--config", str(path)], "deep.yaml", command="config")


# --------------------------------------------------------------------------- good input still passes


def test_valid_input_reaches_the_trainer(sandbox, capsys):
    """The sandbox's Trainer stub is reached by a valid config (so the cases above prove rejection)."""
    with pytest.raises(AssertionError, match="reached the Trainer"):
        cli.main(["train", "--run-dir", str(sandbox / "out" / "run"), "--set", "llm.cache_path=null",
                  "--set", "model.preset=debug"])


# --------------------------------------------------------------------------- real subprocesses


def _lore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lore.cli", *args], capture_output=True, text=True, timeout=HANG_GUARD_S)


@pytest.mark.parametrize("kind", ["binary", "deep", "nan_lr", "seed_nan", "unknown_env"])
def test_subprocess(tmp_path, kind):
    run_dir = tmp_path / "out" / "run"
    config = tmp_path / "bad.yaml"
    args, needle = [], ""
    if kind == "binary":
        config.write_bytes(_BINARY)
        args, needle = ["--config", str(config)], "bad.yaml"
    elif kind == "deep":
        config.write_text("train: " + "[" * 10_000 + "]" * 10_000 + "\n")
        args, needle = ["--config", str(config)], "bad.yaml"
    elif kind == "nan_lr":
        args, needle = ["--set", "dreamer.wm_lr=.nan"], "dreamer.wm_lr"
    elif kind == "seed_nan":
        args, needle = ["--seed", "nan"], "--seed"
    else:
        args, needle = ["--set", "env.name=MiniGrid-NoSuchThing-v0"], "env.name"
    before = _snapshot(tmp_path)
    res = _lore("train", *args, "--run-dir", str(run_dir))
    _assert_rejected(res.returncode, res.stderr, needle, tmp_path, before, run_dir)
    assert res.stdout == ""


def test_config_knows_the_same_crafter_names_as_the_envs():
    from lore.config import CRAFTER_ENV_NAMES
    from lore.envs.crafter import CRAFTER_NAMES

    assert set(CRAFTER_ENV_NAMES) == set(CRAFTER_NAMES)


# --------------------------------------------------------------------------- analysis settings, run markers


_SETTINGS_CASES = [
    ("budgets: [1000, abc]\n", "analysis.budgets[1]"),
    ("budgets: []\n", "analysis.budgets"),
    ("budgets: 5000\n", "analysis.budgets"),
    ("budgets: [1.0e+400]\n", "analysis.budgets[0]"),
    ("budgets: [-5]\n", "analysis.budgets[0]"),
    ("env_budgets: 7\n", "analysis.env_budgets"),
    ("env_budgets: {crafter: [.nan]}\n", "analysis.env_budgets.crafter[0]"),
    ("threshold: .nan\n", "analysis.threshold"),
    ("threshold: 3\n", "analysis.threshold"),
    ("window_center: .inf\n", "analysis.window_center"),
    ("confidence: yes\n", "analysis.confidence"),
    ("resamples: 1.0e+12\n", "analysis.resamples"),
    ("resamples: 0\n", "analysis.resamples"),
    ("resamples: 2.5\n", "analysis.resamples"),
    ("seed: -1\n", "analysis.seed"),
    ("headline_budget: [1]\n", "analysis.headline_budget"),
    ("baseline: 5\n", "analysis.baseline"),
    ("no_such_key: 1\n", "no_such_key"),
    ("budgets:\n\t- 1000\n", "settings.yaml"),
    (_BINARY, "settings.yaml"),
    ("- just\n- a list\n", "settings.yaml"),
    ("", "settings.yaml"),
]


@pytest.mark.parametrize("content, needle", _SETTINGS_CASES, ids=[f"settings{i}" for i in range(len(_SETTINGS_CASES))])
def test_analysis_settings_are_validated_before_anything_is_written(tmp_path, capsys, content, needle):
    from lore.report import cli as analysis_cli

    settings = tmp_path / "settings.yaml"
    settings.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "tables"
    before = _snapshot(tmp_path)
    capsys.readouterr()
    rc = analysis_cli.main(["aggregate", "--runs-root", str(tmp_path), "--settings", str(settings), "--out", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and rc == 2, (rc, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lore aggregate: error: "), err
    assert needle in lines[0], lines[0]
    assert _snapshot(tmp_path) == before and not out.exists()


def _finished_looking_run(root: Path) -> Path:
    from lore.config import build_config, save_config

    run = root / "run"
    run.mkdir()
    save_config(build_config(overrides=["model.preset=debug", "llm.cache_path=null"], ablation="rl_only"),
                run / "config.yaml")
    return run


@pytest.mark.parametrize("damage", ["garbage", "list", "directory", "latin1"])
def test_a_damaged_done_marker_is_named_and_nothing_is_touched(sandbox, capsys, damage):
    run = _finished_looking_run(sandbox)
    done = run / "done"
    if damage == "garbage":
        done.write_text('{"env_step": 10')
    elif damage == "list":
        done.write_text("[1, 2]")
    elif damage == "latin1":
        done.write_bytes("{\"x\": \"caf\xe9\"}".encode("latin-1"))
    else:
        done.mkdir()
    before = _snapshot(sandbox)
    rc, err = _run_in_process(capsys, ["train", "--run-dir", str(run), "--set", "model.preset=debug",
                                       "--set", "llm.cache_path=null"])
    assert "Traceback" not in err and rc == 2, (rc, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lore: error: ") and "`done`" in lines[0], err
    assert "delete it to resume" in lines[0]
    assert _snapshot(sandbox) == before


@pytest.mark.parametrize("key, value", [("dreamer.wm_lr", ".inf"), ("train.batch_length", "-3"),
                                        ("prior.trust_dead_zone", ".nan")])
def test_a_saved_run_config_edited_out_of_range_is_refused_on_eval(sandbox, capsys, key, value):
    import yaml

    run = _finished_looking_run(sandbox)
    data = yaml.safe_load((run / "config.yaml").read_text())
    section, name = key.split(".")
    data[section][name] = yaml.safe_load(value)
    (run / "config.yaml").write_text(yaml.safe_dump(data))
    (run / "checkpoint.pt").write_bytes(b"never read: the config is refused first")
    before = _snapshot(sandbox)
    rc, err = _run_in_process(capsys, ["eval", "--run-dir", str(run)])
    assert "Traceback" not in err and rc == 2, (rc, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lore: error: "), err
    assert "config.yaml" in lines[0] and key in lines[0], lines[0]
    assert _snapshot(sandbox) == before
