"""Retired settings: an older config that holds one at its neutral value still loads; any other value is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lore import cli
from lore.config import (
    RETIRED,
    ConfigError,
    RunConfig,
    build_config,
    config_from_saved,
    load_config,
    save_config,
    to_dict,
)


def with_key(data: dict, dotted: str, value: object) -> dict:
    """``data`` (a nested mapping) with ``dotted`` set to ``value``."""
    *parents, name = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[name] = value
    return data


def other_value(neutral: object) -> object:
    """A value of the same kind that is not the neutral one (and still passes YAML and type checks)."""
    if isinstance(neutral, bool):
        return not neutral
    if isinstance(neutral, (int, float)):
        return neutral + 1
    return f"{neutral}_variant"


def old_run_config(tmp_path: Path, **retired: object) -> Path:
    """A saved run config as an older release wrote it: the current fields plus retired keys."""
    data = to_dict(build_config(overrides=["train.steps=3000"], ablation="full"))
    for dotted, value in retired.items():
        with_key(data, dotted, value)
    path = tmp_path / "run" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_retired_keys_are_no_fields_any_more():
    sections = {k: v for k, v in to_dict(RunConfig()).items() if isinstance(v, dict)}
    fields = {f"{section}.{name}" for section, values in sections.items() for name in values}
    assert RETIRED and not set(RETIRED) & fields


@pytest.mark.parametrize("key", sorted(RETIRED))
def test_a_retired_key_at_its_neutral_value_is_dropped_by_load_config(tmp_path, key):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(with_key({"train": {"steps": 2000}}, key, RETIRED[key])))
    cfg = load_config(path, ablation="full")
    assert cfg == build_config(overrides=["train.steps=2000"], ablation="full")
    section, name = key.split(".")
    assert name not in to_dict(cfg)[section]


@pytest.mark.parametrize("key", sorted(RETIRED))
def test_a_retired_key_at_another_value_is_refused_by_load_config_naming_file_and_key(tmp_path, key):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(with_key({}, key, other_value(RETIRED[key]))))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message and f"{key}: retired setting" in message and "\n" not in message
    assert yaml.safe_dump(RETIRED[key]).split("\n")[0] in message  # the accepted value is named


def test_the_refusal_reads_as_the_setting_and_its_one_accepted_value():
    with pytest.raises(ConfigError, match=r"^prior\.trust_failures: retired setting; only its default false is "
                                          r"accepted \(the variant was removed\)$"):
        build_config(overrides=["prior.trust_failures=true"])
    # booleans and numbers are not mixed up: 0 is not false, and false is not 0
    with pytest.raises(ConfigError, match="prior.trust_failures"):
        build_config(overrides=["prior.trust_failures=0"])
    with pytest.raises(ConfigError, match="prior.warmup_steps"):
        build_config(overrides=["prior.warmup_steps=false"])
    # an integer written as a float (as YAML may store a float field) is the same neutral number
    assert build_config(overrides=["prior.warmup_steps=0.0", "prior.w_value=0"]) == build_config()


def test_an_old_run_directory_config_loads_with_its_retired_keys_dropped(tmp_path):
    neutral = old_run_config(tmp_path, **RETIRED)
    assert "trust_failures" in neutral.read_text()
    cfg = config_from_saved(neutral)
    assert cfg == build_config(overrides=["train.steps=3000"], ablation="full")
    # saving it again writes the current fields only
    again = tmp_path / "again.yaml"
    save_config(cfg, again)
    assert "trust_failures" not in again.read_text() and config_from_saved(again) == cfg


@pytest.mark.parametrize("key", ["prior.trust_episode_strength", "prior.absorb_trust", "distill.holdout_frac"])
def test_an_old_run_directory_that_ran_a_removed_variant_is_refused(tmp_path, key):
    path = old_run_config(tmp_path, **{key: other_value(RETIRED[key])})
    with pytest.raises(ConfigError) as err:
        config_from_saved(path)
    message = str(err.value)
    assert message.startswith(f"{path} (a saved run config): {key}: retired setting") and "\n" not in message


def test_lore_eval_refuses_a_run_that_ran_a_removed_variant_in_one_line(tmp_path, capsys):
    path = old_run_config(tmp_path, **{"prior.trust_failures": True})
    (path.parent / "checkpoint.pt").write_bytes(b"never read: the config is checked first")
    before = sorted(p.name for p in path.parent.iterdir())
    rc = cli.main(["eval", "--run-dir", str(path.parent)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("lore: error: ")
    assert str(path) in err and "prior.trust_failures: retired setting" in err
    assert sorted(p.name for p in path.parent.iterdir()) == before  # nothing written


def test_lore_config_accepts_an_old_config_file_and_prints_no_retired_key(tmp_path, capsys):
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(with_key(with_key({}, "prior.trust_act_evidence", "combined"),
                                            "prior.anneal", "none")))
    assert cli.main(["config", "--config", str(path)]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert "trust_act_evidence" not in printed["prior"] and "anneal" not in printed["prior"]
