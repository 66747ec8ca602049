"""Advice trust, the bounded uncertainty gate, temperature scaling, the act-time KL bound and the
bootstrapped critic heads: hand-computed values and invariants."""

from __future__ import annotations

import math

import pytest
import torch

from lore.config import PriorConfig
from lore.dreamer.behavior import Critic, bootstrap_head_mask, critic_losses
from lore.dreamer.math import make_bins
from lore.prior.gate import entropy_fraction, ratio_to_mean, uncertainty_parts
from lore.prior.kl_control import categorical_kl, dual_ascent, project_beta_to_kl
from lore.prior.layer import PriorLayer
from lore.prior.mixing import normalise_prior_logits
from lore.prior.trust import (
    ADVICE_SOURCES,
    AdviceTrust,
    advice_value_z,
    source_code,
    trust_from_evidence,
)

A = 5
LLM, PLAN, SURROGATE = (source_code(name) for name in ADVICE_SOURCES)


def prior_cfg(**overrides) -> PriorConfig:
    base = dict(enabled=True, dropout=0.0)
    base.update(overrides)
    return PriorConfig(**base)


def one_hot_advice(actions: torch.Tensor, num_actions: int = A) -> torch.Tensor:
    """Advice as the LLM bridge stores it: normalised log-probs of a one-hot answer (in [-10, 0])."""
    return normalise_prior_logits(100.0 * torch.nn.functional.one_hot(actions, num_actions).float())


def feed_advice(layer: PriorLayer, gen: torch.Generator, code: int, pick: str, updates: int = 20,
                n: int = 64) -> None:
    """Score advice on a random Q table: one-hot on its best (``pick="best"``) or worst action."""
    for _ in range(updates):
        q = torch.randn(n, A, generator=gen)
        target = q.argmax(-1) if pick == "best" else q.argmin(-1)
        layer.observe_advice_values(q, one_hot_advice(target), torch.full((n,), code))


def pin_means(layer: PriorLayer, mean: float) -> None:
    """Freeze the running means of the uncertainty signals (an act call barely moves them)."""
    for normaliser in layer.normalisers:
        normaliser.load_state_dict({"mean": mean, "sq": mean * mean, "count": 10**12, "decay": 1.0 - 1e-9})


# --------------------------------------------------------------------------- advice value z-score


def test_advice_value_z_hand_computed():
    q = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 6.0]], dtype=torch.float64)
    rho = torch.tensor([[0.2, 0.3, 0.5], [0.25, 0.25, 0.5]], dtype=torch.float64)
    gap = 1e-3
    z = advice_value_z(q, rho.log(), gap)
    # Row 0: advised 2.3, mean 2, population std sqrt(2/3). Row 1: advised 3, mean 2, std sqrt(8).
    expected = [0.3 / (math.sqrt(2.0 / 3.0) + gap), 1.0 / (math.sqrt(8.0) + gap)]
    assert z.tolist() == pytest.approx(expected, rel=1e-12)
    # Logits are only defined up to a shift.
    assert torch.allclose(advice_value_z(q, rho.log() + 7.0, gap), z)
    # Advice on the worst action is negative; uniform advice is exactly average.
    assert advice_value_z(q, torch.log(torch.tensor([[0.98, 0.01, 0.01]] * 2, dtype=torch.float64)), gap).lt(0).all()
    assert advice_value_z(q, torch.zeros(2, 3, dtype=torch.float64), gap).abs().max() < 1e-12


def test_min_gap_makes_indistinguishable_actions_count_as_zero():
    gen = torch.Generator().manual_seed(0)
    q = 1e-7 * torch.randn(64, A, generator=gen, dtype=torch.float64)  # an untrained critic: noise
    advice = one_hot_advice(q.argmax(-1))  # advice on the (noise) best action
    z = advice_value_z(q, advice, min_gap=1e-3)
    assert z.abs().max() < 1e-3
    # Without the floor the same noise would read as strong evidence.
    assert advice_value_z(q, advice, min_gap=1e-12).mean() > 1.0
    with pytest.raises(ValueError, match="min_gap"):
        advice_value_z(q, advice, 0.0)
    with pytest.raises(ValueError, match=r"\[N, A\]"):
        advice_value_z(q[0], advice[0], 1e-3)


# --------------------------------------------------------------------------- advice trust


def test_source_codes():
    assert [source_code(None), source_code("llm"), source_code("cache"), source_code("plan"),
            source_code("surrogate")] == [0, 1, 1, 2, 3]
    with pytest.raises(ValueError, match="unknown advice source"):
        source_code("oracle")


def test_trust_starts_uninformed_and_ema_is_bias_corrected():
    trust = AdviceTrust(decay=0.9, gain=2.0)
    assert all(trust.value(name) == 0.5 for name in ADVICE_SOURCES)
    assert trust_from_evidence(0.5, 2.0) == pytest.approx(1.0 / (1.0 + math.exp(-1.0)))
    trust.observe(torch.tensor([-1.0, -3.0, 7.0, 5.0]), torch.tensor([1, 1, 0, 0]))  # code 0: no advice
    assert trust.mean_z("llm") == pytest.approx(-2.0)  # one batch: its mean, not shrunk towards 0
    assert trust.value("llm") == pytest.approx(1.0 / (1.0 + math.exp(4.0)))
    trust.observe(torch.tensor([0.0]), torch.tensor([1]))
    assert trust.mean_z("llm") == pytest.approx((0.9 * 0.1 * -2.0 + 0.1 * 0.0) / (1 - 0.81))
    assert trust.value("plan") == 0.5 and trust.value("surrogate") == 0.5
    assert trust.values_for(torch.tensor([0, 2, 1])).tolist() == pytest.approx([1.0, 0.5, trust.value("llm")])
    with pytest.raises(ValueError, match="trust_gain"):
        AdviceTrust(0.9, 0.0)
    with pytest.raises(ValueError, match="trust_decay"):
        AdviceTrust(1.0, 2.0)


