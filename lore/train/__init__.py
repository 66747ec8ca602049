"""Training: the loop, replay, evaluation and checkpoints of one run (``lore train``, ``lore eval``)."""
