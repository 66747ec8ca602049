"""KL control of the prior's influence on the actor.

Three mutually exclusive modes (``prior.kl_mode``):

- ``lagrangian``: two parts with two jobs. (1) A hard trust region at act time: per state, beta is
  lowered (bisection, :func:`project_beta_to_kl`) until ``KL(pi_mix || pi_wm) <= kl_bound``, so the
  policy that acts never departs from the learned policy by more than ``kl_bound`` nats.
  (2) An absorption constraint on the actor: ``lambda * relu(KL(sg(pi_mix) || pi_wm) - delta)`` with
  dual ascent on ``lambda``; it pulls pi_wm towards the (bounded) mixed policy until they are within
  ``delta`` on replayed advised states, i.e. it distils the advice the agent acted on into the actor;
  as the actor absorbs it, the same bound admits a larger tilt next time (a trust-region curriculum);
- ``prior_reg``: pull the policy towards the prior, ``lambda_kl * w * KL(pi_wm || rho)``;
- ``bonus``: add ``beta_bonus * log rho(a)`` to the advantage of the taken action.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x [N]`` over entries with ``mask > 0``; 0 (keeping the graph) when none are."""
    if x.shape != mask.shape:
        raise ValueError(f"masked_mean: x {tuple(x.shape)} and mask {tuple(mask.shape)} differ")
    m = (mask > 0).to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def absorption_mean(x: torch.Tensor, mask: torch.Tensor, over: str) -> torch.Tensor:
    """The absorption term's reduction of per-state ``x [N]`` on advised states (``mask > 0``).

    ``advised``: :func:`masked_mean`, the mean over advised states, whatever their share of the batch.
    ``all``: ``sum(x * mask) / N``, so the term pulls on the actor in proportion to the share of states the
    advice covers, like every other per-state term of the actor loss. With advice on ~1% of the states the
    masked mean weighs each advised state ~100 times an ordinary one: measured on Crafter (20k env steps,
    advice on 1-3% of training steps) a trust a hair above 0.5 (absorption weight 0.01-0.05) was enough to
    collapse the actor onto the adversarial advisor's ``noop`` (89% of its evaluation actions, seed 2;
    docs/benchmark/crafter_actions.md).
    """
    if over == "advised":
        return masked_mean(x, mask)
    if over != "all":
        raise ValueError(f"prior.absorb_over must be advised|all, got {over!r}")
    if x.shape != mask.shape:
        raise ValueError(f"absorption_mean: x {tuple(x.shape)} and mask {tuple(mask.shape)} differ")
    return (x * (mask > 0).to(x.dtype)).sum() / max(x.numel(), 1)


def categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``KL(softmax p || softmax q)`` per row: ``[N,A], [N,A] -> [N]`` (nats)."""
    if p_logits.shape != q_logits.shape:
        raise ValueError(f"categorical_kl: shapes {tuple(p_logits.shape)} and {tuple(q_logits.shape)} differ")
    p_log = torch.log_softmax(p_logits, dim=-1)
    q_log = torch.log_softmax(q_logits, dim=-1)
    return (p_log.exp() * (p_log - q_log)).sum(-1)


def project_beta_to_kl(logits_wm: torch.Tensor, tilt: torch.Tensor, beta: torch.Tensor, bound: float,
                       iterations: int = 30) -> torch.Tensor:
    """Largest ``beta' <= beta [B]`` with ``KL(softmax(l_wm + beta' tilt) || softmax l_wm) <= bound`` -> ``[B]``.

    ``logits_wm [B,A]``, ``tilt [B,A]`` (the prior over T). The KL grows monotonically with beta
    (its derivative is ``beta * Var_mix(tilt) >= 0``), so bisection on ``[0, beta]`` finds it; rows
    already within the bound keep their beta exactly.
    """
    if bound <= 0:
        raise ValueError(f"kl bound must be > 0, got {bound}")
    if logits_wm.shape != tilt.shape or beta.shape != logits_wm.shape[:1]:
        raise ValueError(f"logits_wm {tuple(logits_wm.shape)}, tilt {tuple(tilt.shape)} and beta "
                         f"{tuple(beta.shape)} must be [B, A], [B, A], [B]")
    wm = logits_wm.detach().double()
    tilt = tilt.detach().double()
    beta = beta.detach().double()

    def kl_at(b: torch.Tensor) -> torch.Tensor:
        return categorical_kl(wm + b[:, None] * tilt, wm)

    within = kl_at(beta) <= bound
    lo, hi = torch.zeros_like(beta), beta.clone()
    for _ in range(iterations):
        mid = (lo + hi) / 2
        ok = kl_at(mid) <= bound
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    return torch.where(within, beta, lo).to(logits_wm.dtype)


def lagrangian_penalty(kl: torch.Tensor, lam: float, delta: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``lam * relu(kl [N] - delta)`` averaged over the masked entries -> scalar."""
    excess = torch.relu(kl - delta)
    if mask is None:
        return lam * excess.mean()
    return lam * masked_mean(excess, mask)


def dual_ascent(lam: float, kl_mean: float, delta: float, eta: float, lam_max: float) -> float:
    """One projected dual step ``clip(lam + eta * (kl_mean - delta), 0, lam_max)``."""
    if eta < 0 or lam_max < 0:
        raise ValueError(f"dual_ascent needs eta >= 0 and lam_max >= 0, got eta={eta}, lam_max={lam_max}")
    if kl_mean != kl_mean:  # NaN: keep lambda rather than poisoning it
        return float(lam)
    return float(min(max(lam + eta * (kl_mean - delta), 0.0), lam_max))


def prior_kl_regulariser(logits_pi: torch.Tensor, prior_logits: torch.Tensor, weight: torch.Tensor,
                         lambda_kl: float) -> torch.Tensor:
    """``lambda_kl * mean_i w_i KL(pi_i || rho_i)`` -> scalar, with ``w = mask * confidence [N]``.

    The mean is over ALL rows (rows without advice have ``w = 0``): this is the per-state penalty
    of the design notes (``(kl * w).mean()``), so its strength per advised state does not grow
    when advice is rare. The prior is a constant (no gradient reaches it).
    """
    kl = categorical_kl(logits_pi, prior_logits.detach())
    if weight.shape != kl.shape:
        raise ValueError(f"weight shape {tuple(weight.shape)} must be [N]={tuple(kl.shape)}")
    return lambda_kl * (kl * weight.detach()).mean()


def advantage_bonus(prior_logits: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor,
                    beta_bonus: float) -> torch.Tensor:
    """``beta_bonus * log_softmax(prior)[a] * (mask > 0)`` -> ``[N]`` (no gradient)."""
    if actions.dim() != 1 or prior_logits.shape[:1] != actions.shape:
        raise ValueError(f"actions must be [N] matching prior_logits [N,A]; got {tuple(actions.shape)} "
                         f"and {tuple(prior_logits.shape)}")
    log_rho = torch.log_softmax(prior_logits.detach(), dim=-1)
    chosen = log_rho.gather(-1, actions.long()[:, None]).squeeze(-1)
    return beta_bonus * chosen * (mask > 0).to(chosen.dtype)
