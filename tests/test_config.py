"""The typed config tree: presets, ablations, overrides and the errors for bad input."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from lore.ablations import ABLATIONS
from lore.config import (
    ConfigError,
    RunConfig,
    build_config,
    config_from_saved,
    load_config,
    parse_override,
    save_config,
)
from lore.presets import PRESETS


def test_defaults_resolve_preset_dims():
    cfg = build_config()
    assert cfg.model.preset == "xs"
    for key, value in PRESETS["xs"].items():
        assert getattr(cfg.model, key) == value


def test_override_types_and_explicit_model_dim_wins():
    cfg = build_config(overrides=["train.steps=20000", "model.preset=s", "model.deter=128", "prior.beta_max=2"])
    assert cfg.train.steps == 20000 and isinstance(cfg.train.steps, int)
    assert cfg.model.units == PRESETS["s"]["units"]
    assert cfg.model.deter == 128
    assert cfg.prior.beta_max == 2.0 and isinstance(cfg.prior.beta_max, float)


@pytest.mark.parametrize("override, needle", [
    ("train.stepz=5", "train.stepz"),
    ("nosuch.key=1", "nosuch"),
    ("train.steps=many", "train.steps"),
    ("prior.enabled=3", "prior.enabled"),
    ("env.obs=rgb", "env.obs"),
    ("model.preset=huge", "model.preset"),
    ("train.steps", "KEY=VALUE"),
    ("=3", "dotted key"),
    ("model.deter=-4", "model.deter"),
])
def test_bad_overrides_name_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        build_config(overrides=[override])


def test_unknown_ablation_is_rejected():
    with pytest.raises(ConfigError, match="ablation"):
        build_config(ablation="everything")


def test_every_ablation_resolves_and_differs_from_rl_only():
    base = dataclasses.asdict(build_config(ablation="rl_only"))
    for name in ABLATIONS:
        cfg = build_config(ablation=name)
        assert cfg.ablation == name
        if name != "rl_only":
            assert dataclasses.asdict(cfg) != {**base, "ablation": name}, name
    assert build_config(ablation="rl_only").llm.backend == "none"
    full = build_config(ablation="full")
    assert full.prior.enabled and full.prior.gate == "fixed" and full.prior.kl_mode == "lagrangian"
    assert full.prior.trust and not full.features.enabled
    assert build_config(ablation="gate").prior.gate == "uncertainty"
    assert build_config(ablation="prior_only").prior.gate == "fixed"
    assert build_config(ablation="kl").prior.kl_mode == "lagrangian"
    assert build_config(ablation="features").features.enabled and not build_config(ablation="features").prior.enabled


def test_user_override_beats_ablation():
    cfg = build_config(overrides=["prior.kl_mode=none"], ablation="full")
    assert cfg.prior.kl_mode == "none"


def test_yaml_file_and_saved_round_trip(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"env": {"name": "MiniGrid-Empty-5x5-v0"}, "train": {"steps": 123, "prefill": 50}}))
    cfg = load_config(path, ["seed=4"], "gate")
    save_config(cfg, tmp_path / "resolved.yaml")
    again = config_from_saved(tmp_path / "resolved.yaml")
    assert dataclasses.asdict(again) == dataclasses.asdict(cfg)
    assert again.env.name == "MiniGrid-Empty-5x5-v0" and again.train.steps == 123 and again.seed == 4


def test_yaml_unknown_key_and_missing_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  batch: 3\n")
    with pytest.raises(ConfigError, match="train.batch"):
        load_config(path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_parse_override_parses_yaml_values():
    assert parse_override("a.b=[1, 2]") == {"a": {"b": [1, 2]}}
    assert parse_override("x=null") == {"x": None}


@pytest.mark.parametrize("override, needle", [
    ("prior.kl_bound=0", "prior.kl_bound"),
    ("prior.trust_gain=0", "prior.trust_gain"),
    ("prior.trust_decay=1", "trust_decay"),
    ("dreamer.value_bootstrap=0", "dreamer.value_bootstrap"),
    ("dreamer.uncertainty_head_steps=16", "dreamer.uncertainty_head_steps: retired setting"),
    ("train.compile=fast", "train.compile"),
    ("train.steps=500", "train.prefill (1000) must be < train.steps (500)"),
    ("prior.control_episodes=1", "prior.control_episodes"),
    ("prior.trust_value_weight=-1", "prior.trust_value_weight"),
    ("prior.trust_value_weight=inf", "prior.trust_value_weight"),
    ("prior.gate_full_at=0", "prior.gate_full_at"),
])
def test_semantic_checks_name_the_new_keys(override, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        build_config(overrides=override.split())


@pytest.mark.parametrize("removed", ["prior.tau_low=0", "prior.kappa=4", "prior.temperature_fit_max_entropy=0.8"])
def test_removed_gate_keys_are_unknown(removed):
    key = removed.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_config(overrides=[removed])


def test_semantic_checks():
    with pytest.raises(ConfigError, match="replay_ledger"):
        build_config(overrides=["llm.backend=replay"])


def test_defaults_are_declared_once():
    # The dataclass defaults are the single source of truth: a bare RunConfig equals build_config's base.
    assert dataclasses.asdict(RunConfig().train) == dataclasses.asdict(build_config().train)


def test_float_literals_without_a_dot_are_numbers():
    cfg = build_config(overrides=["dreamer.wm_lr=1e-3"])
    assert cfg.dreamer.wm_lr == 1e-3
    with pytest.raises(ConfigError, match="dreamer.wm_lr"):
        build_config(overrides=["dreamer.wm_lr=fast"])


def _levels(n: int) -> str:
    """``n`` nested YAML anchors, each a list of nine aliases of the one before: 9 ** n values in all."""
    lines = ["l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, n)]
    return "\n".join(lines) + "\n"


def test_yaml_alias_expansion_is_bounded_and_names_the_key(tmp_path):
    import time

    from lore.config import MAX_YAML_VALUES

    path = tmp_path / "bomb.yaml"
    path.write_text("train:\n  steps: 100\n" + _levels(10))
    start = time.process_time()  # CPU time: a busy machine does not make it grow
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert time.process_time() - start < 2.0
    message = str(err.value)
    assert f"more than {MAX_YAML_VALUES:_} values once its aliases are expanded" in message
    assert message.split(": ")[1] == "l5" and len(message) < 300, message  # 9**6 > 100_000 >= 9**5
    path.write_text("a: &loop [1, *loop]\n")
    with pytest.raises(ConfigError, match="a: an alias that contains itself"):
        load_config(path)
    path.write_text("train: &t {steps: 1000, prefill: 100}\n")  # aliases that stay small are fine
    assert load_config(path).train.steps == 1000


def test_a_tab_is_named_by_either_yaml_loader(tmp_path):
    path = tmp_path / "tab.yaml"
    path.write_text("train:\n\tsteps: 100\n")
    with pytest.raises(ConfigError, match="a tab character where YAML expects spaces"):
        load_config(path)


def _field_docstrings(class_name: str) -> dict[str, str | None]:
    """``{field: its docstring or None}`` of a config dataclass, read from lore/config/sections.py."""
    import ast

    import lore.config.sections as sections

    tree = ast.parse(Path(sections.__file__).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    out: dict[str, str | None] = {}
    body = node.body
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            nxt = body[i + 1] if i + 1 < len(body) else None
            is_doc = isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant) \
                and isinstance(nxt.value.value, str)
            out[stmt.target.id] = nxt.value.value if is_doc else None
    return out


def test_prior_config_is_small_and_every_field_says_what_it_does_in_one_line():
    from dataclasses import fields

    from lore.config import PriorConfig

    docs = _field_docstrings("PriorConfig")
    assert set(docs) == {f.name for f in fields(PriorConfig)}
    assert len(docs) <= 22, sorted(docs)  # the low-regret candidates under test; the losers leave
    for name, doc in docs.items():
        assert doc, f"prior.{name} has no docstring"
        assert "\n" not in doc.strip() and len(doc) <= 400, f"prior.{name}: docstring not one line of <= 400 chars"
