"""DreamerV3 ingredients and defaults, one test each that fails when the ingredient is wrong.

Hand-computed values on tiny inputs, invariants (a termination cuts the return, ``is_first`` cuts
the history, a zero advantage moves the actor by its entropy bonus only), gradient checks, and the
defaults pinned against the published values. Sources named in the comments:

* [paper] Hafner et al. 2023, "Mastering Diverse Domains through World Models", arXiv:2301.04104
  (v1, January 2023), appendix hyper-parameter and model-size tables.
* [code] the official implementation released with that paper, github.com/danijar/dreamerv3 at
  commit 323ea968 (``dreamerv3/configs.yaml`` defaults, ``nets.py``, ``agent.py``, ``behaviors.py``).
* [code24] the later official code (2024 revision, e.g. commit 05699cd1), only where it differs.

``benchmarks/mutation_check.py`` runs these tests (with tests/test_dreamer_math.py and
tests/test_dreamer_agent.py) against single broken ingredients; docs/testing.md has the score.
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lore.config import DreamerConfig, TrainConfig, build_config
from lore.dreamer import networks
from lore.dreamer.agent import DreamerAgent
from lore.dreamer.behavior import (
    bootstrap_head_mask,
    critic_losses,
    ema_update_,
    imagination_weights,
    own_rows,
    reinforce_loss,
)
from lore.dreamer.math import (
    categorical_entropy,
    kl_categorical,
    lambda_returns,
    make_bins,
    symlog,
    twohot_loss,
)
from lore.dreamer.networks import (
    CNNDecoder,
    EnsembleNorm,
    FeatureEncoder,
    NormLinear,
    ObsDecoder,
    ObsEncoder,
    init_trunc_normal_,
    linear,
)
from lore.dreamer.rssm import RSSM, LayerNormGRUCell
from lore.method import LoReAgent
from lore.method.terms import masked_prior_kl
from lore.presets import PRESETS

OBS_DIM, A = 6, 3
pytestmark = pytest.mark.usefixtures("one_thread_fixed_seed")


def make_cfg(*overrides):
    return build_config(overrides=["model.preset=debug", "dreamer.horizon=4", *overrides])


def vector_space(dim=OBS_DIM):
    return gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(-np.inf, np.inf, (dim,), np.float32)})


def pixel_space():
    return gymnasium.spaces.Dict({"pixels": gymnasium.spaces.Box(0, 255, (64, 64, 3), np.uint8)})


def make_batch(b=3, t=5, seed=0):
    """A replay batch with a termination and an episode start inside row 0."""
    g = torch.Generator().manual_seed(seed)
    batch = {
        "action": torch.randint(0, A, (b, t), generator=g),
        "reward": torch.randn(b, t, generator=g) * 3.0,
        "is_first": torch.zeros(b, t, dtype=torch.bool),
        "is_terminal": torch.zeros(b, t, dtype=torch.bool),
        "obs.symbolic": torch.randn(b, t, OBS_DIM, generator=g) * 2.0,
    }
    batch["is_first"][:, 0] = True
    batch["is_terminal"][0, 2] = True
    batch["is_first"][0, 3] = True
    return batch


def randomise_(module: nn.Module, std: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)


def feat_of(post):
    return torch.cat([post["deter"], post["stoch"].flatten(-2)], -1)


# =========================================================================== defaults


def test_dreamer_defaults_are_the_published_ones():
    d = DreamerConfig()
    # [paper] "discount horizon 1/(1-γ) = 333", [code] ``horizon: 333`` -> γ = 1 - 1/333 ≈ 0.997
    assert d.gamma == pytest.approx(1.0 - 1.0 / 333.0, abs=1e-12)
    assert 1.0 / (1.0 - d.gamma) == pytest.approx(333.0)
    assert d.lam == 0.95                    # [paper] return lambda 0.95, [code] return_lambda
    assert d.horizon == 15                  # [paper] imagination horizon 15, [code] imag_horizon
    assert d.imag_last == 0                 # [code] imag_last: 0, imagine from every posterior state
    assert d.actor_entropy == 3e-4          # [paper] actor entropy scale η = 3e-4, [code] actent
    assert d.free_bits == 1.0               # [paper] free nats 1, [code] dyn_loss.free / rep_loss.free
    assert d.kl_dyn == 0.5                  # [paper] β_dyn 0.5, [code] loss_scales.dyn ([code24]: 1.0)
    assert d.kl_rep == 0.1                  # [paper] β_rep 0.1, [code] loss_scales.rep
    assert d.unimix == 0.01                 # [paper] 1% unimix, [code] rssm.unimix and actor.unimix
    assert d.retnorm_decay == 0.99          # [paper] return normalisation decay 0.99, [code] retnorm.decay
    assert (d.retnorm_low, d.retnorm_high) == (5.0, 95.0)  # [paper] Per(R, 95) - Per(R, 5)
    assert d.slow_critic_fraction == 0.02   # [paper] critic EMA decay 0.98, [code] slow_critic_fraction
    assert d.slow_critic_reg == 1.0         # [paper] critic EMA regulariser 1, [code] loss_scales.slowreg
    # [code] loss_scales image / vector / reward / cont: 1.0
    assert (d.decoder_scale, d.reward_scale, d.continue_scale) == (1.0, 1.0, 1.0)
    # [paper] world model: learning rate 1e-4, Adam epsilon 1e-8, gradient clipping 1000 ([code] model_opt)
    assert (d.wm_lr, d.wm_eps, d.wm_clip) == (1e-4, 1e-8, 1000.0)
    # [paper] actor and critic: learning rate 3e-5, Adam epsilon 1e-5, gradient clipping 100 ([code]
    # actor_opt / critic_opt). DreamerConfig says "2023 paper settings", and 3e-5 is that paper's value;
    # [code24] uses one optimiser with lr 4e-5, eps 1e-20 and adaptive gradient clipping 0.3 instead.
    assert (d.ac_lr, d.ac_eps, d.ac_clip) == (3e-5, 1e-5, 100.0)
    # LoRe's own addition (not in DreamerV3): bootstrapped critic heads
    assert d.value_bootstrap == 0.5


def test_train_defaults_are_the_published_ones():
    t = TrainConfig()
    # [paper] batch size 16, batch length 64, replay capacity 1e6 ([code] batch_size / batch_length)
    assert (t.batch_size, t.batch_length) == (16, 64)
    assert t.replay_capacity == 1_000_000


def test_a_default_run_uses_the_dataclass_defaults():
    cfg = build_config()
    assert dataclasses.asdict(cfg.dreamer) == dataclasses.asdict(DreamerConfig())


def test_model_presets_match_the_paper_sizes():
    for name, preset in PRESETS.items():
        # [paper] / [code] symlog_disc heads with 255 bins (reward head and critic)
        assert preset["bins"] == 255, name
    # [code] configs.yaml ``small``: rssm.deter 512, units 512, layers 2, cnn_depth 32; ``medium``:
    # 1024 / 640 / 3 / 48; rssm stoch 32 x classes 32 in the defaults, which the sizes keep.
    for name, (deter, units, layers, depth) in {"s": (512, 512, 2, 32), "m": (1024, 640, 3, 48)}.items():
        p = PRESETS[name]
        assert (p["deter"], p["units"], p["layers"], p["cnn_depth"], p["stoch"], p["classes"]) == \
            (deter, units, layers, depth, 32, 32), name
    # xs: LoRe's own CPU size (the 2023 code's smallest size is ``small``), with a 32x16 latent and CNN
    # depth 16; pinned so that a change is deliberate.
    xs = PRESETS["xs"]
    assert (xs["deter"], xs["units"], xs["layers"], xs["stoch"], xs["classes"], xs["cnn_depth"]) == \
        (256, 256, 1, 32, 16, 16)


def test_world_model_and_critic_share_the_255_bin_symlog_support():
    agent = DreamerAgent(vector_space(), A, build_config(overrides=["model.preset=debug"]))
    torch.testing.assert_close(agent.wm.bins, make_bins(255, 20.0), rtol=0, atol=0)
    torch.testing.assert_close(agent.critic.bins, make_bins(255, 20.0), rtol=0, atol=0)


# =========================================================================== networks


def test_weight_init_is_truncated_normal_with_fan_avg_variance():
    # [code] winit 'normal', fan 'avg': truncated normal (±2 σ') whose variance is scale / fan_avg
    w = torch.empty(300, 500)
    torch.manual_seed(0)
    init_trunc_normal_(w, fan_in=500, fan_out=300)
    std = math.sqrt(1.0 / 400.0)
    assert w.mean().item() == pytest.approx(0.0, abs=1e-3)
    assert w.std().item() == pytest.approx(std, rel=0.01)
    bound = 2.0 * std / 0.87962566103423978
    assert w.abs().max().item() <= bound + 1e-7
    assert w.abs().max().item() >= 0.99 * bound  # reached: truncated, not a narrower normal
    layer = linear(5, 4, scale=0.0)
    assert torch.all(layer.weight == 0) and torch.all(layer.bias == 0)


def test_norm_linear_is_linear_without_bias_then_layernorm_eps_1e3_then_silu():
    # [code] nets.Linear(norm='layer', act='silu'): no bias before the norm, LayerNorm ε = 1e-3
    assert networks.LN_EPS == 1e-3
    layer = NormLinear(5, 4)
    assert layer[0].bias is None
    x = torch.randn(7, 5) * 0.01  # tiny activations: the value of ε matters
    h = x @ layer[0].weight.T
    expected = F.silu((h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + 1e-3))
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-6)


def test_vector_encoder_reads_symlog_inputs():
    # [code] encoder symlog_inputs: True
    enc = ObsEncoder(vector_space(), units=8, layers=1, cnn_depth=4)
    x = torch.randn(4, OBS_DIM) * 100.0
    torch.testing.assert_close(enc({"symbolic": x}), enc.mlp(symlog(x)))


def test_vector_decoder_loss_is_summed_squared_error_on_symlog_targets():
    # [code] vector decoder dist 'symlog_mse': squared error in symlog space, summed over the vector
    dec = ObsDecoder(vector_space(), feat_dim=5, units=8, layers=1, cnn_depth=4)
    feat, obs = torch.randn(2, 3, 5), torch.randn(2, 3, OBS_DIM) * 50.0
    expected = ((dec.mlp(feat) - symlog(obs)) ** 2).sum(-1)
    torch.testing.assert_close(dec.loss(feat, {"symbolic": obs}), expected)


def test_image_encoder_centres_pixels_and_decoder_predicts_offset_means():
    enc = ObsEncoder(pixel_space(), units=8, layers=1, cnn_depth=2)
    img = torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8)
    cnn = enc.cnns["pixels"]
    expected = cnn.net(img.permute(0, 3, 1, 2).float() / 255.0 - 0.5).reshape(2, -1)
    torch.testing.assert_close(enc({"pixels": img}), expected)
    # decoder: an output layer of zeros predicts mid-grey 0.5 everywhere; the loss sums over pixels
    dec = ObsDecoder(pixel_space(), feat_dim=5, units=8, layers=1, cnn_depth=2)
    with torch.no_grad():
        last = dec.cnns["pixels"].net[-1]
        last.weight.zero_()
        last.bias.zero_()
    assert isinstance(dec.cnns["pixels"], CNNDecoder)
    feat = torch.randn(2, 5)
    assert torch.all(dec.cnns["pixels"](feat) == 0.5)
    expected = ((0.5 - img.float() / 255.0) ** 2).sum((-3, -2, -1))
    torch.testing.assert_close(dec.loss(feat, {"pixels": img}), expected)


def channel_layer_norm(x, eps=1e-3):  # NCHW, normalised over C
    mean = x.mean(1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(1, unbiased=False, keepdim=True) + eps)


def test_cnn_blocks_are_conv_then_channel_layernorm_then_silu():
    # [code] ImageEncoderResnet / ImageDecoderResnet: each stride-2 conv is followed by norm and act
    enc = ObsEncoder(pixel_space(), units=8, layers=1, cnn_depth=2)
    x = torch.rand(2, 3, 64, 64) - 0.5
    net = enc.cnns["pixels"].net
    expected = x
    for i in range(4):
        conv = net[3 * i]
        assert conv.bias is None
        h = F.conv2d(expected, conv.weight, stride=2, padding=1)
        expected = F.silu(channel_layer_norm(h))
    torch.testing.assert_close(net(x), expected, rtol=1e-5, atol=1e-5)
    dec = ObsDecoder(pixel_space(), feat_dim=5, units=8, layers=1, cnn_depth=2).cnns["pixels"]
    h = dec.project(torch.randn(2, 5)).reshape(2, 16, 4, 4)
    block = F.silu(channel_layer_norm(F.conv_transpose2d(h, dec.net[0].weight, stride=2, padding=1)))
    torch.testing.assert_close(dec.net[:3](h), block, rtol=1e-5, atol=1e-5)


def test_ensemble_layernorm_uses_eps_1e3_per_member():
    norm = EnsembleNorm(2, 4)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 5, 4) * 0.01  # tiny activations: ε matters
    normed = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-3)
    torch.testing.assert_close(norm(x), normed * norm.weight + norm.bias)


def test_llm_features_are_symlogged_and_masked():
    enc = FeatureEncoder(n_features=4, feature_units=6)
    feats = torch.randn(5, 4) * 100.0
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    torch.testing.assert_close(enc(feats, mask), enc.net(symlog(feats)) * mask[:, None])


def test_zero_initialised_output_layers_of_reward_and_critic_only():
    agent = DreamerAgent(vector_space(), A, make_cfg())
    assert torch.all(agent.wm.reward_head.out.weight == 0) and torch.all(agent.critic.net.out.weight == 0)
    # the continue head, actor and decoder keep their normal initialisation ([code] outscale 1.0)
    assert agent.wm.continue_head.out.weight.abs().sum() > 0
    assert agent.actor.net.out.weight.abs().sum() > 0


# =========================================================================== RSSM


def test_gru_cell_hand_computed():
    # [code] _gru: one linear + LayerNorm on [deter, x], reset gates the candidate, update gate biased by -1
    cell = LayerNormGRUCell(3, 4)
    with torch.no_grad():
        cell.norm.weight.uniform_(0.5, 1.5)
        cell.norm.bias.uniform_(-0.5, 0.5)
    x, deter = torch.randn(5, 3), torch.randn(5, 4)
    parts = F.layer_norm(torch.cat([deter, x], -1) @ cell.linear.weight.T, (12,), cell.norm.weight,
                         cell.norm.bias, eps=1e-3)
    reset, cand, update = torch.sigmoid(parts[:, :4]), parts[:, 4:8], torch.sigmoid(parts[:, 8:] - 1.0)
    expected = update * torch.tanh(reset * cand) + (1.0 - update) * deter
    torch.testing.assert_close(cell(x, deter), expected)


def test_fresh_gru_cell_mostly_keeps_its_state():
    cell = LayerNormGRUCell(3, 4)
    with torch.no_grad():
        cell.linear.weight.zero_()  # all gates see 0: update = σ(-1) ≈ 0.27, candidate tanh(0) = 0
    deter = torch.randn(2, 4)
    torch.testing.assert_close(cell(torch.randn(2, 3), deter), (1.0 - torch.sigmoid(torch.tensor(-1.0))) * deter)


def small_rssm(unimix=0.01):
    torch.manual_seed(0)
    return RSSM(deter=8, stoch=3, classes=4, units=8, num_actions=A, embed_dim=5, unimix=unimix)


def test_initial_state_is_tanh_of_a_learned_vector_and_the_prior_mode():
    # [code] initial: learned -> deter = tanh(w), stoch = mode of the prior at that deter
    rssm = small_rssm()
    with torch.no_grad():
        rssm.initial_deter.copy_(torch.linspace(-3.0, 3.0, 8))
    state = rssm.initial_state(2)
    torch.testing.assert_close(state["deter"], torch.tanh(torch.linspace(-3.0, 3.0, 8)).expand(2, 8))
    mode = rssm.prior_logits(state["deter"]).argmax(-1)
    assert torch.equal(state["stoch"], F.one_hot(mode, 4).float())


@pytest.mark.parametrize("unimix", [0.01, 0.05])
def test_unimix_floor_on_prior_posterior_and_actor(unimix):
    overrides = [] if unimix == 0.01 else [f"dreamer.unimix={unimix}"]  # 0.01: the default itself
    agent = DreamerAgent(vector_space(), A, make_cfg(*overrides))
    rssm, classes = agent.wm.rssm, agent.cfg.model.classes
    with torch.no_grad():  # extreme logits everywhere
        rssm.img_out[-1].weight.mul_(1e3)
        rssm.obs_stats.weight.mul_(1e3)
        agent.actor.net.out.weight.mul_(1e3)
    data = agent._prepare_batch({k: v for k, v in make_batch().items()})
    _, post, _ = agent.wm.loss(data, agent.generator)
    for name, logp, n in (("prior", post["prior_logits"], classes), ("posterior", post["post_logits"], classes),
                          ("actor", agent.actor(feat_of(post)), A)):
        probs = logp.exp()
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]), msg=name)
        assert probs.min().item() == pytest.approx(unimix / n, rel=1e-3), name
        assert probs.max().item() == pytest.approx(1.0 - unimix + unimix / n, rel=1e-3), name


def test_rssm_sample_is_one_hot_with_straight_through_gradient():
    rssm = small_rssm()
    logits = torch.log_softmax(torch.randn(5, 3, 4), -1).requires_grad_()
    sample = rssm.sample(logits, torch.Generator().manual_seed(0))
    value = sample.detach()  # one-hot (+ p - p: rounding only)
    torch.testing.assert_close(value, value.round(), rtol=0, atol=1e-6)
    torch.testing.assert_close(value.sum(-1), torch.ones(5, 3))
    weights = torch.randn(5, 3, 4)
    (grad,) = torch.autograd.grad((sample * weights).sum(), logits)
    (expected,) = torch.autograd.grad((logits.exp() * weights).sum(), logits)
    torch.testing.assert_close(grad, expected)


def test_obs_step_posterior_reads_the_observation_and_the_history():
    rssm = small_rssm()
    state = {"deter": torch.randn(2, 8), "stoch": F.one_hot(torch.randint(0, 4, (2, 3)), 4).float()}
    action, first = torch.eye(A)[:2], torch.zeros(2, dtype=torch.bool)
    e1, e2 = torch.randn(2, 5), torch.randn(2, 5)
    _, post1, prior1 = rssm.obs_step(state, action, e1, first, sample=False)
    _, post2, prior2 = rssm.obs_step(state, action, e2, first, sample=False)
    assert not torch.allclose(post1, post2)       # the posterior sees the observation
    torch.testing.assert_close(prior1, prior2)    # the prior does not
    other = {"deter": torch.randn(2, 8), "stoch": state["stoch"]}
    _, post3, _ = rssm.obs_step(other, action, e1, first, sample=False)
    assert not torch.allclose(post1, post3)       # ... and the recurrent state


def test_observe_is_causal_prior_from_deter_only_and_each_step_reads_its_embedding():
    rssm = small_rssm()
    b, t = 2, 5
    embed, actions = torch.randn(b, t, 5), F.one_hot(torch.randint(0, A, (b, t)), A).float()
    first = torch.zeros(b, t, dtype=torch.bool)
    first[:, 0] = True
    out = rssm.observe(embed, actions, first, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(out["prior_logits"], rssm.prior_logits(out["deter"]))
    changed = embed.clone()
    changed[:, 3] += 1.0
    out2 = rssm.observe(changed, actions, first, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(out2["deter"][:, :4], out["deter"][:, :4], rtol=0, atol=0)
    torch.testing.assert_close(out2["post_logits"][:, :3], out["post_logits"][:, :3], rtol=0, atol=0)
    torch.testing.assert_close(out2["prior_logits"][:, 3], out["prior_logits"][:, 3], rtol=0, atol=0)
    assert not torch.allclose(out2["post_logits"][:, 3], out["post_logits"][:, 3])


def test_is_first_cuts_the_history_when_observing_a_sequence():
    rssm = small_rssm()
    b, t = 2, 5
    embed = torch.randn(b, t, 5)
    garbage_actions = F.one_hot(torch.randint(0, A, (b, t)), A).float()  # even the action before a reset
    first = torch.zeros(b, t, dtype=torch.bool)
    first[:, 0] = True
    first[0, 3] = True
    out = rssm.observe(embed, garbage_actions, first, generator=torch.Generator().manual_seed(0))
    # the step after a reset starts from the initial state with a zero action, like step 0
    fresh = rssm.gru(rssm.img_in(torch.cat([rssm.initial_state(1)["stoch"].reshape(1, -1), torch.zeros(1, A)], -1)),
                     rssm.initial_state(1)["deter"])
    torch.testing.assert_close(out["deter"][0, 3], fresh[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out["deter"][:, 0], fresh.expand(b, -1), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(out["deter"][1, 3], fresh[0])  # row 1 carries its history on


def test_latents_are_sampled_with_the_generator_not_taken_as_the_mode():
    rssm = small_rssm()
    b, t = 6, 4
    embed, actions = torch.randn(b, t, 5), torch.zeros(b, t, A)
    first = torch.zeros(b, t, dtype=torch.bool)
    out1 = rssm.observe(embed, actions, first, generator=torch.Generator().manual_seed(1))
    out2 = rssm.observe(embed, actions, first, generator=torch.Generator().manual_seed(2))
    assert not torch.equal(out1["stoch"][:, 0], out2["stoch"][:, 0])
    assert not torch.equal(out1["stoch"].argmax(-1), out1["post_logits"].argmax(-1))
    state = {"deter": torch.randn(64, 8), "stoch": torch.zeros(64, 3, 4)}
    act = torch.eye(A)[torch.zeros(64, dtype=torch.long)]
    sampled, logits = rssm.img_step(state, act, torch.Generator().manual_seed(3))
    assert not torch.equal(sampled["stoch"].argmax(-1), logits.argmax(-1))
    mode, _ = rssm.img_step(state, act, sample=False)
    assert torch.equal(mode["stoch"].argmax(-1), logits.argmax(-1))


def test_img_step_is_action_conditioned_and_returns_the_prior_of_the_new_state():
    rssm = small_rssm()
    state = {"deter": torch.randn(4, 8), "stoch": F.one_hot(torch.randint(0, 4, (4, 3)), 4).float()}
    nxt0, logits0 = rssm.img_step(state, torch.eye(A)[[0, 0, 0, 0]], sample=False)
    nxt1, _ = rssm.img_step(state, torch.eye(A)[[1, 1, 1, 1]], sample=False)
    assert not torch.allclose(nxt0["deter"], nxt1["deter"])
    torch.testing.assert_close(logits0, rssm.prior_logits(nxt0["deter"]))


def test_obs_step_agrees_with_observe():
    """The acting path (obs_step per env step) and the training path (observe over a sequence)."""
    rssm = small_rssm()
    b, t = 3, 3
    embed, actions = torch.randn(b, t, 5), F.one_hot(torch.randint(0, A, (b, t)), A).float()
    first = torch.zeros(b, t, dtype=torch.bool)
    first[:, 0] = True
    seq = rssm.observe(embed, actions, first, generator=torch.Generator().manual_seed(0))
    state = rssm.initial_state(b)
    for i in range(t):
        post, post_logits, prior_logits = rssm.obs_step(state, actions[:, i], embed[:, i], first[:, i], sample=False)
        torch.testing.assert_close(post["deter"], seq["deter"][:, i], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(post_logits, seq["post_logits"][:, i], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(prior_logits, seq["prior_logits"][:, i], rtol=1e-5, atol=1e-6)
        state = {"deter": post["deter"], "stoch": seq["stoch"][:, i].detach()}  # continue from the same sample


def test_each_observed_step_draws_fresh_noise():
    rssm = small_rssm()
    t = 64
    embed = torch.randn(1, 1, 5).expand(1, t, 5)   # the same observation ...
    first = torch.ones(1, t, dtype=torch.bool)     # ... from the same (initial) state at every step
    out = rssm.observe(embed, torch.zeros(1, t, A), first, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(out["post_logits"], out["post_logits"][:, :1].expand_as(out["post_logits"]))
    samples = out["stoch"].argmax(-1)[0]  # [T, S]: i.i.d. draws from one distribution
    assert len({tuple(row.tolist()) for row in samples}) > 1
    probs = out["post_logits"][0, 0].exp()
    freq = F.one_hot(samples, 4).float().mean(0)
    torch.testing.assert_close(freq, probs, rtol=0, atol=0.25)  # ~4 standard errors


def test_imagination_detaches_the_start_and_feeds_the_policy_the_current_state():
    rssm = small_rssm()
    start = {"deter": torch.randn(4, 8, requires_grad=True), "stoch": F.one_hot(torch.randint(0, 4, (4, 3)), 4).float()}
    seen = []

    def policy(feat, step):
        seen.append(feat)
        return F.one_hot(torch.full((4,), step % A), A).float()

    traj = rssm.imagine(start, policy, 3, torch.Generator().manual_seed(0))
    assert not traj["feat"].requires_grad  # neither the start nor the dynamics carry gradient
    for k in range(3):
        assert torch.equal(seen[k], traj["feat"][k])
        assert torch.all(traj["action"][k].argmax(-1) == k % A)


# =========================================================================== world model


def wm_setup(*overrides, seed=0):
    torch.manual_seed(seed)  # the same networks whatever the overrides
    agent = DreamerAgent(vector_space(), A, make_cfg(*overrides))
    randomise_(agent.wm.reward_head.out, 0.3, seed + 1)   # so that the reward targets matter
    data = agent._prepare_batch(make_batch(seed=seed))
    return agent, data


def test_world_model_losses_hand_computed():
    agent, data = wm_setup()
    wm = agent.wm
    losses, post, metrics = wm.loss(data, agent.generator)
    feat = feat_of(post)
    torch.testing.assert_close(losses["decoder"], wm.decoder.loss(feat, data["obs"]).mean())
    # reward: two-hot cross-entropy of the posterior at t against the reward received on arriving at t
    torch.testing.assert_close(losses["reward"], twohot_loss(wm.reward_head(feat), data["reward"], wm.bins).mean())
    # continue: Bernoulli log-likelihood of 1 - is_terminal
    cont_target = 1.0 - data["is_terminal"].float()
    assert cont_target.min() == 0.0
    torch.testing.assert_close(losses["continue"], F.binary_cross_entropy_with_logits(
        wm.continue_head(feat).squeeze(-1), cont_target))
    # dyn and rep: KL summed over the latents, free bits max(1, KL) per step, then the mean
    kl = kl_categorical(post["post_logits"], post["prior_logits"])
    expected = kl.clamp(min=1.0).mean()
    torch.testing.assert_close(losses["dyn"], expected)
    torch.testing.assert_close(losses["rep"], expected)
    assert metrics["kl_dyn"] == pytest.approx(kl.mean().item(), rel=1e-5)


def test_continue_head_learns_termination_not_truncation():
    agent, data = wm_setup()
    gen_state = agent.generator.get_state()
    losses, _, _ = agent.wm.loss(data, agent.generator)
    batch = make_batch()
    batch["is_last"] = torch.ones_like(batch["is_terminal"])  # every step a time-limit truncation
    truncated = agent._prepare_batch(batch)
    agent.generator.set_state(gen_state)
    losses_trunc, _, _ = agent.wm.loss(truncated, agent.generator)
    assert losses_trunc["continue"].item() == losses["continue"].item()


def test_kl_balancing_dyn_trains_the_prior_rep_the_posterior():
    agent, data = wm_setup("dreamer.free_bits=0.0")
    losses, _, _ = agent.wm.loss(data, agent.generator)
    prior_params = list(agent.wm.rssm.img_out.parameters())  # used by the prior head only
    grads_rep = torch.autograd.grad(losses["rep"], prior_params, retain_graph=True, allow_unused=True)
    assert all(g is None or torch.all(g == 0) for g in grads_rep)
    grads_dyn = torch.autograd.grad(losses["dyn"], prior_params, retain_graph=True, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads_dyn)
    post_params = [agent.wm.rssm.obs_stats.weight]
    (g_rep,) = torch.autograd.grad(losses["rep"], post_params, retain_graph=True)
    assert g_rep.abs().sum() > 0


def test_free_bits_clip_each_step_at_the_configured_value():
    agent, data = wm_setup()
    _, post, _ = agent.wm.loss(data, agent.generator)
    kl = kl_categorical(post["post_logits"], post["prior_logits"]).detach()
    free = round(kl.median().item(), 3)  # half of the steps below the free bits, half above
    assert (kl < free).sum() >= 5 and (kl > free).sum() >= 5
    agent, data = wm_setup(f"dreamer.free_bits={free}")
    losses, post, _ = agent.wm.loss(data, agent.generator)
    torch.testing.assert_close(kl_categorical(post["post_logits"], post["prior_logits"]), kl)  # same model
    # max(free, KL) per (B, T) step, then the mean; not max(free, mean KL), not KL - free
    torch.testing.assert_close(losses["dyn"], kl.clamp(min=free).mean())
    torch.testing.assert_close(losses["rep"], kl.clamp(min=free).mean())
    assert abs(losses["dyn"].item() - max(free, kl.mean().item())) > 1e-3


def test_obs_t_is_paired_with_the_action_before_it():
    agent, data = wm_setup()
    gen_state = agent.generator.get_state()
    _, post, _ = agent.wm.loss(data, agent.generator)
    other = {**data, "action": data["action"].clone()}
    other["action"][:, 2] = (other["action"][:, 2] + 1) % A  # the action taken after obs 2
    agent.generator.set_state(gen_state)
    _, post2, _ = agent.wm.loss(other, agent.generator)
    torch.testing.assert_close(post2["deter"][:, :3], post["deter"][:, :3], rtol=0, atol=0)
    assert not torch.allclose(post2["deter"][1:, 3], post["deter"][1:, 3])  # row 0 resets at 3


def test_masked_prior_kl_hand_computed():
    rho = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]))
    q = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]))
    kl1 = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    value = masked_prior_kl(rho, q, torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0, 0.5, 1.0]))
    assert value.item() == pytest.approx(0.5 * kl1 / 1.5, rel=1e-5)


# =========================================================================== actor and critic


def test_slow_critic_ema_hand_computed():
    fast, slow = nn.Linear(2, 2), nn.Linear(2, 2)
    with torch.no_grad():
        for p in fast.parameters():
            p.fill_(1.0)
        for p in slow.parameters():
            p.fill_(0.0)
    ema_update_(slow, fast, 0.02)
    assert all(torch.allclose(p, torch.full_like(p, 0.02)) for p in slow.parameters())


def test_imagination_weights_hand_computed():
    gamma = 0.5
    first = torch.tensor([1.0, 0.0])                          # start state 1 is terminal
    conts = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0]])  # c_1 .. c_3
    w = imagination_weights(first, conts, gamma)
    # w_k = Π_{j<=k} γ c_j / γ: 1, γ, γ²·0 = 0, 0 for column 0; everything 0 from the terminal start
    torch.testing.assert_close(w, torch.tensor([[1.0, 0.0], [0.5, 0.0], [0.0, 0.0], [0.0, 0.0]]))


def test_reinforce_loss_hand_computed():
    probs = torch.tensor([[[0.7, 0.2, 0.1]], [[0.25, 0.25, 0.5]]])  # [H=2, N=1, A=3]
    actions = F.one_hot(torch.tensor([[1], [2]]), 3).float()
    adv, weight, eta = torch.tensor([[2.0], [-1.0]]), torch.tensor([[1.0], [0.5]]), 0.1
    loss, ent = reinforce_loss(torch.log(probs), actions, adv, weight, eta)
    h0 = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    h1 = -(0.5 * math.log(0.25) + 0.5 * math.log(0.5))
    per_step = [-math.log(0.2) * 2.0 - eta * h0, 0.5 * (math.log(0.5) * 1.0 - eta * h1)]
    assert loss.item() == pytest.approx(sum(per_step) / 2, rel=1e-5)
    assert ent.item() == pytest.approx((h0 + h1) / 2, rel=1e-5)


def test_zero_advantage_moves_the_actor_by_its_entropy_bonus_only():
    logits = torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    actions = F.one_hot(torch.randint(0, 3, (4, 5)), 3).float()
    weight = torch.rand(4, 5)
    loss, _ = reinforce_loss(logits, actions, torch.zeros(4, 5), weight, 3e-4)
    (grad,) = torch.autograd.grad(loss, logits)
    (expected,) = torch.autograd.grad(-(3e-4 * categorical_entropy(logits) * weight).mean(), logits)
    torch.testing.assert_close(grad, expected)
    with torch.no_grad():  # a gradient step raises the entropy
        stepped = logits - 100.0 * grad
    assert (categorical_entropy(stepped) * weight).sum() > (categorical_entropy(logits) * weight).sum()
    # a positive advantage raises the taken action's probability
    loss, _ = reinforce_loss(logits, actions, torch.ones(4, 5), torch.ones(4, 5), 0.0)
    (grad,) = torch.autograd.grad(loss, logits)
    assert torch.all((grad * actions).sum(-1) < 0)


def test_bootstrap_head_mask_keeps_each_heads_expected_scale():
    mask = bootstrap_head_mask(3, 20_000, 0.5, torch.Generator().manual_seed(0))
    assert set(mask.unique().tolist()) == {0.0, 2.0}
    assert mask.mean().item() == pytest.approx(1.0, abs=0.02)
    assert torch.all(bootstrap_head_mask(2, 5, 1.0) == 1.0)


def test_critic_losses_hand_computed():
    bins = make_bins(255)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 4, 255, generator=gen)  # K=2 heads, H=3, N=4
    returns, slow = torch.randn(3, 4, generator=gen) * 5, torch.randn(2, 3, 4, generator=gen) * 5
    weight, heads = torch.rand(3, 4, generator=gen), torch.tensor([[1.0, 0.0, 2.0, 1.0], [2.0, 2.0, 0.0, 0.0]])
    loss, reg = critic_losses(logits, returns, slow, weight, bins, heads)
    exp_loss = sum((twohot_loss(logits[k], returns, bins) * weight * heads[k]).mean() for k in range(2))
    exp_reg = sum((twohot_loss(logits[k], slow[k], bins) * weight * heads[k]).mean() for k in range(2))
    torch.testing.assert_close(loss, exp_loss)
    torch.testing.assert_close(reg, exp_reg)


# =========================================================================== the whole update


def test_behaviour_losses_follow_the_dreamerv3_recipe():
    """Imagined rewards/continues at the reached state, the continue mode, λ-returns bootstrapped from
    the current critic, start-terminal weights, the EMA percentile scale, REINFORCE with entropy and the
    two-hot critic with its slow regulariser: every internal recomputed by hand."""
    agent, data = wm_setup("dreamer.value_bootstrap=1.0", "dreamer.actor_entropy=0.01", seed=3)
    cfg = agent.cfg.dreamer
    randomise_(agent.wm.continue_head.out, 0.5, 7)
    randomise_(agent.critic.net.out, 0.05, 8)   # the slow copy keeps its zeros: it must differ
    agent.retnorm.low, agent.retnorm.high = torch.tensor(-4.0), torch.tensor(4.0)
    _, post, _ = agent.wm.loss(data, agent.generator)
    actor_losses, critic_losses_, _, internals = agent.behaviour_losses(post, data)
    feat, actions = internals["feat"], internals["actions"]
    with torch.no_grad():
        rewards = agent.wm.reward(feat[1:])
        conts = (agent.wm.continue_head(feat[1:]).squeeze(-1) > 0).float()   # mode, not probability
        assert 0.0 < conts.mean() < 1.0
        values = agent.critic.values(feat).mean(0)                           # mean over critic heads
        returns = lambda_returns(rewards, values, conts, cfg.gamma, cfg.lam)
        weight = imagination_weights(1.0 - data["is_terminal"].reshape(-1).float(), conts, cfg.gamma)
        assert (weight[:, 2] == 0).all()  # batch row 0, t=2 is terminal: nothing imagined from it counts
    torch.testing.assert_close(internals["values"], values)
    torch.testing.assert_close(internals["returns"], returns)
    torch.testing.assert_close(internals["weight"], weight)
    lo, hi = torch.quantile(returns.flatten(), torch.tensor([0.05, 0.95]))
    torch.testing.assert_close(agent.retnorm.low, 0.99 * -4.0 + 0.01 * lo)
    torch.testing.assert_close(agent.retnorm.high, 0.99 * 4.0 + 0.01 * hi)
    scale = torch.clamp(agent.retnorm.high - agent.retnorm.low, min=1.0)
    assert scale > 2.0
    advantage = (returns - values[:-1]) / scale
    expected_actor, _ = reinforce_loss(agent.actor(feat[:-1]), actions, advantage, weight[:-1], 0.01)
    torch.testing.assert_close(actor_losses["actor"], expected_actor)
    logits = agent.critic(feat[:-1])
    slow_values = agent.slow_critic.values(feat[:-1])
    exp_critic, exp_reg = critic_losses(logits, returns, slow_values, weight[:-1], agent.wm.bins)
    torch.testing.assert_close(critic_losses_["critic"], exp_critic)
    torch.testing.assert_close(critic_losses_["slow_reg"], exp_reg)
    # imagined actions are sampled from the policy, not its mode
    assert not torch.equal(actions.argmax(-1), agent.actor(feat[:-1]).argmax(-1))


def test_imag_last_imagines_from_the_last_posterior_states():
    agent, data = wm_setup("train.batch_length=5", "dreamer.imag_last=2")
    _, post, _ = agent.wm.loss(data, agent.generator)
    _, _, _, internals = agent.behaviour_losses(post, data)
    start = feat_of(post)[:, -2:].reshape(-1, agent.wm.feat_dim)
    torch.testing.assert_close(internals["feat"][0], start.detach())


def test_train_step_moves_the_slow_critic_two_percent_toward_the_critic():
    agent = DreamerAgent(vector_space(), A, make_cfg())
    before = [p.detach().clone() for p in agent.critic.parameters()]
    assert all(torch.equal(s, b) for s, b in zip(agent.slow_critic.parameters(), before, strict=True))
    agent.train_step(make_batch())
    moved = False
    for slow, old, new in zip(agent.slow_critic.parameters(), before, agent.critic.parameters(), strict=True):
        torch.testing.assert_close(slow, old + 0.02 * (new.detach() - old), rtol=1e-5, atol=1e-7)
        moved |= not torch.equal(slow, old)
    assert moved


def test_optimisers_and_clipping_use_their_own_settings(monkeypatch):
    agent = DreamerAgent(vector_space(), A, make_cfg(
        "dreamer.wm_lr=1e-3", "dreamer.wm_eps=1e-7", "dreamer.wm_clip=500", "dreamer.ac_lr=2e-4",
        "dreamer.ac_eps=1e-6", "dreamer.ac_clip=50"))
    for opt, lr, eps, module in ((agent.wm_opt, 1e-3, 1e-7, agent.wm), (agent.actor_opt, 2e-4, 1e-6, agent.actor),
                                 (agent.critic_opt, 2e-4, 1e-6, agent.critic)):
        assert isinstance(opt, torch.optim.Adam)
        assert opt.param_groups[0]["lr"] == lr and opt.param_groups[0]["eps"] == eps
        assert {id(p) for p in opt.param_groups[0]["params"]} == {id(p) for p in module.parameters()}
    calls = []
    real = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *args, **kwargs):
        params = list(params)
        calls.append(({id(p) for p in params}, max_norm))
        return real(params, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    agent.train_step(make_batch())
    clips = {frozenset(ids): clip for ids, clip in calls}
    assert clips[frozenset(id(p) for p in agent.wm.parameters())] == 500
    assert clips[frozenset(id(p) for p in agent.actor.parameters())] == 50
    assert clips[frozenset(id(p) for p in agent.critic.parameters())] == 50


def test_act_remembers_the_executed_action_not_the_policys():
    cfg = make_cfg("prior.enabled=true", "prior.gate=fixed", "prior.dropout=0.0", "prior.beta_max=1.0")
    agent = LoReAgent(vector_space(), A, cfg)
    prior = torch.full((4, A), -50.0)
    prior[:, 2] = 50.0
    llm = {"prior_logits": prior, "mask": torch.ones(4), "confidence": torch.ones(4)}
    for _ in range(5):
        out = agent.act({"symbolic": torch.randn(4, OBS_DIM)}, torch.ones(4, dtype=torch.bool),
                        agent.initial_state(4), llm, 100)
        assert torch.all(out.action == 2)
        assert torch.equal(out.state["prev_action"].argmax(-1), out.action)


# =========================================================================== fast paths (issue 13)


def onehot_latents(lead, deter=5, stoch=4, classes=3, seed=0):
    """Dense latent features [*lead, deter + stoch*classes] with exactly one-hot stoch groups."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, classes, (*lead, stoch), generator=g)
    return torch.cat([torch.randn(*lead, deter, generator=g), F.one_hot(idx, classes).float().flatten(-2)], -1)


