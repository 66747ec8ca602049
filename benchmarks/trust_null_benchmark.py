"""How often the episode evidence of advice trust absorbs advice that changes nothing, and how soon it
absorbs advice that helps: a Monte Carlo of :class:`lore.prior.trust.AdviceTrust` on simulated episodes.

    .venv/bin/python benchmarks/trust_null_benchmark.py --out docs/benchmark/trust_null.md

Each simulated run has ``--episodes`` episodes, a share ``control`` of them control episodes (the prior's
default), and a success (return 0.9, else 0) with one probability for advised and one for control
episodes. The statistic is read after every episode, as in training. Reported per scenario: the share of
runs in which the absorption weight ``clip(2 trust - 1, 0, 1)`` ever exceeded 0.5, and the median number
of episodes until it first exceeded 0.8. The previous rule (Welch's t with per-group variances, no dead
zone) and ``prior.trust_familywise`` (the dead zone widened over the windows read so far) are simulated next
to the default for comparison; only the episode evidence is simulated (the value z-score evidence is 0, as
it is early in training when the critic cannot rank actions).

``--returns-from`` adds the same table for real return sequences: the ``episodes.csv`` of training runs,
replayed in their order with control labels drawn at random (the null: the labels say nothing about the
return, but the returns drift as the agent learns, as they do in training), and with ``--shift`` standard
deviations of the sequence added to the advised episodes (advice that helps by that much).

A second table reports the act-time scale ``min(1, 2 trust_act)`` that multiplies beta in advised episodes,
averaged over each run's episodes, for the two settings of ``prior.trust_act_evidence``: ``combined`` (the
absorption's trust, whose episode part has the dead zone on both sides) and ``returns`` (harm at face value,
:func:`lore.prior.trust.harm_first`). Higher is better for helpful advice, lower for harmful advice;
for advice that changes nothing the scale costs nothing either way.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path

from lore.analysis.runs import find_run_dirs
from lore.config import PriorConfig
from lore.prior.trust import AdviceTrust, EpisodeComparison, trust_from_evidence

SCENARIOS = [  # (label, p advised, p control, episodes); "null" rows: advice changes nothing
    ("null, 5% success", 0.05, 0.05, 40),
    ("null, 20% success", 0.20, 0.20, 40),
    ("null, 30% success, long run", 0.30, 0.30, 300),
    ("helpful, 60% vs 5%", 0.60, 0.05, 40),
    ("helpful, 30% vs 0%", 0.30, 0.00, 40),
    ("harmful, 2% vs 10%", 0.02, 0.10, 40),
    ("helpful, 45% vs 30%, long run", 0.45, 0.30, 300),
]

RULES = {"welch": "previous: Welch t, no dead zone", "current": "default: pooled t, dead zone {w:g}",
         "familywise": "prior.trust_familywise: dead zone {w:g} over the windows"}


def welch_t(cmp: EpisodeComparison) -> float:
    """The previous rule's statistic: per-group variances (0 for identical returns)."""
    (wa, sa, qa, _), (wc, sc, qc, _) = cmp.stats["advised"], cmp.stats["control"]
    if min(wa, wc) < cmp.min_episodes - 1e-6:
        return 0.0
    ma, mc = sa / wa, sc / wc
    va, vc = max(qa / wa - ma * ma, 0.0), max(qc / wc - mc * mc, 0.0)
    return (ma - mc) / math.sqrt(va / wa + vc / wc + cmp.min_gap ** 2)


def draw_episode(rng: random.Random, p_advised: float, p_control: float, control: float) -> tuple[float, bool]:
    """One episode's ``(return, control)``: control with prob ``control``; success, return 0.9, with its group's
    probability."""
    is_control = rng.random() < control
    return (0.9 if rng.random() < (p_control if is_control else p_advised) else 0.0), is_control


def weights_of_run(rule: str, cfg: PriorConfig, episodes: Iterable[tuple[float, bool]]) -> list[float]:
    """Absorption weight after every ``(return, control)`` episode of one run under ``rule`` (a key of RULES)."""
    trust = AdviceTrust(cfg.trust_decay, cfg.trust_gain, cfg.trust_dead_zone, familywise=rule == "familywise")
    weights = []
    for episode_return, control in episodes:
        trust.episodes.observe(episode_return, control)
        tau = trust_from_evidence(welch_t(trust.episodes), cfg.trust_gain) if rule == "welch" else trust.value("llm")
        weights.append(min(max(2.0 * tau - 1.0, 0.0), 1.0))
    return weights


def simulate(rule: str, p_advised: float, p_control: float, episodes: int, seed: int, control: float,
             cfg: PriorConfig) -> list[float]:
    """Absorption weight after every episode of one simulated run."""
    rng = random.Random(seed)
    return weights_of_run(rule, cfg, (draw_episode(rng, p_advised, p_control, control) for _ in range(episodes)))


def replay(rule: str, returns: list[float], shift: float, seed: int, control: float, cfg: PriorConfig) -> list[float]:
    """Absorption weight over a real return sequence with random control labels; advised returns + ``shift``."""
    rng = random.Random(seed)
    labels = [rng.random() < control for _ in returns]
    return weights_of_run(rule, cfg, ((r + (0.0 if c else shift), c) for r, c in zip(returns, labels, strict=True)))


def summary(weights: list[list[float]]) -> tuple[float, str]:
    """(share of runs whose weight ever exceeded 0.5, median episodes until it first exceeded 0.8)."""
    first = [next((i + 1 for i, x in enumerate(w) if x > 0.8), math.inf) for w in weights]
    med = statistics.median(first)
    return sum(max(w) > 0.5 for w in weights) / len(weights), f"{med:.0f}" if math.isfinite(med) else "never"


