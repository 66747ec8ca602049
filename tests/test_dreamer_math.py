"""DreamerV3 maths: symlog, two-hot, λ-returns, free bits, unimix, return normaliser, KL balance, loss scales."""

import math

import pytest
import torch

from lore.config import build_config
from lore.dreamer.math import (
    ReturnNormalizer,
    build_loss_scales,
    categorical_entropy,
    check_scales_used,
    combine_losses,
    free_bits_kl,
    gumbel_noise,
    kl_balance,
    kl_categorical,
    lambda_returns,
    make_bins,
    percentile_range,
    percentile_return_scale,
    sample_one_hot,
    straight_through,
    symexp,
    symlog,
    twohot_decode,
    twohot_encode,
    twohot_log_prob,
    twohot_loss,
    twohot_mean_symlog,
    unimix_logits,
    unimix_probs,
)
from lore.dreamer.networks import MLP


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny tensors: a second intra-op thread only adds synchronisation (badly so on a loaded machine)
    torch.set_num_threads(1)
    yield


def test_symlog_symexp_are_inverse():
    x = torch.tensor([-1e6, -1234.5, -3.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 7.0, 1e5], dtype=torch.float64)
    torch.testing.assert_close(symexp(symlog(x)), x, rtol=1e-10, atol=1e-12)
    y = torch.linspace(-15, 15, 31, dtype=torch.float64)
    torch.testing.assert_close(symlog(symexp(y)), y, rtol=1e-10, atol=1e-12)
    assert symlog(torch.tensor(0.0)).item() == 0.0
    assert symlog(torch.tensor(-2.0)).item() == pytest.approx(-math.log(3.0))


def test_bins_symmetric_with_exact_zero():
    bins = make_bins(255)
    assert bins.shape == (255,)
    assert bins[0].item() == -20.0 and bins[-1].item() == 20.0 and bins[127].item() == 0.0
    assert torch.equal(bins, -bins.flip(0))
    with pytest.raises(ValueError, match="odd"):
        make_bins(256)


@pytest.mark.parametrize("value", [0.0, 0.123, -0.5, 1.0, 2.5, -3.7, 1e3, -1e4, 1e6, 3.3e7])
def test_twohot_round_trip(value):
    bins = make_bins(255)
    x = torch.tensor([value])
    target = twohot_encode(x, bins)
    assert target.shape == (1, 255)
    assert target.sum().item() == pytest.approx(1.0, abs=1e-6)
    nonzero = target[0].nonzero().flatten()
    assert 1 <= len(nonzero) <= 2
    if len(nonzero) == 2:
        assert nonzero[1] - nonzero[0] == 1  # the two neighbouring bins
    # expectation in symlog space is exact; decoding returns the raw value
    assert twohot_mean_symlog(target, bins).item() == pytest.approx(symlog(x).item(), abs=1e-5)
    decoded = twohot_decode(torch.log(target.clamp(min=1e-30)), bins)
    assert decoded.item() == pytest.approx(value, rel=1e-4, abs=1e-5)


def test_twohot_value_between_bins_splits_weight():
    bins = make_bins(255)
    step = (bins[1] - bins[0]).item()
    y = bins[130].item() + 0.25 * step  # a quarter of the way from bin 130 to bin 131 (symlog space)
    target = twohot_encode(symexp(torch.tensor([y])), bins)[0]
    assert target[130].item() == pytest.approx(0.75, abs=1e-4)
    assert target[131].item() == pytest.approx(0.25, abs=1e-4)


