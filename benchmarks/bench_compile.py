"""Eager against compiled (``train.compile: update``): ms per LoReAgent.train_step and per act step, per preset.

    .venv/bin/python benchmarks/bench_compile.py                       # debug, xs, s; batch 16x64; 1 thread
    .venv/bin/python benchmarks/bench_compile.py --presets debug --batch-length 16 --json out.json
    .venv/bin/python benchmarks/bench_compile.py --presets m --device cuda   # on a GPU machine
    .venv/bin/python benchmarks/bench_compile.py --run-config config/crafter_cpu.yaml --presets xs --batch-length 16

Per preset: two agents with the same weights, one eager and one compiled. The compiled agent's first update
and first act step are timed apart (they include the compile); then both agents' updates (and act steps) are
timed round-robin, so that load changes on a shared machine hit both alike. Reported: median and inter-quartile
range in ms, the speed-up eager / compiled, the compile times, and how far the compiled update's metrics are
from the eager one's on the first batch from identical weights (max relative difference).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import time

import torch
from bench_update import doorkey_spaces, random_batch

from lore.config import build_config, load_config
from lore.envs import make_env_from_config
from lore.method import LoReAgent


def quartiles(ms: list[float]) -> tuple[float, float, float]:
    """(q1, median, q3) of a sample of timings."""
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
    return q[0], statistics.median(ms), q[2]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_once(fn, device: torch.device):
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def relative_gap(a: dict, b: dict) -> float:
    """Largest |a - b| / max(1, |a|) over the finite metrics both report."""
    gaps = [abs(a[k] - b[k]) / max(1.0, abs(a[k])) for k in a
            if k in b and math.isfinite(a[k]) and math.isfinite(b[k])]
    return max(gaps, default=0.0)


def spaces(run_config: str | None):
    """(observation space, actions, its name, config builder) of DoorKey-5x5, or of a run config's env."""
    if run_config is None:
        space, actions, source = doorkey_spaces()
        return space, actions, source, lambda overrides: build_config(overrides=overrides)
    env = make_env_from_config(load_config(run_config).env, 0)
    space, actions = env.observation_space, int(env.action_space.n)
    env.close()
    return space, actions, f"{run_config}", lambda overrides: load_config(run_config, overrides=overrides)


def run(preset: str, b: int, t: int, rounds: int, device: torch.device, envs: int, run_config: str | None) -> dict:
    space, actions, source, config = spaces(run_config)
    overrides = [f"model.preset={preset}", "ablation=full", f"train.batch_size={b}", f"train.batch_length={t}",
                 f"device={device.type}"]
    agents = {mode: LoReAgent(space, actions, config([*overrides, f"train.compile={mode}"]), device)
              for mode in ("off", "update")}
    agents["update"].load_state_dict(copy.deepcopy(agents["off"].state_dict()))
    batch = random_batch(space, actions, b, t)
    obs = {key[4:]: value[:envs, 0].to(device) for key, value in batch.items() if key.startswith("obs.")}
    first = torch.zeros(envs, dtype=torch.bool)

    # the first update from identical weights: the compile time, and how close the two updates are
    eager_metrics, _ = timed_once(lambda: agents["off"].train_step(batch), device)
    compiled_metrics, compile_update_s = timed_once(lambda: agents["update"].train_step(batch), device)
    states = {mode: agent.initial_state(envs) for mode, agent in agents.items()}
    _, compile_act_s = timed_once(lambda: agents["update"].act(obs, first, states["update"]), device)

    update_ms = {mode: [] for mode in agents}
    act_ms = {mode: [] for mode in agents}
    for _ in range(rounds):
        for mode, agent in agents.items():
            _, s = timed_once(lambda agent=agent: agent.train_step(batch), device)
            update_ms[mode].append(1000.0 * s)
        for mode, agent in agents.items():
            for _ in range(10):
                _, s = timed_once(lambda agent=agent, mode=mode: agent.act(obs, first, states[mode]), device)
                act_ms[mode].append(1000.0 * s)
    row = {"preset": preset, "obs": source, "batch": f"{b}x{t}", "envs": envs, "rounds": rounds,
           "compile_update_s": compile_update_s, "compile_act_s": compile_act_s,
           "first_update_gap": relative_gap(eager_metrics, compiled_metrics)}
    for kind, table in (("update", update_ms), ("act", act_ms)):
        for mode, ms in table.items():
            q1, med, q3 = quartiles(ms)
            row[f"{kind}_{mode}_ms"], row[f"{kind}_{mode}_q1"], row[f"{kind}_{mode}_q3"] = med, q1, q3
        row[f"{kind}_speedup"] = row[f"{kind}_off_ms"] / row[f"{kind}_update_ms"]
    return row


def table(rows: list[dict]) -> str:
    head = ("| preset | batch | update eager ms [IQR] | update compiled ms [IQR] | speed-up | act eager ms | "
            "act compiled ms | speed-up | compile s (update + act) | first-update gap |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cell = lambda k, r=r: f"{r[f'{k}_ms']:.1f} [{r[f'{k}_q1']:.1f}, {r[f'{k}_q3']:.1f}]"  # noqa: E731
        lines.append(f"| {r['preset']} | {r['batch']} | {cell('update_off')} | {cell('update_update')} | "
                     f"{r['update_speedup']:.2f}x | {r['act_off_ms']:.2f} | {r['act_update_ms']:.2f} | "
                     f"{r['act_speedup']:.2f}x | {r['compile_update_s']:.0f} + {r['compile_act_s']:.0f} | "
                     f"{r['first_update_gap']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["debug", "xs", "s"])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batch-length", type=int, default=64)
    parser.add_argument("--envs", type=int, default=1, help="batch of the timed act steps (parallel envs)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--run-config", default=None,
                        help="a run config (e.g. config/crafter_cpu.yaml): its env's observations and its settings")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be >= 2 (the inter-quartile range needs two timings)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    rows = []
    for preset in args.presets:
        rows.append(run(preset, args.batch_size, args.batch_length, args.rounds, device, args.envs, args.run_config))
        print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {args.threads} thread(s), device {device}, load average {load:.2f}, "
          f"obs: {rows[0]['obs']}, rounds {args.rounds} (10 act steps each)")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"threads": args.threads, "device": str(device), "load_average": load,
                       "torch": torch.__version__, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
