"""The Crafter benchmark (issue 10, "Crafter for real"): every (arm, seed) run of the CPU Crafter config,
two at a time, seed by seed; and the uniform-random policy measured by the same evaluation code.

    .venv/bin/python benchmarks/crafter_benchmark.py --out results/bench_crafter          # ~2h on 2 idle cores
    .venv/bin/python benchmarks/crafter_report.py --runs-root results/bench_crafter       # docs/benchmark/crafter.md

Every run is ``lore train --config config/crafter_cpu.yaml`` (the one declaration of the CPU Crafter
run, also read by the workflow's config/crafter.yaml): symbolic observation, preset xs, 20k env steps,
evaluation every 5k steps on 10 separate episodes (fixed layouts, the learned policy without the prior).
Arms: ``rl_only`` (DreamerV3 alone), ``full`` (the scripted Crafter advisor, good) and ``full_adversarial``;
seeds 0..2 (``--seeds 5`` for 0..4). ``--steps``, ``--eval-every`` and ``--eval-episodes`` override the
config file for every run, ``--set KEY=VALUE`` anything else.

The random baseline: for each seed, ``lore.train.random_policy.evaluate_random_policy`` at every eval point
of the trained runs (same env config, layouts and episode count, the policy's draws seeded like the agent's
at that point), written to ``<out>/random_policy/seed<k>/eval.csv`` with the columns of a run's ``eval.csv``.

The final evaluation: every finished run's last checkpoint is evaluated again on ``--final-episodes``
separate episodes (default 50, five times the periodic evaluation's 10, so that the comparison at the last
budget is not decided by episode noise) with ``lore eval`` -> ``<run>/eval_final.csv`` (the learned policy
alone) and, for the arms with a prior, ``lore eval --with-prior`` -> ``<run>/eval_final_prior.csv`` (the agent
as it acts in training: the advice mixed in, gated, at the trust it had earned); and the random
policy and the scripted advisor played alone (good and adversarial: what following the advice to the
letter gives) on the same episodes (same layouts, draws seeded as the agent's last evaluation) ->
``<out>/{random_policy,advisor_good,advisor_adversarial}/seed<k>/eval_final.csv``.

Resumable: a finished run (``done``) is skipped, an interrupted one resumes from its checkpoint and a
complete random baseline is not recomputed, so the same command continues an interrupted benchmark.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_CONFIG = REPO / "config" / "crafter_cpu.yaml"
ARMS = ("rl_only", "full", "full_adversarial")
RANDOM_DIR = "random_policy"
"""Folder of the random baseline under ``--out`` (not a training run: no config.yaml, no done)."""
ADVISORS = ("advisor_good", "advisor_adversarial")
"""The scripted advisor played alone (good / adversarial mode): final evaluation only, beside the random policy."""
REFERENCES = (RANDOM_DIR, *ADVISORS)
FINAL_EVAL = "eval_final.csv"
"""The final evaluation's file, in each run directory and each ``random_policy/seed<k>``."""
FINAL_EVAL_PRIOR = "eval_final_prior.csv"
"""The same with the LLM prior mixed in at act time (``lore eval --with-prior``), for the arms that have one."""


def jobs(arms: tuple[str, ...], seeds: int) -> list[tuple[str, int]]:
    """(arm, seed), seed by seed: an interrupted benchmark has every arm at the same n."""
    return [(arm, seed) for seed in range(seeds) for arm in arms]


def overrides(args: argparse.Namespace) -> list[str]:
    """The ``--set`` overrides of every run (and of the random baseline), on top of the config file."""
    sets = []
    if args.steps is not None:
        sets.append(f"train.steps={args.steps}")
    if args.eval_every is not None:
        sets.append(f"eval.every={args.eval_every}")
    if args.eval_episodes is not None:
        sets.append(f"eval.episodes={args.eval_episodes}")
    # One answer cache per process and run: no run's hits depend on which runs finished before it.
    return sets + ["llm.cache_path=null", *args.set]


