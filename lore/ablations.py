"""Ablations, declared once: each is a named set of dotted config overrides.

``lore train --ablation NAME`` and the Snakemake workflow both read this table, and
the resolved ``config.yaml`` of every run shows exactly what it ran.
"""

from __future__ import annotations

from lore.validation import ConfigError, show

_LLM_ON = {"llm.backend": "scripted"}
_NO_LLM = {"llm.backend": "none", "prior.enabled": False, "features.enabled": False,
           "plan.enabled": False, "distill.enabled": False}
_MIX = {**_LLM_ON, "prior.enabled": True}
_KL = {**_MIX, "prior.gate": "fixed", "prior.kl_mode": "lagrangian"}
_FULL = {**_KL, "prior.trust": True}

ABLATIONS: dict[str, dict[str, object]] = {
    # DreamerV3 alone: no LLM is ever called.
    "rl_only": dict(_NO_LLM),
    # The uniform-random policy: never updates; the floor a learned policy has to clear.
    "random": {**_NO_LLM, "train.policy": "random"},
    # Mixing at a fixed beta = beta_max; no gate, no KL control.
    "prior_only": {**_MIX, "prior.gate": "fixed", "prior.kl_mode": "none"},
    # Mixing gated by state uncertainty, no KL control.
    "gate": {**_MIX, "prior.gate": "uncertainty", "prior.kl_mode": "none"},
    # Fixed beta held in check by KL control (act-time trust region + absorption Lagrangian).
    "kl": dict(_KL),
    # LLM feature code only (late fusion), no prior mixing.
    "features": {**_LLM_ON, "prior.enabled": False, "features.enabled": True},
    # The method: fixed beta scaled by the advice trust, held in check by KL control.
    "full": dict(_FULL),
    # full + CEM planning in latent space seeded by the LLM plan.
    "full_plan": {**_FULL, "plan.enabled": True},
    # full + PriorNet distillation (the controller answers from PriorNet once trusted).
    "full_distill": {**_FULL, "distill.enabled": True},
    # Advisor-quality arms of the full method.
    "full_noisy": {**_FULL, "advisor.mode": "noisy", "advisor.accuracy": 0.5},
    "full_adversarial": {**_FULL, "advisor.mode": "adversarial"},
    # The kl arm (no gate, no advice trust) under the adversarial advisor: what the trust protects against.
    "kl_adversarial": {**_KL, "advisor.mode": "adversarial"},
}


def ablation_overrides(name: str) -> dict[str, object]:
    if not isinstance(name, str) or name not in ABLATIONS:
        shown = f"'{name}'" if isinstance(name, str) else show(name)
        raise ConfigError(f"ablation: unknown ablation {shown} (valid: {', '.join(ABLATIONS)})")
    return dict(ABLATIONS[name])