def test_twohot_loss_matches_dense_cross_entropy():
    bins = make_bins(255)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 255, generator=gen)
    target = torch.randn(3, 4, generator=gen) * 50
    dense = -(twohot_encode(target, bins) * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(twohot_loss(logits, target, bins), dense)
    # broadcasting one target over an ensemble dimension
    torch.testing.assert_close(twohot_loss(logits[None].expand(2, 3, 4, 255), target, bins)[1], dense)
    # expectation over probs equals the plain weighted sum
    probs = torch.softmax(logits, -1)
    torch.testing.assert_close(twohot_mean_symlog(probs, bins), (probs * bins).sum(-1))


def test_twohot_clips_beyond_support():
    bins = make_bins(255)
    target = twohot_encode(torch.tensor([1e12, -1e12]), bins)
    assert target[0, -1].item() == pytest.approx(1.0) and target[1, 0].item() == pytest.approx(1.0)


def test_zero_initialised_head_predicts_exactly_zero():
    bins = make_bins(255)
    head = MLP(12, 16, 1, out_dim=255, out_scale=0.0)
    logits = head(torch.randn(5, 12) * 10)
    assert torch.all(logits == 0)
    assert torch.all(twohot_decode(logits, bins) == 0.0)  # exact, not approximately


def test_lambda_returns_hand_computed_with_termination():
    # trajectory s_0..s_3; rewards/continues belong to the state reached (s_1..s_3)
    gamma, lam = 0.9, 0.5
    rewards = torch.tensor([[1.0], [0.0], [2.0]])      # r_1, r_2, r_3
    continues = torch.tensor([[1.0], [0.0], [1.0]])    # c_1, c_2 (= terminal at s_2), c_3
    values = torch.tensor([[0.5], [1.0], [2.0], [3.0]])  # v_0 .. v_3
    # R_2 = r_3 + γ c_3 ((1-λ) v_3 + λ R_3), R_3 = v_3 = 3   -> 2 + 0.9 * 3        = 4.7
    # R_1 = r_2 + γ c_2 (...) with c_2 = 0                    -> 0
    # R_0 = r_1 + γ c_1 ((1-λ) v_1 + λ R_1) = 1 + 0.9 (0.5 + 0) = 1.45
    ret = lambda_returns(rewards, values, continues, gamma, lam)
    torch.testing.assert_close(ret, torch.tensor([[1.45], [0.0], [4.7]]))


def test_lambda_returns_limits():
    rewards = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    conts = torch.ones_like(rewards)
    values = torch.tensor([[10.0], [20.0], [30.0], [40.0], [50.0]])
    # λ = 1, γ = 1: Monte-Carlo sum of the rest plus the bootstrap value at the end
    mc = lambda_returns(rewards, values, conts, 1.0, 1.0)
    torch.testing.assert_close(mc[:, 0], torch.tensor([60.0, 59.0, 57.0, 54.0]))
    # λ = 0: one-step TD targets r_{t+1} + γ v_{t+1}
    td = lambda_returns(rewards, values, conts, 0.5, 0.0)
    torch.testing.assert_close(td[:, 0], torch.tensor([1 + 10.0, 2 + 15.0, 3 + 20.0, 4 + 25.0]))
    with pytest.raises(ValueError, match="values must be"):
        lambda_returns(rewards, values[:-1], conts, 0.9, 0.95)


def test_free_bits_clamp_value_and_gradient():
    dyn = torch.tensor([0.3, 2.0], requires_grad=True)
    rep = torch.tensor([0.99, 1.5], requires_grad=True)
    dyn_loss, rep_loss = free_bits_kl(dyn, rep, free=1.0)
    assert dyn_loss.tolist() == [1.0, 2.0]
    assert rep_loss.tolist() == [1.0, 1.5]
    (dyn_loss.sum() + rep_loss.sum()).backward()
    assert dyn.grad.tolist() == [0.0, 1.0]
    assert rep.grad.tolist() == [0.0, 1.0]
    # DreamerV3's default: 1 nat
    assert free_bits_kl(torch.tensor([0.5, 1.5]), torch.tensor([0.5, 1.5]))[0].tolist() == [1.0, 1.5]


def test_unimix_floor_on_every_class():
    logits = torch.tensor([[100.0, -100.0, -100.0, -100.0], [0.0, 0.0, 0.0, -1e9]])
    probs = unimix_probs(logits, 0.01)
    assert torch.all(probs >= 0.01 / 4 - 1e-9)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))
    assert probs[0, 0].item() == pytest.approx(0.99 + 0.0025)