def test_trust_learns_from_the_critic_per_source():
    gen = torch.Generator().manual_seed(1)
    layer = PriorLayer(prior_cfg(trust=True, trust_decay=0.9), A, num_envs=3)
    assert layer.wants_advice_values()
    feed_advice(layer, gen, LLM, "worst")  # adversarial LLM
    assert layer.trust.value("llm") < 0.2
    assert layer.trust.value("plan") == 0.5 and layer.trust.value("surrogate") == 0.5  # untouched
    feed_advice(layer, gen, PLAN, "best")  # a good plan
    assert layer.trust.value("plan") > 0.8
    assert layer.trust.value("llm") < 0.2 and layer.trust.value("surrogate") == 0.5
    # The LLM turns good: its trust recovers (the EMA forgets).
    feed_advice(layer, gen, LLM, "best", updates=60)
    assert layer.trust.value("llm") > 0.8
    metrics = layer.metrics()
    assert metrics["trust_llm"] == pytest.approx(layer.trust.value("llm"))
    assert metrics["trust_plan"] > 0.8 and metrics["trust_surrogate"] == 0.5


@pytest.mark.parametrize("weight, low", [(1.0, True), (0.5, True), (0.0, False)])
def test_the_value_weight_scales_the_critics_say_in_the_trust(weight, low):
    gen = torch.Generator().manual_seed(1)
    layer = PriorLayer(prior_cfg(trust=True, trust_decay=0.9, trust_value_weight=weight), A, num_envs=3)
    feed_advice(layer, gen, LLM, "worst")
    z = layer.trust.mean_z("llm")
    assert z < 0  # the critic rates the advice below an average action whatever the weight
    assert layer.trust.evidence("llm") == pytest.approx(weight * z)
    assert (layer.trust.value("llm") < 0.2) is low and (weight > 0 or layer.trust.value("llm") == 0.5)


def test_trust_state_dict_round_trip():
    gen = torch.Generator().manual_seed(2)
    layer = PriorLayer(prior_cfg(trust=True, trust_decay=0.9), A, num_envs=2)
    feed_advice(layer, gen, LLM, "worst", updates=5)
    feed_advice(layer, gen, SURROGATE, "best", updates=3)
    again = AdviceTrust(layer.trust.decay, layer.trust.gain)
    again.load_state_dict(layer.trust.state_dict())
    for name in ADVICE_SOURCES:
        assert again.value(name) == layer.trust.value(name)
    assert again.state_dict()["count"] == {"llm": 5, "plan": 0, "surrogate": 3}
    resumed = PriorLayer(prior_cfg(trust=True, trust_decay=0.9), A, num_envs=2)
    resumed.load_state_dict(layer.state_dict())
    assert resumed.trust.value("llm") == layer.trust.value("llm") < 0.2


def test_beta_is_scaled_by_the_trust_of_each_envs_source():
    gen = torch.Generator().manual_seed(3)
    layer = PriorLayer(prior_cfg(gate="fixed", beta_max=1.0, trust=True, trust_decay=0.9), A, num_envs=4)
    feed_advice(layer, gen, LLM, "worst")
    feed_advice(layer, gen, PLAN, "best")
    logits, prior = torch.zeros(4, A), one_hot_advice(torch.tensor([0, 1, 2, 3]))
    source = torch.tensor([LLM, PLAN, SURROGATE, 0])
    _, beta = layer.act(logits, prior, torch.ones(4), None, 0, source=source)
    trust_llm = layer.trust.value("llm")
    assert trust_llm < 0.2 and beta[0] < 0.4 and beta[0] < beta[1]
    # beta scale min(1, 2 * trust): uninformed (0.5) and trusted advice act at full strength; no advice: 1.
    assert beta.tolist() == pytest.approx([2 * trust_llm, 1.0, 1.0, 1.0])
    # Only advice with net positive evidence is absorbed: weight clip(2 * trust - 1, 0, 1), so
    # distrusted and uninformed advice (PriorNet, no evidence yet: 0.5) are not distilled at all.
    trust_plan = layer.trust.value("plan")
    assert layer.absorb_weight(source, 4, torch.device("cpu")).tolist() == pytest.approx(
        [0.0, 2 * trust_plan - 1, 0.0, 1.0])
    assert 0.5 < 2 * trust_plan - 1 < 1.0
    # Same evidence, trust switched off: every env gets beta_max.
    untrusting = PriorLayer(prior_cfg(gate="fixed", beta_max=1.0, trust=False), A, num_envs=4)
    untrusting.trust.load_state_dict(layer.trust.state_dict())
    _, beta = untrusting.act(logits, prior, torch.ones(4), None, 0, source=source)
    assert beta.tolist() == pytest.approx([1.0] * 4)
    # No source given: nothing to scale.
    _, beta = layer.act(logits, prior, torch.ones(4), None, 0)
    assert beta.tolist() == pytest.approx([1.0] * 4)


# --------------------------------------------------------------------------- bounded uncertainty gate


