"""Prompts: deterministic, complete, and identical to the golden copies in tests/golden/.

Regenerate the golden files after an intended wording change with
``LORE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_llm_prompt.py``.
"""

import os
import re
from pathlib import Path

import pytest

from lore.envs import make_env
from lore.llm.prompt import build_prompt, default_features_spec, features_spec, prompt_hash

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("LORE_UPDATE_GOLDEN") == "1"


def minigrid_prompt() -> str:
    env = make_env("MiniGrid-DoorKey-5x5-v0", seed=3)
    env.reset()
    for action in (0, 2):  # turn, then one move: a state that is not the reset state
        env.step(action)
    return build_prompt(env.describe(), env.action_names, env.family,
                        default_features_spec("minigrid", 8))


def crafter_prompt() -> str:
    env = make_env("crafter", seed=7)
    env.reset()
    for action in (1, 1, 3, 5):
        env.step(action)
    return build_prompt(env.describe(), env.action_names, env.family)


@pytest.mark.parametrize("name, make", [("minigrid_doorkey5x5_seed3.txt", minigrid_prompt),
                                        ("crafter_seed7.txt", crafter_prompt)])
def test_golden_prompts(name, make):
    prompt = make()
    assert make() == prompt, "prompt is not deterministic"
    path = GOLDEN / name
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"golden file {path} missing: run with LORE_UPDATE_GOLDEN=1 to create it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(prompt)
    assert prompt == path.read_text(), f"prompt differs from {path} (LORE_UPDATE_GOLDEN=1 to accept)"


def test_minigrid_prompt_content():
    prompt = minigrid_prompt()
    n = 7
    # role, coordinate convention, the state, each action with its id, the exact JSON format
    assert "x grows to the right, y grows downwards" in prompt
    assert "Mission: use the key to open the door and then get to the goal." in prompt
    for i, name in enumerate(["left", "right", "forward", "pickup", "drop", "toggle", "done"]):
        assert re.search(rf"^{i}: {name} - ", prompt, re.M)
    assert '"action_prior": {"logits": [' in prompt
    assert f"exactly {n} numbers" in prompt
    assert "def compute_features(obs)" in prompt and "exactly 8 floats" in prompt
    assert 'obs["agent_pos"]' in prompt
    assert not re.search(r"20\d\d-\d\d-\d\d", prompt)  # no timestamps


def test_features_section_only_when_asked():
    env = make_env("MiniGrid-DoorKey-5x5-v0", seed=0)
    env.reset()
    plain = build_prompt(env.describe(), env.action_names, "minigrid")
    assert "features_code" not in plain and "compute_features" not in plain
    spec = features_spec("minigrid", 4)
    with_features = build_prompt(env.describe(), env.action_names, "minigrid", spec)
    assert "exactly 4 floats" in with_features and '"features_code"' in with_features
    assert prompt_hash(plain) != prompt_hash(with_features)
    assert prompt_hash(plain) == prompt_hash(build_prompt(env.describe(), env.action_names, "minigrid"))
    assert "18 plant" in default_features_spec("crafter", 8)  # the semantic-id legend


def test_bad_arguments():
    with pytest.raises(ValueError, match="env_family"):
        build_prompt("state", ["a"], "atari")
    with pytest.raises(ValueError, match="action_names"):
        build_prompt("state", [], "minigrid")
    with pytest.raises(ValueError, match="description"):
        build_prompt("  ", ["a"], "minigrid")
    with pytest.raises(ValueError, match="n_features"):
        features_spec("minigrid", 0)