def test_percentile_scale_small_and_large_spread():
    small = torch.linspace(0.0, 0.5, 1001)
    assert percentile_return_scale(small).item() == 1.0
    large = torch.linspace(0.0, 1000.0, 1001)
    assert percentile_return_scale(large).item() == pytest.approx(900.0, rel=1e-4)


def test_return_normalizer_ema():
    norm = ReturnNormalizer(decay=0.99)
    assert norm.scale().item() == 1.0
    returns = torch.linspace(0.0, 1000.0, 1001)  # P5 = 50, P95 = 950
    norm.update(returns)
    # zero-initialised EMA without bias correction (official Moments): 1% of the way after one update
    assert norm.low.item() == pytest.approx(0.5, rel=1e-4)
    assert norm.high.item() == pytest.approx(9.5, rel=1e-4)
    assert norm.scale().item() == pytest.approx(9.0, rel=1e-4)
    for _ in range(2000):
        norm.update(returns)
    assert norm.scale().item() == pytest.approx(900.0, rel=1e-3)
    # small spread: the scale decays back toward 1 and never goes below it
    for _ in range(3000):
        norm.update(torch.linspace(0.0, 0.2, 101))
    assert norm.scale().item() == 1.0
    restored = ReturnNormalizer()
    restored.load_state_dict(norm.state_dict())
    assert restored.low.item() == norm.low.item() and restored.high.item() == norm.high.item()


def test_kl_balance_gradients_reach_only_their_side_with_configured_scales():
    cfg = build_config()
    scales = build_loss_scales(cfg)
    assert scales["dyn"] == 0.5 and scales["rep"] == 0.1
    gen = torch.Generator().manual_seed(0)
    post = torch.randn(2, 3, 4, 5, generator=gen).requires_grad_()
    prior = torch.randn(2, 3, 4, 5, generator=gen).requires_grad_()

    dyn, rep = kl_balance(post, prior)
    torch.testing.assert_close(dyn, kl_categorical(post, prior))  # same value, different gradient path
    dyn.mean().backward()
    assert post.grad is None and prior.grad.abs().sum() > 0
    prior.grad = None
    _, rep = kl_balance(post, prior)
    rep.mean().backward()
    assert prior.grad is None and post.grad.abs().sum() > 0

    # scaled together (free bits 0 so nothing is clamped): each side gets exactly its scale
    post.grad = prior.grad = None
    dyn, rep = kl_balance(post, prior)
    dyn_l, rep_l = free_bits_kl(dyn, rep, free=0.0)
    combine_losses({"dyn": dyn_l.mean(), "rep": rep_l.mean()}, scales).backward()
    g_post, g_prior = torch.autograd.grad(kl_categorical(post, prior).mean(), [post, prior])
    torch.testing.assert_close(prior.grad, 0.5 * g_prior)
    torch.testing.assert_close(post.grad, 0.1 * g_post)


def test_loss_scales_table_checks():
    cfg = build_config()
    scales = build_loss_scales(cfg)
    for key in ("decoder", "reward", "continue", "dyn", "rep", "actor", "critic", "slow_reg"):
        assert key in scales
    assert not {"prior", "prior_net", "ensemble"} & set(scales)  # the method's losses bring their own scales
    one = torch.tensor(1.0)
    with pytest.raises(KeyError, match="no entry in LOSS_SCALES"):
        combine_losses({"decoder": one, "mystery": one}, scales)
    with pytest.raises(KeyError, match="match no computed loss"):
        check_scales_used(scales, ["decoder"])
    check_scales_used(scales, list(scales))
    assert combine_losses({"dyn": one, "rep": one}, scales).item() == pytest.approx(0.6)


# --------------------------------------------------------------------------- ingredient checks (issue 13)
# Hand-computed values and invariants that fail when one DreamerV3 ingredient is broken; the mutation
# check (benchmarks/mutation_check.py, docs/testing.md) runs these tests against single mutations.


def test_bins_are_uniform_in_symlog_space():
    # DreamerV3: 255 bins spaced uniformly over symlog [-20, 20] (official ``symlog_disc`` head)
    bins = make_bins()
    assert bins.shape == (255,) and bins[0].item() == -20.0 and bins[-1].item() == 20.0
    torch.testing.assert_close(torch.diff(bins), torch.full((254,), 40.0 / 254.0), rtol=0, atol=1e-5)


