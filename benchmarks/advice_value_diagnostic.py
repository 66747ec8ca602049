"""How well can the agent's own one-step values judge advice? Measured on a finished run's checkpoint.

    .venv/bin/python benchmarks/advice_value_diagnostic.py results/bench/doorkey/full/seed0

Loads the agent and the replay of ``<run>/checkpoint.pt``, replays the last ``--rows`` steps through the
world model, and on every advised state scores each action with one imagined step
(:meth:`DreamerAgent.advice_q_values`, the quantity behind advice trust and the temperature labels).
Prints the spread of Q across actions against the noise of one stochastic sample, how often two samples
agree on the best action, and where the advised action ranks under a ``--samples``-sample mean.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from lore.config import config_from_saved
from lore.dreamer.agent import DreamerAgent
from lore.envs import make_env_from_config
from lore.train.checkpoint import load_checkpoint


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--samples", type=int, default=16)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    cfg = config_from_saved(args.run / "config.yaml")
    env = make_env_from_config(cfg.env, seed=0)
    ckpt = load_checkpoint(args.run / "checkpoint.pt")
    agent = DreamerAgent(env.observation_space, env.action_space.n, cfg, "cpu")
    agent.load_state_dict(ckpt["agent"])
    storage = ckpt["replay"]["buffer"]["_storage"]
    n, rows = storage["_len"], storage["_storage"]
    idx = torch.arange(max(n - args.rows, 0), n)
    batch = {k: v[idx][None] for k, v in rows.items() if k != "chunk_id"}
    data = agent._prepare_batch(batch)
    with torch.no_grad():
        _, post, _ = agent.wm.loss(data, agent.generator)
    advised = data["llm_mask"][0] > 0
    if not bool(advised.any()):
        print("no advised states in these rows")
        return 1
    start = {k: post[k][0][advised] for k in ("deter", "stoch")}
    top = data["llm_prior_logits"][0][advised].argmax(-1)
    q1, q2 = agent.advice_q_values(start), agent.advice_q_values(start)
    q_mean = torch.stack([agent.advice_q_values(start) for _ in range(args.samples)]).mean(0)
    rank = (q_mean > q_mean.gather(1, top[:, None])).sum(1)
    print(f"run {args.run} at env step {ckpt['env_step']}: {int(advised.sum())} advised states")
    print(f"Q spread across actions (mean std): {float(q_mean.std(-1).mean()):.4g}; "
          f"noise of one sample: {float((q1 - q2).std() / 2 ** 0.5):.4g}")
    print(f"best action agrees between two samples: {float((q1.argmax(-1) == q2.argmax(-1)).float().mean()):.2f}")
    print(f"advised action ranked best: {float((rank == 0).float().mean()):.2f} "
          f"(chance {1 / env.action_space.n:.2f}); rank histogram {torch.bincount(rank, minlength=env.action_space.n).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
