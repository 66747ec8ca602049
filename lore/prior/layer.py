"""PriorLayer: the stateful part of LoRe's LLM prior (gate state, temperature, KL multiplier).

MINIMAL PLACEHOLDER written by the lead so the agent can run; the prior helper replaces the
internals (uncertainty gate, hysteresis, temperature alignment, KL control) keeping this API.
"""

from __future__ import annotations

import torch

from lore.config import PriorConfig


class PriorLayer:
    def __init__(self, cfg: PriorConfig, num_actions: int, num_envs: int = 1, total_steps: int = 1):
        self.cfg = cfg
        self.num_actions = num_actions
        self.num_envs = num_envs
        self.total_steps = total_steps
        self.temperature = cfg.temperature
        self.lambda_kl = 0.0

    def beta_max_at(self, env_step: int) -> float:
        return self.cfg.beta_max if self.cfg.enabled else 0.0

    def act(self, logits_wm, prior_logits, mask, u, env_step, generator=None):
        beta = torch.full(mask.shape, self.beta_max_at(env_step), device=logits_wm.device) * (mask > 0)
        logits_mix = logits_wm + beta[:, None] * (prior_logits.detach() / self.temperature)
        return logits_mix, beta

    def actor_loss(self, logits_wm, prior_logits, mask, confidence, beta):
        return logits_wm.sum() * 0.0, {}

    def advantage_bonus(self, prior_logits, actions, mask):
        return torch.zeros(actions.shape, device=prior_logits.device)

    def update_lambda(self, kl_mean: float) -> None:
        pass

    def refit_temperature(self, logits_wm, prior_logits) -> None:
        pass

    def metrics(self) -> dict:
        return {"temperature": self.temperature, "lambda_kl": self.lambda_kl}

    def state_dict(self) -> dict:
        return {"temperature": self.temperature, "lambda_kl": self.lambda_kl}

    def load_state_dict(self, state: dict) -> None:
        self.temperature = state["temperature"]
        self.lambda_kl = state["lambda_kl"]