def test_twohot_log_prob_hand_computed():
    bins = make_bins(5, limit=2.0)  # [-2, -1, 0, 1, 2] in symlog space
    log_probs = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.25, 0.15]))
    # raw 2.0 -> symlog ln 3 = 1.0986: 90.14% on bin 1 (index 3), 9.86% on bin 2 (index 4)
    w = math.log(3.0) - 1.0
    expected = (1 - w) * math.log(0.25) + w * math.log(0.15)
    assert twohot_log_prob(log_probs, torch.tensor(2.0), bins).item() == pytest.approx(expected, rel=1e-5)
    # raw -0.5 -> symlog -ln 1.5 = -0.405: between bins -1 (index 1) and 0 (index 2)
    y = -math.log(1.5)
    expected = -y * math.log(0.2) + (1 + y) * math.log(0.3)
    assert twohot_log_prob(log_probs, torch.tensor(-0.5), bins).item() == pytest.approx(expected, rel=1e-5)
    # beyond the support: all weight on the last bin
    assert twohot_log_prob(log_probs, torch.tensor(1e9), bins).item() == pytest.approx(math.log(0.15), rel=1e-6)
    # symlog -1.5, between the two lowest bins; and below the support: all weight on the first bin
    expected = 0.5 * math.log(0.1) + 0.5 * math.log(0.2)
    assert twohot_log_prob(log_probs, symexp(torch.tensor(-1.5)), bins).item() == pytest.approx(expected, rel=1e-5)
    assert twohot_log_prob(log_probs, torch.tensor(-1e9), bins).item() == pytest.approx(math.log(0.1), rel=1e-6)
    # one distribution scored against several targets (broadcasting)
    targets = torch.tensor([[2.0, 1e9], [-1e9, 0.0]])
    manual = torch.stack([twohot_log_prob(log_probs, t, bins) for t in targets.flatten()]).reshape(2, 2)
    torch.testing.assert_close(twohot_log_prob(log_probs, targets, bins), manual)
    # the loss normalises raw logits itself
    logits = torch.tensor([3.0, 1.0, 0.0, -1.0, 2.0])
    torch.testing.assert_close(twohot_loss(logits, torch.tensor(2.0), bins),
                               -twohot_log_prob(torch.log_softmax(logits, -1), torch.tensor(2.0), bins))


def test_twohot_decode_hand_computed():
    bins = make_bins(5, limit=2.0)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.25, 0.15])
    mean = -2 * 0.1 - 0.2 + 0.25 + 2 * 0.15  # expectation in symlog space = 0.15
    assert twohot_mean_symlog(probs, bins).item() == pytest.approx(mean, abs=1e-7)
    # decoding maps the symlog-space mean back with symexp: e^0.15 - 1
    assert twohot_decode(torch.log(probs), bins).item() == pytest.approx(math.expm1(mean), rel=1e-6)


def test_kl_is_summed_over_latents_hand_computed():
    # two latents of two classes: p = [(.5, .5), (.9, .1)], q uniform
    p = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1]]))
    q = torch.log(torch.full((2, 2), 0.5))
    kl_second = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    assert kl_categorical(p, q).item() == pytest.approx(0.0 + kl_second, rel=1e-6)  # summed, not averaged
    reverse = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert kl_categorical(q, p).item() == pytest.approx(reverse, rel=1e-6)  # KL(p || q), not KL(q || p)
    # leading batch dims are kept: the softmax runs over the classes (last dim) only
    batched = kl_categorical(torch.stack([p, q, p]), torch.stack([q, q, p]))
    torch.testing.assert_close(batched, torch.tensor([kl_second, 0.0, 0.0]), rtol=1e-5, atol=1e-7)
    # 32 identical latents carry 32 times the KL of one
    p32, q32 = p[1:].expand(32, 2), q[1:].expand(32, 2)
    assert kl_categorical(p32, q32).item() == pytest.approx(32 * kl_second, rel=1e-5)