def test_one_hot_features_detect_one_hot_groups_and_leave_everything_else_dense():
    feat = onehot_latents((2, 3))
    fast = networks.one_hot_features(feat, 5, 3)
    assert isinstance(fast, networks.OneHotFeatures) and fast.shape == feat.shape
    torch.testing.assert_close(fast.to_dense(), feat, rtol=0, atol=0)
    torch.testing.assert_close(fast[1:].to_dense(), feat[1:], rtol=0, atol=0)
    torch.testing.assert_close(fast[:, :-1].to_dense(), feat[:, :-1], rtol=0, atol=0)
    # straight-through rounding of the 1 is admitted; probabilities, negatives and gradients are not
    assert isinstance(networks.one_hot_features(feat * (1 + 1e-7), 5, 3), networks.OneHotFeatures)
    soft = feat.clone()
    soft[..., 5:8] = torch.tensor([0.5, 0.25, 0.25])
    assert networks.one_hot_features(soft, 5, 3) is soft
    negative = feat.clone()
    negative[0, 0, 5:8] = torch.tensor([1.0, 0.5, -0.5])
    assert networks.one_hot_features(negative, 5, 3) is negative
    grad = feat.clone().requires_grad_(True)
    assert networks.one_hot_features(grad, 5, 3) is grad


