"""Cross-entropy-method planning in the world model's latent space (LoRe layer C).

Discrete CEM: each of the ``H`` plan steps has its own categorical over the ``A`` actions. Every
iteration samples ``N`` action sequences, scores them by imagined return in the world model, and
refits the categoricals to the action frequencies of the ``K`` best (elites), mixed with a uniform
``smoothing`` so no action ever loses all support. The LLM's plan (or its action prior) only
seeds the first distribution: a wrong plan is corrected by the world model's own scores.

Score of a sequence from start state ``s_0`` (``s_{t+1} = step(s_t, a_t)``, ``r_t = reward(s_{t+1})``,
``c_t = cont(s_{t+1})``; DreamerV3 heads predict the reward and continuation of the transition
that led INTO a state)::

    R = sum_{t<H} gamma^t (prod_{k<t} c_k) r_t  +  gamma^H (prod_{k<H} c_k) V(s_H)

This module knows nothing about the agent's classes: it takes four callables on latent tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

StepFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``step(latent [N,D], action_onehot [N,A]) -> latent [N,D]``."""
HeadFn = Callable[[torch.Tensor], torch.Tensor]
"""``reward / cont / value (latent [N,D]) -> [N]`` (cont: a probability in [0, 1])."""


@dataclass
class PlanResult:
    action: int
    """First action of the final distribution (its argmax)."""
    probs: torch.Tensor
    """Final per-step distribution ``[H, A]``."""
    planned_return: float
    """Mean return of the last iteration's elites."""
    iterations_used: int
    elite_returns: torch.Tensor
    """Returns of the last iteration's elites ``[K]``, best first."""
    best_actions: torch.Tensor
    """Best sequence scored over all iterations ``[H]``."""
    best_return: float


# --------------------------------------------------------------------------- initial distributions


def _check_sizes(horizon: int, num_actions: int) -> None:
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    if num_actions < 1:
        raise ValueError(f"num_actions must be >= 1, got {num_actions}")


def _check_smoothing(smoothing: float) -> None:
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"smoothing must be in [0, 1], got {smoothing}")


def uniform_init(horizon: int, num_actions: int) -> torch.Tensor:
    """``[H, A]`` uniform distributions."""
    _check_sizes(horizon, num_actions)
    return torch.full((horizon, num_actions), 1.0 / num_actions)


def init_from_plan(plan_actions: list[int], horizon: int, num_actions: int, smoothing: float) -> torch.Tensor:
    """``[H, A]``: ``(1 - smoothing) * one_hot(plan[t]) + smoothing / A`` per step.

    Steps beyond the plan are uniform; a plan longer than ``horizon`` is truncated.
    """
    _check_sizes(horizon, num_actions)
    _check_smoothing(smoothing)
    probs = uniform_init(horizon, num_actions)
    for t, action in enumerate(list(plan_actions)[:horizon]):
        action = int(action)
        if not 0 <= action < num_actions:
            raise ValueError(f"plan action {action} at step {t} is out of range [0, {num_actions})")
        probs[t] = smoothing / num_actions
        probs[t, action] += 1.0 - smoothing
    return probs


def init_from_prior(prior_logits: torch.Tensor, horizon: int, smoothing: float = 0.0,
                    repeat: bool = False) -> torch.Tensor:
    """``[H, A]`` from an action prior ``[A]`` for the CURRENT state.

    Step 0 gets ``softmax(prior)`` (mixed with ``smoothing`` uniform); later steps are uniform, because
    the prior speaks about this state only — ``repeat=True`` uses it for every step instead.
    """
    prior_logits = torch.as_tensor(prior_logits).detach().float().cpu()
    if prior_logits.dim() != 1:
        raise ValueError(f"prior_logits must be [A], got {tuple(prior_logits.shape)}")
    if not torch.isfinite(prior_logits).all():
        raise ValueError("prior_logits contain NaN or inf")
    num_actions = prior_logits.shape[0]
    _check_sizes(horizon, num_actions)
    _check_smoothing(smoothing)
    first = (1.0 - smoothing) * torch.softmax(prior_logits, -1) + smoothing / num_actions
    probs = uniform_init(horizon, num_actions)
    if repeat:
        probs[:] = first
    else:
        probs[0] = first
    return probs


# --------------------------------------------------------------------------- scoring and CEM


