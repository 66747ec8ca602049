"""Cost of the LLM controller in the env loop: random policy on DoorKey-5x5, steps/s without an LLM
vs with the scripted backend answering after a simulated latency (default 500 ms), non-blocking.

    .venv/bin/python benchmarks/bench_llm_latency.py [--steps 20000] [--latency-ms 500] [--repeats 3]

Goal: at most a 10% drop in env steps/s. Prints a small table; ``--json`` prints a JSON line instead.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np

from lore.config import build_config
from lore.envs import make_env
from lore.llm.controller import EnvQuery, LLMController

ENV = "MiniGrid-DoorKey-5x5-v0"


def loop_without_llm(steps: int, seed: int, with_key: bool = False) -> float:
    """The bare env loop; ``with_key`` adds the one ``state_key()`` per step the controller needs."""
    env = make_env(ENV, seed=seed)
    rng = np.random.default_rng(seed)
    env.reset()
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        if terminated or truncated:
            env.reset()
        if with_key:
            env.state_key()
    return steps / (time.perf_counter() - start)


def loop_with_llm(steps: int, seed: int, latency_ms: float, run_dir: str) -> tuple[float, dict]:
    """Returns (steps/s, counters + ``controller_us_per_step``: time inside the controller's methods)."""
    cfg = build_config(overrides=["llm.backend=scripted", f"llm.simulated_latency_ms={latency_ms}",
                                  "llm.cache_path=null", "model.preset=debug"])
    env = make_env(ENV, seed=seed)
    ctl = LLMController(cfg, run_dir, env.action_names, env.family)
    rng = np.random.default_rng(seed)
    env.reset()
    is_first, reward = True, 0.0
    key = env.state_key()
    inside = 0.0
    start = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        ctl.maybe_request(step, [EnvQuery(0, key, env.describe, env.state_snapshot, float(rng.random()),
                                          is_first, reward)])
        advice = ctl.current(0, key, step)
        inside += time.perf_counter() - t0
        action = int(rng.integers(env.action_space.n))
        if advice is not None and rng.random() < 0.5:
            action = int(np.argmax(advice.prior_logits))
        _, reward, terminated, truncated, _ = env.step(action)
        is_first = terminated or truncated
        if is_first:
            env.reset()
        key = env.state_key()  # one key per step: the next step's key is this step's new key
        t0 = time.perf_counter()
        ctl.observe_action(0, action, key, reward, is_first)
        inside += time.perf_counter() - t0
    rate = steps / (time.perf_counter() - start)
    counters = ctl.counters()
    counters["controller_us_per_step"] = 1e6 * inside / steps
    ctl.close(timeout_s=0.0)
    return rate, counters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--latency-ms", type=float, default=500.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base, keyed, with_llm, instant, counters, instant_counters = [], [], [], [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):  # interleaved, so background load hits all alike
            base.append(loop_without_llm(args.steps, r))
            keyed.append(loop_without_llm(args.steps, r, with_key=True))
            rate, counters = loop_with_llm(args.steps, r, args.latency_ms, f"{tmp}/lat{r}")
            with_llm.append(rate)
            rate, instant_counters = loop_with_llm(args.steps, r, 0.0, f"{tmp}/inst{r}")
            instant.append(rate)
    result = {
        "env": ENV, "steps": args.steps, "repeats": args.repeats, "latency_ms": args.latency_ms,
        "no_llm_steps_per_s": float(np.median(base)),
        "state_key_only_steps_per_s": float(np.median(keyed)),
        "llm_steps_per_s": float(np.median(with_llm)),
        "llm_instant_steps_per_s": float(np.median(instant)),
        "llm_calls": counters.get("llm_calls"), "llm_plan_steps": counters.get("llm_plan_steps"),
        "llm_cache_hits": counters.get("llm_cache_hits"),
        "llm_instant_calls": instant_counters.get("llm_calls"),
        "controller_us_per_step": counters.get("controller_us_per_step"),
        "no_llm_us_per_step": 1e6 / float(np.median(base)),
    }
    result["drop_pct"] = 100.0 * (1.0 - result["llm_steps_per_s"] / result["no_llm_steps_per_s"])
    result["drop_vs_state_key_pct"] = 100.0 * (1.0 - result["llm_steps_per_s"] / result["state_key_only_steps_per_s"])
    if args.json:
        print(json.dumps(result))
        return
    print(f"{ENV}, random policy, {args.steps} steps x {args.repeats} (median)")
    print(f"  no LLM                              {result['no_llm_steps_per_s']:9.0f} steps/s")
    print(f"  no LLM + env.state_key() per step   {result['state_key_only_steps_per_s']:9.0f} steps/s")
    print(f"  scripted, {args.latency_ms:.0f} ms latency, non-blocking {result['llm_steps_per_s']:9.0f} steps/s"
          f"   drop {result['drop_pct']:.1f}% vs no LLM, {result['drop_vs_state_key_pct']:.1f}% vs state_key only")
    print(f"      (calls {result['llm_calls']}, plan steps {result['llm_plan_steps']}, "
          f"cache hits {result['llm_cache_hits']}; time inside the controller "
          f"{result['controller_us_per_step']:.1f} us/step vs {result['no_llm_us_per_step']:.0f} us per bare env step)")
    print(f"  scripted, no latency (in-line)      {result['llm_instant_steps_per_s']:9.0f} steps/s"
          f"   ({result['llm_instant_calls']} calls: each answered at once, so cooldowns, not latency, pace them)")


if __name__ == "__main__":
    main()