def test_uncertainty_parts_hand_computed_and_in_unit_interval():
    h = torch.tensor([0.5 * math.log(A)])
    parts = uncertainty_parts([h, torch.tensor([3.0]), torch.tensor([1.0])], A, [123.0, 1.0, 3.0])
    assert [p.item() for p in parts] == pytest.approx([0.5, 0.75, 0.25])

    gen = torch.Generator().manual_seed(4)
    signals = [torch.rand(500, generator=gen) * 5.0,
               torch.cat([torch.rand(497, generator=gen) * 1e6, torch.tensor([0.0, float("nan"), float("inf")])]),
               torch.rand(500, generator=gen) * 1e-6 - 1e-7]
    for means in [[0.0, 0.0, 0.0], [0.0, 1e-9, 1e9], [0.0, 1.0, 1.0]]:
        for x in uncertainty_parts(signals, A, means):
            assert torch.isfinite(x).all() and x.min() >= 0.0 and x.max() <= 1.0
    with pytest.raises(ValueError, match="shape"):
        uncertainty_parts([signals[0], signals[1][:3], signals[2]], A, [0.0, 1.0, 1.0])


def test_entropy_part_is_one_for_a_uniform_policy():
    uniform = torch.distributions.Categorical(logits=torch.zeros(3, A)).entropy()
    assert entropy_fraction(uniform, A).tolist() == pytest.approx([1.0] * 3, abs=1e-6)
    assert entropy_fraction(torch.tensor([0.0]), A).item() == 0.0


def test_ratio_to_mean_is_half_at_the_mean_and_monotone():
    assert ratio_to_mean(torch.tensor([0.3]), 0.3).item() == pytest.approx(0.5)
    assert ratio_to_mean(torch.tensor([0.0]), 0.0).item() == pytest.approx(0.5)
    x = torch.logspace(-6, 6, 200, dtype=torch.float64)
    r = ratio_to_mean(x, 1.0)
    assert (r[1:] > r[:-1]).all() and r[0] < 1e-5 and r[-1] > 1 - 1e-5
    assert ratio_to_mean(torch.tensor([3.0]), 1.0).item() == pytest.approx(0.75)


@pytest.mark.parametrize("signal", ["entropy", "value_var", "disagreement"])
def test_beta_rises_with_the_entropy_and_ignores_the_logged_spreads(signal):
    layer = PriorLayer(prior_cfg(gate="uncertainty", beta_max=1.0, gate_full_at=1.0), A, num_envs=2)
    pin_means(layer, 0.1)
    base = {"entropy": 0.5, "value_var": 0.1, "disagreement": 0.1}
    levels = [0.3, 0.6, 1.2, 2.4]
    betas = []
    for level in levels:
        u = {k: torch.full((2,), v) for k, v in base.items()}
        u[signal] = torch.tensor([base[signal], level])  # env 1: only this signal differs
        _, beta = layer.act(torch.zeros(2, A), torch.zeros(2, A), torch.ones(2), u, env_step=0)
        betas.append(beta[1].item())
        ref = beta[0].item()
    assert ref == pytest.approx(0.5 / math.log(A), abs=1e-6)
    if signal == "entropy":
        assert betas == pytest.approx([min(level / math.log(A), 1.0) for level in levels], abs=1e-6)
    else:
        assert betas == pytest.approx([ref] * len(levels), abs=1e-6)


# --------------------------------------------------------------------------- act-time KL bound


def test_project_beta_to_kl_is_the_largest_beta_within_the_bound():
    gen = torch.Generator().manual_seed(8)
    n, bound = 512, 0.3
    wm = 2.0 * torch.randn(n, A, generator=gen, dtype=torch.float64)
    tilt = 3.0 * torch.randn(n, A, generator=gen, dtype=torch.float64)
    beta = 3.0 * torch.rand(n, generator=gen, dtype=torch.float64)
    out = project_beta_to_kl(wm, tilt, beta, bound)

    def kl_at(b):
        return categorical_kl(wm + b[:, None] * tilt, wm)

    assert (kl_at(out) <= bound + 1e-6).all()
    assert (out >= 0).all() and (out <= beta).all()
    within = kl_at(beta) <= bound
    assert within.any() and (~within).any()  # both cases are exercised
    assert torch.equal(out[within], beta[within])
    clipped = ~within
    assert (kl_at(out + 1e-3)[clipped] > bound).all()
    assert kl_at(out)[clipped].tolist() == pytest.approx([bound] * int(clipped.sum()), abs=1e-6)
    # float32 in, float32 out, still within the bound.
    out32 = project_beta_to_kl(wm.float(), tilt.float(), beta.float(), bound)
    assert out32.dtype == torch.float32
    assert (categorical_kl(wm + out32.double()[:, None] * tilt, wm) <= bound + 1e-6).all()
    with pytest.raises(ValueError, match="bound"):
        project_beta_to_kl(wm, tilt, beta, 0.0)


def test_lagrangian_act_never_exceeds_the_kl_bound():
    gen = torch.Generator().manual_seed(9)
    bound, n = 0.2, 16
    layer = PriorLayer(prior_cfg(gate="fixed", beta_max=4.0, kl_mode="lagrangian", kl_bound=bound), A, num_envs=n)
    free = PriorLayer(prior_cfg(gate="fixed", beta_max=4.0, kl_mode="none"), A, num_envs=n)
    worst_free = 0.0
    for step in range(20):
        logits = 2.0 * torch.randn(n, A, generator=gen)
        prior = one_hot_advice(torch.randint(0, A, (n,), generator=gen))
        mask = (torch.rand(n, generator=gen) > 0.2).float()
        mix, beta = layer.act(logits, prior, mask, None, step)
        kl = categorical_kl(mix.double(), logits.double())
        assert (kl <= bound + 1e-5).all(), kl.max()
        assert (beta <= 4.0).all() and (beta[mask == 0] == 0).all()
        free_mix, _ = free.act(logits, prior, mask, None, step)
        worst_free = max(worst_free, categorical_kl(free_mix, logits).max().item())
    assert worst_free > 2 * bound  # without the projection the same inputs go far past it
    metrics = layer.metrics()
    assert metrics["kl_mix_wm"] <= bound
    assert 0.0 < metrics["kl_bound_active_frac"] <= 1.0
    assert free.metrics()["kl_bound_active_frac"] == 0.0


