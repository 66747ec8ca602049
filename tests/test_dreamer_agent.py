"""DreamerAgent: shapes, act(), resets, a real update, gradient isolation, NaN guard, checkpoints, late fusion;
LoReAgent (the method around it): the prior at act time, its actor term, PriorNet, the planner's and the
trust's reads of the world model."""

import copy
import io

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from lore.config import ConfigError, build_config
from lore.dreamer.agent import DreamerAgent
from lore.dreamer.math import combine_losses
from lore.method import LoReAgent

OBS_DIM, A, B, T = 10, 4, 3, 6


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny tensors: a second intra-op thread only adds synchronisation (badly so on a loaded machine)
    torch.set_num_threads(1)
    yield


def make_cfg(*overrides):
    return build_config(overrides=["model.preset=debug", "dreamer.horizon=5", *overrides])


def symbolic_space(dim=OBS_DIM):
    return gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(-np.inf, np.inf, (dim,), np.float32)})


def pixel_space():
    return gymnasium.spaces.Dict({"pixels": gymnasium.spaces.Box(0, 255, (64, 64, 3), np.uint8)})


def make_batch(b=B, t=T, seed=0, pixels=False, n_features=8):
    g = torch.Generator().manual_seed(seed)
    batch = {
        "action": torch.randint(0, A, (b, t), generator=g),
        "reward": (torch.rand(b, t, generator=g) < 0.3).float() * 2.0,
        "is_first": torch.zeros(b, t, dtype=torch.bool),
        "is_terminal": torch.zeros(b, t, dtype=torch.bool),
        "is_last": torch.zeros(b, t, dtype=torch.bool),
        "llm_prior_logits": torch.randn(b, t, A, generator=g),
        "llm_mask": (torch.rand(b, t, generator=g) < 0.5).float(),
        "llm_confidence": torch.full((b, t), 0.9),
        "llm_beta": torch.full((b, t), 0.5),
        "llm_features": torch.randn(b, t, n_features, generator=g),
        "llm_features_mask": torch.ones(b, t),
    }
    batch["is_first"][:, 0] = True
    batch["is_first"][0, t // 2] = True
    batch["is_terminal"][0, t // 2 - 1] = True
    if pixels:
        batch["obs.pixels"] = torch.randint(0, 256, (b, t, 64, 64, 3), generator=g, dtype=torch.uint8)
    else:
        batch["obs.symbolic"] = torch.randn(b, t, OBS_DIM, generator=g)
    return batch


def snapshot(agent):
    mods = {"wm": agent.wm, "actor": agent.actor, "critic": agent.critic, "slow": agent.slow_critic}
    return {name: [p.detach().clone() for p in m.parameters()] for name, m in mods.items()}


def changed(before, after):
    return any(not torch.equal(x, y) for x, y in zip(before, after, strict=True))


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("pixels", [False, True])
def test_shapes_encoder_rssm_imagination_heads(pixels):
    cfg = make_cfg()
    agent = DreamerAgent(pixel_space() if pixels else symbolic_space(), A, cfg)
    m = cfg.model
    b, t = (2, 3) if pixels else (B, T)
    data = agent._prepare_batch(make_batch(b, t, pixels=pixels))
    embed = agent.wm.embed(data["obs"])
    assert embed.shape == (b, t, agent.wm.encoder.out_dim)
    losses, post, metrics = agent.wm.loss(data, agent.generator)
    assert post["deter"].shape == (b, t, m.deter)
    assert post["stoch"].shape == (b, t, m.stoch, m.classes)
    assert post["post_logits"].shape == post["prior_logits"].shape == (b, t, m.stoch, m.classes)
    stoch = post["stoch"].detach()  # one-hot samples (straight-through adds p - p: rounding only)
    torch.testing.assert_close(stoch, stoch.round(), rtol=0, atol=1e-6)
    torch.testing.assert_close(stoch.sum(-1), torch.ones(b, t, m.stoch))
    feat_dim = m.deter + m.stoch * m.classes
    assert agent.wm.feat_dim == feat_dim
    assert all(torch.isfinite(v) and v.dim() == 0 for v in losses.values())
    if pixels:
        feat = torch.cat([post["deter"], post["stoch"].flatten(-2)], -1)
        assert agent.wm.decoder.cnns["pixels"](feat).shape == (b, t, 64, 64, 3)

    actor_losses, critic_losses, ac_metrics, internals = agent.behaviour_losses(post, data)
    h, n = cfg.dreamer.horizon, b * t
    assert internals["feat"].shape == (h + 1, n, feat_dim)
    assert internals["actions"].shape == (h, n, A)
    assert internals["returns"].shape == (h, n) and internals["values"].shape == (h + 1, n)
    assert agent.critic(internals["feat"]).shape == (m.value_heads, h + 1, n, m.bins)
    assert agent.wm.reward(internals["feat"]).shape == (h + 1, n)


def test_untrained_reward_and_value_predict_zero():
    agent = DreamerAgent(symbolic_space(), A, make_cfg())
    feat = torch.randn(7, agent.wm.feat_dim)
    assert torch.all(agent.wm.reward(feat) == 0.0)
    assert torch.all(agent.critic.values(feat) == 0.0)


# --------------------------------------------------------------------------- acting


def test_act_output_shapes():
    dreamer = DreamerAgent(symbolic_space(), A, make_cfg())
    plain = dreamer.act({"symbolic": torch.randn(B, OBS_DIM)}, torch.ones(B, dtype=torch.bool), dreamer.initial_state(B))
    assert plain.logits.shape == (B, A) and plain.step.latent.shape == (B, dreamer.wm.feat_dim)
    assert torch.equal(plain.logits, plain.step.logits) and not plain.action_changed.any()
    agent = LoReAgent(symbolic_space(), A, make_cfg())
    state = agent.initial_state(B)
    out = agent.act({"symbolic": torch.randn(B, OBS_DIM)}, torch.ones(B, dtype=torch.bool), state, None, 0)
    assert out.action.shape == (B,) and out.action.dtype == torch.int64
    assert torch.all((out.action >= 0) & (out.action < A))
    for name in ("logits_wm", "logits_mix"):
        assert getattr(out, name).shape == (B, A)
    for name in ("beta", "u_entropy", "u_value_var"):
        value = getattr(out, name)
        assert value.shape == (B,) and torch.all(torch.isfinite(value)) and torch.all(value >= 0)
    assert out.action_changed.shape == (B,) and out.action_changed.dtype == torch.bool
    assert out.latent.shape == (B, agent.dreamer.wm.feat_dim)
    # prior disabled (rl_only): beta 0, mixed == world-model policy, never a changed action
    assert torch.all(out.beta == 0) and torch.equal(out.logits_mix, out.logits_wm)
    assert not out.action_changed.any()
    assert torch.equal(out.state["prev_action"].argmax(-1), out.action)
    greedy = agent.act({"symbolic": torch.randn(B, OBS_DIM)}, torch.zeros(B, dtype=torch.bool), out.state,
                       None, 1, sample=False)
    assert torch.equal(greedy.action, greedy.logits_mix.argmax(-1))
    assert torch.equal(agent.set_action(greedy.state, torch.tensor([3, 0, 1]))["prev_action"].argmax(-1),
                       torch.tensor([3, 0, 1]))


def test_act_with_prior_steers_the_action():
    cfg = make_cfg("prior.enabled=true", "prior.gate=fixed", "prior.dropout=0.0", "prior.beta_max=1.0")
    agent = LoReAgent(symbolic_space(), A, cfg)
    prior = torch.full((B, A), -50.0)
    prior[:, 2] = 50.0
    llm = {"prior_logits": prior, "mask": torch.tensor([1.0, 1.0, 0.0]), "confidence": torch.ones(B)}
    outs = [agent.act({"symbolic": torch.randn(B, OBS_DIM)}, torch.ones(B, dtype=torch.bool),
                      agent.initial_state(B), llm, 100) for _ in range(20)]
    assert all(torch.all(o.action[:2] == 2) for o in outs)
    assert all(o.beta[2] == 0 and torch.all(o.beta[:2] == 1.0) for o in outs)
    assert any(o.action_changed[:2].any() for o in outs)  # the untrained policy would often pick another
    assert not any(o.action_changed[2] for o in outs)


def test_is_first_resets_to_initial_state():
    agent = DreamerAgent(symbolic_space(), A, make_cfg())
    obs = {"symbolic": torch.randn(B, OBS_DIM)}
    garbage = {"deter": torch.randn(B, agent.cfg.model.deter),
               "stoch": torch.nn.functional.one_hot(torch.randint(0, 4, (B, 4)), 4).float(),
               "prev_action": torch.nn.functional.one_hot(torch.tensor([1, 2, 3]), A).float()}
    agent.generator.manual_seed(123)
    reset = agent.act(obs, torch.ones(B, dtype=torch.bool), garbage)
    agent.generator.manual_seed(123)
    fresh = agent.act(obs, torch.zeros(B, dtype=torch.bool), agent.initial_state(B))
    for key in ("deter", "stoch"):
        torch.testing.assert_close(reset.state[key], fresh.state[key], rtol=0, atol=0)
    torch.testing.assert_close(reset.logits, fresh.logits, rtol=0, atol=0)
    agent.generator.manual_seed(123)
    kept = agent.act(obs, torch.zeros(B, dtype=torch.bool), garbage)
    assert not torch.allclose(kept.state["deter"], fresh.state["deter"])
    # per-env: only the flagged env is reset
    agent.generator.manual_seed(123)
    mixed = agent.act(obs, torch.tensor([True, False, False]), garbage)
    torch.testing.assert_close(mixed.state["deter"][0], fresh.state["deter"][0], rtol=0, atol=0)
    torch.testing.assert_close(mixed.state["deter"][1:], kept.state["deter"][1:], rtol=0, atol=0)


# --------------------------------------------------------------------------- training


def test_train_step_finite_metrics_and_updates_parameters():
    agent = DreamerAgent(symbolic_space(), A, make_cfg())
    before = snapshot(agent)
    metrics = agent.train_step(TensorDict(make_batch(), batch_size=[B, T]))
    required = ["wm_loss", "loss_decoder", "loss_reward", "loss_continue", "kl_dyn", "kl_rep", "loss_actor",
                "loss_critic", "entropy_imag", "return_scale", "imag_return_mean", "value_mean", "grad_norm_wm",
                "grad_norm_actor", "grad_norm_critic", "nonfinite_skips"]
    for key in required:
        assert key in metrics, key
    assert all(isinstance(v, float) and np.isfinite(v) for k, v in metrics.items()), metrics
    assert metrics["nonfinite_skips"] == 0.0
    after = snapshot(agent)
    for name in before:
        assert changed(before[name], after[name]), f"{name} parameters did not change"


def test_actor_and_critic_losses_send_no_gradient_into_world_model():
    method = LoReAgent(symbolic_space(), A, make_cfg("prior.enabled=true", "prior.kl_mode=lagrangian"))
    method.prior.lambda_kl = 1.0  # make the prior term non-zero
    agent = method.dreamer
    data = agent._prepare_batch(make_batch())
    _, post, _ = agent.wm.loss(data, agent.generator)
    agent.wm.zero_grad(set_to_none=True)
    actor_losses, critic_losses, _, _ = agent.behaviour_losses(post, data)
    combine_losses(actor_losses, agent.loss_scales).backward()
    assert all(p.grad is None for p in agent.wm.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.actor.parameters())
    combine_losses(critic_losses, agent.loss_scales).backward()
    assert all(p.grad is None for p in agent.wm.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.critic.parameters())


def test_nan_batch_skips_steps_and_leaves_parameters_untouched():
    agent = DreamerAgent(symbolic_space(), A, make_cfg())
    agent.train_step(make_batch(seed=1))  # optimiser state exists
    before = snapshot(agent)
    opt_before = agent.wm_opt.state_dict()["state"][0]["exp_avg"].clone()
    retnorm_before = agent.retnorm.state_dict()
    bad = make_batch(seed=2)
    bad["obs.symbolic"][1, 2, 3] = float("nan")
    metrics = agent.train_step(bad)
    assert metrics["nonfinite_skips"] >= 1 and agent.nonfinite_skips >= 1
    after = snapshot(agent)
    for name in before:
        assert not changed(before[name], after[name]), f"{name} changed on a NaN batch"
        assert all(torch.isfinite(p).all() for p in after[name])
    assert torch.equal(agent.wm_opt.state_dict()["state"][0]["exp_avg"], opt_before)
    assert agent.retnorm.state_dict()["high"].item() == retnorm_before["high"].item()
    ok = agent.train_step(make_batch(seed=3))  # recovers on the next good batch
    assert ok["nonfinite_skips_step"] == 0.0 and np.isfinite(ok["wm_loss"])


def test_state_dict_round_trip_continues_identically():
    cfg = make_cfg()
    agent = DreamerAgent(symbolic_space(), A, cfg)
    agent.train_step(make_batch(seed=1))
    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    buffer.seek(0)
    clone = DreamerAgent(symbolic_space(), A, make_cfg("seed=99"))
    clone.load_state_dict(torch.load(buffer, weights_only=False))

    obs = {"symbolic": torch.randn(B, OBS_DIM)}
    first = torch.ones(B, dtype=torch.bool)
    out_a = agent.act(obs, first, agent.initial_state(B))
    out_b = clone.act(obs, first, clone.initial_state(B))
    assert torch.equal(out_a.logits, out_b.logits) and torch.equal(out_a.action, out_b.action)
    m_a = agent.train_step(make_batch(seed=2))
    m_b = clone.train_step(make_batch(seed=2))
    assert m_a == m_b
    for x, y in zip(agent.state_dict()["wm"].values(), clone.state_dict()["wm"].values(), strict=True):
        assert torch.equal(x, y)


def with_latent_ensemble(state: dict, members: int = 2) -> dict:
    """``state`` as a world model with a one-step latent ensemble saved it: ``wm.ensemble.*`` after the
    continue head, and their (stateless) entries in the world model's Adam, the later indices shifted."""
    from lore.dreamer.networks import EnsembleMLP

    wm = state["wm"]
    extra = {f"ensemble.{k}": v for k, v in EnsembleMLP(members, 8, 4, 2, 6).state_dict().items()}
    keys = list(wm)
    cut = max(i for i, k in enumerate(keys) if k.startswith("continue_head.")) + 1
    before = sum(1 for k in keys[:cut])  # every world-model entry is a parameter (no persistent buffers)
    shift = lambda i: i if i < before else i + len(extra)  # noqa: E731
    opt = state["wm_opt"]
    return {**state, "wm": {**{k: wm[k] for k in keys[:cut]}, **extra, **{k: wm[k] for k in keys[cut:]}},
            "wm_opt": {"state": {shift(i): v for i, v in opt["state"].items()},
                       "param_groups": [{**g, "params": list(range(len(g["params"]) + len(extra)))}
                                        for g in opt["param_groups"]]}}


@pytest.mark.parametrize("overrides", [(), ("distill.enabled=true", "features.enabled=true")])
def test_a_checkpoint_with_a_latent_ensemble_loads_without_it(overrides):
    agent = DreamerAgent(symbolic_space(), A, make_cfg(*overrides))
    agent.train_step(make_batch(seed=1))
    state = agent.state_dict()
    old = with_latent_ensemble(state)
    assert any(k.startswith("ensemble.") for k in old["wm"])
    upgraded = agent.upgrade_state(old)
    assert list(upgraded["wm"]) == list(state["wm"])
    assert upgraded["wm_opt"]["param_groups"] == state["wm_opt"]["param_groups"]
    assert sorted(upgraded["wm_opt"]["state"]) == sorted(state["wm_opt"]["state"])
    for i, entry in state["wm_opt"]["state"].items():
        assert torch.equal(upgraded["wm_opt"]["state"][i]["exp_avg"], entry["exp_avg"])
    clone = DreamerAgent(symbolic_space(), A, make_cfg(*overrides))
    clone.load_state_dict(copy.deepcopy(old))  # loads as is: the upgrade runs inside
    assert clone.train_step(make_batch(seed=2)) == agent.train_step(make_batch(seed=2))


def test_loss_scale_table_must_match_computed_losses():
    agent = DreamerAgent(symbolic_space(), A, make_cfg())
    agent.loss_scales["forgotten"] = 1.0
    with pytest.raises(KeyError, match="forgotten"):
        agent.train_step(make_batch())
    agent = DreamerAgent(symbolic_space(), A, make_cfg())
    del agent.loss_scales["reward"]
    with pytest.raises(KeyError, match="reward"):
        agent.train_step(make_batch())


def test_nested_obs_layout_is_accepted():
    agent = DreamerAgent(symbolic_space(), A, make_cfg())
    flat = make_batch()
    nested = {k: v for k, v in flat.items() if not k.startswith("obs.")}
    nested["obs"] = {"symbolic": flat["obs.symbolic"]}
    torch.testing.assert_close(agent._prepare_batch(nested)["obs"]["symbolic"], flat["obs.symbolic"])
    td = TensorDict({**nested, "obs": TensorDict(nested["obs"], batch_size=[B, T])}, batch_size=[B, T])
    torch.testing.assert_close(agent._prepare_batch(td)["obs"]["symbolic"], flat["obs.symbolic"])


def test_bad_batch_is_rejected_with_a_clear_message():
    agent = DreamerAgent(symbolic_space(), A, make_cfg())
    batch = make_batch()
    del batch["is_terminal"]
    with pytest.raises(KeyError, match="is_terminal"):
        agent.train_step(batch)
    batch = make_batch()
    batch["action"][0, 0] = A
    with pytest.raises(ValueError, match="outside"):
        agent.train_step(batch)


# --------------------------------------------------------------------------- LLM parts


def test_late_fusion_features_respect_the_mask():
    agent = DreamerAgent(symbolic_space(), A, make_cfg("features.enabled=true", "features.n_features=8"))
    obs = {"symbolic": torch.randn(B, OBS_DIM)}
    f1, f2 = torch.randn(B, 8), torch.randn(B, 8)
    on, off = torch.ones(B), torch.zeros(B)
    assert not torch.allclose(agent.wm.embed(obs, f1, on), agent.wm.embed(obs, f2, on))
    assert torch.equal(agent.wm.embed(obs, f1, off), agent.wm.embed(obs, f2, off))
    base = agent.wm.encoder.out_dim
    assert torch.all(agent.wm.embed(obs, f1, off)[:, base:] == 0)
    assert torch.equal(agent.wm.embed(obs, f1, off)[:, :base], agent.wm.encoder(obs))
    metrics = agent.train_step(make_batch())
    assert np.isfinite(metrics["wm_loss"])
    assert DreamerAgent(symbolic_space(), A, make_cfg()).wm.feature_encoder is None


def test_prior_net_distillation():
    cfg = make_cfg("distill.enabled=true", "prior.enabled=true", "prior.gate=fixed")
    agent = LoReAgent(symbolic_space(), A, cfg)
    latent = torch.randn(5, agent.dreamer.wm.feat_dim)
    logits = agent.prior_net_logits(latent)
    assert logits.shape == (5, A)
    torch.testing.assert_close(logits.exp().sum(-1), torch.ones(5))
    before = [p.detach().clone() for p in agent.dreamer.wm.prior_net.parameters()]
    metrics = agent.train_step(make_batch())
    assert np.isfinite(metrics["loss_prior_net"]) and metrics["loss_prior_net"] > 0
    assert changed(before, list(agent.dreamer.wm.prior_net.parameters()))
    with pytest.raises(RuntimeError, match="distill.enabled"):
        LoReAgent(symbolic_space(), A, make_cfg()).prior_net_logits(latent)


def test_plan_callables_on_latents():
    method = LoReAgent(symbolic_space(), A, make_cfg())
    agent = method.dreamer
    out = method.act({"symbolic": torch.randn(B, OBS_DIM)}, torch.ones(B, dtype=torch.bool), agent.initial_state(B))
    fns = method.plan_callables()
    nxt = fns["step"](out.latent, torch.nn.functional.one_hot(out.action, A).float())
    assert nxt.shape == out.latent.shape
    assert torch.equal(nxt[:, :agent.cfg.model.deter], agent.wm.rssm.img_step(
        {"deter": out.state["deter"], "stoch": out.state["stoch"]}, out.state["prev_action"])[0]["deter"])
    assert torch.all(fns["reward"](nxt) == 0) and torch.all(fns["value"](nxt) == 0)  # untrained heads
    cont = fns["cont"](nxt)
    assert cont.shape == (B,) and torch.all((cont > 0) & (cont < 1))


def test_imag_last_limits_the_imagination_starts():
    cfg = make_cfg()
    cfg.dreamer.imag_last = 2  # optional knob (absent from DreamerConfig: read with getattr, default 0 = all)
    agent = DreamerAgent(symbolic_space(), A, cfg)
    data = agent._prepare_batch(make_batch())
    _, post, _ = agent.wm.loss(data, agent.generator)
    _, _, metrics, internals = agent.behaviour_losses(post, data)
    assert internals["feat"].shape[1] == B * 2
    assert np.isfinite(metrics["imag_return_mean"])


def test_advice_q_values_are_one_imagined_step_scored_by_reward_continue_and_critic():
    method = LoReAgent(symbolic_space(), A, make_cfg(), "cpu")
    agent = method.dreamer
    with torch.no_grad():  # give the heads something to say: random output layers
        for p in agent.critic.parameters():
            p.normal_(0, 0.3)
    m = 3
    start = agent.wm.rssm.initial_state(m)
    start = {"deter": torch.randn(m, start["deter"].shape[-1]), "stoch": start["stoch"]}
    dreamer_draws, state = agent.generator.get_state(), method.method_generator.get_state()
    q = method.advice_q_values(start, samples=2)
    heads = agent.critic.values(agent.wm.rssm.features(start)).shape[0]
    assert q.shape == (m, 2 * heads, A)
    assert torch.equal(agent.generator.get_state(), dreamer_draws)  # the method draws on its own stream
    method.method_generator.set_state(state)  # the same latent samples, computed by hand
    rep = {k: v.repeat_interleave(A, 0) for k, v in start.items()}
    for sample in range(2):
        nxt, _ = agent.wm.rssm.img_step(rep, torch.eye(A).repeat(m, 1), method.method_generator)
        feat = agent.wm.rssm.features(nxt)
        expected = agent.wm.reward(feat) + agent.cfg.dreamer.gamma * agent.wm.continue_prob(feat) * \
            agent.critic.values(feat)  # [heads, M*A]
        got = q[:, sample * heads:(sample + 1) * heads].permute(1, 0, 2).reshape(heads, -1)
        torch.testing.assert_close(got, expected.detach())
    assert q[:, 0].std() > 0 and not torch.allclose(q[:, 0], q[:, heads])  # samples differ
    q = q.mean(1)
    assert not torch.allclose(q[0], q[1])


def test_train_step_feeds_trust_and_temperature_only_when_the_prior_wants_them():
    batch = make_batch()
    batch["llm_source"] = torch.ones(B, T)
    full = LoReAgent(symbolic_space(), A, make_cfg("prior.enabled=true", "prior.trust=true"), "cpu")
    metrics = full.train_step(batch)
    assert "advice_value_z" in metrics and full.prior.trust.state_dict()["count"]["llm"] == 1
    plain = LoReAgent(symbolic_space(), A, make_cfg("prior.enabled=true"), "cpu")
    assert "advice_value_z" not in plain.train_step(batch)


# --------------------------------------------------------------------------- precision and compile


@pytest.mark.parametrize("pixels", [False, True])
def test_bf16_autocast_update_tracks_float32_and_keeps_float32_weights(pixels):
    space = pixel_space() if pixels else symbolic_space()
    runs = {}
    for precision in ("float32", "bfloat16"):
        torch.manual_seed(0)
        agent = LoReAgent(space, A, make_cfg(f"train.precision={precision}", "ablation=full"))
        runs[precision] = (agent, agent.train_step(TensorDict(make_batch(pixels=pixels), batch_size=[B, T])))
    (fp32, m32), (bf16, m16) = runs["float32"], runs["bfloat16"]
    assert fp32.dreamer.autocast_dtype is None and bf16.dreamer.autocast_dtype is torch.bfloat16
    finite = lambda m: {k for k, v in m.items() if np.isfinite(v)}  # noqa: E731  (some metrics are nan by design)
    assert finite(m16) == finite(m32) and m16["nonfinite_skips"] == 0.0
    # same weights and batch: bf16 rounding moves the world-model losses a little, a wrong cast would move
    # them a lot (the imagination is not compared: a rounded logit can flip a sampled latent there)
    for key in ("wm_loss", "loss_decoder", "loss_reward", "kl_dyn"):
        assert m16[key] == pytest.approx(m32[key], rel=0.05, abs=1e-3), key
    assert m16["wm_loss"] != m32["wm_loss"]  # autocast did run in bf16
    assert all(p.dtype == torch.float32 for p in bf16.parameters())
    out = bf16.act({"pixels" if pixels else "symbolic": make_batch(pixels=pixels)[
        "obs.pixels" if pixels else "obs.symbolic"][:, 0]}, torch.ones(B, dtype=torch.bool), bf16.initial_state(B))
    assert out.action.shape == (B,)


def test_compile_wraps_the_networks_in_place_and_keeps_checkpoint_keys():
    plain = DreamerAgent(symbolic_space(), A, make_cfg("features.enabled=true"))
    compiled = DreamerAgent(symbolic_space(), A, make_cfg("features.enabled=true", "train.compile=networks"))
    assert plain.compiled == []
    # the outermost networks only, never a module inside one already compiled
    assert {"encoder.mlp", "rssm.gru", "decoder.mlp", "reward_head", "continue_head", "net"} <= set(
        compiled.compiled)
    assert not any(a != b and b.startswith(f"{a}.") for a in compiled.compiled for b in compiled.compiled)
    assert compiled.wm.rssm.gru._compiled_call_impl is not None and plain.wm.rssm.gru._compiled_call_impl is None
    # compile is lazy: building costs nothing, and a checkpoint of either loads into the other
    assert list(compiled.state_dict()["wm"]) == list(plain.state_dict()["wm"])
    plain.load_state_dict(compiled.state_dict())


def test_bad_precision_is_a_config_error():
    with pytest.raises(ConfigError, match=r"train\.precision"):
        make_cfg("train.precision=float16")
