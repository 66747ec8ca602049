"""CEM planning in latent space, on hand-built world models with known returns."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lore.config import PlanConfig
from lore.plan.cem import cem_plan, imagined_returns, init_from_plan, init_from_prior, uniform_init
from lore.plan.planner import Planner


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny tensors: a second intra-op thread only adds synchronisation (badly so on a loaded machine)
    torch.set_num_threads(1)
    yield


class CombinationLock:
    """Latent = one-hot of 'k correct actions so far' (k = 0..H) plus an absorbing 'wrong' state.

    Only the code (one sequence of length H) earns the full return H: each correct action in a
    row earns 1, the first wrong one ends all reward.
    """

    def __init__(self, code: list[int], num_actions: int, final_value: float = 0.0):
        self.code = torch.tensor(code)
        self.horizon = len(code)
        self.num_actions = num_actions
        self.dim = self.horizon + 2
        self.final_value = final_value

    def start(self) -> torch.Tensor:
        return F.one_hot(torch.tensor(0), self.dim).float()

    def step(self, latent: torch.Tensor, action_onehot: torch.Tensor) -> torch.Tensor:
        k, action = latent.argmax(-1), action_onehot.argmax(-1)
        correct = (k < self.horizon) & (action == self.code[k.clamp(max=self.horizon - 1)])
        wrong = torch.full_like(k, self.horizon + 1)
        nxt = torch.where(correct, k + 1, wrong)
        return F.one_hot(nxt, self.dim).float()

    def reward(self, latent: torch.Tensor) -> torch.Tensor:
        k = latent.argmax(-1)
        return ((k >= 1) & (k <= self.horizon)).float()

    def cont(self, latent: torch.Tensor) -> torch.Tensor:
        return torch.ones(latent.shape[0])

    def value(self, latent: torch.Tensor) -> torch.Tensor:
        return (latent.argmax(-1) == self.horizon).float() * self.final_value

    def callables(self) -> dict:
        return {"step": self.step, "reward": self.reward, "cont": self.cont, "value": self.value}

    def plan_callables(self) -> dict:  # the agent adapter's name
        return self.callables()


def plan(lock: CombinationLock, init, iterations: int, seed: int, samples: int = 128, elites: int = 8,
         smoothing: float = 0.1, gamma: float = 1.0):
    return cem_plan(lock.start(), lock.step, lock.reward, lock.cont, lock.value, lock.num_actions, lock.horizon,
                    samples, elites, iterations, init, gamma, generator=torch.Generator().manual_seed(seed),
                    smoothing=smoothing)


CODES = [[2, 0, 3, 1, 1, 2], [0, 0, 0, 3, 2, 1], [3, 1, 2, 0, 2, 3]]


@pytest.mark.parametrize("code", CODES)
def test_cem_finds_the_only_rewarding_sequence(code):
    lock = CombinationLock(code, num_actions=4, final_value=2.0)
    result = plan(lock, uniform_init(6, 4), iterations=15, seed=0)
    assert result.probs.argmax(-1).tolist() == code
    assert result.action == code[0]
    assert result.best_actions.tolist() == code
    assert result.best_return == pytest.approx(6 + 2.0)  # rewards plus the bootstrap value
    assert result.iterations_used > 1


def test_seeding_with_the_optimal_plan_stops_early():
    code = CODES[0]
    lock = CombinationLock(code, num_actions=4)
    seeded = plan(lock, init_from_plan(code, 6, 4, smoothing=0.1), iterations=15, seed=1)
    uniform = plan(lock, uniform_init(6, 4), iterations=15, seed=1)
    assert seeded.probs.argmax(-1).tolist() == code and uniform.probs.argmax(-1).tolist() == code
    assert seeded.iterations_used == 1
    assert seeded.iterations_used < uniform.iterations_used
    assert seeded.planned_return == pytest.approx(6.0)


def test_seeded_with_a_wrong_plan_it_still_recovers():
    code = CODES[1]
    wrong = [(a + 1) % 4 for a in code]
    lock = CombinationLock(code, num_actions=4)
    result = plan(lock, init_from_plan(wrong, 6, 4, smoothing=0.2), iterations=30, seed=2, samples=64,
                  smoothing=0.2)
    assert result.probs.argmax(-1).tolist() == code
    # Without smoothing the wrong plan has all the support: CEM can never leave it.
    stuck = plan(lock, init_from_plan(wrong, 6, 4, smoothing=0.0), iterations=30, seed=2, samples=64,
                 smoothing=0.0)
    assert stuck.probs.argmax(-1).tolist() == wrong and stuck.planned_return == 0.0


def test_score_discounts_and_stops_at_termination():
    """R = sum_t gamma^t (prod_{k<t} c_k) r_t + gamma^H (prod c) V(s_H), on a hand-computed chain."""
    # Latent = [position, alive]; each step moves +1; reward = position; cont = 0 once position >= 2.
    def step(latent, onehot):
        return latent + torch.tensor([1.0, 0.0])

    def reward(latent):
        return latent[:, 0]

    def cont(latent):
        return (latent[:, 0] < 2).float()

    def value(latent):
        return torch.full((latent.shape[0],), 100.0)

    gamma = 0.9
    returns = imagined_returns(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 3, dtype=torch.long), step, reward,
                               cont, value, num_actions=2, gamma=gamma)
    # r_0 = 1 (c_0 = 1), r_1 = 2 (c_1 = 0: episode ends), r_2 and V are cut off.
    assert returns.item() == pytest.approx(1.0 + gamma * 2.0)
    short = imagined_returns(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 1, dtype=torch.long), step, reward, cont,
                             value, num_actions=2, gamma=gamma)
    assert short.item() == pytest.approx(1.0 + gamma * 100.0)


def test_initial_distributions():
    probs = init_from_plan([1, 3], horizon=4, num_actions=4, smoothing=0.2)
    assert probs.shape == (4, 4) and torch.allclose(probs.sum(-1), torch.ones(4))
    assert probs[0].tolist() == pytest.approx([0.05, 0.85, 0.05, 0.05])
    assert probs[2].tolist() == pytest.approx([0.25] * 4)  # padded with uniform
    assert init_from_plan(list(range(10)), horizon=3, num_actions=10, smoothing=0.0).argmax(-1).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="out of range"):
        init_from_plan([5], 2, 4, 0.1)
    prior = torch.tensor([2.0, 0.0, 0.0])
    from_prior = init_from_prior(prior, horizon=3)
    assert from_prior[0].tolist() == pytest.approx(torch.softmax(prior, -1).tolist())
    assert from_prior[1].tolist() == pytest.approx([1 / 3] * 3)
    assert init_from_prior(prior, 3, repeat=True)[2].tolist() == pytest.approx(torch.softmax(prior, -1).tolist())


def test_cem_rejects_bad_arguments():
    lock = CombinationLock(CODES[0], 4)
    with pytest.raises(ValueError, match="elites"):
        plan(lock, None, iterations=2, seed=0, samples=4, elites=8)
    with pytest.raises(ValueError, match="init_probs"):
        plan(lock, torch.ones(6, 4), iterations=2, seed=0)
    with pytest.raises(ValueError, match="init_probs must be"):
        plan(lock, uniform_init(5, 4), iterations=2, seed=0)


def test_planner_uses_the_agent_adapter_and_counts():
    code = CODES[2]
    lock = CombinationLock(code, num_actions=4)
    cfg = PlanConfig(enabled=True, horizon=6, samples=64, elites=8, iterations=6, init="llm", smoothing=0.1)
    planner = Planner(cfg, num_actions=4, gamma=1.0, seed=0)
    latent = torch.stack([lock.start(), lock.start()])
    policy_action = torch.tensor([code[0], (code[0] + 1) % 4])
    out = planner.plan(lock, latent, llm_plan=[code, None], prior_logits=torch.zeros(2, 4),
                       policy_action=policy_action, prior_mask=torch.tensor([0.0, 0.0]))
    assert out.init_source == ["llm", "uniform"]
    assert out.action[0].item() == code[0] and out.iterations[0].item() == 1
    metrics = planner.metrics()
    assert metrics["plan_calls"] == 1 and metrics["plan_ms"] > 0
    assert metrics["plan_action_differs_frac"] == pytest.approx((out.action != policy_action).float().mean().item())
    assert metrics["plan_seeded_llm_frac"] == 0.5
    assert math.isnan(planner.metrics()["plan_return"])  # reset after reading
    assert planner.should_plan(0) and not Planner(PlanConfig(enabled=False), 4, 1.0).should_plan(0)
    with pytest.raises(TypeError, match="plan_callables"):
        planner.plan(object(), latent)
    with pytest.raises(ValueError, match="missing"):
        planner.plan({"step": lock.step}, latent)


def test_planner_mix_mode_adds_log_plan_probs_to_policy_logits():
    code = CODES[0]
    lock = CombinationLock(code, num_actions=4)
    cfg = PlanConfig(enabled=True, horizon=6, samples=64, elites=8, iterations=3, act="mix", mix_weight=2.0)
    planner = Planner(cfg, num_actions=4, gamma=1.0, seed=0)
    policy_logits = torch.zeros(1, 4)
    out = planner.plan(lock.callables(), lock.start(), llm_plan=code, policy_logits=policy_logits, sample=False)
    assert torch.allclose(out.logits, policy_logits + 2.0 * torch.log(out.first_probs))
    assert out.action.item() == code[0]
    with pytest.raises(ValueError, match="policy_logits"):
        planner.plan(lock.callables(), lock.start(), llm_plan=code)


def test_planner_state_round_trip_is_reproducible():
    lock = CombinationLock(CODES[1], num_actions=4)
    cfg = PlanConfig(enabled=True, horizon=6, samples=32, elites=4, iterations=3, init="uniform")
    first = Planner(cfg, num_actions=4, gamma=0.99, seed=3)
    first.plan(lock, lock.start())
    resumed = Planner(cfg, num_actions=4, gamma=0.99, seed=99)
    resumed.load_state_dict(first.state_dict())
    a, b = first.plan(lock, lock.start()), resumed.plan(lock, lock.start())
    assert torch.equal(a.first_probs, b.first_probs) and a.iterations.tolist() == b.iterations.tolist()


def test_planner_runs_on_the_dreamer_agent_adapter():
    import gymnasium
    import numpy as np

    from lore.config import build_config
    from lore.method import LoReAgent

    cfg = build_config(overrides=["model.preset=debug", "plan.enabled=true", "plan.samples=16", "plan.elites=4",
                                  "plan.iterations=2", "plan.horizon=4"])
    space = gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(-np.inf, np.inf, (10,), np.float32)})
    agent = LoReAgent(space, 4, cfg, torch.device("cpu"))
    out = agent.act({"symbolic": torch.randn(2, 10)}, torch.ones(2, dtype=torch.bool), agent.initial_state(2))
    planner = Planner(cfg.plan, num_actions=4, gamma=cfg.dreamer.gamma, seed=0)
    plan_out = planner.plan(agent, out.latent, llm_plan=[[1, 2], None], prior_logits=torch.zeros(2, 4),
                            prior_mask=torch.zeros(2), policy_action=out.action)
    assert plan_out.action.shape == (2,) and plan_out.init_source == ["llm", "uniform"]
    assert torch.isfinite(plan_out.planned_return).all()