def test_dual_ascent_lowers_lambda_while_the_constraint_is_met():
    layer = PriorLayer(prior_cfg(kl_mode="lagrangian", kl_delta=0.25, kl_eta=0.05), A)
    layer.lambda_kl = 1.0
    history = [layer.lambda_kl]
    for _ in range(450):  # 0.05 * (0.2 - 0.25) = -0.0025 per step
        layer.update_lambda(0.2)  # within delta (but not 0)
        history.append(layer.lambda_kl)
    assert all(b < a for a, b in zip(history, history[1:], strict=False) if a > 0)
    assert history[1] == pytest.approx(1.0 - 0.0025) and history[-1] == 0.0
    layer.update_lambda(float("nan"))  # no evidence this update: lambda kept
    assert layer.lambda_kl == 0.0
    assert dual_ascent(1.0, 0.2, 0.25, 0.05, 10.0) == pytest.approx(1.0 - 0.05 * 0.05)


# --------------------------------------------------------------------------- bootstrapped critic heads


def test_bootstrap_head_mask_statistics():
    gen = torch.Generator().manual_seed(10)
    mask = bootstrap_head_mask(4, 20000, 0.5, gen)
    assert mask.shape == (4, 20000)
    assert set(mask.unique().tolist()) == {0.0, 2.0}
    assert abs(mask.mean().item() - 1.0) < 0.03
    assert (mask.mean(1) - 1.0).abs().max() < 0.05
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.equal(mask[i], mask[j])
    assert torch.equal(bootstrap_head_mask(3, 7, 1.0, gen), torch.ones(3, 7))
    again = bootstrap_head_mask(4, 100, 0.3, torch.Generator().manual_seed(11))
    assert torch.equal(again, bootstrap_head_mask(4, 100, 0.3, torch.Generator().manual_seed(11)))
    for keep in (0.0, 1.5):
        with pytest.raises(ValueError, match="value_bootstrap"):
            bootstrap_head_mask(2, 5, keep, gen)


def test_critic_losses_head_weight():
    gen = torch.Generator().manual_seed(12)
    bins = make_bins(255, 20.0)
    logits = torch.randn(3, 2, 6, 255, generator=gen, requires_grad=True)
    returns, slow = torch.randn(2, 6, generator=gen), torch.randn(3, 2, 6, generator=gen)
    weight = torch.rand(2, 6, generator=gen)
    plain = critic_losses(logits, returns, slow, weight, bins)
    ones = critic_losses(logits, returns, slow, weight, bins, torch.ones(3, 6))
    assert torch.allclose(plain[0], ones[0]) and torch.allclose(plain[1], ones[1])
    head_weight = torch.ones(3, 6)
    head_weight[1] = 0.0  # head 1 sits this batch out
    loss, reg = critic_losses(logits, returns, slow, weight, bins, head_weight)
    (loss + reg).backward()
    assert logits.grad[1].abs().max() == 0 and logits.grad[0].abs().max() > 0
    with pytest.raises(ValueError, match="head_weight"):
        critic_losses(logits, returns, slow, weight, bins, torch.ones(3, 5))