def train_command(config: Path, run_dir: Path, arm: str, seed: int, sets: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "lore.cli", "train", "--run-dir", str(run_dir), "--ablation", arm,
           "--seed", str(seed), "--config", str(config), "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def train_one(out: Path, config: Path, arm: str, seed: int, sets: list[str],
              final_episodes: int = 0) -> tuple[str, int, float, int]:
    """Train (or resume, or skip a finished) run, then its final evaluation (``final_episodes`` > 0)."""
    run_dir = out / arm / f"seed{seed}"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(run_dir.parent / f"seed{seed}.log", "a") as log:
        rc = subprocess.call(train_command(config, run_dir, arm, seed, sets), stdout=log, stderr=subprocess.STDOUT)
        for name, with_prior in ((FINAL_EVAL, False), (FINAL_EVAL_PRIOR, True)):
            if rc != 0 or final_episodes <= 0 or has_final_eval(run_dir / name, final_episodes):
                continue
            if with_prior and not uses_prior(run_dir):
                continue
            (run_dir / name).unlink(missing_ok=True)  # one of another size: `lore eval` would append
            rc = subprocess.call(final_eval_command(run_dir, final_episodes, with_prior), stdout=log,
                                 stderr=subprocess.STDOUT)
    return arm, seed, time.time() - t0, rc


def final_eval_command(run_dir: Path, episodes: int, with_prior: bool = False) -> list[str]:
    return [sys.executable, "-m", "lore.cli", "eval", "--run-dir", str(run_dir), "--episodes", str(episodes),
            *(["--with-prior"] if with_prior else []),
            "--out", str(run_dir / (FINAL_EVAL_PRIOR if with_prior else FINAL_EVAL))]


def uses_prior(run_dir: Path) -> bool:
    """The run mixes an LLM prior at act time (its final evaluation is repeated with it)."""
    from lore.config import config_from_saved

    cfg = config_from_saved(run_dir / "config.yaml")
    return cfg.prior.enabled and cfg.llm.backend not in ("none", "replay")


def has_final_eval(path: Path, episodes: int) -> bool:
    """A complete final evaluation of ``episodes`` episodes is at ``path`` (one row; it is not redone)."""
    import pandas as pd

    if not path.is_file():
        return False
    done = pd.read_csv(path)
    return len(done) == 1 and int(done["episodes"].iloc[0]) == episodes


def eval_steps(steps: int, every: int) -> list[int]:
    """The env steps at which ``lore train`` evaluates (one env): 0, every multiple of ``every`` below
    ``steps``, and ``steps`` (the final evaluation)."""
    return sorted(set(range(0, steps, every)) | {steps})


def random_baseline(out: Path, config: Path, seed: int, sets: list[str]) -> Path:
    """The uniform-random policy at every eval point of seed ``seed``'s runs -> ``eval.csv`` (resumable)."""
    import pandas as pd

    from lore.config import build_config, load_yaml
    from lore.train.evaluate import make_eval_envs
    from lore.train.random_policy import evaluate_random_policy
    from lore.utils.io import atomic_write_text

    cfg = build_config(load_yaml(config), [*sets, f"seed={seed}"], "rl_only")
    points = eval_steps(cfg.train.steps, cfg.eval.every)
    path = out / RANDOM_DIR / f"seed{seed}" / "eval.csv"
    if path.is_file():
        done = pd.read_csv(path)
        if done["env_step"].tolist() == points and (done["episodes"] == cfg.eval.episodes).all():
            return path
    envs = make_eval_envs(cfg, cfg.seed)
    rows = [{"env_step": step, **evaluate_random_policy(cfg, eval_index=i, env=envs)} for i, step in enumerate(points)]
    for env in envs:
        env.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, pd.DataFrame(rows).to_csv(index=False))
    return path


