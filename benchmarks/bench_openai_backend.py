"""Cost of the openai backend: the client's overhead per call above the server's own time, and the calls a
`full` run makes per 10k env steps, both against the loopback OpenAI-compatible server of
tests/openai_stub.py (a real socket on 127.0.0.1, the real ``openai`` client).

    .venv/bin/python benchmarks/bench_openai_backend.py [--calls 200] [--latency-ms 20]
        [--train-steps 10000] [--json]

Overhead: ``backend.complete`` on a real DoorKey-5x5 prompt (schema-constrained), the client's round trip
minus the server's handling time of the same request (from its request line parsed to its answer written),
call by call; goal <= 2 ms (median). Calls: one `lore train --ablation full` run (debug preset) with
``llm.backend=openai``, the controller's default budget and cooldowns, the server answering after
``--latency-ms``; goal <= 50 per 10k env steps. A run shorter than 10k steps is scaled linearly (its
calls / steps x 10k). ``--train-steps 0`` skips the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from openai_stub import MODEL, OpenAIStub  # noqa: E402

from lore.envs import make_env  # noqa: E402
from lore.llm.backends import AdviceRequest, OpenAIBackend  # noqa: E402
from lore.llm.prompt import build_prompt, prompt_hash  # noqa: E402

ENV = "MiniGrid-DoorKey-5x5-v0"


def overhead(calls: int, latency_ms: float) -> dict:
    """Per-call client round trip, server handling time and their difference (ms), median and p90."""
    env = make_env(ENV, seed=0)
    env.reset()
    prompt = build_prompt(env.describe(), env.action_names, env.family)
    request = AdviceRequest(prompt=prompt, prompt_hash=prompt_hash(prompt), num_actions=len(env.action_names),
                            action_names=env.action_names, env_family=env.family)
    with OpenAIStub(num_actions=len(env.action_names)) as stub:
        stub.latency_s = latency_ms / 1000.0
        backend = OpenAIBackend(MODEL, stub.base_url, timeout_s=10.0, retries=0)
        for _ in range(5):  # warm-up: connection, imports, first-call caches
            backend.complete(request)
        stub.handling_s.clear()
        client = []
        for _ in range(calls):
            start = time.perf_counter()
            backend.complete(request)
            client.append(time.perf_counter() - start)
        server = list(stub.handling_s)
        backend.close()
    diffs = sorted(1000.0 * (c - s) for c, s in zip(client, server, strict=True))

    def p90(values):
        return sorted(values)[int(0.9 * (len(values) - 1))]

    return {"calls": calls, "prompt_chars": len(prompt),
            "client_ms_median": 1000.0 * statistics.median(client),
            "server_ms_median": 1000.0 * statistics.median(server),
            "overhead_ms_median": statistics.median(diffs), "overhead_ms_p90": p90(diffs)}


def calls_per_10k(steps: int, latency_ms: float) -> dict:
    """One `full` run with the openai backend; its calls per 10k env steps (scaled when ``steps`` < 10k)."""
    from lore.config import build_config
    from lore.train.trainer import train

    with OpenAIStub() as stub, tempfile.TemporaryDirectory() as tmp:
        stub.latency_s = latency_ms / 1000.0
        cfg = build_config(overrides=["model.preset=debug", "device=cpu", f"train.steps={steps}",
                                      f"train.prefill={min(1000, steps // 5)}",
                                      "train.tensorboard=false", "train.checkpoint_every=1000000",
                                      f"eval.every={steps}", "eval.episodes=2", "llm.backend=openai",
                                      f"llm.base_url={stub.base_url}", f"llm.model={MODEL}"],
                           ablation="full")
        start = time.perf_counter()
        summary = train(cfg, Path(tmp) / "run", show_progress=False)
        wall = time.perf_counter() - start
        ledger = [json.loads(line) for line in (Path(tmp) / "run" / "llm_calls.jsonl").read_text().splitlines()]
    backend_calls = sum(1 for r in ledger if r.get("source") == "backend")
    ctl = cfg.llm.controller
    return {"train_steps": steps, "backend_calls": backend_calls, "ok_calls": int(summary["llm_calls_ok"]),
            "calls_per_10k_steps": backend_calls * 10_000 / steps, "served_requests": len(stub.requests),
            "budget": ctl.budget, "cooldown": ctl.cooldown, "cooldown_after_success": ctl.cooldown_after_success,
            "run_wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="the server's own time per answer")
    parser.add_argument("--train-steps", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"env": ENV, "latency_ms": args.latency_ms, **overhead(args.calls, args.latency_ms)}
    if args.train_steps:
        result.update(calls_per_10k(args.train_steps, args.latency_ms))
    if args.json:
        print(json.dumps(result))
        return
    print(f"openai backend against the loopback server ({args.latency_ms:g} ms per answer), {ENV} prompt "
          f"of {result['prompt_chars']} chars, {args.calls} calls (median)")
    print(f"  client round trip   {result['client_ms_median']:8.2f} ms")
    print(f"  server handling     {result['server_ms_median']:8.2f} ms")
    print(f"  overhead per call   {result['overhead_ms_median']:8.2f} ms (p90 {result['overhead_ms_p90']:.2f} ms;"
          f" goal <= 2 ms)")
    if args.train_steps:
        print(f"  `full`, {result['train_steps']} env steps: {result['backend_calls']} calls "
              f"({result['ok_calls']} answered, {result['served_requests']} requests) -> "
              f"{result['calls_per_10k_steps']:.1f} per 10k env steps (goal <= 50; budget {result['budget']}, "
              f"cooldowns {result['cooldown']} / {result['cooldown_after_success']} steps), "
              f"run {result['run_wall_s']:.0f} s")


if __name__ == "__main__":
    main()