def test_categorical_entropy_hand_computed():
    logits = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    assert categorical_entropy(logits).item() == pytest.approx(1.5 * math.log(2.0), rel=1e-6)
    assert categorical_entropy(torch.zeros(7)).item() == pytest.approx(math.log(7.0), rel=1e-6)


def test_unimix_logits_are_normalised_with_a_floor():
    logits = torch.tensor([[50.0, -50.0, -50.0, -50.0]])
    mixed = unimix_logits(logits, 0.01)
    torch.testing.assert_close(mixed.exp().sum(-1), torch.ones(1))
    assert mixed.exp().min().item() == pytest.approx(0.01 / 4, rel=1e-5)
    torch.testing.assert_close(unimix_logits(logits, 0.0), torch.log_softmax(logits, -1))
    # the default is DreamerV3's 1%; mixing 0 leaves the softmax over the last dim of any shape
    batch = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(unimix_logits(batch), unimix_logits(batch, 0.01))
    torch.testing.assert_close(unimix_probs(batch), unimix_probs(batch, 0.01))
    torch.testing.assert_close(unimix_logits(batch, 0.0), torch.log_softmax(batch, -1))
    torch.testing.assert_close(unimix_probs(batch, 0.0), torch.softmax(batch, -1))


def test_gumbel_max_samples_follow_the_softmax():
    # sample_one_hot with gumbel_noise draws from softmax(logits) (categorical latents and actions)
    probs = torch.tensor([0.6, 0.3, 0.1])
    n = 40_000
    gen = torch.Generator().manual_seed(0)
    noise = gumbel_noise((n, 3), gen, "cpu")
    assert noise.dtype == torch.float32 and gumbel_noise((2, 3), gen, "cpu", torch.float64).dtype == torch.float64
    samples = sample_one_hot(torch.log(probs).expand(n, 3), noise)
    assert torch.all(samples.sum(-1) == 1.0)
    torch.testing.assert_close(samples.mean(0), probs, rtol=0, atol=0.012)  # ~5 standard errors


