"""bf16 autocast and torch.compile (``train.compile``) against float32 eager: ms per LoReAgent.train_step.

    .venv/bin/python benchmarks/bench_precision.py --device cuda --json out.json     # a GPU, pixel Crafter, preset m
    .venv/bin/python benchmarks/bench_precision.py --device cpu --preset debug --obs symbolic --repeats 3

Every mode builds the same agent (same seed, same batch) from the environment's own observation space, as
`lore train` does, and the modes are timed round-robin so that load changes hit all alike. Reported per mode:
median ms per update (with the interquartile range), the ratio to float32 eager, the first call's time
(the compile cost for compiled modes), peak GPU memory, and how far the losses of `--check-steps` identical
updates drift from float32 eager's (bf16 changes rounding, so its losses drift; compile should not).
A GPU benchmark: on CPU the numbers say little (bf16 matmuls are emulated on most CPUs). Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from bench_update import random_batch

from lore.config import build_config
from lore.envs import make_env
from lore.method import LoReAgent

MODES = {"fp32": ("float32", "off"), "bf16": ("bfloat16", "off"),
         "fp32+networks": ("float32", "networks"), "fp32+update": ("float32", "update"),
         "bf16+update": ("bfloat16", "update")}
"""mode -> (train.precision, train.compile)."""


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(mode: str, args, space, actions: int, device: torch.device) -> LoReAgent:
    precision, compiled = MODES[mode]
    cfg = build_config(overrides=[f"model.preset={args.preset}", f"env.name={args.env}", f"env.obs={args.obs}",
                                  f"ablation={args.ablation}", f"train.precision={precision}",
                                  f"train.compile={compiled}", f"device={device.type}"])
    torch.manual_seed(0)
    return LoReAgent(space, actions, cfg, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--env", default="crafter")
    parser.add_argument("--obs", default="pixels")
    parser.add_argument("--preset", default="m")
    parser.add_argument("--ablation", default="full", help="full: the prior's terms and the critic heads the advice trust reads")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batch-length", type=int, default=64)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--check-steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    env = make_env(args.env, 0, obs=args.obs)
    space, actions = env.observation_space, int(env.action_space.n)
    env.close()
    batch = {k: v.to(device) for k, v in random_batch(space, actions, args.batch_size, args.batch_length).items()}

    agents, first_ms, peak_mb, losses = {}, {}, {}, {}
    for mode in args.modes:
        agents[mode] = agent = build(mode, args, space, actions, device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        trace = []
        for step in range(max(args.warmup, args.check_steps)):
            sync(device)
            start = time.perf_counter()
            metrics = agent.train_step(batch)
            sync(device)
            if step == 0:
                first_ms[mode] = 1000.0 * (time.perf_counter() - start)
            trace.append(metrics["wm_loss"])
        losses[mode] = trace[:args.check_steps]
        peak_mb[mode] = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")

    times = {mode: [] for mode in args.modes}
    for _ in range(args.repeats):
        for mode in args.modes:
            sync(device)
            start = time.perf_counter()
            agents[mode].train_step(batch)
            sync(device)
            times[mode].append(1000.0 * (time.perf_counter() - start))

    base = statistics.median(times[args.modes[0]])
    reference = np.asarray(losses[args.modes[0]])
    rows = []
    for mode in args.modes:
        q1, med, q3 = np.percentile(times[mode], [25, 50, 75])
        drift = float(np.max(np.abs(np.asarray(losses[mode]) - reference) / np.maximum(np.abs(reference), 1e-8)))
        rows.append({"mode": mode, "ms": float(med), "q1": float(q1), "q3": float(q3), "ratio": float(med / base),
                     "first_call_ms": first_ms[mode], "peak_mb": peak_mb[mode], "wm_loss_rel_drift": drift,
                     "compiled": len(agents[mode].dreamer.compiled)})
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {name}, {args.env}/{args.obs}, preset {args.preset}, ablation {args.ablation}, "
          f"batch {args.batch_size}x{args.batch_length}, {args.repeats} interleaved repeats")
    print(f"{'mode':<14}{'ms/update':>10}{'IQR':>16}{'ratio':>7}{'1st call s':>11}{'peak MiB':>10}{'loss drift':>11}")
    for r in rows:
        iqr = f"{r['q1']:.1f}-{r['q3']:.1f}"
        print(f"{r['mode']:<14}{r['ms']:>10.1f}{iqr:>16}{r['ratio']:>7.2f}"
              f"{r['first_call_ms'] / 1000:>11.1f}{r['peak_mb']:>10.0f}{r['wm_loss_rel_drift']:>11.2e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": name, "torch": torch.__version__, "args": vars(args), "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
