"""LoRe's DreamerV3 update against the peer implementation (sheeprl), at matched sizes, side by side.

    .venv/bin/python benchmarks/peer_benchmark.py --out docs/benchmark/peer.md
    .venv/bin/python benchmarks/peer_benchmark.py --sizes xs --rounds 7 --venv /tmp/lore-peer-venv

A throwaway virtualenv (``--venv``, default under the temp dir; reused when it already imports
sheeprl) gets ``torch==2.13.0`` first, so pip takes the CPU wheel on this machine's disk, and then
sheeprl under a constraints file that pins that torch: nothing may pull a multi-GB CUDA build, and
a dry run checks that before the real install. No torchvision: sheeprl does not need it.

The agents (``AGENTS``) are built in their own processes, each pinned to one torch thread: LoRe
as the ``full`` ablation configures it by default ("full"), the same agent with its update compiled
(``train.compile=update``: "compiled"), LoRe with 1 critic head ("core") (these
three are ``LORE_AGENTS``) and sheeprl's ``dreamer_v3`` ("peer"), at XS (deter 256, units 256, 1 layer) and S
(deter 512, units 512, 2 layers), both with 32x32 latents, 255 bins, a 147-d vector observation,
7 actions, batch 16x64 and imagination from all 1,024 posterior states (horizon 15). The parent
sends "step" to one process at a time, round-robin with the order rotated every round, so load from
the rest of the machine hits every agent alike; ratios are formed within a round and summarised by
their median and interquartile range. Wall time is the headline; CPU time
of the process is printed beside it, since it is far less sensitive to a busy machine.

Every agent runs ``--warmup`` (at least 2) untimed updates before the timed rounds. The compiled agent
compiles its world-model losses and its imagination with the actor and critic losses on the first one
(minutes on a CPU, backward included); its warm-up times are reported, the first as the compile time.
A worker that does not answer within ``--first-step-timeout`` (first update, default 30 minutes) or
``--step-timeout`` (every later one, default 10 minutes) is stopped and the size fails with that message.

It is a benchmark, not a test: CI never runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCH_PIN = "torch==2.13.0"
DEFAULT_PEER = "0.8.4"
FALLBACK_PEERS = ("0.8.3", "0.8.1", "0.8.0")
OBS_DIM, ACTIONS, BINS, HORIZON = 147, 7, 255, 15
SIZES = {  # both agents: deter, units (dense/hidden), layers, 32 latents x 32 classes
    "xs": {"deter": 256, "units": 256, "layers": 1, "lore_preset": "xs", "peer_algo": "dreamer_v3_XS"},
    "s": {"deter": 512, "units": 512, "layers": 2, "lore_preset": "s", "peer_algo": "dreamer_v3_S"},
}
AGENTS = ("full", "compiled", "core", "peer")
LORE_AGENTS = AGENTS[:-1]
"""LoRe's variants, each the ``full`` ablation timed against the peer: its defaults (the bootstrapped critic heads
feed the advice values), the same with ``train.compile=update`` (the
world-model losses and the imagination with the actor and critic losses each one compiled graph, backward
included), and the core (1 head)."""
LORE_OVERRIDES = {"full": [], "compiled": ["train.compile=update"],
                  "core": ["model.value_heads=1", "model.ensemble=1"]}
"""The settings each of ``LORE_AGENTS`` adds to the shared ones of :func:`build_lore`."""

# Every size difference that remains between the agents once the sizes above are matched.
DIFFERENCES = [
    "LoRe full and compiled train 3 bootstrapped distributional critic heads (and keep 3 slow copies); sheeprl "
    "and LoRe core train one critic and one target copy. In LoRe full each head runs with a graph on its own half "
    "of the imagined trajectories and without one on the rest (the returns bootstrap from all heads on all "
    "states); LoRe compiled runs the heads dense instead, every head (and its slow copy) on every row, with the "
    "bootstrap weights as 0/2 masks on the losses, since a compiled graph reads no data-dependent row count.",
    "sheeprl runs its critic twice on the imagined states (values without gradient inside the imagination, then "
    "the loss with gradient) and its actor twice (sampling, then the loss); LoRe runs each once and keeps the graph.",
    "LoRe's first layers read an imagined latent's one-hot stoch as 32 selected weight rows (same numbers up to "
    "rounding; an embedding bag in the compiled agent); sheeprl multiplies the full 1,024-wide one-hot block.",
    "sheeprl's optimisers are fused Adam (its configs' `fused: True`), as are LoRe compiled's; LoRe full and core "
    "use torch's default Adam.",
    "sheeprl computes its reward and continue heads on all H+1 imagined states, LoRe on the H reached states.",
    "Each agent logs its own metrics; sheeprl's aggregator is left out (it only averages scalars).",
]


# --------------------------------------------------------------------------- the peer's virtualenv


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def peer_version(venv: Path) -> str | None:
    """sheeprl's version in ``venv``, or None when that venv cannot import it."""
    py = venv_python(venv)
    if not py.exists():
        return None
    out = _run([str(py), "-c", "import importlib.metadata as m, sheeprl.algos.dreamer_v3.dreamer_v3 as d; "
                "print(m.version('sheeprl'))"])
    return out.stdout.strip() if out.returncode == 0 else None