def _train_heads(head_weight: torch.Tensor, feat: torch.Tensor, returns: torch.Tensor, steps: int = 200) -> Critic:
    bins = make_bins(255, 20.0)
    with torch.random.fork_rng():
        torch.manual_seed(13)
        critic = Critic(feat.shape[-1], heads=head_weight.shape[0], units=32, layers=1, bins=bins)
    opt = torch.optim.Adam(critic.parameters(), lr=3e-3)
    weight = torch.ones_like(returns)
    for _ in range(steps):
        logits = critic(feat)  # [K, 1, N, bins]
        slow = torch.zeros(head_weight.shape[0], *returns.shape)
        loss, _ = critic_losses(logits, returns, slow, weight, bins, head_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return critic


def test_bootstrapped_heads_disagree_where_their_data_disagree():
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(32, 4, generator=gen)
    # The same states twice with different returns: head 0 and 2 see only the first half (+3),
    # head 1 only the second (-3).
    feat = torch.cat([x, x])[None]  # [H=1, N=64, F]
    returns = torch.cat([torch.full((32,), 3.0), torch.full((32,), -3.0)])[None]
    half = torch.cat([torch.ones(32), torch.zeros(32)])
    disjoint = torch.stack([half, 1 - half, half]) * 2.0
    spread_boot = _train_heads(disjoint, feat, returns).values(x).var(0).mean().item()
    spread_same_data = _train_heads(torch.ones(3, 64), feat, returns).values(x).var(0).mean().item()
    assert spread_boot > 1.0  # heads near +3, -3, +3
    assert spread_same_data < 0.05 * spread_boot


def test_critic_heads_are_whole_mlps_with_zero_initialised_outputs():
    bins = make_bins(255, 20.0)
    separate = Critic(12, heads=3, units=16, layers=2, bins=bins)
    single = Critic(12, heads=1, units=16, layers=2, bins=bins)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(separate) == 3 * count(single)
    logits = separate(torch.randn(5, 7, 12))
    assert logits.shape == (3, 5, 7, 255) and torch.all(logits == 0)  # untrained heads predict 0


# --------------------------------------------------------------------------- metrics


def test_metrics_separate_states_where_advice_disagrees_with_the_policy():
    layer = PriorLayer(prior_cfg(gate="uncertainty", beta_max=1.0, gate_full_at=1.0, trust=True), A, num_envs=4)
    logits = 3.0 * torch.eye(A)[:4]  # policy argmax 0, 1, 2, 3
    prior = one_hot_advice(torch.tensor([0, 1, 4, 4]))  # envs 0, 1 agree; 2, 3 disagree
    entropy = torch.tensor([0.2, 0.4, 1.0, 1.4])
    u = {"entropy": entropy, "value_var": torch.zeros(4), "disagreement": torch.zeros(4)}
    _, beta = layer.act(logits, prior, torch.ones(4), u, 0, source=torch.full((4,), LLM))
    frac = entropy / math.log(A)
    assert beta.tolist() == pytest.approx(frac.tolist(), abs=1e-6)  # trust 0.5 before evidence: full strength
    metrics = layer.metrics()
    for key in ("trust_llm", "trust_plan", "trust_surrogate", "kl_bound_active_frac",
                "u_entropy_frac_disagree", "u_entropy_frac_agree", "beta_disagree", "beta_agree",
                "u_value_ratio_disagree", "u_disagreement_ratio_agree"):
        assert key in metrics and math.isfinite(metrics[key]), key
    assert metrics["u_entropy_frac_agree"] == pytest.approx(frac[:2].mean().item(), abs=1e-6)
    assert metrics["u_entropy_frac_disagree"] == pytest.approx(frac[2:].mean().item(), abs=1e-6)
    assert metrics["beta_agree"] == pytest.approx(frac[:2].mean().item(), abs=1e-6)
    assert metrics["beta_disagree"] == pytest.approx(frac[2:].mean().item(), abs=1e-6)
    assert metrics["trust_llm"] == 0.5 and metrics["kl_bound_active_frac"] == 0.0
    # Nothing advised since the last read: the separation is undefined, not 0.
    layer.act(logits, prior, torch.zeros(4), u, 1)
    assert math.isnan(layer.metrics()["beta_disagree"])


def test_a_signal_nobody_computed_has_no_part_in_the_metrics_and_leaves_beta_alone():
    """The agent passes NaN for disagreement when nothing computes it: beta is unchanged, the running
    mean is not poisoned, and the separation metrics say 'not computed' (NaN) instead of 'no difference'."""
    cfg = prior_cfg(gate="uncertainty", beta_max=1.0, gate_full_at=1.0)
    logits = 3.0 * torch.eye(A)[:4]
    prior = one_hot_advice(torch.tensor([0, 1, 4, 4]))
    entropy = torch.tensor([0.2, 0.4, 1.0, 1.4])
    betas, metrics = [], []
    for disagreement in (torch.zeros(4), torch.full((4,), math.nan)):
        layer = PriorLayer(cfg, A, num_envs=4)
        u = {"entropy": entropy, "value_var": torch.zeros(4), "disagreement": disagreement}
        betas.append(layer.act(logits, prior, torch.ones(4), u, 0)[1])
        metrics.append(layer.metrics())
        assert math.isfinite(layer.normalisers[2].mean)
    assert torch.equal(betas[0], betas[1])
    computed, missing = metrics
    assert computed["u_disagreement_ratio_agree"] == pytest.approx(0.5)
    for key in ("u_disagreement_ratio_agree", "u_disagreement_ratio_disagree", "u_disagreement"):
        assert math.isnan(missing[key]), key
    for key in ("u_entropy_frac_agree", "u_value_ratio_disagree", "beta_disagree", "u_entropy"):
        assert missing[key] == pytest.approx(computed[key]), key


def test_only_replicated_best_actions_become_temperature_labels():
    from lore.prior.trust import replicated_best_action

    clear = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.9, 0.1, 0.0, 0.0]])       # both draws rank action 0 first
    split = torch.tensor([[1.0, 0.95, 0.0, 0.0], [0.9, 0.92, 0.0, 0.0]])     # draws disagree: a near-tie
    tiny = torch.tensor([[1.0, 0.9995, 0.0, 0.0], [1.0, 0.9995, 0.0, 0.0]])  # unanimous, margin < min_gap
    later = torch.tensor([[0.0, 0.1, 0.3, 0.2], [0.0, 0.1, 0.25, 0.2]])      # unanimous on action 2
    best, labelled = replicated_best_action(torch.stack([clear, split, tiny, later]), min_gap=1e-3)
    assert best.tolist() == [0, 0, 0, 2]
    assert labelled.tolist() == [True, False, False, True]
    # One draw: the margin test alone decides.
    best1, labelled1 = replicated_best_action(split[:1][None], min_gap=1e-3)
    assert best1.tolist() == [0] and labelled1.tolist() == [True]
    with pytest.raises(ValueError, match="A >= 2"):
        replicated_best_action(torch.zeros(3, 2, 1), 1e-3)
    with pytest.raises(ValueError, match="N, D, A"):
        replicated_best_action(torch.zeros(3, 4), 1e-3)


