"""The update's cheaper paths give exactly the numbers of the plain ones (values and gradients, bit for bit).

Each test compares a fast path with a reference written out here in the plain form it replaces.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lore.config import build_config
from lore.dreamer import networks
from lore.dreamer.agent import DreamerAgent
from lore.dreamer.math import one_hot_float, straight_through
from lore.method import LoReAgent

OBS_DIM, A = 6, 3
pytestmark = pytest.mark.usefixtures("one_thread_fixed_seed")


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


def test_one_hot_float_is_f_one_hot_as_float():
    index = torch.randint(0, 7, (5, 3, 4))
    for dtype in (torch.float32, torch.float64):
        assert torch.equal(one_hot_float(index, 7, dtype), F.one_hot(index, 7).to(dtype))
    assert one_hot_float(index, 7).dtype == torch.float32


def test_strided_range_is_arange_and_is_reused():
    assert torch.equal(networks.strided_range(6, 4, torch.device("cpu")), torch.arange(0, 24, 4))
    assert networks.strided_range(6, 4, "cpu") is networks.strided_range(6, 4, torch.device("cpu"))


def reference_observe(rssm, embed, prev_actions, is_first, noise):
    """The posterior loop with per-step reset masks and one host read per step (the plain form)."""
    b, t = embed.shape[:2]
    state = rssm.initial_state(b)
    embed_part = rssm.obs_embed(embed)
    init = rssm.initial_state(b)
    deters, stochs, posts = [], [], []
    for i in range(t):
        first = is_first[:, i].bool()
        keep = (~first).to(embed.dtype)[:, None]
        action = prev_actions[:, i] * keep
        deter, stoch = state["deter"], state["stoch"]
        if bool(first.any()):
            deter = deter * keep + init["deter"] * (1.0 - keep)
            stoch = stoch * keep[..., None] + init["stoch"] * (1.0 - keep[..., None])
        x = rssm.img_in(torch.cat([stoch.reshape(b, -1), action], -1))
        deter = rssm.gru(x, deter)
        logits = rssm._posterior(deter, embed_part[:, i])
        stoch = straight_through(F.one_hot((logits.detach() + noise[:, i]).argmax(-1), rssm.classes).float(),
                                 logits.exp())
        state = {"deter": deter, "stoch": stoch}
        deters.append(deter)
        stochs.append(stoch)
        posts.append(logits)
    deter = torch.stack(deters, 1)
    return {"deter": deter, "stoch": torch.stack(stochs, 1), "post_logits": torch.stack(posts, 1),
            "prior_logits": rssm.prior_logits(deter)}


def test_observe_gives_the_plain_loops_values_and_gradients_bit_for_bit():
    agent = make_agent()
    rssm = agent.wm.rssm
    b, t = 4, 7
    g = torch.Generator().manual_seed(3)
    embed = torch.randn(b, t, agent.wm.encoder.out_dim, generator=g).requires_grad_(True)
    prev = F.one_hot(torch.randint(0, A, (b, t), generator=g), A).float()
    is_first = torch.rand(b, t, generator=g) < 0.25
    is_first[:, 0] = True
    noise = torch.rand(b, t, rssm.stoch_dim, rssm.classes, generator=g)
    params = [embed, *rssm.parameters()]
    outs = []
    for observe in (rssm.observe, lambda *args, noise: reference_observe(rssm, *args, noise)):
        post = observe(embed, prev, is_first, noise=noise)
        loss = sum((v * torch.linspace(0.5, 1.5, v.numel()).reshape(v.shape)).sum() for v in post.values())
        outs.append((post, torch.autograd.grad(loss, params, allow_unused=True)))
    (fast, fast_grads), (plain, plain_grads) = outs
    for key in plain:
        assert torch.equal(fast[key], plain[key]), key
    for a, b_ in zip(fast_grads, plain_grads, strict=True):
        assert (a is None and b_ is None) or torch.equal(a, b_)


def test_the_decoder_target_reused_from_the_encoder_gives_the_same_losses_and_gradients():
    agent = make_agent()
    wm = agent.wm
    data = agent._prepare_batch(make_batch())
    feat = torch.randn(4, 6, wm.feat_dim, requires_grad=True)
    vector = wm.encoder.vector_input(data["obs"])
    pairs = [(wm.encoder(data["obs"], vector), wm.encoder(data["obs"])),
             (wm.decoder.loss(feat, data["obs"], vector), wm.decoder.loss(feat, data["obs"]))]
    params = [feat, *wm.encoder.parameters(), *wm.decoder.parameters()]
    for fast, plain in pairs:
        assert torch.equal(fast, plain)
        grads = [torch.autograd.grad(x.square().sum(), params, allow_unused=True) for x in (fast, plain)]
        for a, b_ in zip(*grads, strict=True):
            assert (a is None and b_ is None) or torch.equal(a, b_)


def test_advice_q_values_share_the_deterministic_step_and_draw_what_separate_steps_draw():
    space = gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)})
    method = LoReAgent(space, A, build_config(overrides=["model.preset=debug"], ablation="full"))
    agent = method.dreamer
    with torch.no_grad():
        for p in agent.critic.parameters():
            p.normal_(0, 0.3)
    m = 5
    start = {"deter": torch.randn(m, agent.cfg.model.deter),
             "stoch": F.one_hot(torch.randint(0, 4, (m, agent.cfg.model.stoch)), agent.cfg.model.classes).float()}
    state = method.method_generator.get_state()
    q = method.advice_q_values(start, samples=3)
    method.method_generator.set_state(state)
    rep = {k: v.repeat_interleave(A, 0) for k, v in start.items()}
    draws = []
    with torch.no_grad():
        for _ in range(3):
            nxt, _ = agent.wm.rssm.img_step(rep, torch.eye(A).repeat(m, 1), method.method_generator)
            feat = agent.wm.rssm.features(nxt)
            value = agent.wm.reward(feat) + agent.cfg.dreamer.gamma * agent.wm.continue_prob(feat) * \
                agent.critic.values(feat)
            draws.append(value.reshape(-1, m, A))
    assert torch.equal(q, torch.cat(draws, 0).permute(1, 0, 2))


def test_the_eager_update_steps_like_the_default_single_tensor_adam_and_clip_bit_for_bit(monkeypatch):
    fast, plain = make_agent(), make_agent()
    plain.load_state_dict(fast.state_dict())
    d = plain.cfg.dreamer
    plain.wm_opt = torch.optim.Adam(plain.wm.parameters(), lr=d.wm_lr, eps=d.wm_eps, foreach=False)
    plain.actor_opt = torch.optim.Adam(plain.actor.parameters(), lr=d.ac_lr, eps=d.ac_eps, foreach=False)
    plain.critic_opt = torch.optim.Adam(plain.critic.parameters(), lr=d.ac_lr, eps=d.ac_eps, foreach=False)
    assert all(g["foreach"] for opt in (fast.wm_opt, fast.actor_opt, fast.critic_opt) for g in opt.param_groups)
    clip = torch.nn.utils.clip_grad_norm_
    for agent, foreach in ((fast, None), (plain, False)):
        if foreach is False:  # the plain agent clips and moves its slow critic one tensor at a time
            monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                                lambda params, max_norm, foreach=None: clip(params, max_norm, foreach=False))

            def ema(slow, fast_net, fraction):
                with torch.no_grad():
                    for p_slow, p_fast in zip(slow.parameters(), fast_net.parameters(), strict=True):
                        p_slow.lerp_(p_fast, fraction)

            monkeypatch.setattr("lore.dreamer.agent.ema_update_", ema)
        for seed in range(3):
            agent.train_step(make_batch(seed=seed))
    for a, b in zip([*fast.parameters(), *fast.slow_critic.parameters()],
                    [*plain.parameters(), *plain.slow_critic.parameters()], strict=True):
        assert torch.equal(a, b)


def test_a_checkpoint_saved_with_the_default_step_options_loads_with_the_multi_tensor_step():
    agent = make_agent()
    state = agent.state_dict()
    for key in ("wm_opt", "actor_opt", "critic_opt"):
        for group in state[key]["param_groups"]:
            group["foreach"] = None
    agent.load_state_dict(state)
    assert all(g["foreach"] for opt in (agent.wm_opt, agent.actor_opt, agent.critic_opt) for g in opt.param_groups)