def ensure_peer_venv(venv: Path, versions: list[str], log) -> str:
    """Reuse ``venv`` if it imports sheeprl; else create it, torch first, then the first sheeprl version
    that installs beside torch 2.13 (CPU). Returns the installed version; raises with pip's words."""
    found = peer_version(venv)
    if found:
        log(f"peer venv {venv}: reusing sheeprl {found}")
        return found
    py = venv_python(venv)
    if not py.exists():
        log(f"creating {venv}")
        res = _run([sys.executable, "-m", "venv", str(venv)])
        if res.returncode:
            raise RuntimeError(f"python -m venv {venv} failed:\n{res.stderr}")
    # torch first: pip takes the CPU wheel from this machine's disk, so nothing later asks for a CUDA build
    log(f"installing {TORCH_PIN} into {venv}")
    res = _run([str(py), "-m", "pip", "install", "-q", TORCH_PIN])
    if res.returncode:
        raise RuntimeError(f"pip install {TORCH_PIN} failed:\n{res.stderr[-3000:]}")
    check = _run([str(py), "-c", "import torch; print(torch.__version__, torch.version.cuda)"])
    if check.returncode or "None" not in check.stdout:
        raise RuntimeError(f"the venv's torch is not the CPU build: {check.stdout or check.stderr}")
    constraints = venv / "peer-constraints.txt"
    constraints.write_text(TORCH_PIN + "\n")
    errors = []
    for version in versions:
        spec = f"sheeprl=={version}"
        dry = _run([str(py), "-m", "pip", "install", "--dry-run", "-c", str(constraints), spec])
        plan = next((line for line in dry.stdout.splitlines() if line.startswith("Would install")), "")
        if dry.returncode:
            errors.append(f"{spec}: dry run failed: {dry.stderr.strip().splitlines()[-1:]}")
            continue
        heavy = [p for p in plan.split()[2:] if p.lower().startswith(("torch-", "torchvision-", "nvidia-", "triton-"))]
        if heavy:  # a second torch (or CUDA libraries) would be a multi-GB download: refuse
            errors.append(f"{spec}: would install {heavy}")
            continue
        log(f"installing {spec} (constraint {TORCH_PIN})")
        res = _run([str(py), "-m", "pip", "install", "-q", "-c", str(constraints), spec])
        if res.returncode:
            errors.append(f"{spec}: {res.stderr.strip()[-1500:]}")
            continue
        found = peer_version(venv)
        if found:
            return found
        errors.append(f"{spec}: installed but `import sheeprl.algos.dreamer_v3.dreamer_v3` fails")
    raise RuntimeError("no sheeprl version installs beside torch 2.13 (CPU):\n" + "\n".join(errors))


# --------------------------------------------------------------------------- shared data


def make_batch(batch: int, length: int, seed: int = 0):
    """One replay batch [B, T] as both agents see it: sparse binary 147-d observations, random actions,
    rare rewards, terminations and episode starts."""
    import torch

    g = torch.Generator().manual_seed(seed)
    is_first = torch.rand(batch, length, generator=g) < 0.02
    is_first[:, 0] = True
    return {
        "obs": (torch.rand(batch, length, OBS_DIM, generator=g) < 0.05).float(),
        "action": torch.randint(0, ACTIONS, (batch, length), generator=g),
        "reward": (torch.rand(batch, length, generator=g) < 0.02).float(),
        "is_first": is_first,
        "is_terminal": torch.rand(batch, length, generator=g) < 0.01,
    }


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())


# --------------------------------------------------------------------------- workers (one agent each)


