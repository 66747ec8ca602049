"""The LLM prior layer: mixing, gate, temperature, KL control, distillation trust."""

from __future__ import annotations

import dataclasses
import io
import math

import pytest
import torch

from lore.config import DistillConfig, PriorConfig
from lore.prior.distill import DistillationMonitor
from lore.prior.gate import EMANormalizer
from lore.prior.kl_control import categorical_kl, dual_ascent, masked_mean
from lore.prior.layer import PriorLayer
from lore.prior.mixing import gumbel_sample_pair, mix_logits, normalise_prior_logits


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny tensors: a second intra-op thread only adds synchronisation (badly so on a loaded machine)
    torch.set_num_threads(1)
    yield


A = 5


def prior_cfg(**overrides) -> PriorConfig:
    base = dict(enabled=True, dropout=0.0)
    base.update(overrides)
    return PriorConfig(**base)


def uncertainty(batch: int, entropy=1.0, value_var=0.1, disagreement=0.01) -> dict:
    return {"entropy": torch.full((batch,), float(entropy)), "value_var": torch.full((batch,), float(value_var)),
            "disagreement": torch.full((batch,), float(disagreement))}


def pin_normalisers(layer: PriorLayer, mean: float = 1.0) -> None:
    """Freeze the running means of the uncertainty signals at ``mean`` (an act call barely moves them)."""
    for normaliser in layer.normalisers:
        normaliser.load_state_dict({"mean": mean, "sq": mean * mean + 1.0, "count": 10**12, "decay": 1.0 - 1e-9})


# --------------------------------------------------------------------------- mixing


def test_beta_zero_gives_the_base_policy_actions_with_the_same_noise():
    gen = torch.Generator().manual_seed(0)
    logits_wm = torch.randn(4096, A, generator=gen)
    prior = torch.randn(4096, A, generator=gen) * 5
    logits_mix = mix_logits(logits_wm, prior, torch.zeros(4096), temperature=1.0)
    a_mix, a_wm = gumbel_sample_pair(logits_wm, logits_mix, gen)
    assert torch.equal(a_mix, a_wm)
    # The samples are real samples of the policy (not its argmax).
    assert (a_wm != logits_wm.argmax(-1)).float().mean() > 0.2


def test_gumbel_pair_samples_each_softmax():
    gen = torch.Generator().manual_seed(1)
    logits_wm = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).expand(20000, 3)
    logits_mix = torch.log(torch.tensor([[0.1, 0.3, 0.6]])).expand(20000, 3)
    a_mix, a_wm = gumbel_sample_pair(logits_wm, logits_mix, gen)
    assert torch.allclose(torch.bincount(a_wm, minlength=3) / 20000.0, torch.tensor([0.7, 0.2, 0.1]), atol=0.015)
    assert torch.allclose(torch.bincount(a_mix, minlength=3) / 20000.0, torch.tensor([0.1, 0.3, 0.6]), atol=0.015)


def test_large_beta_with_one_hot_prior_dominates():
    gen = torch.Generator().manual_seed(2)
    n, target = 4000, 3
    logits_wm = torch.randn(n, A, generator=gen) * 2
    prior = normalise_prior_logits(torch.nn.functional.one_hot(torch.full((n,), target), A).float() * 100.0)
    logits_mix = mix_logits(logits_wm, prior, torch.full((n,), 5.0), temperature=1.0)
    a_mix, a_wm = gumbel_sample_pair(logits_wm, logits_mix, gen)
    assert (a_mix == target).float().mean() > 0.95
    assert (a_wm == target).float().mean() < 0.5


