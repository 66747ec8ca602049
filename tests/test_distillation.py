"""PriorNet distillation end to end: the head learns a fixed synthetic prior from replay, the
monitor comes to trust it on held-out comparisons, and the controller's LLM calls then drop."""

import numpy as np
import torch
from test_dreamer_agent import A, make_batch, make_cfg, symbolic_space
from test_llm_controller import ProgrammedBackend, answer, query

from lore.llm.controller import LLMController
from lore.method import LoReAgent
from lore.prior.distill import DistillationMonitor

FIXED_PRIOR = torch.zeros(A)
FIXED_PRIOR[2] = 3.0  # the synthetic advice: action 2, p ~ 0.8


def test_priornet_learns_a_fixed_prior_and_calls_drop_once_trusted():
    torch.manual_seed(0)
    cfg = make_cfg("distill.enabled=true", "distill.min_samples=8", "distill.trust_kl=0.2",
                   "distill.check_every=4", "dreamer.wm_lr=1e-2", "llm.backend=scripted", "llm.cache_path=null",
                   "llm.controller.cooldown=0", "llm.controller.cooldown_after_success=0")
    agent = LoReAgent(symbolic_space(), A, cfg)
    monitor = DistillationMonitor(cfg.distill)
    # Held-out probes: posterior latents of observations the PriorNet is never trained on.
    probe_obs = make_batch(b=8, t=1, seed=999)["obs.symbolic"][:, 0]
    probe_latent = agent.act({"symbolic": probe_obs}, torch.ones(8, dtype=torch.bool), agent.initial_state(8)).latent

    def held_out_kl() -> float:
        with torch.no_grad():
            net = agent.prior_net_logits(probe_latent)
        return monitor.observe(net, FIXED_PRIOR.expand(8, A))

    kl_before = held_out_kl()
    for step in range(80):
        batch = make_batch(seed=step)
        batch["llm_prior_logits"] = FIXED_PRIOR.expand_as(batch["llm_prior_logits"]).clone()
        batch["llm_mask"] = torch.ones_like(batch["llm_mask"])
        agent.train_step(batch)
    kl_after = held_out_kl()
    assert kl_after < 0.5 * kl_before and kl_after < cfg.distill.trust_kl, (kl_before, kl_after)
    assert monitor.trusted()

    def surrogate(env_index):
        if not monitor.trusted():
            return None
        with torch.no_grad():
            return agent.prior_net_logits(probe_latent[:1])[0].numpy()

    def run_controller(with_surrogate: bool) -> int:
        backend = ProgrammedBackend([answer(best=2)] * 40)
        ctl = LLMController(cfg, None, [f"a{i}" for i in range(A)], "minigrid", backend=backend)
        if with_surrogate:
            ctl.set_surrogate(surrogate)
            ctl.on_heldout(lambda s, llm: monitor.observe(torch.as_tensor(s), torch.as_tensor(llm)))
        for step in range(20):
            ctl.maybe_request(step, [query(0, f"s{step}", beta=1.0)])
        ctl.close()
        return len(backend.requests)

    calls_without, calls_with = run_controller(False), run_controller(True)
    assert calls_without == 20
    assert calls_with == 20 // cfg.distill.check_every  # only the held-out checks reach the LLM
    assert monitor.trusted()  # the held-out checks agree with the distilled prior
    assert np.isfinite(monitor.metrics()["priornet_kl"])
