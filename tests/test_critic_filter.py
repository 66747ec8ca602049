"""The act-time critic filter: advice the critic rates below the agent's own policy does not act, advice it
rates above acts, and where the critic cannot tell the actions apart the filter leaves beta to the other
controls."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from lore.config import build_config
from lore.prior.critic_filter import advice_gain_draws, critic_filter, informative_states
from lore.prior.layer import PriorLayer

A = 4


def _advice(action: int, rows: int = 1) -> torch.Tensor:
    return 10.0 * torch.eye(A)[torch.full((rows,), action)]  # [rows, A]: a confident advisor


def test_advice_the_critic_rates_below_the_policy_is_filtered_out_and_above_passes():
    q = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]]).repeat(2, 3, 1)  # [B=2, D=3, A]: action 0 is best in every draw
    logits = torch.zeros(2, A)                                    # the agent's own policy: uniform
    prior = torch.cat([_advice(0), _advice(2)])                   # row 0 advises the best action, row 1 a bad one
    f, informative = critic_filter(q, prior, logits, temperature=1.0, min_gap=1e-3)
    assert informative.tolist() == [True, True]
    assert f.tolist() == [1.0, 0.0]


def test_the_filter_is_the_share_of_draws_that_favour_the_advice():
    draws = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]])
    f, _ = critic_filter(draws[None], _advice(0), torch.zeros(1, A), 1.0, 1e-3)
    assert f.item() == pytest.approx(0.75)  # 3 of the 4 draws rate the advised action above the uniform policy
    gain = advice_gain_draws(draws[None], _advice(0), torch.zeros(1, A), 1.0)
    assert gain.shape == (1, 4) and (gain[0, [0, 2, 3]] > 0).all() and gain[0, 1] < 0


def test_where_the_critic_cannot_tell_actions_apart_the_filter_passes():
    q = torch.zeros(3, 2, A)  # before the first reward every value is 0
    f, informative = critic_filter(q, _advice(1, 3), torch.randn(3, A), 1.0, 1e-3)
    assert not informative.any() and f.tolist() == [1.0, 1.0, 1.0]
    assert informative_states(torch.full((1, 1, A), 0.0) + torch.tensor([0.0, 0.0, 0.0, 0.01]), 1e-3).item()


def test_bad_shapes_and_settings_are_refused():
    with pytest.raises(ValueError, match="must be"):
        critic_filter(torch.zeros(2, A), _advice(0, 2), torch.zeros(2, A), 1.0, 1e-3)
    with pytest.raises(ValueError, match="temperature"):
        advice_gain_draws(torch.zeros(1, 1, A), _advice(0), torch.zeros(1, A), 0.0)
    with pytest.raises(ValueError, match="min_gap"):
        informative_states(torch.zeros(1, 1, A), 0.0)


def test_the_prior_layer_scales_beta_by_the_filter_and_reports_it():
    cfg = build_config(None, ["prior.filter=true", "prior.dropout=0", "prior.control_episodes=0"], "full").prior
    layer = PriorLayer(cfg, A, num_envs=2)
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(1, 2, 1)  # one advised row, action 0 best
    rows = torch.tensor([False, True])
    f = layer.filter_advice(q, _advice(2, 2), torch.zeros(2, A), rows)
    assert f.tolist() == [1.0, 0.0]  # the unadvised row is left alone, the bad advice is cut
    _, beta = layer.act(torch.zeros(2, A), _advice(2, 2), torch.ones(2), None, 0, advice_filter=f)
    assert beta[1].item() == 0.0 and beta[0].item() > 0.0
    metrics = layer.metrics()
    assert metrics["filter_pass"] == 0.0 and metrics["filter_informative_frac"] == 1.0
    off = PriorLayer(build_config(None, [], "full").prior, A, num_envs=2)
    assert "filter_pass" not in off.metrics()


def test_the_agent_filters_at_act_time_on_its_own_world_model():
    from lore.method import LoReAgent

    cfg = build_config(overrides=["model.preset=debug", "prior.filter=true", "env.num_envs=2"], ablation="full")
    space = gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(-np.inf, np.inf, (10,), np.float32)})
    agent = LoReAgent(space, A, cfg, torch.device("cpu"))
    agent.prior.seed_draws(3)
    llm = {"prior_logits": _advice(1, 2), "mask": torch.tensor([1.0, 0.0]), "source": torch.tensor([1.0, 0.0])}
    obs = {"symbolic": torch.randn(2, 10)}
    before = agent.prior.generator.get_state()
    out = agent.act(obs, torch.ones(2, dtype=torch.bool), agent.initial_state(2), llm)
    assert out.beta.shape == (2,) and out.beta[1].item() == 0.0
    assert not torch.equal(before, agent.prior.generator.get_state())  # the values were drawn on the method's stream
    assert agent.prior.metrics()["filter_pass"] >= 0.0
