"""The sceptical episode bandit: scripted advisors that harm are detected within a stated number of episodes
and steer few episodes meanwhile; good advice is found and used; harm once seen is not forgotten."""

from __future__ import annotations

import pytest
import torch

from lore.prior.allocation import TIMEOUT_OUTCOME, EpisodeBandit, episode_outcome, p_greater

DETECT_WITHIN = 50
"""Episodes after which a bandit must be sure (P(advice better) below 0.1 or above 0.9) of a scripted advisor."""


def test_episode_outcomes():
    assert episode_outcome(0.0, failed=True, best_return=0.9) == 0.0
    assert episode_outcome(0.0, failed=False, best_return=0.0) == TIMEOUT_OUTCOME
    assert episode_outcome(0.9, failed=False, best_return=0.9) == 1.0
    assert episode_outcome(0.45, failed=False, best_return=0.9) == pytest.approx(0.75)
    assert episode_outcome(float("nan"), failed=False, best_return=0.9) == 0.0


def _play(advice, own, episodes: int, scepticism: float = 3.0, seed: int = 0):
    """Run ``episodes`` episodes: each is given to the advice or not by the bandit, and ends as ``advice(k)`` or
    ``own(k)`` says (return, failed). Returns the bandit, the advised flags and P(advice better) after each."""
    bandit, gen = EpisodeBandit(scepticism), torch.Generator().manual_seed(seed)
    advised, p = [], []
    for k in range(episodes):
        use = bool(bandit.draw_advised(1, gen)[0])
        bandit.observe(*(advice(k) if use else own(k)), advised=use)
        advised.append(use)
        p.append(bandit.p_advice_better())
    return bandit, advised, p


def _first(p, test) -> int:
    return next((k + 1 for k, v in enumerate(p) if test(v)), len(p) + 1)


@pytest.mark.parametrize("seed", range(5))
def test_advice_that_walks_into_failure_is_detected_and_steers_few_episodes(seed):
    # the adversary ends every advised episode in failure (lava) while the agent's own episodes time out
    _, advised, p = _play(lambda k: (0.0, True), lambda k: (0.0, False), 200, seed=seed)
    assert _first(p, lambda v: v < 0.1) <= DETECT_WITHIN
    assert sum(advised) <= 12  # the regret: advised episodes over 200, bounded by the detection
    assert max(p[DETECT_WITHIN:]) < 0.1  # and never forgotten


@pytest.mark.parametrize("seed", range(5))
def test_advice_that_stalls_is_dropped_once_the_agent_succeeds_on_its_own(seed):
    # an advisor that can only stall (no failure possible, as in DoorKey) costs nothing until the agent's own
    # episodes start to succeed at episode 40; from then it is detected within the stated number of episodes
    _, advised, p = _play(lambda k: (0.0, False), lambda k: (0.9 if k >= 40 and k % 2 else 0.0, False), 200,
                          seed=seed)
    assert _first(p[40:], lambda v: v < 0.1) <= DETECT_WITHIN
    assert sum(advised[40 + DETECT_WITHIN:]) <= 10


@pytest.mark.parametrize("seed", range(5))
def test_good_advice_is_found_and_steers_most_episodes(seed):
    _, advised, p = _play(lambda k: (0.9, False), lambda k: (0.0, False), 200, seed=seed)
    assert _first(p, lambda v: v > 0.9) <= DETECT_WITHIN
    assert sum(advised[DETECT_WITHIN:]) >= 0.85 * (200 - DETECT_WITHIN)


def test_unproven_advice_steers_a_minority_of_episodes():
    bandit, gen = EpisodeBandit(3.0), torch.Generator().manual_seed(0)
    share = float(bandit.draw_advised(4000, gen).double().mean())
    assert 0.15 < share < 0.35 and bandit.p_advice_better() < 0.35
    assert float(EpisodeBandit(0.0).draw_advised(4000, gen).double().mean()) == pytest.approx(0.5, abs=0.03)


def test_p_greater_and_the_state_round_trip():
    assert p_greater((0.5, 0.01), (0.5, 0.01)) == pytest.approx(0.5)
    assert p_greater((0.9, 1e-4), (0.1, 1e-4)) > 0.999 and p_greater((0.1, 0.0), (0.9, 0.0)) == 0.0
    bandit, _, _ = _play(lambda k: (0.9, False), lambda k: (0.0, True), 30)
    other = EpisodeBandit(3.0)
    other.load_state_dict(bandit.state_dict())
    assert other.state_dict() == bandit.state_dict() and other.p_advice_better() == bandit.p_advice_better()


def test_the_prior_layer_lets_the_bandit_pick_the_advised_episodes():
    from lore.config import build_config
    from lore.prior.layer import PriorLayer

    cfg = build_config(None, ["prior.allocation=thompson", "prior.dropout=0"], "full").prior
    layer = PriorLayer(cfg, 3, num_envs=64)
    layer.seed_draws(1)
    for _ in range(30):  # advised episodes fail, own ones time out
        layer.draw_control_episodes(torch.ones(64, dtype=torch.bool))
        for i in range(64):
            advised = not bool(layer.control[i])
            layer.observe_episode(i, 0.0, failed=advised)
    assert layer.bandit.p_advice_better() < 0.01 and layer.metrics()["advice_p_better"] < 0.01
    layer.draw_control_episodes(torch.ones(64, dtype=torch.bool))
    assert float(layer.control.double().mean()) > 0.95  # almost every episode is the agent's own
    logits = torch.zeros(64, 3)
    _, beta = layer.act(logits, torch.eye(3)[torch.zeros(64, dtype=torch.long)], torch.ones(64), None, 0)
    assert torch.equal(beta > 0, ~layer.control)  # the advised episodes act at full strength, the others not
    assert float(layer.absorb_weight(None, 4, "cpu").max()) == 0.0
    saved = layer.state_dict()
    again = PriorLayer(cfg, 3, num_envs=64)
    again.load_state_dict(saved)
    assert again.bandit.state_dict() == layer.bandit.state_dict()
