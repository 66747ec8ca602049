"""The LLM action prior: logit mixing, the uncertainty gate, temperature alignment, KL control.

Pure functions live in :mod:`.mixing`, :mod:`.gate`, :mod:`.temperature`, :mod:`.kl_control`; the
state in :class:`lore.prior.layer.PriorLayer` and :class:`lore.prior.distill.DistillationMonitor`.
"""

from lore.prior.distill import DistillationMonitor
from lore.prior.layer import PriorLayer
from lore.prior.mixing import gumbel_sample_pair, mix_logits, normalise_prior_logits

__all__ = ["DistillationMonitor", "PriorLayer", "gumbel_sample_pair", "mix_logits", "normalise_prior_logits"]
