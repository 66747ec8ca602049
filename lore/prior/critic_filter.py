"""The act-time critic filter: advice acts at a state only as far as the critic finds it better than the agent's
own policy there.

Anchors: the Q-filter of Nair et al. (2018), which applies a demonstrator's behaviour-cloning loss only where
the critic rates the demonstrated action above the policy's, and Critic-Guided Policy Reuse (CUP, Zhang et al.
2023), which follows a source policy at a state only where its expected advantage over the learner's is
positive. Here the comparison is made at act time, per state, with the one-step values the advice trust
already uses, ``Q(s, a) = r(s') + gamma * c(s') * V_k(s')`` over ``D`` draws (imagined latent samples x critic
heads), and the filter is the posterior share of draws in which following the advice is better:

    gain_d(s) = sum_a (rho(a) - pi(a)) Q_d(s, a)        rho = softmax(prior / T), pi = softmax(logits)
    f(s)      = mean_d 1[gain_d(s) > 0]                 where std_a mean_d Q(s, a) > min_gap
    f(s)      = 1                                       where the critic cannot tell the actions apart

so beta is multiplied by ``f``: where the critic knows, advice it finds worse is switched off and advice it is
unsure of acts at the share of draws that favour it; where it cannot tell (before the first reward), the other
controls (the trust, the allocation) decide alone.
"""

from __future__ import annotations

import torch


def advice_gain_draws(q_draws: torch.Tensor, prior_logits: torch.Tensor, logits: torch.Tensor,
                      temperature: float) -> torch.Tensor:
    """Per draw, the value of following the advice minus the value of the agent's own policy:
    ``Q [B, D, A], prior [B, A], logits [B, A] -> [B, D]`` (return-scale units of ``Q``)."""
    if q_draws.dim() != 3 or q_draws.shape[::2] != prior_logits.shape or prior_logits.shape != logits.shape:
        raise ValueError(f"q_draws {tuple(q_draws.shape)}, prior {tuple(prior_logits.shape)}, logits "
                         f"{tuple(logits.shape)} must be [B, D, A], [B, A], [B, A]")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    rho = torch.softmax(prior_logits.double() / temperature, -1)  # [B, A]
    pi = torch.softmax(logits.double(), -1)                        # [B, A]
    return torch.einsum("bda,ba->bd", q_draws.double(), rho - pi)


def informative_states(q_draws: torch.Tensor, min_gap: float) -> torch.Tensor:
    """``[B, D, A] -> [B]`` bool: the mean values spread across actions by more than ``min_gap``."""
    if not min_gap > 0:
        raise ValueError(f"min_gap must be > 0, got {min_gap}")
    return q_draws.double().mean(1).std(-1, unbiased=False) > min_gap


def critic_filter(q_draws: torch.Tensor, prior_logits: torch.Tensor, logits: torch.Tensor, temperature: float,
                  min_gap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(f [B] in [0, 1], informative [B] bool)``: the share of draws in which the advice beats the agent's own
    policy where the critic can tell the actions apart, 1 elsewhere (see the module docstring)."""
    gain = advice_gain_draws(q_draws, prior_logits, logits, temperature)  # [B, D]
    informative = informative_states(q_draws, min_gap)                  # [B]
    share = (gain > 0).double().mean(1)                                 # [B]
    return torch.where(informative, share, torch.ones_like(share)).to(logits.dtype), informative