def test_first_layers_on_one_hot_features_equal_the_dense_layers_values_and_gradients():
    feat = onehot_latents((4, 6), deter=5, stoch=4, classes=3)
    fast = networks.one_hot_features(feat, 5, 3)
    for net in (networks.MLP(17, 8, 2, out_dim=3), networks.EnsembleMLP(3, 17, 8, 2, out_dim=7)):
        randomise_(net, 0.5, 1)
        out_dense = net(feat)
        grads_dense = torch.autograd.grad(out_dense.square().sum(), list(net.parameters()))
        out_fast = net(fast)
        grads_fast = torch.autograd.grad(out_fast.square().sum(), list(net.parameters()))
        torch.testing.assert_close(out_fast, out_dense)
        for a, b in zip(grads_fast, grads_dense, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("with_heads", [False, True])
def test_fused_critic_losses_equal_the_reference_values_and_gradients(with_heads):
    g = torch.Generator().manual_seed(4)
    bins = make_bins(255)
    k, h, n = 3, 4, 5
    logits = (torch.randn(k, h + 1, n, 255, generator=g) * 2.0).requires_grad_(True)
    returns = torch.randn(h, n, generator=g) * 30.0
    returns[0, 0] = 1e9  # clipped to the last bin
    slow = torch.randn(k, h, n, generator=g) * 5.0
    weight = torch.rand(h, n, generator=g)
    heads = bootstrap_head_mask(k, n, 0.5, g) if with_heads else None
    ref = critic_losses(logits[:, :-1], returns, slow, weight, bins, heads)
    fused = critic_losses(logits[:, :-1], returns, slow, weight, bins, heads, fused=True)
    for a, b in zip(fused, ref, strict=True):
        torch.testing.assert_close(a, b)
    for scale_ce, scale_reg in ((1.0, 0.0), (0.0, 1.0), (1.0, 0.7)):
        (grad_ref,) = torch.autograd.grad(scale_ce * ref[0] + scale_reg * ref[1], logits, retain_graph=True)
        (grad_fused,) = torch.autograd.grad(scale_ce * fused[0] + scale_reg * fused[1], logits, retain_graph=True)
        torch.testing.assert_close(grad_fused, grad_ref)


def test_own_rows_lists_each_heads_rows_in_order_padded_at_weight_zero():
    weight = torch.tensor([[2.0, 0.0, 2.0, 2.0], [0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    rows, w = own_rows(weight)
    assert rows.tolist() == [[0, 2, 3], [2, 0, 0], [0, 0, 0]]
    assert w.tolist() == [[2.0, 2.0, 2.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


def test_each_member_on_its_own_rows_equals_those_rows_of_the_whole_forward():
    torch.manual_seed(3)
    net = networks.EnsembleMLP(3, 12, 16, 2, 9)
    randomise_(net, 0.3, 4)
    rows = torch.tensor([[0, 4, 5], [1, 1, 6], [6, 2, 0]])
    dense = torch.randn(4, 7, 12)
    whole = net(dense)  # [3, 4, 7, 9]
    out = net.forward_rows(dense, rows)  # [3, 4, 3, 9]
    for k in range(3):
        torch.testing.assert_close(out[k], whole[k][:, rows[k]])
    # one-hot features (the imagined latents) take the selected-row path and give the same numbers
    hot = torch.randint(0, 4, (4, 7, 2)) + torch.tensor([0, 4])
    feat = networks.OneHotFeatures(torch.randn(4, 7, 4), hot, 8)
    whole = net(feat.to_dense())
    out = net.forward_rows(feat, rows)
    for k in range(3):
        torch.testing.assert_close(out[k], whole[k][:, rows[k]])
    with pytest.raises(ValueError, match="rows must be"):
        net.forward_rows(dense, rows[:2])


def test_critic_heads_on_their_own_rows_give_the_dense_update():
    """The bootstrapped heads' losses and every critic gradient are those of the dense form (all rows, 0-weighted)."""
    results = {}
    for on_rows in (False, True):
        agent, data = wm_setup()
        assert agent._critic_on_rows  # the default: separate heads, value_bootstrap 0.5
        agent._critic_on_rows = on_rows
        randomise_(agent.critic, 0.2, 7)
        randomise_(agent.slow_critic, 0.2, 8)
        _, post, _ = agent.wm.loss(data, agent.generator)
        post = {k: v.detach() for k, v in post.items()}
        _, critic_l, _, internals = agent.behaviour_losses(post, data)
        agent.critic.zero_grad()
        (critic_l["critic"] + 0.7 * critic_l["slow_reg"]).backward()
        results[on_rows] = (critic_l, internals, [p.grad.clone() for p in agent.critic.parameters()])
    (dense_l, dense_i, dense_g), (rows_l, rows_i, rows_g) = results[False], results[True]
    for key in ("critic", "slow_reg"):
        torch.testing.assert_close(rows_l[key], dense_l[key])
    # the returns bootstrap from every head on every state, the own rows' and the others' alike
    for key in ("values", "returns"):
        torch.testing.assert_close(rows_i[key], dense_i[key])
    for a, b in zip(rows_g, dense_g, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert any(float(g.abs().sum()) > 0 for g in rows_g)


@pytest.mark.parametrize("cls", [networks.EnsembleMLP])
def test_a_slice_of_ensemble_members_equals_those_members_of_the_whole_forward(cls):
    torch.manual_seed(3)
    net = cls(4, 12, 16, 2, 9)
    randomise_(net, 0.3, 4)
    x = torch.randn(5, 7, 12)
    whole = net(x)  # [4, 5, 7, 9]
    for members in (slice(0, 1), slice(1, None), slice(1, 3), slice(None)):
        torch.testing.assert_close(net(x, members), whole[members])
    if cls is networks.EnsembleMLP:
        with pytest.raises(ValueError, match="non-empty contiguous slice"):
            net(x, slice(0, 4, 2))
        # the one-hot fast path reads the same member rows
        dense = torch.cat([torch.randn(6, 4), F.one_hot(torch.randint(0, 4, (6, 2)), 4).float().flatten(-2)], -1)
        fast = networks.one_hot_features(dense, 4, 4)
        net = cls(3, 12, 16, 1, 9)
        randomise_(net, 0.3, 5)
        torch.testing.assert_close(net(fast, slice(1, None)), net(dense)[1:])


def _behaviour(agent, data, seed=0):
    agent.generator.manual_seed(seed)
    _, post, _ = agent.wm.loss(data, agent.generator)
    return agent.behaviour_losses(post, data)


def test_the_value_is_the_mean_of_every_critic_head():
    agent, data = wm_setup("dreamer.value_bootstrap=1.0", seed=4)
    randomise_(agent.critic, 0.05, 6)
    _, _, _, internals = _behaviour(agent, data)
    with torch.no_grad():
        torch.testing.assert_close(internals["values"], agent.critic.values(internals["feat"]).mean(0))