def reference_final(out: Path, config: Path, seed: int, sets: list[str], episodes: int,
                    policy: str = RANDOM_DIR) -> Path:
    """A reference policy (``random_policy`` or ``advisor_<mode>``: the scripted advisor played alone) on
    the final evaluation's ``episodes`` episodes of seed ``seed`` -> ``<out>/<policy>/seed<k>/eval_final.csv``
    (resumable)."""
    import dataclasses

    import pandas as pd

    from lore.config import build_config, load_yaml
    from lore.train.advisor_policy import evaluate_advisor_policy
    from lore.train.random_policy import evaluate_random_policy
    from lore.utils.io import atomic_write_text

    if policy not in REFERENCES:
        raise ValueError(f"reference policy must be one of {REFERENCES}, got {policy!r}")
    cfg = build_config(load_yaml(config), [*sets, f"seed={seed}"], "rl_only")
    path = out / policy / f"seed{seed}" / FINAL_EVAL
    if has_final_eval(path, episodes):
        return path
    points = eval_steps(cfg.train.steps, cfg.eval.every)
    final_cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, episodes=episodes))
    # eval_index of the last periodic evaluation: the agent's `lore eval` at its final checkpoint seeds alike
    index = len(points) - 1
    result = (evaluate_random_policy(final_cfg, eval_index=index) if policy == RANDOM_DIR
              else evaluate_advisor_policy(final_cfg, policy.removeprefix("advisor_"), eval_index=index))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, pd.DataFrame([{"env_step": points[-1], **result}]).to_csv(index=False))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench_crafter"))
    p.add_argument("--config", type=Path, default=RUN_CONFIG, help="run config of every run (default: %(default)s)")
    p.add_argument("--arms", nargs="+", default=list(ARMS))
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3; 5 for tighter intervals)")
    p.add_argument("--steps", type=int, default=None, help="env steps per run (default: the config's train.steps)")
    p.add_argument("--eval-every", type=int, default=None, help="default: the config's eval.every")
    p.add_argument("--eval-episodes", type=int, default=None, help="default: the config's eval.episodes")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    p.add_argument("--set", action="append", default=[], help="extra KEY=VALUE override for every run")
    p.add_argument("--final-episodes", type=int, default=50,
                   help="episodes of the final evaluation of each finished run and of the random policy "
                        "(default %(default)s; 0 skips it)")
    p.add_argument("--no-random", action="store_true", help="skip the random-policy baseline")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        p.error("--seeds and --jobs must be >= 1")
    if args.final_episodes < 0:
        p.error(f"--final-episodes must be >= 0, got {args.final_episodes}")
    sets = overrides(args)
    grid = jobs(tuple(args.arms), args.seeds)
    if args.dry_run:
        for arm, seed in grid:
            print(" ".join(train_command(args.config, args.out / arm / f"seed{seed}", arm, seed, sets)))
        return 0
    # Reject a bad config or override once, before any job (each job would fail alike).
    from lore.config import ConfigError, build_config, load_yaml

    try:
        for arm in args.arms:
            build_config(load_yaml(args.config), sets, arm)
    except ConfigError as e:
        print(f"crafter_benchmark: error: {e}", file=sys.stderr)
        return 2
    if not args.no_random:
        for seed in range(args.seeds):
            t0 = time.time()
            path = random_baseline(args.out, args.config, seed, sets)
            print(f"random policy seed {seed}: {path} ({time.time() - t0:.0f} s)", flush=True)
            for policy in REFERENCES if args.final_episodes else ():
                print(f"{policy} seed {seed}, final evaluation: "
                      f"{reference_final(args.out, args.config, seed, sets, args.final_episodes, policy)}", flush=True)
    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(train_one, args.out, args.config, arm, seed, sets, args.final_episodes)
                   for arm, seed in grid]
        for fut in futures:
            arm, seed, wall, rc = fut.result()
            failed += rc != 0
            print(f"{arm} seed {seed}: {wall:.0f} s, exit {rc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
