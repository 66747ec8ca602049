"""Cost of CEM planning per act step on a random world model of the ``xs`` size.

The world model imitates DreamerV3's imagination step at the ``xs`` preset: a GRU deterministic
state (256) and 32 categorical latents of 16 classes, an MLP (256 units) into the GRU and for the
prior, and reward / continue / value heads (two-hot decoding over 255 bins) on the 768-d latent.
Weights are random: the cost does not depend on them, and early stopping is disabled so every
plan runs all iterations.

    .venv/bin/python benchmarks/bench_plan.py                  # N=64, H=8, K=4 iterations, 2 threads
    .venv/bin/python benchmarks/bench_plan.py --sweep --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F
from _timing import time_calls_ms

from lore.plan.cem import cem_plan, uniform_init
from lore.presets import PRESETS


def mlp(inp: int, units: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, units), nn.LayerNorm(units), nn.SiLU(), nn.Linear(units, out))


class RandomWorldModel(nn.Module):
    def __init__(self, num_actions: int, deter: int, stoch: int, classes: int, units: int, bins: int = 255):
        super().__init__()
        self.deter, self.stoch, self.classes = deter, stoch, classes
        self.img_in = nn.Sequential(nn.Linear(stoch * classes + num_actions, units), nn.LayerNorm(units), nn.SiLU())
        self.gru = nn.GRUCell(units, deter)
        self.prior = mlp(deter, units, stoch * classes)
        feat = deter + stoch * classes
        self.reward_head, self.cont_head, self.value_head = mlp(feat, units, bins), mlp(feat, units, 1), mlp(
            feat, units, bins)
        self.register_buffer("bins", torch.linspace(-20.0, 20.0, bins))
        self.generator = torch.Generator().manual_seed(0)

    def two_hot_mean(self, logits: torch.Tensor) -> torch.Tensor:
        x = (torch.softmax(logits, -1) * self.bins).sum(-1)
        return torch.sign(x) * (torch.exp(torch.abs(x)) - 1)  # symexp

    def step(self, latent: torch.Tensor, action_onehot: torch.Tensor) -> torch.Tensor:
        deter, stoch = latent[:, :self.deter], latent[:, self.deter:]
        deter = self.gru(self.img_in(torch.cat([stoch, action_onehot], -1)), deter)
        logits = self.prior(deter).reshape(-1, self.stoch, self.classes)
        noise = -torch.log(-torch.log(torch.rand(logits.shape, generator=self.generator).clamp(1e-20, 1 - 1e-7)))
        sample = F.one_hot((logits + noise).argmax(-1), self.classes).float().reshape(latent.shape[0], -1)
        return torch.cat([deter, sample], -1)

    def plan_callables(self) -> dict:
        return {"step": self.step, "reward": lambda z: self.two_hot_mean(self.reward_head(z)),
                "cont": lambda z: torch.sigmoid(self.cont_head(z)).squeeze(-1),
                "value": lambda z: self.two_hot_mean(self.value_head(z))}


def make_agent(preset: str, num_actions: int):
    """The real agent (untrained LoReAgent) at ``preset``; planning never touches the encoder."""
    import gymnasium
    import numpy as np

    from lore.config import build_config
    from lore.method import LoReAgent

    cfg = build_config(overrides=[f"model.preset={preset}"])
    space = gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(-np.inf, np.inf, (147,), np.float32)})
    return LoReAgent(space, num_actions, cfg, torch.device("cpu"))


def start_latents(model, batch: int) -> torch.Tensor:
    if isinstance(model, RandomWorldModel):
        return torch.randn(batch, model.deter + model.stoch * model.classes)
    with torch.no_grad():  # posterior features of random observations
        obs = {"symbolic": torch.randn(batch, 147)}
        return model.act(obs, torch.ones(batch, dtype=torch.bool), model.initial_state(batch)).latent


def time_plans(fn, repeats: int, warmup: int = 3) -> dict:
    times = time_calls_ms(fn, repeats, warmup)
    return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times), "min_ms": min(times)}


def bench(model: RandomWorldModel, num_actions: int, samples: int, horizon: int, iterations: int, elites: int,
          batch: int, repeats: int) -> dict:
    callables = model.plan_callables()
    latent = start_latents(model, batch)
    generator = torch.Generator().manual_seed(0)

    def one_act() -> None:  # one plan per env, early stopping off: every plan runs all iterations
        for env in range(batch):
            cem_plan(latent[env], callables["step"], callables["reward"], callables["cont"], callables["value"],
                     num_actions, horizon, samples, elites, iterations, uniform_init(horizon, num_actions), 0.997,
                     generator=generator, early_stop=False)

    with torch.no_grad():
        timing = time_plans(one_act, repeats)
    return {"samples": samples, "horizon": horizon, "iterations": iterations, "elites": elites, "batch": batch,
            "latent_steps_per_act": samples * horizon * iterations * batch, **timing}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="xs")
    parser.add_argument("--actions", type=int, default=7, help="MiniGrid has 7 actions")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--sweep", action="store_true", help="also vary N, H, K and the env batch")
    parser.add_argument("--agent", action="store_true",
                        help="also time the real LoReAgent's plan_callables at this preset")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    size = PRESETS[args.preset]
    model = RandomWorldModel(args.actions, size["deter"], size["stoch"], size["classes"], size["units"]).eval()
    settings = [(64, 8, 4, 8, 1)]
    if args.sweep:
        settings += [(32, 8, 4, 4, 1), (128, 8, 4, 8, 1), (64, 15, 4, 8, 1), (64, 8, 1, 8, 1), (64, 8, 4, 8, 4)]
    rows = [{"model": "random-mlp", **bench(model, args.actions, n, h, k, e, b, args.repeats)}
            for n, h, k, e, b in settings]
    if args.agent:
        agent = make_agent(args.preset, args.actions)
        rows += [{"model": "dreamer-agent", **bench(agent, args.actions, n, h, k, e, b, args.repeats)}
                 for n, h, k, e, b in settings]
    header = f"preset={args.preset} threads={args.threads} actions={args.actions} torch={torch.__version__}"
    print(header)
    print(f"{'model':>14} {'N':>5} {'H':>4} {'K':>3} {'elites':>6} {'envs':>4} {'steps/act':>9} {'median ms':>10} {'mean ms':>9}")
    for r in rows:
        print(f"{r['model']:>14} {r['samples']:>5} {r['horizon']:>4} {r['iterations']:>3} {r['elites']:>6} {r['batch']:>4} "
              f"{r['latent_steps_per_act']:>9} {r['median_ms']:>10.2f} {r['mean_ms']:>9.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": header, "results": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
