"""Logit mixing of the world-model policy with the LLM prior, and paired Gumbel sampling.

``l_mix = l_wm + beta * stopgrad(l_llm / T)``: the prior tilts the policy in log space, so
``beta = 0`` gives back the base policy exactly and the prior can never make an action impossible.
"""

from __future__ import annotations

import torch

PRIOR_LOGIT_CLIP = 10.0
"""Default floor of normalised prior logits: log-probabilities live in ``[-PRIOR_LOGIT_CLIP, 0]``."""


def _check_logits(name: str, logits: torch.Tensor) -> None:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 2:
        raise ValueError(f"{name} must have shape [B, A], got {tuple(logits.shape)}")


def mix_logits(logits_wm: torch.Tensor, prior_logits: torch.Tensor, beta: torch.Tensor,
               temperature: float) -> torch.Tensor:
    """``logits_wm [B,A] + beta[B,None] * stopgrad(prior_logits [B,A] / T)`` -> ``[B,A]``.

    Gradients flow into ``logits_wm`` only: the prior and the gate value ``beta`` are constants
    to the actor (``beta`` is a function of the state's uncertainty, not a trained quantity).
    """
    _check_logits("logits_wm", logits_wm)
    _check_logits("prior_logits", prior_logits)
    if prior_logits.shape != logits_wm.shape:
        raise ValueError(f"prior_logits shape {tuple(prior_logits.shape)} != logits_wm shape "
                         f"{tuple(logits_wm.shape)}")
    beta = torch.as_tensor(beta, dtype=logits_wm.dtype, device=logits_wm.device)
    if beta.shape != logits_wm.shape[:1]:
        raise ValueError(f"beta must have shape [B]={tuple(logits_wm.shape[:1])}, got {tuple(beta.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    tilt = (prior_logits.detach().to(logits_wm.dtype) / temperature) * beta.detach()[:, None]
    return logits_wm + tilt


def normalise_prior_logits(prior_logits: torch.Tensor, clip: float = PRIOR_LOGIT_CLIP) -> torch.Tensor:
    """Log-softmax of ``prior_logits [..., A]``, clamped to ``[-clip, 0]``.

    Softmax is shift invariant, so this changes nothing about the prior except that an action the
    LLM rules out (``-inf`` or a huge negative logit) keeps log-probability ``-clip`` instead of
    ``-inf``: mixing then bounds how far the prior can push an action down by ``beta * clip / T``.
    ``-inf`` entries are allowed; NaN, ``+inf`` or a row that is ``-inf`` everywhere is an error.
    """
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    if torch.isnan(prior_logits).any():
        raise ValueError("prior_logits contain NaN")
    if torch.isposinf(prior_logits).any():
        raise ValueError("prior_logits contain +inf")
    if torch.isneginf(prior_logits).all(dim=-1).any():
        raise ValueError("a row of prior_logits is -inf for every action (no action allowed)")
    return torch.log_softmax(prior_logits, dim=-1).clamp(min=-clip, max=0.0)


def gumbel_noise(shape: torch.Size | tuple[int, ...], generator: torch.Generator | None = None,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """Standard Gumbel noise ``-log(-log U)``; drawn on the generator's device, returned on ``device``."""
    gen_device = generator.device if generator is not None else torch.device(device or "cpu")
    uniform = torch.rand(shape, generator=generator, device=gen_device)
    tiny = torch.finfo(uniform.dtype).tiny
    noise = -torch.log(-torch.log(uniform.clamp(min=tiny, max=1.0 - 1e-7)))
    return noise.to(device) if device is not None else noise


def gumbel_sample_pair(logits_wm: torch.Tensor, logits_mix: torch.Tensor,
                       generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``(a_mix [B], a_wm [B])`` by Gumbel-max with the SAME noise for both logits.

    Each is an exact sample of its own softmax; sharing the noise couples them, so
    ``a_mix != a_wm`` is true exactly when the prior changed the action at this step (the honest
    measure of the prior's influence, rather than two independent draws that differ by chance).
    """
    _check_logits("logits_wm", logits_wm)
    _check_logits("logits_mix", logits_mix)
    if logits_wm.shape != logits_mix.shape:
        raise ValueError(f"logits_wm {tuple(logits_wm.shape)} and logits_mix {tuple(logits_mix.shape)} differ")
    noise = gumbel_noise(logits_wm.shape, generator, logits_wm.device).to(logits_wm.dtype)
    a_mix = torch.argmax(logits_mix.detach() + noise, dim=-1)
    a_wm = torch.argmax(logits_wm.detach() + noise, dim=-1)
    return a_mix, a_wm


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of ``softmax(logits [..., A])`` -> ``[...]``."""
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)
