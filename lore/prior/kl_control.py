"""KL control of the prior's influence on the actor (``prior.kl_mode: lagrangian``).

Two parts with two jobs. (1) A hard trust region at act time: per state, beta is lowered (bisection,
:func:`project_beta_to_kl`) until ``KL(pi_mix || pi_wm) <= kl_bound``, so the policy that acts never departs
from the learned policy by more than ``kl_bound`` nats. (2) An absorption constraint on the actor:
``lambda * relu(KL(sg(pi_mix) || pi_wm) - delta)`` with dual ascent on ``lambda`` (:func:`dual_ascent`); it
pulls pi_wm towards the (bounded) mixed policy until they are within ``delta`` on replayed advised states,
i.e. it distils the advice the agent acted on into the actor; as the actor absorbs it, the same bound admits
a larger tilt next time (a trust-region curriculum).
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x [N]`` over entries with ``mask > 0``; 0 (keeping the graph) when none are."""
    if x.shape != mask.shape:
        raise ValueError(f"masked_mean: x {tuple(x.shape)} and mask {tuple(mask.shape)} differ")
    m = (mask > 0).to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``KL(softmax p || softmax q)`` per row: ``[N,A], [N,A] -> [N]`` (nats)."""
    if p_logits.shape != q_logits.shape:
        raise ValueError(f"categorical_kl: shapes {tuple(p_logits.shape)} and {tuple(q_logits.shape)} differ")
    p_log = torch.log_softmax(p_logits, dim=-1)
    q_log = torch.log_softmax(q_logits, dim=-1)
    return (p_log.exp() * (p_log - q_log)).sum(-1)


def absorption_loss(logits: torch.Tensor, prior: torch.Tensor, mask: torch.Tensor, beta: torch.Tensor,
                    weight: torch.Tensor, lambda_kl: torch.Tensor, temperature: torch.Tensor,
                    delta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``lambda * masked_mean(w * relu(KL(sg(pi_mix) || pi_wm) - delta))`` and the trust-weighted KL it constrains.

    logits [N, A] (with grad), prior [N, A] (zero where mask is 0), mask, beta, weight [N]; lambda_kl and
    temperature 0-dim. The KL returned is ``delta + masked_mean(w * (KL - delta))``, NaN where no row is absorbed.
    """
    target = (logits + (prior.detach().to(logits.dtype) / temperature) * beta.detach()[:, None]).detach()
    kl = categorical_kl(target, logits)
    loss = lambda_kl * masked_mean(torch.relu(kl - delta) * weight, mask)
    absorbed = ((mask > 0) & (weight > 0)).any()
    kl_weighted = delta + masked_mean(weight * (kl.detach() - delta), mask)
    return loss, torch.where(absorbed, kl_weighted, torch.full_like(kl_weighted, float("nan")))


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
    if bool(within.all()):  # nothing to bisect
        return beta.to(logits_wm.dtype)
    lo, hi = torch.zeros_like(beta), beta.clone()
    for _ in range(iterations):
        mid = (lo + hi) / 2
        ok = kl_at(mid) <= bound
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    return torch.where(within, beta, lo).to(logits_wm.dtype)


def dual_ascent(lam: float, kl_mean: float, delta: float, eta: float, lam_max: float) -> float:
    """One projected dual step ``clip(lam + eta * (kl_mean - delta), 0, lam_max)``."""
    if eta < 0 or lam_max < 0:
        raise ValueError(f"dual_ascent needs eta >= 0 and lam_max >= 0, got eta={eta}, lam_max={lam_max}")
    if kl_mean != kl_mean:  # NaN: keep lambda rather than poisoning it
        return float(lam)
    return float(min(max(lam + eta * (kl_mean - delta), 0.0), lam_max))
