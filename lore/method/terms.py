"""What the LoRe method plugs into DreamerV3's extension points (:mod:`lore.dreamer`): the prior's actor-loss
term (KL absorption of the mixed policy, :class:`PriorTerm`) and the distilled prior head (:class:`PriorNet`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from lore.dreamer.networks import MLP
from lore.prior.layer import PriorLayer

Tensor = torch.Tensor


def prior_batch_keys(num_actions: int) -> dict[str, tuple[int, ...]]:
    """The replay keys the method's terms read, with their trailing shapes."""
    return {"llm_prior_logits": (num_actions,), "llm_mask": (), "llm_confidence": (), "llm_beta": (),
            "llm_source": ()}


def sanitise_prior(prior_logits: Tensor, mask: Tensor) -> Tensor:
    """Zero the prior logits where no prior applies and replace non-finite entries (a NaN
    multiplied by a zero weight would still poison a loss)."""
    prior_logits = torch.nan_to_num(prior_logits.float(), nan=0.0, posinf=0.0, neginf=-1e4)
    return torch.where(mask.unsqueeze(-1) > 0, prior_logits, torch.zeros_like(prior_logits))


def masked_prior_kl(prior_logits: Tensor, student_logits: Tensor, mask: Tensor, confidence: Tensor) -> Tensor:
    """Σ w·KL(ρ ‖ π_student) / Σ w with w = mask·confidence; 0 when no step carries a prior.

    prior_logits, student_logits [N, A]; mask, confidence [N].
    """
    weight = mask.float() * confidence.float().clamp(min=0.0)
    log_rho = torch.log_softmax(prior_logits, -1)
    log_q = torch.log_softmax(student_logits, -1)
    kl = (log_rho.exp() * (log_rho - log_q)).sum(-1)
    return (weight * kl).sum() / weight.sum().clamp(min=1e-6)


class PriorNet(MLP):
    """Latent features [N, F] -> action logits [N, A], trained on the stopped features towards the advice of
    the replayed advised states (the distilled prior that can answer in the LLM's place)."""

    name = "prior_net"

    def __init__(self, feat_dim: int, units: int, layers: int, num_actions: int, scale: float):
        super().__init__(feat_dim, units, layers, out_dim=num_actions)
        self.scale = scale

    def loss(self, feat: Tensor, data: dict[str, Tensor]) -> Tensor:
        """Confidence-weighted KL(advice ‖ PriorNet) over the advised rows of a ``[B, T]`` batch."""
        prior = sanitise_prior(data["llm_prior_logits"], data["llm_mask"])
        return masked_prior_kl(prior.reshape(feat.shape[0], -1), self(feat), data["llm_mask"].reshape(-1),
                               data["llm_confidence"].reshape(-1))


class PriorTerm:
    """The prior layer's actor-loss term (:class:`lore.dreamer.agent.ActorTerm`): absorption of the mixed
    policy at the imagination's start states, the KL multiplier's dual ascent and the scoring of advice.

    ``score_advice(start, prior, mask, codes, scale)`` scores advised start states (the owner's one-step
    values) and returns metrics.
    """

    name = "prior"
    scale = 1.0

    def __init__(self, layer: PriorLayer, score_advice: Callable[..., dict[str, float]]):
        self.layer = layer
        self.score_advice = score_advice
        self._rows: dict[str, Tensor] = {}

    def inputs(self, rows: dict[str, Tensor]) -> dict[str, Tensor]:
        """The layer's state the term reads (absorption weights, lambda, T) and the sanitised prior, as tensors."""
        prior = sanitise_prior(rows["llm_prior_logits"], rows["llm_mask"])
        self._rows = {"prior": prior, "mask": rows["llm_mask"], "codes": rows["llm_source"]}
        source = rows["llm_source"]
        return {"prior": prior, **self.layer.loss_inputs(source, source.device)}

    def loss(self, logits: Tensor, rows: dict[str, Tensor], inputs: dict[str, Tensor]
             ) -> tuple[Tensor, dict[str, Tensor]]:
        mask = rows["llm_mask"]
        loss, kl_mix_wm = self.layer.absorption(logits, inputs["prior"], mask, rows["llm_beta"], inputs)
        return loss, {"kl_mix_wm": kl_mix_wm, "prior_loss": loss.detach(),
                      "prior_mask_frac_train": (mask > 0).float().mean()}

    def finish(self, metrics: dict[str, float], start: dict[str, Tensor]) -> None:
        """The layer's bookkeeping after the update: lambda, the loss count, advice scores, dual ascent."""
        layer, rows = self.layer, self._rows
        metrics["lambda_kl"] = layer.current_lambda()
        metrics["prior_mask_frac_train"] = metrics.pop("prior_mask_frac_train") if rows["mask"].numel() else 0.0
        layer.record_loss(metrics["prior_loss"])
        if layer.wants_advice_values():
            metrics.update(self.score_advice(start, rows["prior"], rows["mask"], rows["codes"],
                                             metrics["return_scale"]))
        kl_mix = metrics.get("kl_mix_wm")
        if kl_mix is not None and math.isfinite(kl_mix):
            layer.update_lambda(kl_mix)