def test_disagreeing_draws_label_nothing_but_their_mean_still_feeds_trust():
    layer = PriorLayer(prior_cfg(trust=True), A, num_envs=1)
    advice = one_hot_advice(torch.zeros(8, dtype=torch.long))
    draws = torch.zeros(8, 2, A, dtype=torch.float64)
    draws[:, 0, 0], draws[:, 1, 1] = 1.0, 1.0      # each draw prefers a different action
    draws[:, :, 0] += 0.5                           # but on average the advised action 0 is best
    out = layer.observe_advice_values(draws, advice, torch.full((8,), LLM))
    assert out["advice_labelled_frac"] == 0.0
    assert out["advice_value_z"] > 0 and layer.trust.value("llm") > 0.5


# --------------------------------------------------------------------------- control episodes


@pytest.mark.parametrize("drawn_before_act", [False, True])
def test_control_episodes_are_drawn_at_episode_starts_and_silence_the_prior_throughout(drawn_before_act):
    """Drawn inside the act, or before it (``llm.ask_before_act``: the controller must know first), a control
    episode's act gets no advice."""
    gen = torch.Generator().manual_seed(0)
    layer = PriorLayer(prior_cfg(gate="fixed", beta_max=1.0, control_episodes=0.3), A, num_envs=1)
    prior = one_hot_advice(torch.tensor([0]))
    episodes, controlled = 0, 0
    for step in range(4000):
        first = torch.tensor([step % 20 == 0])
        if drawn_before_act:
            layer.draw_control_episodes(first, gen)
        _, beta = layer.act(torch.zeros(1, A), prior, torch.ones(1), None, step, generator=gen, is_first=first,
                            control_drawn=drawn_before_act)
        if bool(first):
            episodes += 1
            episode_control = bool(layer.control[0])
            controlled += episode_control
        # the draw holds for the whole episode: beta is 0 on every step of a control episode only
        assert (float(beta[0]) == 0.0) == episode_control
    assert controlled / episodes == pytest.approx(0.3, abs=0.07)
    resumed = PriorLayer(prior_cfg(gate="fixed", control_episodes=0.3), A, num_envs=1)
    resumed.load_state_dict(layer.state_dict())
    assert bool(resumed.control[0]) == bool(layer.control[0])


def test_no_control_episodes_when_switched_off_or_for_a_separate_eval_batch():
    layer = PriorLayer(prior_cfg(gate="fixed", control_episodes=0.0), A, num_envs=2)
    _, beta = layer.act(torch.zeros(2, A), one_hot_advice(torch.tensor([0, 1])), torch.ones(2), None, 0,
                        is_first=torch.tensor([True, True]))
    assert beta.tolist() == [1.0, 1.0] and not layer.control.any()


# --------------------------------------------------------------------------- trust-weighted dual