def build_lore(size: str, agent: str, batch: int, length: int):
    """(update function, parameter counts) of LoRe's agent ``agent`` (one of ``LORE_AGENTS``) at ``size``."""
    import gymnasium
    import numpy as np

    from lore.config import build_config
    from lore.dreamer.agent import DreamerAgent

    spec = SIZES[size]
    overrides = [f"model.preset={spec['lore_preset']}", "model.stoch=32", "model.classes=32",
                 f"model.deter={spec['deter']}", f"model.units={spec['units']}", f"model.layers={spec['layers']}",
                 f"model.bins={BINS}", f"dreamer.horizon={HORIZON}", "dreamer.imag_last=0", "seed=0",
                 "ablation=full"]
    cfg = build_config(overrides=overrides + LORE_OVERRIDES[agent])
    space = gymnasium.spaces.Dict({"symbolic": gymnasium.spaces.Box(0.0, 1.0, (OBS_DIM,), np.float32)})
    lore = DreamerAgent(space, ACTIONS, cfg)
    data = make_batch(batch, length)
    replay = {"obs.symbolic": data["obs"], "action": data["action"], "reward": data["reward"],
              "is_first": data["is_first"], "is_terminal": data["is_terminal"]}
    wm = count(lore.wm)
    params = {"world model (without ensemble)": wm, "ensemble": 0, "actor": count(lore.actor),
              "critic": count(lore.critic), "critic heads": cfg.model.value_heads, "ensemble members": 0}
    return (lambda: lore.train_step(replay)), params


def build_peer(size: str, batch: int, length: int):
    """(update function, parameter counts) of sheeprl's dreamer_v3 at ``size``: one ``train`` call of its
    training loop plus the target-critic EMA that loop runs before it, on the same batch as LoRe's."""
    import gymnasium
    import hydra
    import torch
    import torch.nn.functional as F
    from hydra import compose, initialize_config_module
    from lightning.fabric import Fabric
    from omegaconf import OmegaConf
    from sheeprl.algos.dreamer_v3 import dreamer_v3 as dv3
    from sheeprl.algos.dreamer_v3.agent import build_agent
    from sheeprl.algos.dreamer_v3.utils import Moments
    from sheeprl.utils.metric import MetricAggregator
    from sheeprl.utils.utils import dotdict
    from torch.distributions import Distribution

    spec = SIZES[size]
    overrides = ["exp=dreamer_v3", f"algo={spec['peer_algo']}", "env=dummy", "algo.cnn_keys.encoder=[]",
                 "algo.mlp_keys.encoder=[state]", "algo.cnn_keys.decoder=[]", "algo.mlp_keys.decoder=[state]",
                 f"algo.per_rank_batch_size={batch}",
                 f"algo.per_rank_sequence_length={length}", f"algo.horizon={HORIZON}", "fabric.accelerator=cpu",
                 "algo.world_model.stochastic_size=32", "algo.world_model.discrete_size=32",
                 f"algo.dense_units={spec['units']}", f"algo.mlp_layers={spec['layers']}",
                 f"algo.world_model.recurrent_model.recurrent_state_size={spec['deter']}",
                 f"algo.world_model.transition_model.hidden_size={spec['units']}",
                 f"algo.world_model.representation_model.hidden_size={spec['units']}",
                 f"algo.world_model.reward_model.bins={BINS}", f"algo.critic.bins={BINS}", "seed=0"]
    with initialize_config_module(config_module="sheeprl.configs", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    cfg = dotdict(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False))
    # what sheeprl's CLI sets before it launches an algorithm
    torch.set_float32_matmul_precision(cfg.float32_matmul_precision)
    Distribution.set_default_validate_args(cfg.distribution.validate_args)
    MetricAggregator.disabled = cfg.metric.log_level == 0
    fabric = Fabric(accelerator="cpu", devices=1, num_nodes=1, precision=cfg.fabric.precision)
    fabric.launch()
    fabric.seed_everything(cfg.seed)
    obs_space = gymnasium.spaces.Dict({"state": gymnasium.spaces.Box(0.0, 1.0, (OBS_DIM,))})
    actions_dim = (ACTIONS,)
    world_model, actor, critic, target_critic, _ = build_agent(fabric, actions_dim, False, cfg, obs_space)
    opts = [hydra.utils.instantiate(c.optimizer, params=m.parameters(), _convert_="all")
            for c, m in ((cfg.algo.world_model, world_model), (cfg.algo.actor, actor), (cfg.algo.critic, critic))]
    world_opt, actor_opt, critic_opt = fabric.setup_optimizers(*opts)
    pct = cfg.algo.actor.moments.percentile
    moments = Moments(cfg.algo.actor.moments.decay, cfg.algo.actor.moments.max, pct.low, pct.high)
    data = make_batch(batch, length)
    tb = lambda x: x.transpose(0, 1).contiguous()  # noqa: E731  sheeprl is time-major [T, B, ...]
    replay = {"state": tb(data["obs"]), "actions": tb(F.one_hot(data["action"], ACTIONS).float()),
              "rewards": tb(data["reward"])[..., None], "terminated": tb(data["is_terminal"].float())[..., None],
              "truncated": torch.zeros(length, batch, 1), "is_first": tb(data["is_first"].float())[..., None]}
    steps = [0]

    def update():
        tau = 1.0 if steps[0] == 0 else cfg.algo.critic.tau  # the loop's target-critic EMA
        for cp, tcp in zip(critic.module.parameters(), target_critic.parameters(), strict=True):
            tcp.data.copy_(tau * cp.data + (1 - tau) * tcp.data)
        batch_now = {k: v.clone() for k, v in replay.items()}  # train() writes is_first in place
        dv3.train(fabric, world_model, actor, critic, target_critic, world_opt, actor_opt, critic_opt, batch_now,
                  None, cfg, False, actions_dim, moments)
        steps[0] += 1

    params = {"world model (without ensemble)": count(world_model), "ensemble": 0, "actor": count(actor),
              "critic": count(critic), "critic heads": 1, "ensemble members": 0}
    return update, params


