"""Synthetic run directories with known answers, for tests and benchmarks of the analysis.

They have the layout and files of a real ``lore train`` run (``config.yaml``, ``eval.csv``,
``episodes.csv``, ``metrics.csv``, ``llm_calls.jsonl``, ``done``), written from a known
success-rate curve so statistics computed from them can be checked against the truth.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from lore.utils.io import atomic_write_text

CRAFTER_ENVS = ("crafter", "CrafterReward-v1", "CrafterNoReward-v1")

# How fast each ablation learns in the synthetic world: (midpoint as a fraction of the run, plateau).
DEFAULT_EFFECTS: dict[str, tuple[float, float]] = {
    "rl_only": (0.55, 0.95),
    "prior_only": (0.45, 0.85),
    "gate": (0.40, 0.95),
    "kl": (0.42, 0.95),
    "features": (0.50, 0.95),
    "full": (0.30, 0.97),
    "full_plan": (0.28, 0.97),
    "full_distill": (0.32, 0.97),
    "full_noisy": (0.45, 0.95),
    "full_adversarial": (0.60, 0.93),
    "kl_adversarial": (0.75, 0.60),
}


CRAFTER_DIFFICULTY = [
    "collect_wood", "place_table", "collect_sapling", "place_plant", "collect_drink", "wake_up", "eat_cow",
    "defeat_zombie", "collect_stone", "place_stone", "make_wood_pickaxe", "make_wood_sword", "eat_plant",
    "defeat_skeleton", "collect_coal", "place_furnace", "make_stone_pickaxe", "make_stone_sword",
    "collect_iron", "make_iron_pickaxe", "make_iron_sword", "collect_diamond",
]


def logistic_curve(midpoint: float, plateau: float, width: float) -> Callable[[np.ndarray], np.ndarray]:
    """p(step) = plateau * sigmoid((step - midpoint) / width)."""
    return lambda steps: plateau / (1.0 + np.exp(-(np.asarray(steps, float) - midpoint) / width))


def uses_llm(ablation: str) -> bool:
    from lore.ablations import ablation_overrides

    return ablation_overrides(ablation).get("llm.backend", "scripted") != "none"


def achievement_names() -> list[str]:
    from crafter import constants

    return list(constants.achievements)


@dataclass
class SyntheticRun:
    """Knobs of one synthetic run; ``eval_sr`` (one value per eval point) overrides the curve."""

    env: str = "MiniGrid-DoorKey-5x5-v0"
    ablation: str = "rl_only"
    seed: int = 0
    steps: int = 10_000
    eval_every: int = 1_000
    eval_episodes: int = 10
    log_every: int = 500
    curve: Callable[[np.ndarray], np.ndarray] | None = None
    eval_sr: Sequence[float] | None = None
    episode_length: float = 60.0
    train_success: Sequence[float] | None = None
    """Exact per-episode training successes (with ``episode_steps``), for the window metric."""
    episode_steps: Sequence[int] | None = None
    achievement_rates: Sequence[float] | None = None
    """Final-eval Crafter achievement rates (22 values in [0, 1]); default drawn from the curve."""
    complete: bool = True

    def eval_steps(self) -> np.ndarray:
        return np.arange(0, self.steps + 1, self.eval_every, dtype=np.int64)


def _default_curve(spec: SyntheticRun) -> Callable[[np.ndarray], np.ndarray]:
    midpoint, plateau = DEFAULT_EFFECTS.get(spec.ablation, (0.5, 0.9))
    return logistic_curve(midpoint * spec.steps, plateau, 0.08 * spec.steps)


def write_run(run_dir: str | Path, spec: SyntheticRun) -> Path:
    """Write one synthetic run directory; returns its path."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # Stable across processes (str hash() is salted per interpreter).
    rng = np.random.default_rng([zlib.crc32(spec.env.encode()), zlib.crc32(spec.ablation.encode()), spec.seed])
    curve = spec.curve or _default_curve(spec)
    crafter = spec.env in CRAFTER_ENVS
    llm = uses_llm(spec.ablation)

    _write_config(run_dir, spec)

    # eval.csv: binomial draws around the curve unless exact values are given.
    steps = spec.eval_steps()
    if spec.eval_sr is not None:
        sr = np.asarray(spec.eval_sr, float)
        if sr.shape != steps.shape:
            raise ValueError(f"eval_sr has {sr.size} values but the run has {steps.size} eval points")
    else:
        sr = rng.binomial(spec.eval_episodes, np.clip(curve(steps), 0, 1)) / spec.eval_episodes
    length = spec.episode_length * (1.5 - sr)
    eval_frame = pd.DataFrame({
        "env_step": steps,
        "success_rate": sr,
        "return_mean": sr * (1.0 - 0.9 * length / 250.0),
        "return_std": 0.3 * np.sqrt(sr * (1 - sr)),
        "length_mean": length,
        "episodes": spec.eval_episodes,
    })
    if crafter:
        names = achievement_names()
        if spec.achievement_rates is not None:
            final = np.asarray(spec.achievement_rates, float)
        else:
            # Easy achievements first, as in Crafter's published agents; noise per seed.
            rank = np.array([CRAFTER_DIFFICULTY.index(n) if n in CRAFTER_DIFFICULTY else 10 for n in names])
            final = np.clip(0.9 * 0.72**rank * (0.3 + sr[-1]) * rng.uniform(0.7, 1.3, len(names)), 0, 1)
        progress = np.clip(steps / max(spec.steps, 1), 0, 1)[:, None]  # [T, 1]
        rates = final[None, :] * progress  # [T, 22]
        rates[-1] = final
        for i, name in enumerate(names):
            eval_frame[f"ach_{name}"] = rates[:, i]
        eval_frame["crafter_score"] = np.exp(np.mean(np.log1p(100 * rates), axis=1)) - 1
    if not spec.complete:
        eval_frame = eval_frame.iloc[: max(1, len(eval_frame) // 2)]
    atomic_write_text(run_dir / "eval.csv", eval_frame.to_csv(index=False))

    _write_episodes(run_dir, spec, curve, rng)
    _write_metrics(run_dir, spec, llm, rng)
    calls = _write_llm_calls(run_dir, spec, llm, rng)
    if spec.complete:
        done = {"env_step": int(spec.steps), "wall_s": float(spec.steps / 50.0),
                "final_success_rate": float(sr[-1]), "llm_calls": calls}
        atomic_write_text(run_dir / "done", json.dumps(done))
    return run_dir


def _write_config(run_dir: Path, spec: SyntheticRun) -> None:
    from lore.config import build_config, to_dict

    cfg = build_config(
        {"env": {"name": spec.env}, "seed": spec.seed,
         "train": {"steps": spec.steps, "prefill": min(spec.steps // 10, 1000)}, "eval": {"every": spec.eval_every, "episodes": spec.eval_episodes}},
        ablation=spec.ablation,
    )
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))


def _write_episodes(run_dir: Path, spec: SyntheticRun, curve, rng: np.random.Generator) -> None:
    if spec.train_success is not None:
        if spec.episode_steps is None or len(spec.episode_steps) != len(spec.train_success):
            raise ValueError("train_success needs episode_steps of the same length")
        ends = np.asarray(spec.episode_steps, np.int64)
        success = np.asarray(spec.train_success, float)
    else:
        lengths = rng.geometric(1.0 / spec.episode_length, size=int(3 * spec.steps / spec.episode_length) + 10)
        ends = np.cumsum(lengths)
        ends = ends[ends <= spec.steps]
        success = (rng.random(ends.size) < 0.8 * curve(ends)).astype(float)
    lengths = np.diff(np.concatenate([[0], ends]))
    frame = pd.DataFrame({
        "env_step": ends, "episode": np.arange(ends.size), "env_index": 0,
        "return": success * (1 - 0.9 * np.minimum(lengths, 250) / 250), "length": lengths,
        "success": success,
    })
    atomic_write_text(run_dir / "episodes.csv", frame.to_csv(index=False))


def _write_metrics(run_dir: Path, spec: SyntheticRun, llm: bool, rng: np.random.Generator) -> None:
    steps = np.arange(spec.log_every, spec.steps + 1, spec.log_every, dtype=np.int64)
    t = steps / spec.steps
    frame = pd.DataFrame({
        "env_step": steps,
        "wm_loss": 2.0 * np.exp(-3 * t) + 0.1 * rng.random(steps.size),
        "kl_dyn": 1.0 + 0.5 * np.exp(-2 * t),
        "entropy_wm": 1.9 * np.exp(-1.5 * t) + 0.05,
        "steps_per_s": 40 + rng.normal(0, 2, steps.size),
    })
    if llm:
        beta = 0.8 * np.exp(-4 * t) + 0.02 * rng.random(steps.size)
        frame["entropy_mix"] = frame["entropy_wm"] * (1 - 0.3 * beta)
        frame["beta_mean"] = beta
        frame["beta_std"] = 0.3 * beta
        frame["u_entropy"] = np.exp(-2 * t)
        frame["u_value_var"] = 0.5 * np.exp(-3 * t)
        frame["u_disagreement"] = 0.3 * np.exp(-2.5 * t)
        frame["kl_mix_wm"] = 0.3 * beta
        frame["lambda_kl"] = 0.1 + np.maximum(0, np.cumsum(0.3 * beta - 0.1) * 0.01)
        calls = np.cumsum(rng.poisson(20 * beta))
        frame["llm_calls"] = calls
        frame["llm_cache_hits"] = (0.3 * calls).astype(int)
        frame["llm_failures"] = 0
        frame["llm_action_changed_frac"] = 0.5 * beta
    atomic_write_text(run_dir / "metrics.csv", frame.to_csv(index=False))


def _write_llm_calls(run_dir: Path, spec: SyntheticRun, llm: bool, rng: np.random.Generator) -> int:
    path = run_dir / "llm_calls.jsonl"
    if not llm:
        if path.exists():
            path.unlink()
        return 0
    # Calls are dense early (high beta) and sparse later.
    n = int(rng.poisson(max(1.0, spec.steps / 100)))
    call_steps = np.sort((spec.steps * rng.beta(1.0, 3.0, size=n)).astype(int))
    lines = []
    for step in call_steps:
        hit = bool(rng.random() < 0.3)
        fail = (not hit) and bool(rng.random() < 0.05)
        lines.append(json.dumps({
            "env_step": int(step), "ok": not fail, "cache_hit": hit,
            "failure": "timeout" if fail else None, "latency_ms": 0.0 if hit else float(rng.gamma(4, 60)),
            "tokens_in": 0 if hit else 400, "tokens_out": 0 if hit else 60,
        }))
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))
    return sum(1 for line in lines if '"cache_hit": false' in line)


def run_dir_for(root: str | Path, env: str, ablation: str, seed: int) -> Path:
    """The workflow's layout: ``<root>/<env>/<ablation>/seed<k>``."""
    return Path(root) / env / ablation / f"seed{seed}"


def write_grid(root: str | Path, envs: Sequence[str], ablations: Sequence[str], seeds: Sequence[int],
               steps: int = 10_000, eval_every: int = 1_000, env_steps: dict[str, int] | None = None) -> list[Path]:
    """A full env x ablation x seed grid of synthetic runs under ``root``."""
    paths = []
    for env in envs:
        n = (env_steps or {}).get(env, steps)
        for ablation in ablations:
            for seed in seeds:
                spec = SyntheticRun(env=env, ablation=ablation, seed=int(seed), steps=n,
                                    eval_every=min(eval_every, n),
                                    log_every=max(1, n // 20))
                paths.append(write_run(run_dir_for(root, env, ablation, seed), spec))
    return paths
