"""Evaluation on separate episodes with a fixed set of layouts, from the current policy.

By default the *learned* policy is evaluated without the LLM prior (``eval.with_prior``
is off): LoRe claims the prior speeds up learning, so the evaluated agent must not lean on
the advisor at test time. The torch RNG is forked so evaluation never perturbs training.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch

from lore.config import RunConfig


def crafter_score(rates_percent: list[float]) -> float:
    """Crafter score: exp(mean ln(1 + s_i)) - 1 over achievement success rates in percent.

    The formula itself lives in :func:`lore.analysis.stats.crafter_score` (rates in [0, 1]): the
    ``crafter_score`` column of ``eval.csv`` and the one of the statistics tables are the same function.
    """
    if not rates_percent:
        return float("nan")
    from lore.analysis.stats import crafter_score as score_from_rates

    return score_from_rates(np.asarray(rates_percent, dtype=np.float64) / 100.0)


def evaluate_policy(agent, env, cfg: RunConfig, device: torch.device, eval_index: int,
                    llm_inputs: Callable | None = None, should_stop: Callable[[], bool] | None = None, *,
                    act_env_step: int = 0, on_reset: Callable | None = None, on_act: Callable | None = None,
                    on_step: Callable | None = None) -> dict | None:
    """Run ``eval.episodes`` episodes; ``llm_inputs(env)`` supplies per-step features (no prior).

    Returns None, leaving the agent untouched, when ``should_stop()`` turns true (preemption).
    The keyword-only hooks serve ``lore eval`` (the trainer uses none of them): ``act_env_step`` is
    the env step the agent acts at (the prior's beta schedule reads it), ``on_reset(env, obs)`` runs
    after each episode's reset, ``on_act(out, action)`` after each act, and
    ``on_step(env, action, obs, reward, done)`` after each env step.
    """
    episodes = cfg.eval.episodes
    returns, lengths, successes = [], [], []
    achievement_hits: dict[str, list[bool]] = {}
    # Evaluation must leave training untouched: fork the global RNG, the agent's own generator
    # and the prior layer's running statistics, and restore them afterwards.
    generator_state = agent.generator.get_state() if getattr(agent, "generator", None) is not None else None
    prior_state = copy.deepcopy(agent.prior.state_dict()) if hasattr(agent, "prior") else None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed * 7919 + eval_index)
        if generator_state is not None:
            agent.generator.manual_seed(cfg.seed * 7919 + eval_index)
        for k in range(episodes):
            # The same layouts at every evaluation point: eval curves compare like with like.
            obs, info = env.reset(seed=10_000_000 + cfg.seed * 1000 + k)
            if on_reset is not None:
                on_reset(env, obs)
            state = agent.initial_state(1)
            is_first = torch.ones(1, dtype=torch.bool, device=device)
            total, length, done, success = 0.0, 0, False, 0.0
            while not done:
                if should_stop is not None and should_stop():
                    _restore(agent, generator_state, prior_state)
                    return None
                obs_t = {key: torch.as_tensor(np.asarray(v)[None], device=device) for key, v in obs.items()}
                extra = llm_inputs(env) if llm_inputs is not None else None
                out = agent.act(obs_t, is_first, state, extra, act_env_step, sample=not cfg.eval.greedy)
                state = out.state
                action = int(out.action[0].item())
                if on_act is not None:
                    on_act(out, action)
                obs, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                length += 1
                done = bool(terminated or truncated)
                if on_step is not None:
                    on_step(env, action, obs, float(reward), done)
                is_first = torch.zeros(1, dtype=torch.bool, device=device)
            success = float(info.get("success", 0.0))
            returns.append(total)
            lengths.append(length)
            successes.append(success)
            for name, unlocked in (info.get("achievements") or {}).items():
                achievement_hits.setdefault(name, []).append(bool(unlocked))
    _restore(agent, generator_state, prior_state)
    result = {
        "success_rate": float(np.mean(successes)),
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "episodes": episodes,
    }
    if achievement_hits:
        rates = {f"ach_{name}": float(np.mean(hits)) for name, hits in sorted(achievement_hits.items())}
        result.update(rates)
        result["crafter_score"] = crafter_score([100.0 * r for r in rates.values()])
    return result


def _restore(agent, generator_state, prior_state) -> None:
    if generator_state is not None:
        agent.generator.set_state(generator_state)
    if prior_state is not None:
        agent.prior.load_state_dict(prior_state)
