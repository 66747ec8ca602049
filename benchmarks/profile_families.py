"""Where one update of the trainer's agent spends its CPU time, per op family, at the benchmark config.

    .venv/bin/python benchmarks/profile_families.py                      # full and rl_only, LavaGapS5
    .venv/bin/python benchmarks/profile_families.py --ablations full --updates 60 --env MiniGrid-DoorKey-5x5-v0

Trains a short run of each ablation with the settings of ``config/benchmark.yaml`` (debug preset, batch 16x16,
one thread) so that the replay, the return normaliser and the prior layer hold what a real run's do, samples
``--batches`` replay batches, and then times ``--updates`` updates of the trainer's agent on them in three passes:

1. CPU time per op family (``time.process_time``; each family's own time, without the families nested in it),
   from wrappers put around the agent's methods, its modules' forwards, ``Tensor.backward`` and the optimisers;
2. ATen operators per family (a ``TorchDispatchMode`` that counts the ops each family dispatches);
3. ``torch.profiler``: the share of the update spent inside ATen operators; the rest is Python and dispatch.

The wrappers cost a few microseconds per call, so the families' sum is a little above the bare update's time
(printed apart). ``--compare BASE NEW`` profiles two code trees instead (each in its own process, ``lore`` from
``PYTHONPATH=<tree>``, one after the other) and prints one table with both trees' ms per family and their ratio;
``--new-set KEY=VALUE`` then applies an override to NEW's runs only (a change of the maths against the base).
It is a benchmark, not a test: CI never runs it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from _timing import set_flags
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK_CONFIG = ROOT / "config" / "benchmark.yaml"


def benchmark_overrides(path: Path = BENCHMARK_CONFIG) -> list[str]:
    """The ``run:`` settings of a workflow config as dotted overrides."""
    from lore.config import load_yaml

    return [f"{k}={v}" for k, v in load_yaml(path)["run"].items()]


def warm_agent(ablation: str, env: str, steps: int, seed: int, batches: int, extra: list[str]):
    """(agent, replay batches) after a ``steps``-env-step run of ``ablation`` on ``env`` at the benchmark config."""
    from lore.config import build_config
    from lore.train.trainer import Trainer

    overrides = [*benchmark_overrides(), f"env.name={env}", f"train.steps={steps}", f"seed={seed}",
                 "eval.episodes=1", f"eval.every={max(steps, 1)}", f"train.checkpoint_every={10 * steps}",
                 "train.progress=false", *extra]
    cfg = build_config(overrides=overrides, ablation=ablation)
    run_dir = Path(tempfile.mkdtemp(prefix=f"profile_{ablation}_"))
    trainer = Trainer(cfg, run_dir, show_progress=False)
    trainer.run()
    torch.manual_seed(seed)
    return trainer.agent, [trainer.replay.sample() for _ in range(batches)]


class Families:
    """A stack of named families: each wrapped call charges its own CPU time (less its nested families')."""

    def __init__(self):
        self.stack: list[str] = ["other (update glue)"]
        self.own: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.mark = time.process_time()
        self.undo: list[tuple[object, str, object, bool]] = []
        self.sticky: set[str] = set()

    def _switch(self, family: str | None) -> None:
        now = time.process_time()
        self.own[self.stack[-1]] += now - self.mark
        self.mark = now
        if family is None:
            self.stack.pop()
        else:
            self.stack.append(family)
            self.calls[family] += 1

    def wrap(self, owner, name: str, family: str, sticky: bool = False) -> None:
        """Replace ``owner.name`` by a wrapper charging ``family`` (undone by :meth:`restore`); a ``sticky`` family
        keeps the time of the wrapped calls nested in it."""
        original = getattr(owner, name)
        had_own = isinstance(owner, type) or name in vars(owner)
        if sticky:
            self.sticky.add(family)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if self.stack[-1] in self.sticky:
                return original(*args, **kwargs)
            self._switch(family)
            try:
                return original(*args, **kwargs)
            finally:
                self._switch(None)

        setattr(owner, name, wrapper)
        self.undo.append((owner, name, original, had_own))

    def restore(self) -> None:
        for owner, name, original, had_own in reversed(self.undo):
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self.undo.clear()

    def reset(self) -> None:
        self.own.clear()
        self.calls.clear()
        self.mark = time.process_time()


def instrument(agent, fam: Families) -> None:
    """Wrap the pieces of one update of ``agent`` (a LoReAgent) in their families."""
    import lore.dreamer.agent as agent_mod
    import lore.dreamer.world_model as wm_mod

    d = agent.dreamer
    wm = d.wm
    fam.wrap(d, "_prepare_batch", "batch to tensors")
    fam.wrap(d, "_update_noise", "noise draws")
    fam.wrap(wm, "embed", "encoder")
    fam.wrap(wm.rssm, "observe", "RSSM observe (posterior loop)")
    fam.wrap(wm.decoder, "loss", "decoder + its loss")
    fam.wrap(wm.reward_head, "forward", "reward/continue heads")
    fam.wrap(wm.continue_head, "forward", "reward/continue heads")
    for name in ("kl_balance", "free_bits_kl", "twohot_loss"):
        fam.wrap(wm_mod, name, "world-model losses (KL, two-hot, BCE)")
    fam.wrap(wm_mod.F, "binary_cross_entropy_with_logits", "world-model losses (KL, two-hot, BCE)")
    fam.wrap(d, "_start_rows", "imagination start rows")
    fam.wrap(wm.rssm, "img_step", "imagination: RSSM prior steps")
    fam.wrap(d, "_imagine", "imagination: loop glue")
    fam.wrap(d.actor, "forward", "actor forward")
    fam.wrap(wm, "one_hot", "one-hot feature views")
    if hasattr(d, "_one_hot_view"):
        fam.wrap(d, "_one_hot_view", "one-hot feature views")
    fam.wrap(d, "_values_and_returns", "lambda-returns, normaliser, advantages")
    fam.wrap(d, "_critic_on_own_rows", "critic heads forward")
    fam.wrap(d.critic.net, "forward", "critic heads forward")
    fam.wrap(d.slow_critic.net, "forward_rows", "critic heads forward")
    fam.wrap(d.slow_critic.net, "forward", "critic heads forward")
    fam.wrap(d, "_critic_losses", "critic losses")
    fam.wrap(agent_mod, "reinforce_loss", "actor loss")
    fam.wrap(agent_mod, "imagination_weights", "lambda-returns, normaliser, advantages")
    if d.actor_term is not None:
        for name in ("inputs", "loss", "finish"):
            fam.wrap(d.actor_term, name, "LoRe: prior term")  # finish calls score_advice, charged apart
        fam.wrap(d.actor_term, "score_advice", "LoRe: advice scoring", sticky=True)
    fam.wrap(agent_mod, "combine_losses", "loss sums")
    fam.wrap(agent_mod, "read_scalars", "metric reads")
    fam.wrap(torch.Tensor, "backward", "backward")
    fam.wrap(agent_mod.torch.nn.utils, "clip_grad_norm_", "optimiser (clip, Adam, zero_grad, slow EMA)")
    for opt in (d.wm_opt, d.actor_opt, d.critic_opt):
        for name in ("step", "zero_grad"):
            fam.wrap(opt, name, "optimiser (clip, Adam, zero_grad, slow EMA)")
    fam.wrap(agent_mod, "ema_update_", "optimiser (clip, Adam, zero_grad, slow EMA)")


class CountOps(TorchDispatchMode):
    """Counts the ATen operators dispatched under each family of ``fam`` (its current top of stack)."""

    def __init__(self, fam: Families):
        super().__init__()
        self.fam = fam
        self.ops: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[self.fam.stack[-1]] += 1
        return func(*args, **(kwargs or {}))


def profile(ablation: str, env: str, warm_steps: int, seed: int, updates: int, batches: int,
            extra: list[str]) -> dict:
    """The three passes over ``updates`` updates of ``ablation`` -> per-family ms and ops, bare ms, ATen share."""
    agent, data = warm_agent(ablation, env, warm_steps, seed, batches, extra)
    step = agent.train_step
    for i in range(3):
        step(data[i % batches])
    start = time.process_time()  # the bare update
    for i in range(updates):
        step(data[i % batches])
    bare_ms = 1000.0 * (time.process_time() - start) / updates

    fam = Families()
    instrument(agent, fam)
    try:
        fam.reset()
        for i in range(updates):
            step(data[i % batches])
        fam._switch("other (update glue)")
        fam._switch(None)
        family_ms = {k: 1000.0 * v / updates for k, v in fam.own.items()}
        fam.reset()
        counter = CountOps(fam)
        with counter:
            for i in range(min(updates, 5)):
                step(data[i % batches])
        ops = {k: v / min(updates, 5) for k, v in counter.ops.items()}
    finally:
        fam.restore()

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    n = min(updates, 10)
    start = time.process_time()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(n):
            step(data[i % batches])
    profiled_ms = 1000.0 * (time.process_time() - start) / n
    aten_ms = sum(e.self_cpu_time_total for e in prof.key_averages()
                  if e.key.startswith("aten::") or "Backward" in e.key) / 1000.0 / n
    return {"bare_ms": bare_ms, "family_ms": family_ms, "ops": ops, "profiled_ms": profiled_ms, "aten_ms": aten_ms}


def table(ablation: str, result: dict) -> str:
    """A Markdown table of one ablation's families, largest first."""
    family_ms, ops = result["family_ms"], result["ops"]
    total = sum(family_ms.values())
    names = sorted(set(family_ms) | set(ops), key=lambda k: -family_ms.get(k, 0.0))
    lines = [f"### {ablation}: {result['bare_ms']:.1f} ms CPU per update (bare); "
             f"{total:.1f} ms with the wrappers", "",
             "| family | ms | share | ATen ops | µs per op |", "|---|---:|---:|---:|---:|"]
    for k in names:
        ms, n = family_ms.get(k, 0.0), ops.get(k, 0.0)
        per = f"{1000.0 * ms / n:.1f}" if n else "–"
        lines.append(f"| {k} | {ms:.2f} | {100.0 * ms / total:.1f}% | {n:.0f} | {per} |")
    n_ops = sum(ops.values())
    lines.append(f"| **total** | {total:.2f} | 100% | {n_ops:.0f} | {1000.0 * total / max(n_ops, 1):.1f} |")
    share = result["aten_ms"] / result["profiled_ms"]
    lines += ["", f"Under torch.profiler: {result['profiled_ms']:.1f} ms per update, of which {result['aten_ms']:.1f} ms "
              f"({100.0 * share:.0f}%) inside ATen operators (self time, forward and backward); the rest is Python, "
              "the dispatcher and the autograd engine.", ""]
    return "\n".join(lines)


def compare_table(ablation: str, base: dict, new: dict) -> str:
    """A Markdown table of one ablation's families in two trees, largest (in ``base``) first."""
    names = sorted(set(base["family_ms"]) | set(new["family_ms"]), key=lambda k: -base["family_ms"].get(k, 0.0))
    lines = [f"### {ablation}: bare update {base['bare_ms']:.1f} -> {new['bare_ms']:.1f} ms CPU "
             f"({new['bare_ms'] / base['bare_ms']:.3f})", "",
             "| family | base ms | new ms | new/base | base ops | new ops |", "|---|---:|---:|---:|---:|---:|"]
    for k in names:
        b, n = base["family_ms"].get(k, 0.0), new["family_ms"].get(k, 0.0)
        ratio = f"{n / b:.2f}" if b > 0.005 else "–"
        lines.append(f"| {k} | {b:.2f} | {n:.2f} | {ratio} | {base['ops'].get(k, 0.0):.0f} | "
                     f"{new['ops'].get(k, 0.0):.0f} |")
    tb, tn = sum(base["family_ms"].values()), sum(new["family_ms"].values())
    lines.append(f"| **total (wrapped)** | {tb:.2f} | {tn:.2f} | {tn / tb:.2f} | {sum(base['ops'].values()):.0f} | "
                 f"{sum(new['ops'].values()):.0f} |")
    return "\n".join(lines) + "\n"


def profile_tree(tree: str, ablation: str, args, extra: list[str]) -> dict:
    """:func:`profile` of ``ablation`` with the overrides ``extra`` in a process that imports ``lore`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--worker", "--ablations", ablation, "--env", args.env, "--warm-steps",
           str(args.warm_steps), "--updates", str(args.updates), "--batches", str(args.batches), "--seed",
           str(args.seed), *set_flags(extra)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"profiling {ablation} at {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ablations", nargs="+", default=["full", "rl_only"])
    parser.add_argument("--env", default="MiniGrid-LavaGapS5-v0")
    parser.add_argument("--warm-steps", type=int, default=1500, help="env steps trained before profiling")
    parser.add_argument("--updates", type=int, default=40, help="updates timed per pass")
    parser.add_argument("--batches", type=int, default=8, help="replay batches the updates cycle through")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="extra", action="append", default=[], help="extra config override")
    parser.add_argument("--compare", nargs=2, metavar=("BASE", "NEW"), help="profile two code trees")
    parser.add_argument("--new-set", dest="new_extra", action="append", default=[],
                        help="with --compare: config override of the NEW tree only (a maths change against the base)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.worker:
        result = profile(args.ablations[0], args.env, args.warm_steps, args.seed, args.updates, args.batches,
                         args.extra)
        print(json.dumps(result))
        return 0
    if args.compare:
        print(f"# One update per op family, two trees\n\nbase {args.compare[0]}, new {args.compare[1]}; torch "
              f"{torch.__version__}, 1 thread, {args.env}, benchmark config after {args.warm_steps} env steps; "
              f"{args.updates} updates per pass; load {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M')}"
              + (f"; new with {' '.join(args.new_extra)}" if args.new_extra else "") + "\n")
        for ablation in args.ablations:
            base = profile_tree(args.compare[0], ablation, args, args.extra)
            new = profile_tree(args.compare[1], ablation, args, [*args.extra, *args.new_extra])
            print(compare_table(ablation, base, new), flush=True)
        return 0
    print(f"# One update per op family\n\ntorch {torch.__version__}, 1 thread, {args.env}, benchmark config "
          f"after {args.warm_steps} env steps; {args.updates} updates per pass; load {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n")
    for ablation in args.ablations:
        result = profile(ablation, args.env, args.warm_steps, args.seed, args.updates, args.batches, args.extra)
        print(table(ablation, result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