def absorption_case(**cfg: object) -> tuple[PriorLayer, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A lagrangian layer with trust at lambda 1 and four advised states of a uniform policy, each advised a
    different action: ``(layer, logits_wm [4, A] (with grad), prior, mask, beta)``."""
    layer = PriorLayer(prior_cfg(gate="fixed", kl_mode="lagrangian", trust=True, kl_delta=0.1, trust_decay=0.9,
                                 **cfg), A)
    layer.lambda_kl = 1.0
    logits = torch.zeros(4, A, requires_grad=True)
    return layer, logits, one_hot_advice(torch.tensor([0, 1, 2, 3])), torch.ones(4), torch.ones(4)


def earn_plan_trust(layer: PriorLayer) -> float:
    """The plans earn trust, the LLM's answers lose it; returns the plans' absorption weight 2 trust - 1."""
    gen = torch.Generator().manual_seed(5)
    feed_advice(layer, gen, LLM, "worst", updates=40)
    feed_advice(layer, gen, PLAN, "best", updates=40)
    return 2 * layer.trust.value("plan") - 1


def test_dual_sees_the_trust_weighted_kl_and_untrusted_advice_is_not_absorbed():
    layer, logits, prior, mask, beta = absorption_case()
    kl = categorical_kl(logits.detach() + prior, logits.detach())  # pi_mix vs pi_wm per row
    # uninformed trust (0.5): weight 0, nothing is absorbed and the dual sees no constraint (NaN)
    loss, m = layer.actor_loss(logits, prior, mask, beta, torch.full((4,), LLM))
    assert math.isnan(m["kl_mix_wm"]) and loss.item() == 0.0
    w = earn_plan_trust(layer)  # weight clip(2 trust - 1, 0, 1) per row
    assert 0.2 < w < 1.0
    source = torch.tensor([LLM, LLM, PLAN, PLAN]).float()
    loss, m = layer.actor_loss(logits, prior, mask, beta, source)
    weights = torch.tensor([0.0, 0.0, w, w])
    assert m["kl_mix_wm"] == pytest.approx(0.1 + float((weights * (kl - 0.1)).mean()), rel=1e-5)
    loss.backward()
    # distrusted rows get no gradient; trusted ones in proportion to their weight
    grad_norm = logits.grad.norm(dim=-1)
    assert float(grad_norm[0]) == 0.0 and float(grad_norm[1]) == 0.0 and float(grad_norm[2]) > 0
    # the target is a stop-gradient: d/dlogits of lambda * w * KL(sg(pi_mix) || pi) / 4 rows = w (pi - pi_mix) / 4
    pi_mix = torch.softmax(logits.detach() + prior, -1)
    expected = weights[:, None] * (torch.softmax(logits.detach(), -1) - pi_mix) / 4 * (kl > 0.1).float()[:, None]
    assert torch.allclose(logits.grad, expected, atol=1e-6)
    logits.grad = None
    layer.actor_loss(logits, prior, mask, beta, torch.zeros(4))[0].backward()  # no source: w = 1
    assert float(grad_norm[2] / logits.grad.norm(dim=-1)[2]) == pytest.approx(w, rel=1e-4)


def test_dual_grows_while_barely_trusted_advice_is_not_absorbed(monkeypatch):
    # Barely trusted advice (w = 0.05) on a policy that ignores it: the constraint E[w (KL - delta)] <= 0 stays
    # violated until the actor has absorbed the advice in full, so lambda climbs.
    cfg = prior_cfg(gate="fixed", kl_mode="lagrangian", trust=True, kl_delta=0.1, kl_eta=0.5)
    layer = PriorLayer(cfg, A)
    monkeypatch.setattr(layer, "absorb_weight", lambda source, rows, device: torch.full((rows,), 0.05))
    layer.lambda_kl = 0.5
    logits, prior = torch.zeros(8, A), one_hot_advice(torch.arange(8) % A)
    assert float(categorical_kl(logits + prior, logits).min()) > 1.0  # the full tilt is far from pi_wm
    for _ in range(50):
        _, m = layer.actor_loss(logits, prior, torch.ones(8), torch.ones(8), torch.full((8,), LLM))
        layer.update_lambda(m["kl_mix_wm"])
    assert layer.lambda_kl > 0.5


def test_episode_comparison_moves_the_trust_of_what_the_llm_wrote():
    from lore.prior.trust import EpisodeComparison

    cmp = EpisodeComparison(decay=1.0 - 1e-12, min_episodes=3)
    for r in (1.0, 0.0):
        cmp.observe(r, control=False)
    cmp.observe(0.0, control=True)
    assert cmp.t_statistic() == 0.0  # too few episodes on either side: no evidence
    for r in (1.0, 0.8, 0.9, 0.0):
        cmp.observe(r, control=False)
    for r in (0.0, 0.5):
        cmp.observe(r, control=True)
    # hand-computed Student t with the pooled within-group variance: advised mean 0.616.., control 0.1667
    adv, ctl = torch.tensor([1.0, 0.0, 1.0, 0.8, 0.9, 0.0]), torch.tensor([0.0, 0.0, 0.5])
    pooled = (((adv - adv.mean()) ** 2).sum() + ((ctl - ctl.mean()) ** 2).sum()) / 9
    se = math.sqrt(pooled * (1 / 6 + 1 / 3) + 1e-6)
    assert cmp.t_statistic() == pytest.approx(float((adv.mean() - ctl.mean()) / se), rel=1e-6)

    layer = PriorLayer(prior_cfg(trust=True, control_episodes=0.5), A, num_envs=1)
    for _ in range(5):  # advised episodes fail, control episodes succeed: adversarial advice
        layer.control[0] = False
        layer.observe_episode(0, 0.0)
        layer.control[0] = True
        layer.observe_episode(0, 0.9 + 0.05 * torch.rand(1).item())
    # every source that answered in advised episodes shares the episode evidence (PriorNet included)
    assert max(layer.trust.value(name) for name in ADVICE_SOURCES) < 0.05
    assert layer.metrics()["trust_episode_t"] < -3
    resumed = PriorLayer(prior_cfg(trust=True, control_episodes=0.5), A, num_envs=1)
    resumed.load_state_dict(layer.state_dict())
    assert resumed.trust.value("llm") == layer.trust.value("llm")


def test_one_lucky_advised_success_against_identical_control_failures_is_no_evidence():
    """The measured false positive: 1 success in 14 advised episodes, 0 in 3 control episodes.

    Welch's t gave 1.05 (the control group's variance is 0) and trust 0.96, and the agent distilled an
    adversarial advisor. With the pooled variance the t is ~0.5, inside the dead zone: trust stays 0.5
    and the absorption weight 0.
    """
    from lore.prior.trust import EpisodeComparison, dead_zone

    cmp = EpisodeComparison(decay=1.0 - 1e-12, min_episodes=3)
    advised = [0.0] * 13 + [0.9]
    for i, r in enumerate(advised):
        cmp.observe(r, control=False)
        if i in (3, 7, 11):
            cmp.observe(0.0, control=True)
    t = cmp.t_statistic()
    assert 0.2 < t < 1.0
    layer = PriorLayer(prior_cfg(trust=True, control_episodes=0.25), A, num_envs=1)
    layer.trust.episodes.load_state_dict(cmp.state_dict())
    assert layer.trust.value("llm") == pytest.approx(0.5)
    weight = layer.absorb_weight(torch.tensor([1]), 1, torch.device("cpu"))
    assert float(weight[0]) == 0.0
    assert dead_zone(2.5, 1.0) == 1.5 and dead_zone(-2.5, 1.0) == -1.5 and dead_zone(0.7, 1.0) == 0.0


def test_trust_rarely_absorbs_advice_that_changes_nothing_but_soon_absorbs_advice_that_helps():
    """Sequential checks under the null: the statistic is read after every episode, so a fixed level is
    crossed by chance in some window. Over 200 simulated runs of 40 episodes (25% control) the
    absorption weight must stay <= 0.5 throughout in >= 90% of null runs, and reach 0.8 within 40
    episodes in >= 90% of runs where advice lifts the success rate from 5% to 60%."""
    import random

    from lore.prior.trust import AdviceTrust

    def max_weight(p_advised: float, p_control: float, seed: int, until: float | None = None) -> float:
        rng, trust, best = random.Random(seed), AdviceTrust(0.99, 3.0, 1.0), 0.0
        for _ in range(40):
            control = rng.random() < 0.25
            p = p_control if control else p_advised
            trust.episodes.observe(0.9 if rng.random() < p else 0.0, control)
            best = max(best, 2 * trust.value("llm") - 1)
        return best

    null = [max_weight(0.2, 0.2, s) for s in range(200)] + [max_weight(0.05, 0.05, s) for s in range(200)]
    assert sum(w > 0.5 for w in null) / len(null) <= 0.10
    helpful = [max_weight(0.6, 0.05, s) for s in range(200)]
    assert sum(w > 0.8 for w in helpful) / len(helpful) >= 0.90


# --------------------------------------------------------------------------- act-time scale, failure evidence


def test_act_scale_is_two_trust_capped_at_one():
    from lore.prior.trust import act_scale

    trust = torch.tensor([0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.9])
    assert act_scale(trust).tolist() == pytest.approx([0.0, 0.2, 0.4, 0.5, 0.6, 1.0, 1.0])


def test_the_llm_is_asked_in_proportion_to_the_trust_in_its_answers():
    from types import SimpleNamespace

    from lore.method.advisor import LLMBridge

    gen = torch.Generator().manual_seed(6)
    for trusted in (False, True):
        layer = PriorLayer(prior_cfg(gate="fixed", trust=trusted, trust_decay=0.9), A)
        feed_advice(layer, gen, LLM, "worst")
        layer.last_u = torch.tensor([0.8])
        bridge = SimpleNamespace(agent=SimpleNamespace(prior=layer), cfg=SimpleNamespace(prior=layer.cfg))
        trigger = LLMBridge.gate_values(bridge)
        trust = layer.trust.value("llm")
        assert trust < 0.2
        assert trigger.tolist() == pytest.approx([0.8 * trust if trusted else 0.8])


def test_failure_z_hand_computed_and_zero_without_failures():
    from lore.prior.trust import failure_z, harm_only

    # 8 of 10 advised episodes fail, 2 of 5 control ones: pooled (10 + 1) / (15 + 2)
    p = 11 / 17
    expected = (2 / 5 - 8 / 10) / math.sqrt(p * (1 - p) * (1 / 10 + 1 / 5))
    assert failure_z(8, 10, 2, 5) == pytest.approx(expected)
    assert failure_z(8, 10, 2, 5) < -1.5
    assert failure_z(0, 10, 0, 5) == 0.0 and failure_z(3, 0, 1, 5) == 0.0
    assert failure_z(1, 10, 4, 5) > 0  # advice that fails less
    assert harm_only(-2.5, 1.0) == -1.5 and harm_only(-0.8, 1.0) == 0.0 and harm_only(3.0, 1.0) == 0.0


def test_only_an_env_ended_step_without_reward_is_a_failure():
    from lore.prior.trust import is_failure

    assert is_failure(True, 0.0) and is_failure(True, -1.0)  # the lava; a collision with reward -1
    assert not is_failure(True, 0.87)  # the goal
    assert not is_failure(False, 0.0)  # a time limit (truncation) is not a failure


# --------------------------------------------------------------------------- failure evidence from the env


def test_step_failures_catch_advice_whose_own_steps_end_the_episode():
    from lore.prior.trust import StepFailures, failure_z

    gen = torch.Generator().manual_seed(9)

    def run(advice_fail_rate: float, steps: int = 400, trust: bool = True) -> PriorLayer:
        layer = PriorLayer(prior_cfg(gate="fixed", trust=trust), A)
        for _ in range(steps):
            changed = torch.rand(2, generator=gen) < 0.05  # advice changes 5% of the actions
            codes = torch.full((2,), LLM)
            rate = torch.where(changed, torch.tensor(advice_fail_rate), torch.tensor(0.03))
            failed = torch.rand(2, generator=gen) < rate
            layer.observe_steps(changed, codes, failed)
        return layer

    adversary, good, off = run(0.5), run(0.0), run(0.5, trust=False)
    assert adversary.trust.steps.z("llm") < -3 and adversary.trust.value("llm") < 0.01
    assert good.trust.steps.z("llm") > 0 and good.trust.value("llm") == 0.5  # never failing is no credit
    assert off.trust.value("llm") == 0.5 and off.trust.steps.advised["llm"][0] == 0.0
    # steps of other sources and unadvised steps are the agent's own; counts hand-checked without decay
    steps = StepFailures(decay=0.5, min_steps=1)
    steps.observe(torch.tensor([True, True, False, True]), torch.tensor([1, 2, 1, 0]),
                  torch.tensor([True, False, True, True]))
    assert steps.advised["llm"] == [1.0, 1.0] and steps.advised["plan"] == [1.0, 0.0]
    assert steps.own == [2.0, 2.0]  # the unchanged step and the changed step without a source
    assert steps.z("llm") == pytest.approx(failure_z(1.0, 1.0, 2.0, 2.0))
    steps.observe(torch.zeros(4, dtype=torch.bool), torch.ones(4), torch.zeros(4, dtype=torch.bool))
    assert steps.own == [2.0 * 0.5 ** 4 + 4.0, 2.0 * 0.5 ** 4]  # decayed once per own step
    assert steps.advised["llm"] == [1.0, 1.0]  # advice that sat out keeps its evidence
    with pytest.raises(ValueError, match="must match"):
        steps.observe(torch.ones(2, dtype=torch.bool), torch.ones(3), torch.ones(2, dtype=torch.bool))
    # the counts survive a checkpoint; one written before they were kept loads as no evidence
    trust = AdviceTrust(0.99, 3.0)
    trust.load_state_dict(adversary.trust.state_dict())
    assert trust.value("llm") == pytest.approx(adversary.trust.value("llm"))
    trust.load_state_dict({k: v for k, v in adversary.trust.state_dict().items() if k != "steps"})
    assert trust.step_failure_harm("llm") == 0.0

