"""How often the episode evidence of advice trust absorbs advice that changes nothing, and how soon it
absorbs advice that helps: a Monte Carlo of :class:`lore.prior.trust.AdviceTrust` on simulated episodes.

    .venv/bin/python benchmarks/trust_null_benchmark.py --out docs/benchmark/trust_null.md

Each simulated run has ``--episodes`` episodes, a share ``control`` of them control episodes (the prior's
default), and a success (return 0.9, else 0) with one probability for advised and one for control
episodes. The statistic is read after every episode, as in training. Reported per scenario: the share of
runs in which the absorption weight ``clip(2 trust - 1, 0, 1)`` ever exceeded 0.5, and the median number
of episodes until it first exceeded 0.8. The previous rule (Welch's t with per-group variances, no dead
zone) is simulated next to the current one for comparison; only the episode evidence is simulated (the
value z-score evidence is 0, as it is early in training when the critic cannot rank actions).

A second table reports the act-time scale ``min(1, 2 trust_act)`` that multiplies beta in advised episodes,
averaged over each run's episodes, for the two settings of ``prior.trust_act_evidence``: ``combined`` (the
absorption's trust, whose episode part has the dead zone on both sides) and ``returns`` (harm at face value,
:func:`lore.prior.trust.harm_first`). Higher is better for helpful advice, lower for harmful advice;
for advice that changes nothing the scale costs nothing either way.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

from lore.config import PriorConfig
from lore.prior.trust import AdviceTrust, EpisodeComparison, trust_from_evidence

SCENARIOS = [  # (label, p advised, p control, episodes); "null" rows: advice changes nothing
    ("null, 5% success", 0.05, 0.05, 40),
    ("null, 20% success", 0.20, 0.20, 40),
    ("null, 30% success, long run", 0.30, 0.30, 300),
    ("helpful, 60% vs 5%", 0.60, 0.05, 40),
    ("helpful, 30% vs 0%", 0.30, 0.00, 40),
    ("harmful, 2% vs 10%", 0.02, 0.10, 40),
]


def welch_t(cmp: EpisodeComparison) -> float:
    """The previous rule's statistic: per-group variances (0 for identical returns)."""
    (wa, sa, qa), (wc, sc, qc) = cmp.stats["advised"], cmp.stats["control"]
    if min(wa, wc) < cmp.min_episodes - 1e-6:
        return 0.0
    ma, mc = sa / wa, sc / wc
    va, vc = max(qa / wa - ma * ma, 0.0), max(qc / wc - mc * mc, 0.0)
    return (ma - mc) / math.sqrt(va / wa + vc / wc + cmp.min_gap ** 2)


def observe_episode(trust: AdviceTrust, rng: random.Random, p_advised: float, p_control: float,
                    control: float) -> None:
    """Draw one episode (control with prob ``control``; success, return 0.9, with its group's probability)."""
    is_control = rng.random() < control
    p = p_control if is_control else p_advised
    trust.episodes.observe(0.9 if rng.random() < p else 0.0, is_control)


def simulate(rule: str, p_advised: float, p_control: float, episodes: int, seed: int, control: float,
             cfg: PriorConfig) -> list[float]:
    """Absorption weight after every episode of one simulated run."""
    rng = random.Random(seed)
    trust = AdviceTrust(cfg.trust_decay, cfg.trust_gain, cfg.trust_dead_zone)
    weights = []
    for _ in range(episodes):
        observe_episode(trust, rng, p_advised, p_control, control)
        tau = trust.value("llm") if rule == "current" else trust_from_evidence(welch_t(trust.episodes), cfg.trust_gain)
        weights.append(min(max(2.0 * tau - 1.0, 0.0), 1.0))
    return weights


def act_scales(evidence: str, p_advised: float, p_control: float, episodes: int, seed: int, control: float,
               cfg: PriorConfig) -> list[float]:
    """Act-time scale ``min(1, 2 trust_act)`` before every episode of one simulated run."""
    rng = random.Random(seed)
    trust = AdviceTrust(cfg.trust_decay, cfg.trust_gain, cfg.trust_dead_zone, evidence)
    scales = []
    for _ in range(episodes):
        scales.append(min(1.0, 2.0 * trust.act_value("llm")))
        observe_episode(trust, rng, p_advised, p_control, control)
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


def table(runs: int, seed: int) -> str:
    cfg = PriorConfig()
    lines = ["| scenario | rule | P(weight ever > 0.5) | median episodes to weight > 0.8 |", "|---|---|---|---|"]
    for label, pa, pc, n in SCENARIOS:
        for rule, name in (("welch", "previous: Welch t, no dead zone"),
                           ("current", f"current: pooled t, dead zone {cfg.trust_dead_zone:g}")):
            ever, first = 0, []
            for r in range(runs):
                w = simulate(rule, pa, pc, n, seed + r, cfg.control_episodes, cfg)
                ever += max(w) > 0.5
                first.append(next((i + 1 for i, x in enumerate(w) if x > 0.8), math.inf))
            med = statistics.median(first)
            shown = f"{med:.0f}" if math.isfinite(med) else f"> {n}"
            lines.append(f"| {label} | {name} | {ever / runs:.2f} | {shown} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=400, help="simulated runs per scenario and rule")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the Markdown table here (else stdout)")
    args = p.parse_args(argv)
    cfg = PriorConfig()
    text = (f"# Advice trust under the null (Monte Carlo, {args.runs} runs per row)\n\n"
            f"Generated by `benchmarks/trust_null_benchmark.py --runs {args.runs} --seed {args.seed}`; "
            f"defaults: control share {cfg.control_episodes:g}, gain {cfg.trust_gain:g}, "
            f"dead zone {cfg.trust_dead_zone:g} standard errors.\n\n{table(args.runs, args.seed)}\n\n"
            f"## Act-time scale min(1, 2 trust_act) by `prior.trust_act_evidence`\n\n"
            f"{act_table(args.runs, args.seed)}\n")
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
