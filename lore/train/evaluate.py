"""Evaluation on separate episodes with a fixed set of layouts, from the current policy.

By default the *learned* policy is evaluated without the LLM prior (``eval.with_prior``
is off): LoRe claims the prior speeds up learning, so the evaluated agent must not lean on
the advisor at test time. The torch RNG is forked so evaluation never perturbs training.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from lore.config import RunConfig


@dataclass
class PolicyAct:
    """What :func:`evaluate_policy` reads from a reference policy's ``act()``: the action [B] and the state."""

    action: torch.Tensor
    state: dict


def crafter_score(rates_percent: list[float]) -> float:
    """Crafter score: exp(mean ln(1 + s_i)) - 1 over achievement success rates in percent.

    The formula itself lives in :func:`lore.envs.crafter.crafter_score` (rates in [0, 1]): the
    ``crafter_score`` column of ``eval.csv`` and the one of the statistics tables are the same function.
    """
    if not rates_percent:
        return float("nan")
    from lore.envs.crafter import crafter_score as score_from_rates

    return score_from_rates(np.asarray(rates_percent, dtype=np.float64) / 100.0)


def evaluate_policy(agent, env, cfg: RunConfig, device: torch.device, eval_index: int,
                    llm_inputs: Callable | None = None, should_stop: Callable[[], bool] | None = None, *,
                    act_env_step: int = 0, on_reset: Callable | None = None, on_act: Callable | None = None,
                    on_step: Callable | None = None, consult: Callable | None = None) -> dict | None:
    """Run ``eval.episodes`` episodes; ``llm_inputs(envs)`` supplies per-step features (no prior).

    ``env`` is one env or a list of identically built envs: episodes run side by side in waves of
    ``len(env)``, with one batched agent forward per step (episode ``k`` is always the layout
    ``reset(seed=10_000_000 + 1000 * seed + k)``; a finished episode's env idles until its wave ends).
    The agent's draws depend on the wave size, so every caller that must reproduce an ``eval.csv`` row
    builds ``eval.parallel`` envs (:func:`make_eval_envs`).

    Returns None, leaving the agent untouched, when ``should_stop()`` turns true (preemption).
    The keyword-only hooks serve ``lore eval`` (the trainer uses none of them): ``act_env_step`` is
    the env step the agent acts at (the prior's beta schedule reads it), ``on_reset(k, env, obs)`` runs
    after episode ``k``'s reset, ``on_act(out, actions)`` after each batched act, and
    ``on_step(k, env, action, obs, reward, done)`` after each env step of episode ``k``, and ``consult`` is
    passed to every :meth:`lore.method.agent.LoReAgent.act` (the LLM asked about the state being acted in).
    """
    envs = list(env) if isinstance(env, (list, tuple)) else [env]
    episodes = cfg.eval.episodes
    returns, lengths, successes = [0.0] * episodes, [0] * episodes, [0.0] * episodes
    achievement_hits: dict[str, list[bool]] = {}
    # Evaluation must leave training untouched: fork the global RNG, the agent's own generator
    # and the prior layer's running statistics, and restore them afterwards.
    generator_state = agent.generator.get_state() if getattr(agent, "generator", None) is not None else None
    prior_state = copy.deepcopy(agent.prior_state()) if hasattr(agent, "prior_state") else None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed * 7919 + eval_index)
        if generator_state is not None:
            agent.generator.manual_seed(cfg.seed * 7919 + eval_index)
        if hasattr(agent, "seed_eval_draws"):
            agent.seed_eval_draws(cfg.seed * 7919 + eval_index)
        for first in range(0, episodes, len(envs)):
            wave = list(range(first, min(first + len(envs), episodes)))
            finished = _run_wave(agent, envs[:len(wave)], wave, cfg, device, llm_inputs, should_stop,
                                 act_env_step, on_reset, on_act, on_step, consult)
            if finished is None:
                _restore(agent, generator_state, prior_state)
                return None
            for k, (total, length, info) in zip(wave, finished, strict=True):
                returns[k], lengths[k], successes[k] = total, length, float(info.get("success", 0.0))
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


def _run_wave(agent, envs: list, wave: list[int], cfg: RunConfig, device, llm_inputs, should_stop, act_env_step,
              on_reset, on_act, on_step, consult=None) -> list[tuple[float, int, dict]] | None:
    """Episodes ``wave`` side by side on ``envs``: ``[(return, length, last info)]``, None if stopped."""
    obs_list = []
    for k, e in zip(wave, envs, strict=True):
        # The same layouts at every evaluation point: eval curves compare like with like.
        obs, _ = e.reset(seed=10_000_000 + cfg.seed * 1000 + k)
        obs_list.append(obs)
        if on_reset is not None:
            on_reset(k, e, obs)
    n = len(envs)
    state = agent.initial_state(n)
    is_first = torch.ones(n, dtype=torch.bool, device=device)
    totals, lengths, infos, done = [0.0] * n, [0] * n, [{}] * n, [False] * n
    while not all(done):
        if should_stop is not None and should_stop():
            return None
        obs_t = {key: torch.as_tensor(np.stack([np.asarray(o[key]) for o in obs_list]), device=device)
                 for key in obs_list[0]}
        extra = llm_inputs(envs) if llm_inputs is not None else None
        asking = {"consult": consult} if consult is not None else {}  # policies without an LLM take no consult
        out = agent.act(obs_t, is_first, state, extra, act_env_step, sample=not cfg.eval.greedy, **asking)
        state = out.state
        actions = out.action.reshape(-1).cpu().numpy()
        if on_act is not None:
            on_act(out, actions)
        for i, e in enumerate(envs):
            if done[i]:  # idles (its observation repeats) until the wave ends
                continue
            obs, reward, terminated, truncated, info = e.step(int(actions[i]))
            obs_list[i] = obs
            totals[i] += float(reward)
            lengths[i] += 1
            done[i] = bool(terminated or truncated)
            if done[i]:
                infos[i] = info
            if on_step is not None:
                on_step(wave[i], e, int(actions[i]), obs, float(reward), done[i])
        is_first = torch.zeros(n, dtype=torch.bool, device=device)
    return list(zip(totals, lengths, infos, strict=True))


def make_eval_envs(cfg: RunConfig, seed: int, count: int | None = None) -> list:
    """``eval.parallel`` (at most ``eval.episodes``) eval envs built like the trainer's."""
    from lore.envs import make_env_from_config

    count = min(cfg.eval.parallel, cfg.eval.episodes) if count is None else count
    return [make_env_from_config(cfg.env, seed=10_000_000 + seed) for _ in range(count)]


def _restore(agent, generator_state, prior_state) -> None:
    if generator_state is not None:
        agent.generator.set_state(generator_state)
    if prior_state is not None:
        agent.load_prior_state(prior_state)
