"""Planner: CEM planning at act time, seeded by the LLM plan, with counters.

The agent side is a thin adapter: ``agent.plan_callables()`` returns
``{"step", "reward", "cont", "value"}`` callables on latent tensors (see :mod:`lore.plan.cem`);
a plain dict of those four callables is accepted too.

``plan.act == "plan"`` takes the argmax of the final distribution's first step;
``plan.act == "mix"`` adds ``mix_weight * log probs[0]`` to the policy logits and samples from that.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lore.config import PlanConfig
from lore.plan.cem import PlanResult, cem_plan, init_from_plan, init_from_prior, uniform_init
from lore.prior.mixing import gumbel_noise

PLAN_CALLABLE_KEYS = ("step", "reward", "cont", "value")


@dataclass
class PlanOutput:
    action: torch.Tensor
    """Chosen action per env ``[B]`` (long)."""
    first_probs: torch.Tensor
    """First-step plan distribution per env ``[B, A]``."""
    logits: torch.Tensor | None
    """``mix`` mode: ``policy_logits + mix_weight * log first_probs`` ``[B, A]``; None in ``plan`` mode."""
    planned_return: torch.Tensor
    """``[B]`` mean elite return of the last CEM iteration."""
    iterations: torch.Tensor
    """``[B]`` CEM iterations used (early stopping)."""
    init_source: list[str]
    """Per env: ``llm`` (seeded by the LLM plan), ``prior`` or ``uniform``."""
    results: list[PlanResult]


def resolve_plan_callables(agent: Any) -> dict:
    """The ``{step, reward, cont, value}`` callables from an agent adapter or a dict."""
    if isinstance(agent, Mapping):
        callables = agent
    elif hasattr(agent, "plan_callables"):
        callables = agent.plan_callables()
    else:
        raise TypeError(f"{type(agent).__name__} has no plan_callables(); pass the agent or a dict with "
                        f"keys {PLAN_CALLABLE_KEYS}")
    missing = [k for k in PLAN_CALLABLE_KEYS if not callable(callables.get(k))]
    if missing:
        raise ValueError(f"plan callables missing or not callable: {missing} (need {PLAN_CALLABLE_KEYS})")
    return dict(callables)


def _per_env_plans(llm_plan: Any, batch: int) -> list[list[int] | None]:
    """``None`` | one plan ``list[int]`` (batch 1) | one plan (or None) per env."""
    if llm_plan is None:
        return [None] * batch
    if isinstance(llm_plan, Sequence) and all(isinstance(a, (int,)) and not isinstance(a, bool)
                                              for a in llm_plan) and batch == 1:
        return [list(llm_plan)]
    if not isinstance(llm_plan, Sequence) or len(llm_plan) != batch:
        raise ValueError(f"llm_plan must be None, a list of action ids (batch 1) or one plan per env "
                         f"({batch}); got {llm_plan!r}")
    plans: list[list[int] | None] = []
    for env, plan in enumerate(llm_plan):
        if plan is not None and not isinstance(plan, Sequence):
            raise ValueError(f"llm_plan[{env}] must be a list of action ids or None, got {plan!r}")
        plans.append(None if plan is None else [int(a) for a in plan])
    return plans


class Planner:
    def __init__(self, cfg: PlanConfig, num_actions: int, gamma: float, seed: int = 0,
                 generator: torch.Generator | None = None):
        if cfg.elites > cfg.samples:
            raise ValueError(f"plan.elites ({cfg.elites}) must be <= plan.samples ({cfg.samples})")
        if cfg.every < 1:
            raise ValueError(f"plan.every must be >= 1, got {cfg.every}")
        if cfg.act not in ("plan", "mix"):
            raise ValueError(f"plan.act must be plan|mix, got {cfg.act!r}")
        if cfg.init not in ("llm", "prior", "uniform"):
            raise ValueError(f"plan.init must be llm|prior|uniform, got {cfg.init!r}")
        self.cfg = cfg
        self.num_actions = int(num_actions)
        self.gamma = float(gamma)
        self.generator = generator if generator is not None else torch.Generator().manual_seed(seed)
        self.plan_calls = 0
        self._recent = {"n": 0, "return": 0.0, "iterations": 0.0, "differs": 0.0, "n_differs": 0, "ms": 0.0,
                        "calls": 0, "seeded_llm": 0}

    def should_plan(self, act_step: int) -> bool:
        """Plan on every ``plan.every``-th act step (when planning is enabled)."""
        return self.cfg.enabled and act_step % self.cfg.every == 0

    def initial_probs(self, plan: list[int] | None, prior_logits: torch.Tensor | None) -> tuple[torch.Tensor, str]:
        """``[H, A]`` seeding distribution for one env and where it came from."""
        horizon, smoothing = self.cfg.horizon, self.cfg.smoothing
        if self.cfg.init == "llm" and plan:
            return init_from_plan(plan, horizon, self.num_actions, smoothing), "llm"
        if self.cfg.init in ("llm", "prior") and prior_logits is not None:
            return init_from_prior(prior_logits, horizon, smoothing), "prior"
        return uniform_init(horizon, self.num_actions), "uniform"

    def plan(self, agent: Any, latent: torch.Tensor, llm_plan: Any = None, prior_logits: torch.Tensor | None = None,
             policy_action: torch.Tensor | None = None, policy_logits: torch.Tensor | None = None,
             prior_mask: torch.Tensor | None = None, sample: bool = True) -> PlanOutput:
        """Plan from ``latent [B, D]`` (or ``[D]``) for each env; returns the chosen action(s).

        ``llm_plan``: per env list of action ids or None; ``prior_logits [B, A]`` (rows with
        ``prior_mask == 0`` are ignored); ``policy_action [B]`` for the ``plan_action_differs_frac``
        counter; ``policy_logits [B, A]`` is required in ``mix`` mode.
        """
        started = time.perf_counter()
        callables = resolve_plan_callables(agent)
        latent = latent.reshape(1, -1) if latent.dim() == 1 else latent
        if latent.dim() != 2:
            raise ValueError(f"latent must be [B, D] or [D], got {tuple(latent.shape)}")
        batch = latent.shape[0]
        plans = _per_env_plans(llm_plan, batch)
        if prior_logits is not None:
            prior_logits = torch.as_tensor(prior_logits).reshape(batch, -1)
            if prior_logits.shape[1] != self.num_actions:
                raise ValueError(f"prior_logits must be [B, {self.num_actions}], got {tuple(prior_logits.shape)}")
        if self.cfg.act == "mix" and policy_logits is None:
            raise ValueError("plan.act == 'mix' needs policy_logits [B, A]")

        results, sources = [], []
        for env in range(batch):
            use_prior = prior_logits is not None and (prior_mask is None or float(prior_mask[env]) > 0)
            init, source = self.initial_probs(plans[env], prior_logits[env] if use_prior else None)
            results.append(cem_plan(latent[env], callables["step"], callables["reward"], callables["cont"],
                                    callables["value"], self.num_actions, self.cfg.horizon, self.cfg.samples,
                                    self.cfg.elites, self.cfg.iterations, init, self.gamma,
                                    generator=self.generator, smoothing=self.cfg.smoothing))
            sources.append(source)

        device = latent.device
        first_probs = torch.stack([r.probs[0] for r in results]).to(device)
        logits = None
        if self.cfg.act == "plan":
            action = torch.tensor([r.action for r in results], dtype=torch.long, device=device)
        else:
            logits = policy_logits.detach() + self.cfg.mix_weight * torch.log(first_probs.clamp(min=1e-8))
            noise = gumbel_noise(logits.shape, self.generator, device).to(logits.dtype) if sample else 0.0
            action = torch.argmax(logits + noise, dim=-1)
        out = PlanOutput(action=action, first_probs=first_probs, logits=logits,
                         planned_return=torch.tensor([r.planned_return for r in results]),
                         iterations=torch.tensor([r.iterations_used for r in results]),
                         init_source=sources, results=results)
        self._record(out, policy_action, (time.perf_counter() - started) * 1000.0)
        return out

    def _record(self, out: PlanOutput, policy_action: torch.Tensor | None, ms: float) -> None:
        rec = self._recent
        self.plan_calls += 1
        rec["calls"] += 1
        rec["ms"] += ms
        rec["n"] += len(out.results)
        rec["return"] += float(out.planned_return.double().sum())
        rec["iterations"] += float(out.iterations.double().sum())
        rec["seeded_llm"] += sum(s == "llm" for s in out.init_source)
        if policy_action is not None:
            policy_action = torch.as_tensor(policy_action).reshape(-1).to(out.action.device)
            rec["differs"] += float((policy_action != out.action).sum())
            rec["n_differs"] += policy_action.numel()

    def metrics(self) -> dict[str, float]:
        """Means since the previous ``metrics()`` call (NaN when none); ``plan_calls`` is cumulative."""
        rec = self._recent

        def ratio(num: float, den: float) -> float:
            return num / den if den > 0 else math.nan

        out = {
            "plan_return": ratio(rec["return"], rec["n"]),
            "plan_iterations": ratio(rec["iterations"], rec["n"]),
            "plan_action_differs_frac": ratio(rec["differs"], rec["n_differs"]),
            "plan_seeded_llm_frac": ratio(rec["seeded_llm"], rec["n"]),
            "plan_ms": ratio(rec["ms"], rec["calls"]),
            "plan_calls": float(self.plan_calls),
        }
        self._recent = {k: 0 for k in rec}
        return out

    def state_dict(self) -> dict:
        return {"plan_calls": self.plan_calls, "recent": dict(self._recent),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.plan_calls = int(state["plan_calls"])
        self._recent = dict(state["recent"])
        self.generator.set_state(state["generator"])