def worker(spec: str) -> None:
    """One agent in this process: build it, print its parameter counts, then one update per "step" line."""
    import torch

    args = json.loads(spec)
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    if args["agent"] == "peer":
        update, params = build_peer(args["size"], args["batch"], args["length"])
    else:
        sys.path.insert(0, str(REPO))
        update, params = build_lore(args["size"], args["agent"], args["batch"], args["length"])
    print(json.dumps({"ready": True, "params": params, "torch": torch.__version__}), flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        wall, cpu = time.perf_counter(), time.process_time()
        update()
        print(json.dumps({"wall_ms": 1000 * (time.perf_counter() - wall),
                          "cpu_ms": 1000 * (time.process_time() - cpu)}), flush=True)


class Worker:
    def __init__(self, python: Path, agent: str, size: str, batch: int, length: int):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "PYTHONWARNINGS": "ignore"}
        spec = json.dumps({"agent": agent, "size": size, "batch": batch, "length": length})
        self.agent = agent
        self.expired: float | None = None  # the timeout that stopped this worker
        self.proc = subprocess.Popen([str(python), str(Path(__file__).resolve()), "--worker", spec], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=str(REPO))
        self.info = self._read()

    def _expire(self, timeout: float) -> None:
        self.expired = timeout
        self.proc.kill()

    def _read(self, timeout: float | None = None) -> dict:
        """The worker's next JSON line; past ``timeout`` seconds the worker is killed and this raises."""
        timer = None
        if timeout is not None:
            timer = threading.Timer(timeout, self._expire, args=(timeout,))
            timer.daemon = True
            timer.start()
        try:
            line = self.proc.stdout.readline()
            while line and not line.startswith("{"):  # a library's print on stdout
                line = self.proc.stdout.readline()
        finally:
            if timer is not None:
                timer.cancel()
        if not line:
            err = self.proc.stderr.read()
            if self.expired is not None:
                raise RuntimeError(f"{self.agent} worker gave no answer within {self.expired:.0f} s and was "
                                   f"stopped:\n{err[-4000:]}")
            raise RuntimeError(f"{self.agent} worker died:\n{err[-4000:]}")
        return json.loads(line)

    def step(self, timeout: float | None = None) -> dict:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return self._read(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# --------------------------------------------------------------------------- measuring and reporting


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3) of ``values`` (inclusive method; one value gives it three times)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def measure(size: str, peer_python: Path, rounds: int, warmup: int, batch: int, length: int, log,
            first_timeout: float | None = None, step_timeout: float | None = None) -> dict:
    """``warmup`` untimed rounds (the compiled agent compiles in the first), then ``rounds`` interleaved rounds
    of one update per agent; per-round ratios to the peer. A worker's first update may take ``first_timeout``
    seconds, every later one ``step_timeout``."""
    workers = {}
    try:
        for agent in AGENTS:
            python = peer_python if agent == "peer" else Path(sys.executable)
            workers[agent] = Worker(python, agent, size, batch, length)
            log(f"{size}: {agent} ready, params {workers[agent].info['params']}")
        times = {agent: [] for agent in AGENTS}
        warm = {agent: [] for agent in AGENTS}
        loads = []
        for r in range(warmup + rounds):
            order = AGENTS[r % len(AGENTS):] + AGENTS[:r % len(AGENTS)]  # rotate: no agent always runs first after a pause
            for agent in order:
                t = workers[agent].step(first_timeout if r == 0 else step_timeout)
                (times if r >= warmup else warm)[agent].append(t)
            if r < warmup:
                log(f"{size} warm-up {r + 1}/{warmup}: " + ", ".join(
                    f"{a} {warm[a][-1]['wall_ms'] / 1000:.1f} s" for a in AGENTS))
                continue
            loads.append(os.getloadavg()[0])
            log(f"{size} round {r - warmup + 1}/{rounds}: " + ", ".join(
                f"{a} {times[a][-1]['wall_ms']:.0f} ms" for a in AGENTS) + f" (load {loads[-1]:.1f})")
        params = {agent: workers[agent].info["params"] for agent in AGENTS}
    finally:
        for w in workers.values():
            w.close()
    out = {"size": size, "params": params, "load": quartiles(loads), "rounds": rounds,
           "warmup_wall_ms": {a: [t["wall_ms"] for t in warm[a]] for a in AGENTS}}
    for clock in ("wall_ms", "cpu_ms"):
        per = {a: [t[clock] for t in times[a]] for a in AGENTS}
        out[clock] = {a: quartiles(per[a]) for a in AGENTS}
        for a in LORE_AGENTS:
            out[clock][f"{a}/peer"] = quartiles([x / y for x, y in zip(per[a], per["peer"], strict=True)])
    return out


