"""DreamerV3 maths: symlog, two-hot, λ-returns, free bits, unimix, return normaliser, KL balance, loss scales."""

import math

import pytest
import torch

from lore.config import build_config
from lore.dreamer.math import (
    ReturnNormalizer,
    build_loss_scales,
    check_scales_used,
    combine_losses,
    free_bits_kl,
    kl_balance,
    kl_categorical,
    lambda_returns,
    make_bins,
    percentile_return_scale,
    symexp,
    symlog,
    twohot_decode,
    twohot_encode,
    twohot_loss,
    twohot_mean_symlog,
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
    assert "prior_net" not in scales
    assert "prior_net" in build_loss_scales(build_config(overrides=["distill.enabled=true"]))
    one = torch.tensor(1.0)
    with pytest.raises(KeyError, match="no entry in LOSS_SCALES"):
        combine_losses({"decoder": one, "mystery": one}, scales)
    with pytest.raises(KeyError, match="match no computed loss"):
        check_scales_used(scales, ["decoder"])
    check_scales_used(scales, list(scales))
    assert combine_losses({"dyn": one, "rep": one}, scales).item() == pytest.approx(0.6)