def test_straight_through_forward_is_the_sample_backward_is_the_probabilities():
    probs = torch.tensor([0.2, 0.5, 0.3], requires_grad=True)
    one_hot = torch.tensor([1.0, 0.0, 0.0])
    out = straight_through(one_hot, probs)
    assert torch.equal(out.detach(), one_hot)
    (out * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert probs.grad.tolist() == [1.0, 2.0, 3.0]


def test_a_termination_cuts_everything_after_it():
    gen = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(6, 2, generator=gen), torch.randn(7, 2, generator=gen)
    conts = torch.ones(6, 2)
    conts[2] = 0.0  # s_3 is terminal
    ret = lambda_returns(rewards, values, conts, 0.9, 0.95)
    later_r, later_v = rewards.clone(), values.clone()
    later_r[3:] += 100.0
    later_v[3:] -= 100.0
    torch.testing.assert_close(lambda_returns(later_r, later_v, conts, 0.9, 0.95)[:3], ret[:3])
    torch.testing.assert_close(ret[2], rewards[2])  # the terminal transition earns its reward only
    # without the termination the same change does reach the earlier returns
    assert not torch.allclose(lambda_returns(later_r, later_v, torch.ones(6, 2), 0.9, 0.95)[:3],
                              lambda_returns(rewards, values, torch.ones(6, 2), 0.9, 0.95)[:3])


def test_gradchecks_of_the_differentiable_maths():
    gen = torch.Generator().manual_seed(0)
    bins = make_bins(7, limit=3.0).double()
    logits = torch.randn(2, 3, 7, dtype=torch.float64, generator=gen, requires_grad=True)
    target = torch.tensor([[0.3, -2.0, 5.0], [0.0, 1.0, -0.7]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda lg: twohot_loss(lg, target, bins), (logits,))
    p = torch.randn(2, 3, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    q = torch.randn(2, 3, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(kl_categorical, (p, q))
    assert torch.autograd.gradcheck(lambda lg: categorical_entropy(lg), (p,))
    rewards = torch.randn(4, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    values = torch.randn(5, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    conts = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda r, v: lambda_returns(r, v, conts, 0.9, 0.95), (rewards, values))
    x = torch.tensor([-3.0, -0.2, 0.4, 2.5], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(symlog, (x,))
    # d symlog / dx = 1 / (1 + |x|)
    (grad,) = torch.autograd.grad(symlog(x).sum(), x)
    torch.testing.assert_close(grad, 1.0 / (1.0 + x.detach().abs()))


def test_every_loss_scale_reads_its_own_config_field():
    cfg = build_config(overrides=[
        "dreamer.decoder_scale=2.0", "dreamer.reward_scale=3.0", "dreamer.continue_scale=4.0",
        "dreamer.kl_dyn=0.6", "dreamer.kl_rep=0.2", "dreamer.slow_critic_reg=0.7"])
    assert build_loss_scales(cfg) == {"decoder": 2.0, "reward": 3.0, "continue": 4.0, "dyn": 0.6, "rep": 0.2,
                                      "actor": 1.0, "critic": 1.0, "slow_reg": 0.7}
    one = torch.tensor(1.0)
    total = combine_losses({"decoder": one, "continue": 2 * one, "slow_reg": one}, build_loss_scales(cfg))
    assert total.item() == pytest.approx(2.0 + 8.0 + 0.7)


def test_smallest_support_and_dtype_preserved():
    torch.testing.assert_close(make_bins(3, limit=5.0), torch.tensor([-5.0, 0.0, 5.0]))
    for bad in (1, 2, 4):
        with pytest.raises(ValueError, match="odd number >= 3"):
            make_bins(bad)
    bins = make_bins(255).double()
    target = twohot_encode(torch.tensor([0.7, -3.0], dtype=torch.float64), bins)
    assert target.dtype == torch.float64
    torch.testing.assert_close(twohot_mean_symlog(target, bins), symlog(torch.tensor([0.7, -3.0], dtype=torch.float64)))


def test_lambda_returns_shape_errors_name_the_shapes():
    rewards, conts = torch.zeros(4, 2), torch.ones(4, 2)
    with pytest.raises(ValueError, match=r"rewards \(4, 2\) and continues \(3, 2\) must have the same shape"):
        lambda_returns(rewards, torch.zeros(5, 2), conts[:3], 0.9, 0.95)
    with pytest.raises(ValueError, match=r"values must be \[T\+1, B\] = \(5, 2\), got \(4, 2\)"):
        lambda_returns(rewards, torch.zeros(4, 2), conts, 0.9, 0.95)


def test_percentiles_default_to_5_and_95_and_honour_other_choices():
    returns = torch.linspace(0.0, 1000.0, 1001)
    lo, hi = percentile_range(returns)
    assert (lo.item(), hi.item()) == (pytest.approx(50.0), pytest.approx(950.0))
    assert percentile_return_scale(returns, 10.0, 80.0).item() == pytest.approx(700.0, rel=1e-5)
    norm = ReturnNormalizer(decay=0.0, low=10.0, high=80.0)  # decay 0: the last batch only
    norm.update(returns)
    assert (norm.low.item(), norm.high.item()) == (pytest.approx(100.0), pytest.approx(800.0))


def test_return_normalizer_rejects_bad_settings_at_the_boundaries():
    ReturnNormalizer(decay=0.0, low=0.0, high=100.0)  # the closed ends are allowed
    for kwargs, message in (({"decay": 1.0}, r"retnorm_decay must be in \[0, 1\)"), ({"decay": -0.1}, "retnorm_decay"),
                            ({"low": 50.0, "high": 50.0}, "0 <= low < high <= 100"),
                            ({"low": -1.0}, "percentiles"), ({"high": 100.5}, "percentiles")):
        with pytest.raises(ValueError, match=message):
            ReturnNormalizer(**kwargs)


def test_combine_losses_needs_at_least_one_loss():
    with pytest.raises(ValueError, match="^combine_losses: no losses given$"):
        combine_losses({}, build_loss_scales(build_config()))
