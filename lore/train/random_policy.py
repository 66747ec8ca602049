"""The uniform-random policy, evaluated by the same code as a trained agent.

:class:`UniformRandomPolicy` has the two methods :func:`lore.train.evaluate.evaluate_policy` calls on an
agent (``initial_state`` and ``act``) and a seeded ``generator``, so :func:`evaluate_random_policy` runs
the exact evaluation protocol of ``lore train``: the eval env built from ``cfg.env`` with the run's eval
seed, episode ``k`` on the layout ``reset(seed=10_000_000 + 1000 * cfg.seed + k)``, ``eval.episodes``
episodes, and the same metrics (``success_rate``, ``return_mean``, ..., for Crafter ``ach_*`` and
``crafter_score``). A random baseline measured this way is directly comparable with an ``eval.csv`` row.
"""

from __future__ import annotations

import torch

from lore.config import RunConfig
from lore.train.evaluate import PolicyAct, evaluate_policy, make_eval_envs


class UniformRandomPolicy:
    """Uniform over ``num_actions``; stateless; draws from its own generator (which the evaluation seeds)."""

    def __init__(self, num_actions: int, seed: int = 0):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.num_actions = int(num_actions)
        self.generator = torch.Generator().manual_seed(int(seed))

    def initial_state(self, batch: int) -> dict:
        return {}

    def act(self, obs, is_first, state, extra=None, env_step: int = 0, sample: bool = True) -> PolicyAct:
        batch = int(is_first.shape[0])
        action = torch.randint(self.num_actions, (batch,), generator=self.generator)
        return PolicyAct(action=action, state=state)


def evaluate_random_policy(cfg: RunConfig, eval_index: int = 0, env=None) -> dict:
    """One evaluation of the uniform-random policy with ``cfg``'s env, seed and ``eval.episodes``.

    ``eval_index`` seeds the policy's draws as the trainer's ``eval_index``-th evaluation seeds the
    agent's (``7919 * seed + eval_index``); the layouts do not depend on it. ``env``: eval envs to
    reuse, one or a list (default: built like the trainer's, :func:`lore.train.evaluate.make_eval_envs`).
    """

    own = env is None
    envs = make_eval_envs(cfg, cfg.seed) if own else (list(env) if isinstance(env, (list, tuple)) else [env])
    try:
        policy = UniformRandomPolicy(int(envs[0].action_space.n), seed=cfg.seed)
        result = evaluate_policy(policy, envs, cfg, torch.device("cpu"), eval_index)
    finally:
        if own:
            for e in envs:
                e.close()
    assert result is not None  # no should_stop: it always finishes
    return result
