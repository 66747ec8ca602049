"""Cost of one DreamerAgent.train_step vs the bare forward+backward of the same networks.

    .venv/bin/python benchmarks/bench_update.py                 # presets xs and s, batch 16x64, 2 threads
    .venv/bin/python benchmarks/bench_update.py --presets xs --repeats 5 --json out.json

"bare" = one forward+backward of encoder + RSSM observe + decoder + reward/continue heads on the
batch, plus one forward+backward of actor + critic on as many states as imagination produces
(B*T starts x (horizon + 1)); no sampling loop, no losses beyond a sum, no optimiser. "full" is
the real update (world model, imagination, λ-returns, actor, critic, three Adam steps, slow critic).
Goal: full <= 3x bare. Wall-clock medians; the machine may be shared, so the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import gymnasium
import numpy as np
import torch
from _timing import time_calls_ms

from lore.config import build_config
from lore.dreamer.agent import DreamerAgent
from lore.dreamer.math import combine_losses

ENV_ID = "MiniGrid-DoorKey-5x5-v0"


def doorkey_spaces() -> tuple[gymnasium.spaces.Dict, int, str]:
    try:
        from lore.envs import make_env

        env = make_env(ENV_ID, 0)
        space, actions = env.observation_space, int(env.action_space.n)
        env.close()
        return gymnasium.spaces.Dict({"symbolic": space["symbolic"]}), actions, ENV_ID
    except (ImportError, AttributeError):
        box = gymnasium.spaces.Box(-np.inf, np.inf, (1000,), np.float32)
        return gymnasium.spaces.Dict({"symbolic": box}), 7, "1000-d fallback"


def random_batch(space: gymnasium.spaces.Dict, actions: int, b: int, t: int, seed: int = 0) -> dict:
    """A replay-shaped batch [b, t] for the observation ``space``: sparse 0/1 vectors, uint8 boxes as images."""
    g = torch.Generator().manual_seed(seed)
    is_first = torch.rand(b, t, generator=g) < 0.02
    is_first[:, 0] = True
    batch = {}
    for key, box in space.spaces.items():
        shape = (b, t, *box.shape)
        batch[f"obs.{key}"] = (torch.randint(0, 256, shape, generator=g, dtype=torch.uint8) if box.dtype == np.uint8
                               else (torch.rand(shape, generator=g) < 0.05).float())
    return {**batch, "action": torch.randint(0, actions, (b, t), generator=g),
            "reward": (torch.rand(b, t, generator=g) < 0.02).float(), "is_first": is_first,
            "is_terminal": torch.rand(b, t, generator=g) < 0.01}


def timed(fn, repeats: int, warmup: int) -> float:
    return statistics.median(time_calls_ms(fn, repeats, warmup))


def interleaved(fns, repeats: int, warmup: int) -> list[float]:
    """Median ms of each fn, timed round-robin so that load changes on a shared machine hit all alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, bucket in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return [1000.0 * statistics.median(bucket) for bucket in times]


def bare_world_model(agent: DreamerAgent, data: dict) -> None:
    wm = agent.wm
    action = torch.nn.functional.one_hot(data["action"], agent.num_actions).float()
    prev = torch.cat([torch.zeros_like(action[:, :1]), action[:, :-1]], 1)
    post = wm.rssm.observe(wm.embed(data["obs"]), prev, data["is_first"], generator=agent.generator)
    feat = torch.cat([post["deter"], post["stoch"].flatten(-2)], -1)
    out = wm.decoder.loss(feat, data["obs"]).mean() + wm.reward_head(feat).mean() + wm.continue_head(feat).mean()
    out = out + post["prior_logits"].mean()
    wm.zero_grad(set_to_none=True)
    out.backward()


def bare_actor_critic(agent: DreamerAgent, states: torch.Tensor) -> None:
    out = agent.actor(states).mean() + agent.critic(states).mean()
    agent.actor.zero_grad(set_to_none=True)
    agent.critic.zero_grad(set_to_none=True)
    out.backward()


def sections(agent: DreamerAgent, batch: dict, repeats: int) -> dict[str, float]:
    """Wall time of the parts of the full update (ms, median), for finding the hot spot."""
    data = agent._prepare_batch(batch)
    out = {}

    def wm_part():
        losses, post, _ = agent.wm.loss(data, agent.generator)
        agent.wm.zero_grad(set_to_none=True)
        combine_losses(losses, agent.loss_scales).backward()
        return post

    out["wm fwd+bwd"] = timed(wm_part, repeats, 1)
    post = {k: v.detach() for k, v in wm_part().items()}
    out["imagine+losses"] = timed(lambda: agent.behaviour_losses(post, data), repeats, 1)

    def ac_backward():
        actor_l, critic_l, _, _ = agent.behaviour_losses(post, data)
        agent.actor.zero_grad(set_to_none=True)
        agent.critic.zero_grad(set_to_none=True)
        (combine_losses(actor_l, agent.loss_scales) + combine_losses(critic_l, agent.loss_scales)).backward()

    out["actor+critic bwd"] = timed(ac_backward, repeats, 1) - out["imagine+losses"]
    return out


def run(preset: str, batch_size: int, length: int, repeats: int, warmup: int, imag_last: int = 0) -> dict:
    space, actions, source = doorkey_spaces()
    cfg = build_config(overrides=[f"model.preset={preset}"])
    cfg.dreamer.imag_last = imag_last  # optional knob read with getattr (0 = imagine from every state)
    agent = DreamerAgent(space, actions, cfg)
    dim = space["symbolic"].shape[0]
    batch = random_batch(space, actions, batch_size, length)
    data = agent._prepare_batch(batch)
    starts = batch_size * (min(imag_last, length) if imag_last > 0 else length)
    n_states = starts * (cfg.dreamer.horizon + 1)
    states = torch.randn(n_states, agent.wm.feat_dim)

    full, bare_wm, bare_ac = interleaved([lambda: agent.train_step(batch), lambda: bare_world_model(agent, data),
                                          lambda: bare_actor_critic(agent, states)], repeats, warmup)
    parts = sections(agent, batch, max(1, repeats // 2))
    return {"preset": preset if not imag_last else f"{preset}/L{imag_last}", "obs": source, "obs_dim": dim, "batch": f"{batch_size}x{length}",
            "full_ms": full, "bare_wm_ms": bare_wm, "bare_ac_ms": bare_ac, "bare_ms": bare_wm + bare_ac,
            "ratio": full / (bare_wm + bare_ac), **{f"part_{k}_ms": v for k, v in parts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["xs", "s"])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batch-length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--imag-last", type=int, default=0,
                        help="imagine only from the last N steps of each sequence (0 = all, DreamerV3 default)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    rows = [run(p, args.batch_size, args.batch_length, args.repeats, args.warmup, args.imag_last)
            for p in args.presets]
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {args.threads} threads, load average {load:.2f}, obs: {rows[0]['obs']}")
    header = f"{'preset':<7}{'batch':>7}{'full ms':>10}{'bare ms':>10}{'(wm':>8}{'+ ac)':>8}{'ratio':>7}   parts"
    print(header)
    for r in rows:
        parts = ", ".join(f"{k[5:-3]} {v:.0f}" for k, v in r.items() if k.startswith("part_"))
        print(f"{r['preset']:<7}{r['batch']:>7}{r['full_ms']:>10.0f}{r['bare_ms']:>10.0f}{r['bare_wm_ms']:>8.0f}"
              f"{r['bare_ac_ms']:>8.0f}{r['ratio']:>7.2f}   {parts}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"threads": args.threads, "load_average": load, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
