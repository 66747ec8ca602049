"""Every arm of a seed starts where rl_only starts: the same initial weights, the same environment layouts and
the same step-0 evaluation; the method draws its own randomness on a stream of its own."""

from __future__ import annotations

import torch

from lore.config import build_config
from lore.train.trainer import Trainer

BASE = ["model.preset=debug", "train.steps=1000", "train.prefill=100", "eval.episodes=6", "device=cpu",
        "train.tensorboard=false", "env.name=MiniGrid-LavaGapS5-v0", "seed=3"]


def _start(tmp_path, ablation: str) -> tuple[dict, dict, dict]:
    run = tmp_path / ablation
    cfg = build_config(None, [*BASE, f"llm.cache_path={run}/cache.sqlite"], ablation)
    trainer = Trainer(cfg, run, show_progress=False)
    try:
        weights = {k: v.detach().clone() for k, v in trainer.agent.dreamer.wm.state_dict().items()}
        trainer._start_episodes()
        layout = {k: torch.as_tensor(v).clone() for k, v in trainer.obs.items()}
        trainer._evaluate()
        return weights, dict(trainer.eval_table.rows[-1]), layout
    finally:
        trainer.agent.close()


def test_every_arm_of_a_seed_starts_where_rl_only_starts(tmp_path):
    ref_weights, ref_eval, ref_layout = _start(tmp_path, "rl_only")
    for ablation in ("full", "full_adversarial", "full_noisy"):
        weights, first_eval, layout = _start(tmp_path, ablation)
        assert weights.keys() == ref_weights.keys()
        assert all(torch.equal(weights[k], ref_weights[k]) for k in weights), ablation
        assert all(torch.equal(layout[k], ref_layout[k]) for k in layout), ablation
        assert first_eval == ref_eval, ablation


def test_the_methods_draws_leave_dreamers_generator_alone():
    from lore.config import build_config as build
    from lore.prior.layer import PriorLayer, method_seed

    cfg = build(None, ["prior.dropout=0.5", "prior.control_episodes=0.5"], "full").prior
    layer = PriorLayer(cfg, 3, num_envs=2)
    layer.seed_draws(5)
    dreamer = torch.Generator().manual_seed(5)
    before = dreamer.get_state()
    logits = torch.zeros(2, 3)
    layer.act(logits, torch.zeros(2, 3), torch.ones(2), None, 0, is_first=torch.ones(2, dtype=torch.bool))
    assert torch.equal(dreamer.get_state(), before)
    assert not torch.equal(layer.generator.get_state(), torch.Generator().manual_seed(method_seed(5)).get_state())
    saved = layer.state_dict()
    other = PriorLayer(cfg, 3, num_envs=2)
    other.load_state_dict(saved)
    assert torch.equal(other.generator.get_state(), layer.generator.get_state())
