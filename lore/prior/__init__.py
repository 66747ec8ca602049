"""The LLM action prior: logit mixing, the advice trust, KL control, the uncertainty gate.

Pure functions live in :mod:`.mixing`, :mod:`.trust`, :mod:`.kl_control`, :mod:`.gate`; the
state in :class:`lore.prior.layer.PriorLayer` and :class:`lore.prior.distill.DistillationMonitor`.
"""

from lore.prior.distill import DistillationMonitor
from lore.prior.layer import PriorLayer
from lore.prior.mixing import gumbel_sample_pair, mix_logits, normalise_prior_logits

__all__ = ["DistillationMonitor", "PriorLayer", "gumbel_sample_pair", "mix_logits", "normalise_prior_logits"]
