"""The update's cheaper paths give exactly the numbers of the plain ones (values and gradients, bit for bit).

Each test compares a fast path with a reference written out here in the plain form it replaces.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from lore.config import build_config
from lore.dreamer import networks
from lore.dreamer.agent import DreamerAgent

OBS_DIM, A = 6, 3


@pytest.fixture(autouse=True)
def _one_thread_fixed_seed():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield


def make_agent(*overrides) -> DreamerAgent:
    cfg = build_config(overrides=["model.preset=debug", "dreamer.horizon=5", *overrides])
    space = gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)})
    return DreamerAgent(space, A, cfg)


def make_batch(b=4, t=6, seed=0) -> dict:
    """A replay batch with episode starts inside it."""
    g = torch.Generator().manual_seed(seed)
    is_first = torch.rand(b, t, generator=g) < 0.2
    is_first[:, 0] = True
    return {"action": torch.randint(0, A, (b, t), generator=g), "reward": torch.randn(b, t, generator=g),
            "is_first": is_first, "is_terminal": torch.rand(b, t, generator=g) < 0.1,
            "obs.symbolic": torch.randn(b, t, OBS_DIM, generator=g) * 2.0}


def test_imagined_states_read_as_one_hot_samples_give_the_checked_views_columns():
    agent = make_agent()
    data = agent._prepare_batch(make_batch())
    _, _, post, _ = agent._world_model_losses(data, agent._update_noise(4, 6)["obs"])
    noise = agent._update_noise(4, 6, observe=False)
    start = {"deter": post["deter"].reshape(24, -1), "stoch": post["stoch"].reshape(24, *post["stoch"].shape[2:])}
    with torch.no_grad():
        traj, _ = agent._imagine(start, noise)
    checked = agent.wm.one_hot(traj["feat"])
    sampled = agent.wm.sampled_one_hot(traj["feat"])
    assert isinstance(checked, networks.OneHotFeatures)  # the checked view finds every imagined state one-hot
    assert torch.equal(sampled.hot, checked.hot) and torch.equal(sampled.dense, checked.dense)
    assert sampled.width == checked.width
