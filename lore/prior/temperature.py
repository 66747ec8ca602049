"""Temperature alignment: calibrate the LLM's confidence against the agent's own value estimates.

Temperature scaling (Guo et al. 2017) on labels the agent produces itself: on replayed states
where advice applied and the critic can tell the actions apart, the label is the action with the
highest one-step value ``argmax_a Q(s, a)`` (see :mod:`lore.prior.trust`), and

    T* = argmin_T  mean_i -log softmax(l_llm_i / T)[y_i]       over [t_min, t_max].

So T sharpens advice whose top action is usually the best one (T < 1), flattens advice that is
right less often than it claims (T > 1) and, for advice that is never right, goes to ``t_max``
(the prior becomes nearly uniform). With ``s = 1/T`` the objective ``-s l[y] + logsumexp(s l)`` is
convex in ``s``, hence unimodal in ``log T``: a coarse log grid finds the bracket and
golden-section search refines it inside. The answer is a grid edge only when the true minimum
lies at or beyond that edge.
"""

from __future__ import annotations

import math

import torch

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def calibration_nll(prior_logits: torch.Tensor, labels: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """Mean NLL of ``labels [N]`` under ``softmax(prior_logits [N,A] / T)`` for each T in ``temperatures [M]`` -> ``[M]``."""
    scaled = prior_logits[None, :, :] / temperatures[:, None, None]  # [M,N,A]
    log_q = torch.log_softmax(scaled, dim=-1)
    index = labels.long()[None, :, None].expand(temperatures.shape[0], -1, 1)
    return -log_q.gather(-1, index).squeeze(-1).mean(-1)


def fit_temperature(prior_logits: torch.Tensor, labels: torch.Tensor, t_min: float, t_max: float,
                    grid_points: int = 33, iterations: int = 60, fallback: float | None = None) -> float:
    """Temperature in ``[t_min, t_max]`` minimising the mean NLL of ``labels [N]`` under ``softmax(prior / T)``.

    ``prior_logits [N,A]`` (no gradient is taken). If the objective is flat over the whole range
    (every prior row is uniform, so T changes nothing) the data carry no information about T:
    ``fallback`` is returned if given, else the geometric mean of the bounds.
    """
    if prior_logits.dim() != 2 or labels.shape != prior_logits.shape[:1]:
        raise ValueError(f"prior_logits must be [N, A] and labels [N]; got {tuple(prior_logits.shape)} "
                         f"and {tuple(labels.shape)}")
    if prior_logits.shape[0] == 0:
        raise ValueError("fit_temperature needs at least one row")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= prior_logits.shape[1]):
        raise ValueError(f"labels must be action indices in [0, {prior_logits.shape[1]})")
    if not 0 < t_min <= t_max:
        raise ValueError(f"need 0 < t_min <= t_max, got t_min={t_min}, t_max={t_max}")
    if grid_points < 3:
        raise ValueError(f"grid_points must be >= 3, got {grid_points}")
    if t_min == t_max:
        return float(t_min)
    with torch.no_grad():
        prior = prior_logits.detach().double().cpu()
        labels = labels.detach().long().cpu()
        if not torch.isfinite(prior).all():
            raise ValueError("fit_temperature: prior logits contain NaN or inf")

        def objective(log_t: float) -> float:
            return calibration_nll(prior, labels, torch.tensor([math.exp(log_t)], dtype=torch.float64)).item()

        lo, hi = math.log(t_min), math.log(t_max)
        grid = torch.linspace(lo, hi, grid_points, dtype=torch.float64)
        values = calibration_nll(prior, labels, grid.exp())
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
        # on a tie (a flat stretch, e.g. advice that is always right) prefer the grid point
        log_t = min(reversed(candidates), key=lambda item: item[1])[0]
    return float(min(max(math.exp(log_t), t_min), t_max))
