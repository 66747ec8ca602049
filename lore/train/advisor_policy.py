"""The offline advisor played as the policy, evaluated by the same code as a trained agent.

:class:`AdvisorPolicy` takes, at every step of every episode, the top action of
:class:`~lore.llm.scripted.ScriptedAdvisor`'s answer for the env's true state (``state_snapshot()``, read
through the evaluation's per-step ``llm_inputs`` hook), so :func:`evaluate_advisor_policy` gives what the
advice alone achieves under the exact protocol of ``lore train``'s evaluation (same layouts, episodes and
metrics). It is the reference a prior-guided agent is read against: the random policy is the floor, the
advisor played alone what following it to the letter would give.
"""

from __future__ import annotations

import numpy as np
import torch

from lore.config import RunConfig
from lore.train.evaluate import PolicyAct, evaluate_policy, make_eval_envs


class AdvisorPolicy:
    """The scripted advisor's top action for each env's snapshot (``extra``: one snapshot per env)."""

    def __init__(self, family: str, action_names: list[str], mode: str = "good", seed: int = 0):
        from lore.llm.scripted import ScriptedAdvisor

        self.family, self.action_names = family, list(action_names)
        self.advisor = ScriptedAdvisor(mode, seed=seed)
        self.generator = torch.Generator().manual_seed(int(seed))  # unused draws: the protocol seeds it

    def initial_state(self, batch: int) -> dict:
        return {}

    def act(self, obs, is_first, state, extra=None, env_step: int = 0, sample: bool = True) -> PolicyAct:
        if extra is None:
            raise ValueError("AdvisorPolicy needs the envs' snapshots as extra (evaluate_advisor_policy passes them)")
        actions = [int(np.argmax(self.advisor.advise(s, self.family, self.action_names,
                                                     with_features=False)["action_prior"]["logits"]))
                   for s in extra]
        return PolicyAct(action=torch.as_tensor(actions, dtype=torch.long), state=state)


def evaluate_advisor_policy(cfg: RunConfig, mode: str = "good", eval_index: int = 0) -> dict:
    """One evaluation of the advisor (``mode``: good / noisy / adversarial) with ``cfg``'s env, seed and
    ``eval.episodes``, on the layouts of a trained run's evaluation (:func:`~lore.train.evaluate.make_eval_envs`)."""

    envs = make_eval_envs(cfg, cfg.seed)
    try:
        policy = AdvisorPolicy(envs[0].family, list(envs[0].action_names), mode, seed=cfg.seed)
        result = evaluate_policy(policy, envs, cfg, torch.device("cpu"), eval_index,
                                 llm_inputs=lambda live: [e.state_snapshot() for e in live])
    finally:
        for e in envs:
            e.close()
    assert result is not None  # no should_stop: it always finishes
    return result