def act_scales(evidence: str, p_advised: float, p_control: float, episodes: int, seed: int, control: float,
               cfg: PriorConfig) -> list[float]:
    """Act-time scale ``min(1, 2 trust_act)`` before every episode of one simulated run."""
    rng = random.Random(seed)
    trust = AdviceTrust(cfg.trust_decay, cfg.trust_gain, cfg.trust_dead_zone, evidence)
    scales = []
    for _ in range(episodes):
        scales.append(min(1.0, 2.0 * trust.act_value("llm")))
        trust.episodes.observe(*draw_episode(rng, p_advised, p_control, control))
    return scales


def act_table(runs: int, seed: int) -> str:
    cfg = PriorConfig()
    lines = ["| scenario | act evidence | mean act scale (5th-95th pct over runs) | first 10 episodes |",
             "|---|---|---|---|"]
    for label, pa, pc, n in SCENARIOS:
        for evidence in ("combined", "returns"):
            means, early = [], []
            for r in range(runs):
                scales = act_scales(evidence, pa, pc, n, seed + r, cfg.control_episodes, cfg)
                means.append(statistics.fmean(scales))
                early.append(statistics.fmean(scales[:10]))
            q = statistics.quantiles(means, n=20)
            lines.append(f"| {label} | {evidence} | {statistics.fmean(means):.2f} ({q[0]:.2f}-{q[-1]:.2f}) | "
                         f"{statistics.fmean(early):.2f} |")
    return "\n".join(lines)


HEADER = ["| scenario | rule | P(weight ever > 0.5) | median episodes to weight > 0.8 |", "|---|---|---|---|"]


def table(runs: int, seed: int) -> str:
    cfg = PriorConfig()
    lines = list(HEADER)
    for label, pa, pc, n in SCENARIOS:
        for rule, name in RULES.items():
            ever, shown = summary([simulate(rule, pa, pc, n, seed + r, cfg.control_episodes, cfg) for r in range(runs)])
            lines.append(f"| {label} | {name.format(w=cfg.trust_dead_zone)} | {ever:.2f} | {shown} |")
    return "\n".join(lines)


def read_returns(paths: list[Path], min_episodes: int = 30) -> list[list[float]]:
    """The return column of every ``episodes.csv`` with at least ``min_episodes`` rows, in episode order."""
    out = []
    for path in paths:
        with path.open(newline="") as fh:
            rows = [float(r["return"]) for r in csv.DictReader(fh)]
        if len(rows) >= min_episodes:
            out.append(rows)
    return out


def real_table(sequences: list[list[float]], shifts: list[float], draws: int, seed: int) -> str:
    cfg = PriorConfig()
    lines = list(HEADER)
    for shift in [0.0, *shifts]:
        label = "null (labels at random)" if shift == 0 else f"advised + {shift:g} sd"
        for rule, name in RULES.items():
            weights = [replay(rule, seq, shift * statistics.pstdev(seq), seed + d, cfg.control_episodes, cfg)
                       for seq in sequences for d in range(draws)]
            ever, shown = summary(weights)
            lines.append(f"| {label} | {name.format(w=cfg.trust_dead_zone)} | {ever:.2f} | {shown} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=400, help="simulated runs per scenario and rule")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the Markdown table here (else stdout)")
    p.add_argument("--returns-from", type=Path, action="append", default=[], metavar="DIR",
                   help="replay the episodes.csv of the runs under DIR, one table per DIR (repeatable)")
    p.add_argument("--shift", type=float, nargs="*", default=[0.25, 0.5], help="advised shifts, in sd of the returns")
    p.add_argument("--draws", type=int, default=40, help="random control labellings per real sequence")
    args = p.parse_args(argv)
    sequences = {}
    for root in args.returns_from:  # every root is read (and checked) before anything is written
        if not root.is_dir():
            p.error(f"--returns-from {root}: not a directory")
        # linked run folders too (a benchmark folder links its baseline runs): each real run read once
        sequences[root] = read_returns([run / "episodes.csv" for run in find_run_dirs(root, "episodes.csv")])
        if not sequences[root]:
            p.error(f"--returns-from {root}: no episodes.csv with at least 30 episodes under it")
    cfg = PriorConfig()
    text = (f"# Advice trust under the null (Monte Carlo, {args.runs} runs per row)\n\n"
            f"Generated by `benchmarks/trust_null_benchmark.py --runs {args.runs} --seed {args.seed}"
            f"{''.join(f' --returns-from {r}' for r in args.returns_from)}"
            f"{f' --draws {args.draws}' if args.returns_from else ''}`; "
            f"defaults: control share {cfg.control_episodes:g}, gain {cfg.trust_gain:g}, "
            f"dead zone {cfg.trust_dead_zone:g} standard errors.\n\n{table(args.runs, args.seed)}\n\n"
            f"## Act-time scale min(1, 2 trust_act) by `prior.trust_act_evidence`\n\n"
            f"{act_table(args.runs, args.seed)}\n")
    for root, runs in sequences.items():
        text += (f"\n## Real return sequences: {root} ({len(runs)} runs, {args.draws} labellings each)\n\n"
                 f"`--returns-from {root} --shift {' '.join(f'{x:g}' for x in args.shift)}`; median run length "
                 f"{statistics.median(len(q) for q in runs):.0f} episodes.\n\n"
                 f"{real_table(runs, args.shift, args.draws, args.seed)}\n")
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
