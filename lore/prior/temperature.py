"""Temperature alignment of LLM logits to the policy's scale.

``T* = argmin_T mean_i KL(softmax l_wm_i || softmax(l_llm_i / T))`` over ``[t_min, t_max]``.
With ``s = 1/T`` the objective ``sum_i [-s <p_i, l_llm_i> + logsumexp(s l_llm_i)] + const`` is
convex in ``s`` (log-sum-exp is convex, the rest is linear), hence unimodal in ``log T`` as well:
a coarse log grid finds the bracket and golden-section search refines it inside. The answer is
a grid edge only when the true minimum lies at or beyond that edge.
"""

from __future__ import annotations

import math

import torch

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def mean_kl_at_temperature(p_log: torch.Tensor, prior_logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """Mean over rows of ``KL(p || softmax(prior / T))`` for each ``T`` in ``temperatures [M]`` -> ``[M]``.

    ``p_log [N,A]``: log-probabilities of the policy; ``prior_logits [N,A]``.
    """
    scaled = prior_logits[None, :, :] / temperatures[:, None, None]  # [M,N,A]
    q_log = torch.log_softmax(scaled, dim=-1)
    p = p_log.exp()[None]
    kl = (p * (p_log[None] - q_log)).sum(-1)  # [M,N]
    return kl.mean(-1)


def fit_temperature(logits_wm: torch.Tensor, prior_logits: torch.Tensor, t_min: float, t_max: float,
                    grid_points: int = 33, iterations: int = 60, fallback: float | None = None) -> float:
    """Temperature in ``[t_min, t_max]`` minimising the mean ``KL(softmax l_wm || softmax l_llm/T)``.

    ``logits_wm [N,A]``, ``prior_logits [N,A]`` (no gradient is taken). If the objective is flat
    over the whole range (e.g. every prior row is uniform, so T changes nothing) the data carry no
    information about T: ``fallback`` is returned if given, else the geometric mean of the bounds.
    """
    if logits_wm.dim() != 2 or logits_wm.shape != prior_logits.shape:
        raise ValueError(f"logits_wm and prior_logits must both be [N, A] and equal; got "
                         f"{tuple(logits_wm.shape)} and {tuple(prior_logits.shape)}")
    if logits_wm.shape[0] == 0:
        raise ValueError("fit_temperature needs at least one row")
    if not 0 < t_min <= t_max:
        raise ValueError(f"need 0 < t_min <= t_max, got t_min={t_min}, t_max={t_max}")
    if grid_points < 3:
        raise ValueError(f"grid_points must be >= 3, got {grid_points}")
    if t_min == t_max:
        return float(t_min)
    with torch.no_grad():
        p_log = torch.log_softmax(logits_wm.detach().double().cpu(), dim=-1)
        prior = prior_logits.detach().double().cpu()
        if not (torch.isfinite(p_log).all() and torch.isfinite(prior).all()):
            raise ValueError("fit_temperature: logits contain NaN or inf")

        def objective(log_t: float) -> float:
            return mean_kl_at_temperature(p_log, prior, torch.tensor([math.exp(log_t)], dtype=torch.float64)).item()

        lo, hi = math.log(t_min), math.log(t_max)
        grid = torch.linspace(lo, hi, grid_points, dtype=torch.float64)
        values = mean_kl_at_temperature(p_log, prior, grid.exp())
        if (values.max() - values.min()).item() <= 1e-12 * max(1.0, values.abs().max().item()):
            return float(fallback) if fallback is not None else math.sqrt(t_min * t_max)
        best = int(torch.argmin(values))
        # The minimum of a unimodal function lies between the grid neighbours of the best point.
        a = grid[max(best - 1, 0)].item()
        b = grid[min(best + 1, grid_points - 1)].item()
        c = b - _GOLDEN * (b - a)
        d = a + _GOLDEN * (b - a)
        fc, fd = objective(c), objective(d)
        for _ in range(iterations):
            if fc < fd:
                b, d, fd = d, c, fc
                c = b - _GOLDEN * (b - a)
                fc = objective(c)
            else:
                a, c, fc = c, d, fd
                d = a + _GOLDEN * (b - a)
                fd = objective(d)
        candidates = [((a + b) / 2, objective((a + b) / 2)), (grid[best].item(), values[best].item())]
        log_t = min(candidates, key=lambda item: item[1])[0]
    return float(min(max(math.exp(log_t), t_min), t_max))