def imagined_returns(start_latent: torch.Tensor, actions: torch.Tensor, step: StepFn, reward: HeadFn,
                     cont: HeadFn, value: HeadFn, num_actions: int, gamma: float) -> torch.Tensor:
    """Discounted imagined return of each sequence: ``start [1,D]``, ``actions [N,H]`` -> ``[N]``."""
    samples, horizon = actions.shape
    latent = start_latent.expand(samples, -1)
    total = torch.zeros(samples, dtype=torch.float64, device=start_latent.device)
    alive = torch.ones_like(total)  # gamma^t * prod_{k<t} c_k
    for t in range(horizon):
        onehot = F.one_hot(actions[:, t], num_actions).to(start_latent.dtype)
        latent = step(latent, onehot)
        total = total + alive * reward(latent).reshape(samples).double()
        alive = alive * gamma * cont(latent).reshape(samples).double()
    return total + alive * value(latent).reshape(samples).double()


def refit_probs(elite_actions: torch.Tensor, num_actions: int, smoothing: float) -> torch.Tensor:
    """Elite action frequencies per step, mixed with uniform: ``[K,H]`` -> ``[H,A]``."""
    freq = F.one_hot(elite_actions, num_actions).double().mean(0)
    return ((1.0 - smoothing) * freq + smoothing / num_actions).float()


def converged(probs: torch.Tensor, elite_actions: torch.Tensor, threshold: float = 0.99) -> bool:
    """Max probability above ``threshold`` at every step, or all elites the same sequence."""
    if bool((probs.max(-1).values > threshold).all()):
        return True
    return bool((elite_actions == elite_actions[:1]).all())


@torch.no_grad()
def cem_plan(start_latent: torch.Tensor, world_model_step: StepFn, reward_fn: HeadFn, continue_fn: HeadFn,
             value_fn: HeadFn, num_actions: int, horizon: int, samples: int, elites: int, iterations: int,
             init_probs: torch.Tensor | None, gamma: float, generator: torch.Generator | None = None,
             early_stop: bool = True, smoothing: float = 0.1) -> PlanResult:
    """Plan from one start latent ``[D]`` or ``[1, D]``; see the module docstring for the score.

    Sample 0 of every iteration is the mode of the current distribution (at iteration 0 that is the
    seeding plan itself), so the best sequence found so far is always re-scored (elitism).
    """
    _check_sizes(horizon, num_actions)
    _check_smoothing(smoothing)
    if not 1 <= elites <= samples:
        raise ValueError(f"need 1 <= elites <= samples, got elites={elites}, samples={samples}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    start = start_latent.reshape(1, -1) if start_latent.dim() == 1 else start_latent
    if start.dim() != 2 or start.shape[0] != 1:
        raise ValueError(f"start_latent must be [D] or [1, D], got {tuple(start_latent.shape)}")
    probs = uniform_init(horizon, num_actions) if init_probs is None else init_probs.detach().float().cpu().clone()
    if probs.shape != (horizon, num_actions):
        raise ValueError(f"init_probs must be [H={horizon}, A={num_actions}], got {tuple(probs.shape)}")
    if (probs < 0).any() or not torch.allclose(probs.sum(-1), torch.ones(horizon), atol=1e-4):
        raise ValueError("init_probs rows must be probability distributions (>= 0, summing to 1)")
    gen_device = generator.device if generator is not None else torch.device("cpu")

    best_actions, best_return = probs.argmax(-1), -float("inf")
    iterations_used = 0
    for _ in range(iterations):
        iterations_used += 1
        actions = torch.multinomial(probs.to(gen_device), samples, replacement=True, generator=generator).T
        actions = actions.cpu()
        actions[0] = probs.argmax(-1)
        returns = imagined_returns(start, actions.to(start.device), world_model_step, reward_fn, continue_fn,
                                   value_fn, num_actions, gamma).cpu()
        returns = torch.nan_to_num(returns, nan=-float("inf"))
        elite_returns, elite_idx = torch.topk(returns, elites)
        elite_actions = actions[elite_idx]
        if elite_returns[0].item() > best_return:
            best_return, best_actions = elite_returns[0].item(), elite_actions[0].clone()
        probs = refit_probs(elite_actions, num_actions, smoothing)
        if early_stop and converged(probs, elite_actions):
            break
    return PlanResult(action=int(probs[0].argmax()), probs=probs, planned_return=elite_returns.mean().item(),
                      iterations_used=iterations_used, elite_returns=elite_returns.float(),
                      best_actions=best_actions, best_return=best_return)