def test_normalise_prior_logits_range_and_errors():
    out = normalise_prior_logits(torch.tensor([[3.0, -float("inf"), 0.0, 50.0]]), clip=10.0)
    assert out.max() <= 0.0 and out.min() >= -10.0
    assert out[0, 1] == -10.0 and out.argmax() == 3
    with pytest.raises(ValueError, match="NaN"):
        normalise_prior_logits(torch.tensor([[float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="every action"):
        normalise_prior_logits(torch.tensor([[-float("inf"), -float("inf")]]))


def test_mix_logits_rejects_bad_shapes():
    with pytest.raises(ValueError, match="beta"):
        mix_logits(torch.zeros(3, A), torch.zeros(3, A), torch.zeros(2), 1.0)
    with pytest.raises(ValueError, match="prior_logits shape"):
        mix_logits(torch.zeros(3, A), torch.zeros(3, A + 1), torch.zeros(3), 1.0)
    with pytest.raises(ValueError, match="temperature"):
        mix_logits(torch.zeros(3, A), torch.zeros(3, A), torch.zeros(3), 0.0)


def test_gradients_never_reach_the_prior_logits():
    for mode in ("lagrangian", "none"):
        layer = PriorLayer(prior_cfg(gate="fixed", kl_mode=mode, kl_delta=0.0), A, num_envs=6)
        layer.lambda_kl = 1.0
        logits_wm = torch.randn(6, A, requires_grad=True)
        prior = torch.randn(6, A, requires_grad=True)
        mask = torch.tensor([1.0, 1, 1, 0, 1, 1])
        logits_mix, beta = layer.act(logits_wm, prior, mask, uncertainty(6), env_step=0)
        loss, _ = layer.actor_loss(logits_wm, prior, mask, beta)
        (logits_mix.logsumexp(-1).sum() + loss).backward()
        assert prior.grad is None or torch.all(prior.grad == 0), mode
        assert logits_wm.grad is not None and logits_wm.grad.abs().sum() > 0, mode


# --------------------------------------------------------------------------- gate


def test_ema_normalizer_tracks_mean_and_variance():
    gen = torch.Generator().manual_seed(4)
    norm = EMANormalizer(0.99)
    for _ in range(2000):
        norm.update(3.0 + 2.0 * torch.randn(8, generator=gen))
    assert abs(norm.mean - 3.0) < 0.3 and abs(math.sqrt(norm.var) - 2.0) < 0.3


def test_layer_gate_is_beta_max_times_u_without_memory():
    # u = H / log A, beta = beta_max * u, whatever the gate saw before (no hysteresis), and whatever the
    # value spread and the disagreement (logged, not read by the gate).
    entropies = [0.2, 1.5, 0.6, 0.1, 3.0, 0.6, 0.2]
    for full_at in (1.0, 0.5):  # beta = beta_max * min(1, u / gate_full_at)
        layer = PriorLayer(prior_cfg(gate="uncertainty", beta_max=0.8, gate_full_at=full_at), A, num_envs=1)
        pin_normalisers(layer)
        betas = []
        for i, h in enumerate(entropies):
            u = uncertainty(1, entropy=h, value_var=10.0 ** (i - 3), disagreement=10.0 ** (3 - i))
            _, beta = layer.act(torch.zeros(1, A), torch.ones(1, A), torch.ones(1), u, 0)
            betas.append(beta.item())
        expected = [0.8 * min(min(h / math.log(A), 1.0) / full_at, 1.0) for h in entropies]
        assert betas == pytest.approx(expected, abs=1e-6)
        # The same u gives the same beta before and after a high-uncertainty state.
        assert betas[2] == betas[5] and betas[0] == betas[6]


def test_beta_dropout_rate_and_reproducibility():
    layer = PriorLayer(prior_cfg(gate="fixed", dropout=0.3), A, num_envs=1)
    n = 20000
    _, beta = layer.act(torch.zeros(n, A), torch.ones(n, A), torch.ones(n), None, 0,
                        generator=torch.Generator().manual_seed(5))
    assert abs((beta == 0).float().mean().item() - 0.3) < 0.02
    _, again = layer.act(torch.zeros(n, A), torch.ones(n, A), torch.ones(n), None, 0,
                         generator=torch.Generator().manual_seed(5))
    assert torch.equal(beta, again)


# --------------------------------------------------------------------------- KL control


def test_lambda_rises_above_delta_and_falls_back_to_zero():
    layer = PriorLayer(prior_cfg(kl_mode="lagrangian", kl_delta=0.1, kl_eta=0.5, lambda_max=2.0), A)
    history = []
    for _ in range(20):
        layer.update_lambda(0.4)
        history.append(layer.lambda_kl)
    assert all(b >= a for a, b in zip(history, history[1:], strict=False)) and history[0] > 0
    assert history[-1] == 2.0  # clipped at lambda_max
    for _ in range(40):
        layer.update_lambda(0.0)
    assert layer.lambda_kl == 0.0
    assert dual_ascent(0.0, float("nan"), 0.1, 1.0, 1.0) == 0.0
    none_mode = PriorLayer(prior_cfg(kl_mode="none"), A)
    none_mode.update_lambda(5.0)
    assert none_mode.lambda_kl == 0.0


def test_lagrangian_hand_computed():
    # pi_wm = [0.5, 0.5]; beta = 1, T = 1, prior = [ln 4, 0] -> pi_mix = [0.8, 0.2].
    kl = 0.8 * math.log(1.6) + 0.2 * math.log(0.4)
    layer = PriorLayer(prior_cfg(kl_mode="lagrangian", kl_delta=0.1), 2)
    layer.lambda_kl = 2.0
    logits_wm = torch.zeros(2, 2, requires_grad=True)
    prior = torch.tensor([[math.log(4.0), 0.0], [5.0, 0.0]])
    loss, metrics = layer.actor_loss(logits_wm, prior, torch.tensor([1.0, 0.0]), torch.ones(2))
    assert metrics["kl_mix_wm"] == pytest.approx(kl, abs=1e-6)
    assert loss.item() == pytest.approx(2.0 * (kl - 0.1), abs=1e-6)
    assert categorical_kl(torch.tensor([[math.log(4.0), 0.0]]), torch.zeros(1, 2)).item() == pytest.approx(kl)
    # the term averages over advised states only: more unadvised rows leave it unchanged
    rows = torch.cat([prior, prior[1:].expand(2, 2)])
    loss_4, _ = layer.actor_loss(torch.zeros(4, 2), rows, torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.ones(4))
    assert loss_4.item() == pytest.approx(loss.item(), abs=1e-6)
    assert masked_mean(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([1.0, 0.0, 1.0])).item() == pytest.approx(3.0)


def test_actor_loss_accepts_batch_time_shapes():
    layer = PriorLayer(prior_cfg(kl_mode="lagrangian", kl_delta=0.0), A, num_envs=4)
    layer.lambda_kl = 1.0
    logits = torch.randn(4, 6, A, requires_grad=True)
    loss, metrics = layer.actor_loss(logits, torch.randn(4, 6, A), torch.ones(4, 6), torch.full((4, 6), 0.5))
    loss.backward()
    assert loss.item() > 0 and metrics["kl_mix_wm"] > 0 and logits.grad is not None
    with pytest.raises(ValueError, match="mask"):
        layer.actor_loss(logits, torch.randn(4, 6, A), torch.ones(4, 5), torch.ones(4, 6))


# --------------------------------------------------------------------------- layer API


def test_placeholder_compatible_api():
    layer = PriorLayer(PriorConfig(), A, num_envs=3)  # default: disabled
    logits = torch.randn(3, A)
    logits_mix, beta = layer.act(logits, torch.randn(3, A), torch.ones(3), uncertainty(3), env_step=10)
    assert torch.equal(logits_mix, logits) and torch.equal(beta, torch.zeros(3))
    loss, _ = layer.actor_loss(logits.requires_grad_(), torch.randn(3, A), torch.ones(3), beta)
    assert loss.item() == 0.0
    layer.update_lambda(1.0)
    assert not layer.wants_advice_values()
    assert layer.beta_max == 0.0
    metrics = layer.metrics()
    for key in ("beta_mean", "beta_std", "u_entropy", "u_value_var", "u_disagreement", "kl_mix_wm", "lambda_kl",
                "temperature", "entropy_wm", "entropy_mix", "gate_open_frac", "beta_max_now", "trust_llm",
                "kl_bound_active_frac"):
        assert key in metrics, key
    # Checkpoints of earlier releases (the placeholder layer's {T, lambda}, version 1) are refused by name.
    with pytest.raises(ValueError, match="version"):
        layer.load_state_dict({"temperature": 2.0, "lambda_kl": 0.5})
    with pytest.raises(ValueError, match="version"):
        layer.load_state_dict({**layer.state_dict(), "version": 1})

    fixed = PriorLayer(prior_cfg(gate="fixed", beta_max=0.7, temperature=2.0), A, num_envs=3)
    prior = torch.randn(3, A)
    logits_mix, beta = fixed.act(logits.detach(), prior, torch.tensor([1.0, 0.0, 1.0]), None, env_step=0)
    assert beta.tolist() == pytest.approx([0.7, 0.0, 0.7])
    assert torch.allclose(logits_mix, logits.detach() + beta[:, None] * prior / 2.0)


def test_uncertainty_gate_names_a_missing_signal():
    layer = PriorLayer(prior_cfg(gate="uncertainty"), A, num_envs=2)
    with pytest.raises(ValueError, match="entropy"):
        layer.act(torch.zeros(2, A), torch.zeros(2, A), torch.ones(2),
                  {"value_var": torch.ones(2), "disagreement": torch.ones(2)}, 0)
    # the logged diagnostics may be missing: they are reported as not computed (NaN)
    _, beta = layer.act(torch.zeros(2, A), torch.zeros(2, A), torch.ones(2), {"entropy": torch.full((2,), 0.5)}, 0)
    metrics = layer.metrics()
    assert beta.tolist() == pytest.approx([0.5 / math.log(A) / 0.5] * 2)
    assert math.isnan(metrics["u_value_var"]) and math.isnan(metrics["u_disagreement"])
    assert metrics["u_entropy"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="logits_wm"):
        layer.act(torch.zeros(2, A + 1), torch.zeros(2, A + 1), torch.ones(2), uncertainty(2), 0)
    with pytest.raises(ValueError, match="NaN/inf"):
        layer.act(torch.zeros(2, A), torch.full((2, A), float("nan")), torch.ones(2), uncertainty(2), 0)
    # NaN in rows without advice is ignored (those rows get beta = 0 anyway).
    logits_mix, beta = layer.act(torch.zeros(2, A), torch.full((2, A), float("nan")), torch.zeros(2),
                                 uncertainty(2), 0)
    assert torch.isfinite(logits_mix).all() and beta.sum() == 0


def test_metrics_report_recent_act_calls():
    layer = PriorLayer(prior_cfg(gate="fixed", beta_max=0.5), A, num_envs=2)
    layer.act(torch.zeros(2, A), torch.ones(2, A), torch.tensor([1.0, 0.0]), uncertainty(2, entropy=2.0), 0)
    layer.act(torch.zeros(2, A), torch.ones(2, A), torch.tensor([1.0, 1.0]), uncertainty(2, entropy=4.0), 0)
    metrics = layer.metrics()
    assert metrics["beta_mean"] == pytest.approx(0.375)
    assert metrics["beta_std"] == pytest.approx(math.sqrt(0.5**2 * 3 / 4 - 0.375**2))
    assert metrics["u_entropy"] == pytest.approx(3.0)
    assert metrics["entropy_wm"] == pytest.approx(math.log(A))
    # gate_open_frac: share of env steps whose beta is > 0 (env 0 had no advice at the first call).
    assert metrics["gate_open_frac"] == 0.75 and metrics["beta_max_now"] == 0.5
    assert math.isnan(layer.metrics()["beta_mean"])  # nothing since the last call


def test_state_dict_round_trip_resumes_identically():
    cfg = prior_cfg(gate="uncertainty", dropout=0.2, kl_mode="lagrangian", kl_bound=0.1, trust=True)
    gen = torch.Generator().manual_seed(9)
    inputs = [(torch.randn(3, A, generator=gen), 3.0 * torch.randn(3, A, generator=gen),
               (torch.rand(3, generator=gen) > 0.3).float(),
               {k: torch.rand(3, generator=gen) for k in ("entropy", "value_var", "disagreement")},
               torch.randint(0, 4, (3,), generator=gen))
              for _ in range(40)]
    original = PriorLayer(cfg, A, num_envs=3)
    act_gen = torch.Generator().manual_seed(10)
    for step, (logits, prior, mask, u, source) in enumerate(inputs[:20]):
        _, beta = original.act(logits, prior, mask, u, step, generator=act_gen, source=source)
        _, metrics = original.actor_loss(logits, prior, mask, beta)
        original.update_lambda(metrics["kl_mix_wm"] + 0.3)
    # Evidence from every source (the trust is part of the state).
    original.observe_advice_values(torch.randn(60, A, generator=gen), torch.randn(60, A, generator=gen),
                                   torch.arange(60) % 3 + 1)
    assert all(original.trust.value(name) != 0.5 for name in ("llm", "plan", "surrogate"))

    buffer = io.BytesIO()
    torch.save({"prior": original.state_dict(), "gen": act_gen.get_state()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=False)
    resumed = PriorLayer(cfg, A, num_envs=3)
    resumed.load_state_dict(saved["prior"])
    resumed_gen = torch.Generator()
    resumed_gen.set_state(saved["gen"])
    assert saved["prior"]["version"] == 3 and "gate_open" not in saved["prior"]

    for step, (logits, prior, mask, u, source) in enumerate(inputs[20:], start=20):
        mix_a, beta_a = original.act(logits, prior, mask, u, step, generator=act_gen, source=source)
        mix_b, beta_b = resumed.act(logits, prior, mask, u, step, generator=resumed_gen, source=source)
        assert torch.equal(mix_a, mix_b) and torch.equal(beta_a, beta_b)
    assert original.metrics() == resumed.metrics()
    assert original.state_dict() == resumed.state_dict()
    assert original.trust.value("llm") == resumed.trust.value("llm")


def test_other_batch_sizes_leave_the_state_alone():
    layer = PriorLayer(prior_cfg(gate="uncertainty"), A, num_envs=2)
    layer.act(torch.zeros(2, A), torch.ones(2, A), torch.ones(2), uncertainty(2), 0)
    before = layer.state_dict()
    _, beta = layer.act(torch.zeros(5, A), torch.ones(5, A), torch.ones(5), uncertainty(5, entropy=9.0), 0)
    assert beta.shape == (5,) and layer.state_dict() == before


def test_config_is_a_dataclass_copy_not_mutated():
    cfg = prior_cfg(gate="fixed")
    frozen = dataclasses.asdict(cfg)
    layer = PriorLayer(cfg, A)
    layer.act(torch.zeros(1, A), torch.ones(1, A), torch.ones(1), None, 0)
    layer.update_lambda(3.0)
    assert dataclasses.asdict(cfg) == frozen


# --------------------------------------------------------------------------- distillation trust


def test_distillation_monitor_trusts_only_after_min_samples_with_low_kl():
    cfg = DistillConfig(enabled=True, trust_kl=0.3, min_samples=10, check_every=4)
    monitor = DistillationMonitor(cfg)
    gen = torch.Generator().manual_seed(11)
    for i in range(10):
        llm = torch.randn(A, generator=gen) * 2
        assert not monitor.trusted(), i  # not before min_samples, however good the match
        monitor.observe(llm + 0.05 * torch.randn(A, generator=gen), llm)
    assert monitor.trusted()
    assert monitor.metrics()["priornet_kl"] < 0.05
    monitor.record_saved(3)
    assert monitor.llm_calls_saved == 3

    # Drift: a run of bad comparisons revokes the trust.
    for _ in range(10):
        monitor.observe(torch.tensor([5.0, 0, 0, 0, 0]), torch.tensor([0.0, 0, 0, 0, 5.0]))
    assert not monitor.trusted()

    state = monitor.state_dict()
    again = DistillationMonitor(cfg)
    again.load_state_dict(state)
    assert again.metrics() == monitor.metrics()


def test_distillation_monitor_not_trusted_with_high_kl():
    monitor = DistillationMonitor(DistillConfig(trust_kl=0.3, min_samples=8))
    gen = torch.Generator().manual_seed(12)
    net = torch.randn(40, A, generator=gen) * 3
    kl = monitor.observe(net, torch.randn(40, A, generator=gen) * 3)  # batched comparisons
    assert kl > 0.3 and monitor.samples == 40 and not monitor.trusted()
    with pytest.raises(ValueError, match="must both be"):
        monitor.observe(torch.zeros(A), torch.zeros(A + 1))


def test_lagrangian_gradient_moves_the_actor_towards_the_mix_and_not_into_collapse():
    # Closed form with sg(pi_mix): d/dl_wm of lam * KL(sg(pi_mix) || pi_wm) = lam * (pi_wm - pi_mix).
    layer = PriorLayer(prior_cfg(kl_mode="lagrangian", kl_delta=0.0), 3)
    layer.lambda_kl = 2.0
    logits = torch.tensor([[3.0, 0.0, 0.0]], requires_grad=True)  # the actor prefers action 0
    prior = torch.tensor([[0.0, 4.0, 0.0]])                         # the advice says action 1
    loss, _ = layer.actor_loss(logits, prior, torch.ones(1), torch.ones(1))
    loss.backward()
    pi_wm = torch.softmax(logits.detach(), -1)
    pi_mix = torch.softmax(logits.detach() + prior, -1)
    assert logits.grad[0].tolist() == pytest.approx((2.0 * (pi_wm - pi_mix))[0].tolist(), abs=1e-6)
    # A gradient step raises the advised action and lowers the preferred one: the policy is pulled
    # towards the mix, never made more deterministic on its own choice.
    stepped = torch.softmax(logits.detach() - 0.5 * logits.grad, -1)
    assert stepped[0, 1] > pi_wm[0, 1] and stepped[0, 0] < pi_wm[0, 0]


def test_act_time_kl_metric_is_measured_on_advised_states_only():
    layer = PriorLayer(prior_cfg(gate="fixed", beta_max=1.0), 3, num_envs=2)
    logits = torch.zeros(2, 3)
    prior = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 9.0]])
    layer.act(logits, prior, torch.tensor([1.0, 0.0]), None, env_step=0)  # env 1 has no advice
    expected = categorical_kl(prior[:1], logits[:1]).item()  # KL(softmax(0 + 1 * prior) || uniform)
    assert layer.metrics()["kl_mix_wm"] == pytest.approx(expected, rel=1e-5)
    layer.act(logits, prior, torch.zeros(2), None, env_step=1)
    assert math.isnan(layer.metrics()["kl_mix_wm"])  # nothing advised since the last read
