"""The calibrated gate reads the policy's uncertainty against its own running distribution, so it moves and
closes where the agent is surer than usual, where the absolute gate stays open."""

from __future__ import annotations

import math

import pytest
import torch

from lore.config import build_config
from lore.prior.gate import calibrated_openness
from lore.prior.layer import PriorLayer

A, ENVS = 7, 16


def _layer(gate: str) -> PriorLayer:
    cfg = build_config(None, [f"prior.gate={gate}", "prior.dropout=0", "prior.control_episodes=0",
                              "prior.trust=false"], "full").prior
    return PriorLayer(cfg, A, num_envs=ENVS)


def _act(layer: PriorLayer, entropy: torch.Tensor) -> torch.Tensor:
    u = {"entropy": entropy, "value_var": torch.zeros(ENVS), "disagreement": torch.zeros(ENVS)}
    _, beta = layer.act(torch.zeros(ENVS, A), torch.eye(A)[torch.zeros(ENVS, dtype=torch.long)], torch.ones(ENVS),
                        u, 0)
    return beta


def test_calibrated_openness_is_the_normal_cdf_of_the_standardised_signal():
    x = torch.tensor([1.0, 2.0, 3.0, float("nan")])
    out = calibrated_openness(x, mean=2.0, var=1.0, floor=0.0)
    assert out[1] == pytest.approx(0.5) and out[3] == pytest.approx(0.5)
    assert out[0] == pytest.approx(0.5 * (1 + math.erf(-1 / math.sqrt(2))))
    assert float(calibrated_openness(torch.ones(2), 1.0, 0.0, 1e-3)[0]) == pytest.approx(0.5)


def test_the_calibrated_gate_moves_where_the_absolute_gate_stays_open():
    gen = torch.Generator().manual_seed(0)
    typical = 0.98 * math.log(A)  # a learning agent's policy entropy stays near its maximum
    calibrated, absolute = _layer("calibrated"), _layer("uncertainty")
    betas_cal, betas_abs = [], []
    for _ in range(400):
        entropy = typical + 0.01 * math.log(A) * torch.randn(ENVS, generator=gen)
        betas_cal.append(_act(calibrated, entropy))
        betas_abs.append(_act(absolute, entropy))
    late_cal, late_abs = torch.cat(betas_cal[200:]), torch.cat(betas_abs[200:])
    assert float((late_abs == 1.0).double().mean()) == 1.0  # the absolute gate never closes
    assert 0.35 < float((late_cal < 0.5).double().mean()) < 0.65  # the calibrated one moves around its median
    surer = torch.full((ENVS,), typical - 0.03 * math.log(A))
    unsure = torch.full((ENVS,), typical + 0.03 * math.log(A))
    assert float(_act(calibrated, surer).max()) < 0.05  # closed where the agent is surer than usual
    assert float(_act(calibrated, unsure).min()) > 0.95