def fmt_ratio(q: tuple[float, float, float]) -> str:
    return f"{q[1]:.2f}x ({q[0]:.2f}-{q[2]:.2f})"


def report(rows: list[dict], meta: dict) -> str:
    lines = [
        "# LoRe vs sheeprl: one DreamerV3 update",
        "",
        "Generated by `benchmarks/peer_benchmark.py`; do not edit by hand. "
        f"torch {meta['torch']} (CPU), sheeprl {meta['sheeprl']}, 1 thread per agent, batch "
        f"{meta['batch']}x{meta['length']}, {OBS_DIM}-d vector observation, {ACTIONS} actions, {BINS} bins, "
        f"32x32 latents, imagination from all {meta['batch'] * meta['length']:,} posterior states "
        f"(horizon {HORIZON}). {meta['cpus']} CPUs ({meta.get('cpu', 'model not recorded')}); {meta['when']}.",
        "",
        "*full*: LoRe's DreamerV3 with the `full` ablation's settings (3 bootstrapped critic heads); "
        "*compiled*: full with "
        "`train.compile=update` (the world-model losses and the imagination with the actor and critic losses each "
        "one `torch.compile` graph, backward included; the critic heads run dense, every head on every row); "
        "*core*: full with 1 critic head; *peer*: sheeprl `dreamer_v3` at the same size. "
        "The replayed batch carries no advice, so no update scores advice. Updates run one at a time, "
        f"interleaved ({', '.join(AGENTS)}, order rotated each round), each agent in its own process; ratios are "
        f"taken within a round: median (interquartile range) over the rounds, after {meta.get('warmup', 2)} untimed "
        "warm-up updates per agent (the compiled agent compiles in the first).",
        "",
        "| size | clock | " + " | ".join(f"{a} ms" for a in AGENTS) + " | "
        + " | ".join(f"{a} / peer" for a in LORE_AGENTS) + " | rounds | load (1 min) |",
        "|---|---|" + "---:|" * (len(AGENTS) + len(LORE_AGENTS) + 2),
    ]
    for r in rows:
        for clock, name in (("wall_ms", "wall"), ("cpu_ms", "CPU")):
            c = r[clock]
            times = " | ".join(f"{c[a][1]:.0f}" for a in AGENTS if a in c)
            ratios = " | ".join(fmt_ratio(c[f"{a}/peer"]) for a in LORE_AGENTS if f"{a}/peer" in c)
            lines.append(f"| {r['size'].upper()} | {name} | {times} | {ratios} | "
                         f"{r['rounds']} | {r['load'][1]:.1f} ({r['load'][0]:.1f}-{r['load'][2]:.1f}) |")
    lines += ["", "Wall time is what a run waits for; CPU time (of each agent's process) is much less disturbed "
              "when other work shares the cores, so a ratio that differs between the two clocks says the "
              "machine was busy.", "", "Warm-up updates (untimed; the compiled agent's first includes its compile), "
              "wall seconds:", "",
              "| size | " + " | ".join(AGENTS) + " |", "|---|" + "---:|" * len(AGENTS)]
    for r in rows:
        warm = r.get("warmup_wall_ms", {})
        cells = [" / ".join(f"{ms / 1000:.1f}" for ms in warm.get(a, [])) or "-" for a in AGENTS]
        lines.append(f"| {r['size'].upper()} | " + " | ".join(cells) + " |")
    lines += ["", "## Sizes", "",
              "| size | agent | world model (without ensemble) | ensemble (members) | actor | critic (heads) |",
              "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        for a in AGENTS:
            if a not in r["params"]:
                continue
            p = r["params"][a]
            lines.append(f"| {r['size'].upper()} | {a} | {p['world model (without ensemble)']:,} | "
                         f"{p['ensemble']:,} ({p['ensemble members']}) | {p['actor']:,} | "
                         f"{p['critic']:,} ({p['critic heads']}) |")
    lines += ["", "Trainable parameters. Sizes matched: deter, units, layers, 32x32 latents, bins, horizon, batch. "
              "The differences that remain:", ""]
    lines += [f"- {d}" for d in DIFFERENCES]
    for size, why in meta.get("failed", {}).items():
        lines += ["", f"Size {size.upper()} failed: {why.strip().splitlines()[0]}"]
    return "\n".join(lines) + "\n"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` where that is missing)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would make the report private
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", nargs="+", default=["xs", "s"], choices=sorted(SIZES))
    parser.add_argument("--rounds", type=int, default=7, help="timed interleaved rounds per size")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (at least 2: the compiled "
                        "agent compiles in the first)")
    parser.add_argument("--first-step-timeout", type=float, default=1800.0,
                        help="seconds an agent's first update (the compile) may take before the size fails")
    parser.add_argument("--step-timeout", type=float, default=600.0,
                        help="seconds any later update may take before the size fails")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batch-length", type=int, default=64)
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "lore-peer-venv",
                        help="the peer's virtualenv (created if missing, reused if it imports sheeprl)")
    parser.add_argument("--sheeprl", default=DEFAULT_PEER,
                        help=f"sheeprl version to install (then {', '.join(FALLBACK_PEERS)} if it will not install)")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here (atomically)")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    parser.add_argument("--from-json", type=Path, nargs="+", default=None,
                        help="no measuring: write the report from earlier --json files (e.g. one per size)")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.warmup < 2 or args.rounds < 1:
        parser.error("--warmup must be >= 2 (the compiled agent compiles in the first update) and --rounds >= 1")
    if args.from_json:
        saved = [json.loads(p.read_text()) for p in args.from_json]
        text = report([r for s in saved for r in s["rows"]], saved[0]["meta"])
        print(text)
        if args.out:
            write_atomic(args.out, text)
        return

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        version = ensure_peer_venv(args.venv, [args.sheeprl, *[v for v in FALLBACK_PEERS if v != args.sheeprl]], log)
    except RuntimeError as exc:
        sys.exit(f"peer_benchmark: cannot set up the peer: {exc}")
    import torch

    rows, failed = [], {}
    for size in args.sizes:  # a size that fails is reported; the others still run
        try:
            rows.append(measure(size, venv_python(args.venv), args.rounds, args.warmup, args.batch_size,
                                args.batch_length, log, args.first_step_timeout, args.step_timeout))
        except RuntimeError as exc:
            log(f"{size} failed: {exc}")
            failed[size] = str(exc)
    meta = {"torch": torch.__version__, "sheeprl": version, "batch": args.batch_size, "length": args.batch_length,
            "cpus": os.cpu_count(), "cpu": cpu_model(), "when": time.strftime("%Y-%m-%d"), "warmup": args.warmup, "failed": failed}
    text = report(rows, meta)
    print(text)
    if args.out:
        write_atomic(args.out, text)
    if args.json:
        write_atomic(args.json, json.dumps({"meta": meta, "rows": rows}, indent=2))
    if failed:
        sys.exit(f"peer_benchmark: failed sizes: {', '.join(failed)}")


if __name__ == "__main__":
    main()
