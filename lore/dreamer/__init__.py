"""DreamerV3 in plain PyTorch: a world model (RSSM) learned from replay and an actor-critic learned in its
imagination, for discrete actions. Read in this order: ``math`` (pure DreamerV3 maths), ``networks``,
``rssm``, ``world_model``, ``behavior`` (actor, critic and their losses), ``agent`` (:class:`DreamerAgent`:
acting, the update, checkpoints).

Extension points, the only ways in for a policy prior (or any other method built on DreamerV3):

* **A transform of the action logits when acting**: ``DreamerAgent.act(..., transform=fn)``;
  ``fn(step: PolicyStep) -> logits [B, A]`` reads the actor's logits, the latent, the policy entropy, the
  critic heads' value variance and the agent's generator, and the action is drawn from what it returns.
* **An extra actor-loss term**: ``DreamerAgent(..., actor_term=term)`` (:class:`~lore.dreamer.agent.ActorTerm`),
  given the actor's logits at the imagination's start states and the extra replay keys (``batch_keys``) at
  those states; it joins the actor loss under its own name and scale.
* **An extra head on the stopped latent features**: ``DreamerAgent(..., head=factory)``: ``factory(feat_dim)``
  builds a module with ``name``, ``scale`` and ``loss(feat, data)``, trained with the world model (its
  gradient stops at the features).
* **Late-fused features for the encoder**: ``features.enabled`` adds a feature encoder whose output joins
  the observation embedding; ``act(..., features=(x, mask))`` and the batch keys ``features`` /
  ``features_mask`` carry them.

Nothing in this package imports the method (``lore.prior``, ``lore.llm``, ``lore.plan``, ``lore.sandbox``,
``lore.method``) or the trainer (``lore.train``); ``tests/test_layout.py`` checks it.
"""

from lore.dreamer.agent import ActorTerm, ActOutput, DreamerAgent, PolicyStep

__all__ = ["ActOutput", "ActorTerm", "DreamerAgent", "PolicyStep"]
