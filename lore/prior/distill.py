"""When may PriorNet (the distilled LLM prior, a head on the agent's latent) answer for the LLM?

The head itself lives in the agent (``agent.prior_net_logits(latent)``). This module holds only the
trust logic: every fresh LLM answer (not yet in replay, so held out from PriorNet's training) is
compared with PriorNet's logits at the same state (``KL(rho_llm || rho_net)``, the distillation
direction). Once at least ``min_samples`` comparisons were made and the MEDIAN of the most recent
ones is below ``trust_kl``, PriorNet is trusted; the trust is re-evaluated continuously, so drift
revokes it. While trusted, the controller still sends every ``distill.check_every``-th due call to the
LLM as a held-out check (:class:`lore.llm.controller.LLMController`).
"""

from __future__ import annotations

import math
from collections import deque

import torch

from lore.config import DistillConfig
from lore.prior.kl_control import categorical_kl


class DistillationMonitor:
    """Held-out KL between PriorNet and the LLM, and whether PriorNet may answer in the LLM's stead."""

    def __init__(self, cfg: DistillConfig, window: int | None = None, ema_decay: float = 0.95):
        if cfg.min_samples < 1:
            raise ValueError(f"distill.min_samples must be >= 1, got {cfg.min_samples}")
        if not cfg.trust_kl > 0:
            raise ValueError(f"distill.trust_kl must be > 0, got {cfg.trust_kl}")
        self.cfg = cfg
        self.window = int(window or cfg.min_samples)
        """How many recent held-out comparisons the median is taken over."""
        self.ema_decay = float(ema_decay)
        self.recent: deque[float] = deque(maxlen=self.window)
        self.samples = 0
        self.priornet_kl = math.nan
        """EMA of the held-out KL (NaN before the first comparison)."""
        self.llm_calls_saved = 0

    def observe(self, priornet_logits: torch.Tensor, llm_logits: torch.Tensor) -> float:
        """Record held-out comparisons ``[A]`` or ``[B,A]``; returns their mean ``KL(llm || priornet)``."""
        net = torch.as_tensor(priornet_logits).detach().double().cpu()
        llm = torch.as_tensor(llm_logits).detach().double().cpu()
        if net.shape != llm.shape or net.dim() not in (1, 2):
            raise ValueError(f"observe: priornet_logits {tuple(net.shape)} and llm_logits {tuple(llm.shape)} "
                             "must both be [A] or [B, A]")
        if not (torch.isfinite(net).all() and torch.isfinite(llm).all()):
            raise ValueError("observe: logits contain NaN or inf")
        kls = categorical_kl(llm.reshape(-1, llm.shape[-1]), net.reshape(-1, net.shape[-1])).tolist()
        for kl in kls:
            self.recent.append(kl)
            self.samples += 1
            self.priornet_kl = kl if math.isnan(self.priornet_kl) else (
                self.ema_decay * self.priornet_kl + (1 - self.ema_decay) * kl)
        return sum(kls) / len(kls)

    def recent_median(self) -> float:
        if not self.recent:
            return math.nan
        values = sorted(self.recent)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])

    def trusted(self) -> bool:
        """At least ``min_samples`` comparisons and the recent median KL below ``trust_kl``."""
        return self.samples >= self.cfg.min_samples and self.recent_median() < self.cfg.trust_kl

    def record_saved(self, count: int = 1) -> None:
        """Count due calls answered by PriorNet instead of the LLM."""
        self.llm_calls_saved += int(count)

    def metrics(self) -> dict[str, float]:
        return {
            "priornet_kl": self.priornet_kl,
            "priornet_kl_median": self.recent_median(),
            "priornet_trusted": float(self.trusted()),
            "priornet_checks": float(self.samples),
            "llm_calls_saved": float(self.llm_calls_saved),
        }

    def state_dict(self) -> dict:
        return {"recent": list(self.recent), "samples": self.samples, "priornet_kl": self.priornet_kl,
                "llm_calls_saved": self.llm_calls_saved}

    def load_state_dict(self, state: dict) -> None:
        self.recent = deque((float(v) for v in state["recent"]), maxlen=self.window)
        self.samples = int(state["samples"])
        self.priornet_kl = float(state["priornet_kl"])
        self.llm_calls_saved = int(state["llm_calls_saved"])
