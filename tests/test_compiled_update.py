"""``train.compile: update``: the update and the act step as whole graphs, matching eager within float tolerance.

Compiling costs about a minute on two cores, so one module-scoped pair of agents serves every test here.
"""

import copy
import math

import gymnasium
import numpy as np
import pytest
import torch

from lore.config import ConfigError, build_config, drop_retired
from lore.dreamer.agent import compile_options
from lore.method import LoReAgent

pytestmark = pytest.mark.slow  # the first compile takes minutes on two cores: schedule it early

OBS_DIM, A, B, T, N_FEAT = 6, 4, 2, 4, 8
# full without the trust, so that every advised state is absorbed (uninformed trust absorbs nothing)
SETTINGS = ["model.preset=debug", "ablation=full", "prior.trust=false", "dreamer.horizon=3",
            f"features.n_features={N_FEAT}"]


def space():
    return gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)})


def batch(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = {
        "obs.symbolic": torch.randn(B, T, OBS_DIM, generator=g),
        "action": torch.randint(0, A, (B, T), generator=g),
        "reward": (torch.rand(B, T, generator=g) < 0.3).float(),
        "is_first": torch.zeros(B, T, dtype=torch.bool),
        "is_terminal": torch.zeros(B, T, dtype=torch.bool),
        "llm_prior_logits": torch.randn(B, T, A, generator=g) * 3.0,
        "llm_mask": (torch.rand(B, T, generator=g) < 0.6).float(),
        "llm_confidence": torch.full((B, T), 0.9),
        "llm_beta": torch.full((B, T), 0.5),
        "llm_source": torch.ones(B, T),
        "llm_features": torch.randn(B, T, N_FEAT, generator=g),
        "llm_features_mask": torch.ones(B, T),
    }
    out["is_first"][:, 0] = True
    out["is_first"][1, 2] = True  # an episode start inside a sequence: the reset runs in the graph
    out["is_terminal"][1, 1] = True
    return out


@pytest.fixture(scope="module")
def pair():
    """(eager agent, compiled agent) with the same weights and generator state, each after the same 2 updates."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    eager = LoReAgent(space(), A, build_config(overrides=SETTINGS))
    compiled = LoReAgent(space(), A, build_config(overrides=[*SETTINGS, "train.compile=update"]))
    compiled.load_state_dict(copy.deepcopy(eager.state_dict()))
    for agent in (eager, compiled):
        agent.prior.lambda_kl = 0.5  # the dual variable starts at 0: give the absorption term a weight
    metrics = {"eager": [eager.train_step(batch(i)) for i in range(2)],
               "compiled": [compiled.train_step(batch(i)) for i in range(2)]}
    return eager, compiled, metrics


def close(a: float, b: float, tol: float = 1e-4) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol * max(1.0, abs(a))


def test_compiled_update_matches_eager_on_the_same_batches(pair):
    eager, compiled, metrics = pair
    for step, (m_eager, m_compiled) in enumerate(zip(metrics["eager"], metrics["compiled"], strict=True)):
        assert list(m_eager) == list(m_compiled)  # same metrics, same order (the CSV's columns)
        far = {k: (m_eager[k], m_compiled[k]) for k in m_eager if not close(m_eager[k], m_compiled[k])}
        assert not far, f"update {step}: {far}"
    # the updates moved the weights (a no-op on both sides would also "match") and moved them alike
    assert metrics["eager"][0]["grad_norm_wm"] > 0 and metrics["eager"][1]["loss_prior"] > 0
    for name in ("wm", "actor", "critic", "slow_critic"):
        for (key, a), b in zip(getattr(eager.dreamer, name).state_dict().items(),
                               getattr(compiled.dreamer, name).state_dict().values(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"{name}.{key}")
    torch.testing.assert_close(eager.dreamer.retnorm.high, compiled.dreamer.retnorm.high)


def test_compiled_act_matches_eager(pair):
    eager, compiled, _ = pair
    # the same weights on both sides (in place: the compiled graphs stay valid); after the updates above a
    # posterior sample may flip on a 1e-7 difference, which says nothing about the act step itself
    compiled.load_state_dict(copy.deepcopy(eager.state_dict()))
    g = torch.Generator().manual_seed(5)
    obs = {"symbolic": torch.randn(3, OBS_DIM, generator=g)}
    first = torch.tensor([True, False, True])  # a reset row between two rows that carry their state on
    state = eager.initial_state(3)
    state = {**state, "deter": state["deter"] + torch.randn(3, state["deter"].shape[-1], generator=g)}
    llm = {"prior_logits": torch.randn(3, A, generator=g), "mask": torch.ones(3), "confidence": torch.ones(3)}
    out = {}
    for name, agent in (("eager", eager), ("compiled", compiled)):
        agent.generator.manual_seed(11)
        out[name] = agent.act(obs, first, state, llm, 100)
    for field in ("logits_wm", "logits_mix", "beta", "u_entropy", "u_value_var", "latent"):
        torch.testing.assert_close(getattr(out["eager"], field), getattr(out["compiled"], field),
                                   rtol=1e-4, atol=1e-5, msg=lambda m, field=field: f"{field}: {m}")
    assert torch.equal(out["eager"].action, out["compiled"].action)


def test_the_compiled_update_is_whole_and_does_not_recompile(pair):
    _, compiled, _ = pair
    assert compile_options(torch.device("cpu"))["fullgraph"]  # a graph break would have raised, not fallen back
    assert compiled.dreamer.compiled == ["world_model_losses", "behaviour", "act"]
    # a third batch of the same shape, other values and other advice: the same graphs, no recompile
    with torch._dynamo.config.patch(error_on_recompile=True):
        other = batch(7)
        other["llm_mask"] = torch.zeros(B, T)  # no advised state: the NaN branch of the KL runs in the graph
        metrics = compiled.train_step(other)
    assert math.isnan(metrics["kl_mix_wm_train"]) and math.isfinite(metrics["wm_loss"])


def test_a_non_finite_loss_skips_its_step_in_the_compiled_update(pair):
    _, compiled, _ = pair
    before = [p.detach().clone() for p in compiled.dreamer.wm.parameters()]
    skips = compiled.dreamer.nonfinite_skips
    bad = batch(8)
    bad["reward"][0, 1] = float("nan")
    with torch._dynamo.config.patch(error_on_recompile=True):
        metrics = compiled.train_step(bad)
    assert compiled.dreamer.nonfinite_skips > skips and metrics["nonfinite_skips_step"] >= 1
    assert all(torch.equal(a, b) for a, b in zip(before, compiled.dreamer.wm.parameters(), strict=True))


@pytest.mark.parametrize(("value", "expected"), [(False, "off"), (True, "networks")])
def test_saved_configs_with_the_old_boolean_load(value, expected):
    data = drop_retired({"train": {"compile": value}})
    assert data["train"]["compile"] == expected
    assert build_config(data).train.compile == expected


def test_an_unknown_compile_mode_is_refused_with_its_name():
    with pytest.raises(ConfigError, match=r"train\.compile: .*graph.*not one of \['off', 'networks', 'update'\]"):
        build_config(overrides=["train.compile=graph"])
