"""``lore train``: collect env steps, replay, update DreamerV3, evaluate, checkpoint, resume.

One ``Trainer`` owns one run directory. The loop is deliberately linear:

    act (agent + LLM prior) -> env step -> replay rows -> updates (train_ratio) -> eval -> logs -> checkpoint

Resume: everything the loop needs to continue bit-identically on CPU (weights, optimisers,
return normaliser, prior-layer state, replay, envs mid-episode, RNGs, counters, table rows)
is in ``checkpoint.pt``; a SIGTERM/SIGINT (SLURM preemption) writes it and exits.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import pickle
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lore.config import ConfigError, RunConfig, config_from_saved, save_config, to_dict
from lore.train.checkpoint import (
    CheckpointError,
    agent_mismatch,
    compact_replay,
    expand_replay,
    load_checkpoint,
    load_envs,
    rng_state,
    save_checkpoint,
    seed_everything,
    set_rng_state,
    state_mismatch,
)
from lore.train.progress import eta_seconds, format_duration, log_points, training_rate
from lore.train.random_policy import UniformRandomPolicy
from lore.train.records import CsvTable, TensorBoard
from lore.train.replay import SequenceReplay, space_row_spec
from lore.train.run_dir import (
    CHECKPOINT,
    DONE,
    check_run_state,
    check_same_config,
    checkpoint_mismatch,
    finished_summary,
    preflight,
    prepare_run_dir,
    resolve_device,
    resumable_checkpoint,
)
from lore.train.run_log import RunLog, log_only, terminal
from lore.utils.io import (
    UnsafeFileError,
    atomic_write_text,
    remove_stale_temporaries,
)
from lore.utils.provenance import code_version, run_provenance


class Preempted(Exception):
    """Raised after a checkpoint was written in response to SIGTERM/SIGINT."""

    def __init__(self, env_step: int):
        super().__init__(f"interrupted: checkpoint written at env step {env_step}; run again to resume")
        self.env_step = env_step


def status_line(cfg: RunConfig, env_step: int, steps_per_s: float, eval_sr: float) -> str:
    """One line of progress for a job log: step, training rate, latest eval SR and the time left at that rate
    ("ETA —" while the rate is unknown: during prefill and the first log interval of training)."""
    total = cfg.train.steps
    rate = f"{steps_per_s:.1f}" if math.isfinite(steps_per_s) else "-"
    sr = f"{eval_sr:.2f}" if math.isfinite(eval_sr) else "-"
    eta = format_duration(eta_seconds(env_step, total, steps_per_s), unknown="—")
    return (f"lore: {cfg.env.name} {cfg.ablation} seed {cfg.seed}: step {env_step}/{total} "
            f"({100 * env_step / total:.0f}%), {rate} steps/s, eval SR {sr}, ETA {eta}")


def plain_library_logs() -> None:
    """torchrl's console log without colour codes and without its INFO lines (unless RL_LOGGING_LEVEL is set)."""
    logger = logging.getLogger("torchrl")
    if "RL_LOGGING_LEVEL" not in os.environ:
        logger.setLevel(logging.WARNING)
    for handler in logger.handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s [%(name)s][%(levelname)s] %(message)s"))


def replay_capacity(cfg: RunConfig) -> int:
    """Rows the storage needs: never more than the run can write (torchrl allocates it all at the
    first write and checkpoints it whole, so 1M rows of a 1k-dim obs would be a 4 GB checkpoint).
    A run writes one row per env step plus one final row per episode (at most one per step)."""
    most_rows = 2 * cfg.train.steps + 4 * cfg.train.batch_length * cfg.env.num_envs
    return max(cfg.train.batch_length, min(cfg.train.replay_capacity, most_rows))


@dataclass
class EpisodeTracker:
    """Running return/length/success of the current training episode of each env."""

    returns: list = field(default_factory=list)
    lengths: list = field(default_factory=list)
    successes: list = field(default_factory=list)

    def reset(self, n: int) -> None:
        self.returns, self.lengths, self.successes = [0.0] * n, [0] * n, [0.0] * n


class Trainer:
    def __init__(self, cfg: RunConfig, run_dir: str | Path, show_progress: bool | None = None):
        from lore.envs import make_vector_env
        from lore.method import LoReAgent
        from lore.train.evaluate import make_eval_envs

        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.device = resolve_device(cfg.device)
        # a bar only on a terminal: a log file gets one plain status line per log interval
        self.show_progress = (cfg.train.progress and sys.stderr.isatty()) if show_progress is None else show_progress
        self.eta_text = "—"
        self._last_status = ""
        plain_library_logs()
        prepare_run_dir(self.run_dir)
        seed_everything(cfg.seed)

        # Training envs get per-env seeds derived from the run seed; evaluation uses a disjoint, fixed set of layouts.
        try:
            self.envs = make_vector_env(cfg.env, cfg.seed)
            self.eval_envs = make_eval_envs(cfg, cfg.seed)
        except ValueError as e:
            raise ConfigError(f"env: {e}") from e
        self.num_envs = cfg.env.num_envs
        self.num_actions = int(self.envs.action_space.n)
        obs_space = self.envs.single_observation_space
        self.agent = LoReAgent(obs_space, self.num_actions, cfg, self.device, envs=self.envs, run_dir=self.run_dir)
        self.random_policy = cfg.train.policy == "random"
        # what acts in evaluations: the agent, or the uniform-random baseline
        self.eval_policy = UniformRandomPolicy(self.num_actions, cfg.seed) if self.random_policy else self.agent

        spec = space_row_spec(obs_space, self.num_actions, cfg.features.n_features)
        memmap_dir = str(self.run_dir / "replay_memmap") if cfg.train.replay_memmap else None
        self.replay = SequenceReplay(spec, self.num_envs, replay_capacity(cfg), cfg.train.batch_size,
                                     cfg.train.batch_length, memmap_dir=memmap_dir)

        self.eval_table = CsvTable(self.run_dir / "eval.csv")
        self.episode_table = CsvTable(self.run_dir / "episodes.csv")
        self.metric_table = CsvTable(self.run_dir / "metrics.csv")
        self.env_step = 0
        self.updates = 0
        self.compile_announced = False
        self.update_credit = 0.0
        self.episodes_done = 0
        self.tracker = EpisodeTracker()
        self.tracker.reset(self.num_envs)
        self.latest_eval_sr = float("nan")
        self.next_eval = 0
        self.next_log = cfg.train.log_every
        self.next_checkpoint = cfg.train.checkpoint_every
        self.train_metrics: dict[str, list[float]] = {}
        self.act_metrics: dict[str, list[float]] = {}
        self.wall_time = 0.0
        self.cpu_time = 0.0
        self.update_time = 0.0
        # the code version of every process that trained this run (one entry per commit, in order)
        self.code_versions: list[dict] = []
        self._stop_signal: int | None = None
        self.obs = None
        self.is_first = None
        self.agent_state = None
        self.pending: list[dict | None] = [None] * self.num_envs

    # ------------------------------------------------------------------ public entry points
    def run(self, payload: dict | None = None, run_log: RunLog | None = None) -> dict:
        """Train to the end; resume from ``payload`` (by default the run's checkpoint, if any). ``run_log`` starts
        writing the run's ``train.log`` once the run has started or its checkpoint is restored (a refused
        checkpoint leaves the run directory as it was)."""
        ckpt = self.run_dir / CHECKPOINT
        resumed = ckpt.exists()
        if resumed:
            self._restore(payload if payload is not None else load_checkpoint(ckpt), ckpt)
            print(f"lore: resuming {self.run_dir} from checkpoint at env step {self.env_step}", file=sys.stderr)
        else:
            save_config(self.cfg, self.run_dir / "config.yaml")
            self._start_episodes()
        if run_log is not None:
            run_log.attach(self.run_dir)
        version = code_version()
        if not self.code_versions or self.code_versions[-1] != version:
            self.code_versions.append(version)
        self.tb = TensorBoard(self.run_dir / "tb", self.cfg.train.tensorboard,
                              purge_step=self.env_step if resumed else None)
        old_handlers = self._install_signal_handlers()
        bar = self._progress_bar()
        try:
            self._loop(bar)
        finally:
            if bar is not None:
                bar.close()
            self._restore_signal_handlers(old_handlers)
            self.tb.close()
        summary = self._finish()
        return summary

    # ------------------------------------------------------------------ main loop
    def _loop(self, bar) -> None:
        cfg = self.cfg
        updates_per_step = cfg.train.train_ratio / (cfg.train.batch_size * cfg.train.batch_length)
        t_last = time.perf_counter()
        cpu_last = time.process_time()
        if self.env_step == 0 and self.next_eval == 0:
            self._evaluate()
        while self.env_step < cfg.train.steps:
            if self._stop_signal is not None:
                self._checkpoint()
                raise Preempted(self.env_step)
            if self.env_step >= self.next_eval:  # only after a resume that interrupted an evaluation
                self._evaluate()
                continue
            self._collect_step()
            if not self.random_policy and self.env_step >= cfg.train.prefill and self.replay.ready():
                self.update_credit += updates_per_step * self.num_envs
                while self.update_credit >= 1.0:
                    self.update_credit -= 1.0
                    self._update()
            if self.env_step >= self.next_eval:
                self._evaluate()
            now = time.perf_counter()
            self.wall_time += now - t_last
            t_last = now
            cpu_now = time.process_time()
            self.cpu_time += cpu_now - cpu_last
            cpu_last = cpu_now
            if self.env_step >= self.next_log:
                self._log()
            if self.env_step >= self.next_checkpoint:
                self._checkpoint()
                self.next_checkpoint += cfg.train.checkpoint_every
            if bar is not None:
                bar.n = min(self.env_step, cfg.train.steps)
                bar.set_postfix(sps=f"{self.env_step / max(self.wall_time, 1e-9):.0f}",
                                eval_sr=f"{self.latest_eval_sr:.2f}", eta=self.eta_text, refresh=False)
                bar.update(0)

    def _start_episodes(self) -> None:
        obs, _ = self.envs.reset(seed=self.cfg.seed)
        self.obs = obs
        self.is_first = np.ones(self.num_envs, dtype=bool)
        self.agent_state = self.agent.initial_state(self.num_envs)
        for i in range(self.num_envs):
            self.pending[i] = self._row(i, obs, reward=0.0, first=True, terminal=False, last=False)
        self.agent.begin(np.ones(self.num_envs, dtype=bool))

    def _row(self, i: int, obs: dict, reward: float, first: bool, terminal: bool, last: bool) -> dict:
        row = {f"obs.{k}": np.asarray(v[i]) for k, v in obs.items()}
        row.update(reward=np.float32(reward), is_first=first, is_terminal=terminal, is_last=last)
        return row

    def _collect_step(self) -> None:
        cfg = self.cfg
        prefill = self.random_policy or self.env_step < cfg.train.prefill  # both act at random
        obs_t = {k: torch.as_tensor(v, device=self.device) for k, v in self.obs.items()}
        first_t = torch.as_tensor(self.is_first, device=self.device)
        step = self.agent.explore(obs_t, first_t, self.agent_state, self.env_step, prefill)
        self.agent_state = step.state
        actions = step.actions
        for k, v in step.metrics.items():
            self.act_metrics.setdefault(k, []).append(v)
        for i in range(self.num_envs):
            row = self.pending[i]
            row["action"] = np.int64(actions[i])
            row.update({key: values[i] for key, values in step.fields.items()})
            self.replay.add(i, row)

        obs, reward, terminated, truncated, info = self.envs.step(actions)
        self.env_step += self.num_envs
        done = np.logical_or(terminated, truncated)
        episodes = []
        for i in range(self.num_envs):
            self.tracker.returns[i] += float(reward[i])
            self.tracker.lengths[i] += 1
            step_info = info["final_info"][i] if done[i] else info["infos"][i]
            self.tracker.successes[i] = float(step_info.get("success", 0.0))
            if done[i]:
                final_obs = info["final_obs"][i]
                last = {k: np.asarray(v)[None] for k, v in final_obs.items()}
                row = self._row(0, last, float(reward[i]), first=False, terminal=bool(terminated[i]), last=True)
                row.update(action=np.int64(0), **self.agent.empty_fields())
                self.replay.add(i, row)
                episodes.append((i, self.tracker.returns[i], self.tracker.lengths[i], self.tracker.successes[i]))
                self.tracker.returns[i], self.tracker.lengths[i] = 0.0, 0
                self.pending[i] = self._row(i, obs, 0.0, first=True, terminal=False, last=False)
            else:
                self.pending[i] = self._row(i, obs, float(reward[i]), first=False, terminal=False, last=False)
        records = self.agent.observe(self.env_step, actions, reward, terminated, done, [e[:2] for e in episodes])
        for i, episode_return, length, success in episodes:
            self.episode_table.append({"env_step": self.env_step, "episode": self.episodes_done, "env_index": i,
                                       "return": episode_return, "length": length, "success": success, **records[i]})
            self.episodes_done += 1
        self.obs = obs
        self.is_first = done.copy()

    def _update(self) -> None:
        t0 = time.perf_counter()
        batch = self.replay.sample().to(self.device)
        if not self.compile_announced and self.cfg.train.compile != "off":  # also after a resume: it compiles anew
            self.compile_announced = True
            print(f"lore: compiling the update (train.compile: {self.cfg.train.compile}); the first update takes "
                  f"minutes on a CPU", file=sys.stderr, flush=True)
        metrics = self.agent.train_step(batch)
        self.updates += 1
        for k, v in metrics.items():
            self.train_metrics.setdefault(k, []).append(float(v))
        self.update_time += time.perf_counter() - t0

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self) -> None:
        from lore.train.evaluate import evaluate_policy

        result = evaluate_policy(self.eval_policy, self.eval_envs, self.cfg, self.device, eval_index=len(self.eval_table.rows),
                                 llm_inputs=self.agent.eval_features,
                                 should_stop=lambda: self._stop_signal is not None)
        if result is None:  # preempted mid-evaluation: the checkpoint comes next, the eval is redone on resume
            return
        row = {"env_step": self.env_step, **result}
        self.eval_table.append(row)
        self.eval_table.flush()
        self.latest_eval_sr = result["success_rate"]
        self.tb.scalars("eval", result, self.env_step) if hasattr(self, "tb") else None
        self.next_eval = (self.env_step // self.cfg.eval.every + 1) * self.cfg.eval.every

    # ------------------------------------------------------------------ logging
    def _log(self) -> None:
        row = {"env_step": self.env_step, "updates": self.updates, "episodes": self.episodes_done}
        for source in (self.train_metrics, self.act_metrics):
            for key, values in source.items():
                finite = [v for v in values if math.isfinite(v)]
                row[key] = float(np.mean(finite)) if finite else float("nan")
        row.update(self.agent.metrics())
        row["steps_per_s"] = self.env_step / max(self.wall_time, 1e-9)
        row["update_ms"] = 1000.0 * self.update_time / max(self.updates, 1)
        row["update_time_frac"] = self.update_time / max(self.wall_time, 1e-9)
        last = self.metric_table.rows[-1] if self.metric_table.rows else None
        if last is not None and last["env_step"] == self.env_step:
            # The final row of a run whose last step was also a log step: one row per step, the
            # training means of the periodic row kept, the ledger counts (settled calls) updated.
            last.update({k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))})
        else:
            self.metric_table.append(row)
        self.metric_table.flush()
        self.episode_table.flush()
        self.tb.scalars("train", row, self.env_step)
        rate = training_rate(log_points(self.metric_table.rows), trains=not self.random_policy,
                             prefill=self.cfg.train.prefill)
        self.eta_text = format_duration(eta_seconds(self.env_step, self.cfg.train.steps, rate), unknown="—")
        line = status_line(self.cfg, self.env_step, rate, self.latest_eval_sr)
        if line != self._last_status:  # batch jobs: a line per log interval, no bar; train.log gets it either way
            if self.show_progress:
                log_only(line)
            else:
                print(line, file=sys.stderr, flush=True)
            self._last_status = line
        self.train_metrics.clear()
        self.act_metrics.clear()
        self.next_log = (self.env_step // self.cfg.train.log_every + 1) * self.cfg.train.log_every

    def _progress_bar(self):
        if not self.show_progress:
            return None
        from tqdm import tqdm

        # tqdm's own time left extrapolates the fast prefill steps; the postfix's eta is the training rate's
        return tqdm(total=self.cfg.train.steps, initial=self.env_step, unit="step", dynamic_ncols=True,
                    file=terminal(sys.stderr),
                    desc=f"{self.cfg.env.name} {self.cfg.ablation} s{self.cfg.seed}", mininterval=1.0,
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")

    # ------------------------------------------------------------------ checkpoint / resume
    def _checkpoint(self) -> None:
        payload = {
            "config": to_dict(self.cfg),
            "env_step": self.env_step,
            "updates": self.updates,
            "update_credit": self.update_credit,
            "episodes_done": self.episodes_done,
            "tracker": (self.tracker.returns, self.tracker.lengths, self.tracker.successes),
            "next_eval": self.next_eval,
            "next_log": self.next_log,
            "next_checkpoint": self.next_checkpoint,
            "latest_eval_sr": self.latest_eval_sr,
            "wall_time": self.wall_time,
            "cpu_time": self.cpu_time,
            "code_versions": self.code_versions,
            "update_time": self.update_time,
            "train_metrics": self.train_metrics,
            "act_metrics": self.act_metrics,
            "agent": self.agent.state_dict(),
            "agent_state": {k: v.cpu() for k, v in self.agent_state.items()},
            "replay": compact_replay(self.replay.state_dict()) if self.cfg.train.save_replay else None,
            "envs": pickle.dumps(self.envs),
            "obs": self.obs,
            "is_first": self.is_first,
            "pending": self.pending,
            "bridge": self.agent.advisor_state(),
            "tables": {"eval": self.eval_table.state_dict(), "episodes": self.episode_table.state_dict(),
                       "metrics": self.metric_table.state_dict()},
            "rng": rng_state(),
        }
        save_checkpoint(self.run_dir / CHECKPOINT, payload)

    def _restore(self, payload: dict, path: Path) -> None:
        """Continue from ``payload``; a checkpoint that does not fit this run's config is refused before any
        file is written."""
        saved_cfg_path = self.run_dir / "config.yaml"
        if saved_cfg_path.exists():
            check_same_config(config_from_saved(saved_cfg_path), self.cfg, self.run_dir)
        initial = {k: v.cpu() for k, v in self.agent.initial_state(self.num_envs).items()}
        if isinstance(payload.get("agent"), dict):
            payload = {**payload, "agent": self.agent.upgrade_state(payload["agent"])}
        mismatch = (checkpoint_mismatch(payload, self.cfg)
                    or agent_mismatch(self.agent.state_dict(), payload["agent"])
                    or state_mismatch(initial, payload.get("agent_state"), "agent_state"))
        if mismatch:
            raise CheckpointError(f"checkpoint {path} does not fit the config of {self.run_dir}: {mismatch}")
        try:
            self._load_payload(payload, path)
        except CheckpointError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"checkpoint {path} does not fit the config of {self.run_dir}: "
                                  f"{e.__class__.__name__}: {str(e)[:300]}") from e
        for table in (self.eval_table, self.episode_table, self.metric_table):
            table.flush()

    def _load_payload(self, payload: dict, path: Path) -> None:
        self.env_step = payload["env_step"]
        self.updates = payload["updates"]
        self.update_credit = payload["update_credit"]
        self.episodes_done = payload["episodes_done"]
        self.tracker.returns, self.tracker.lengths, self.tracker.successes = (list(x) for x in payload["tracker"])
        self.next_eval = payload["next_eval"]
        self.next_log = payload["next_log"]
        self.next_checkpoint = payload["next_checkpoint"]
        self.latest_eval_sr = payload["latest_eval_sr"]
        self.wall_time = payload["wall_time"]
        self.cpu_time = payload.get("cpu_time", 0.0)
        self.code_versions = list(payload.get("code_versions", []))
        self.update_time = payload["update_time"]
        self.train_metrics = payload["train_metrics"]
        self.act_metrics = payload["act_metrics"]
        self.agent.load_state_dict(payload["agent"])
        self.agent_state = {k: v.to(self.device) for k, v in payload["agent_state"].items()}
        if payload["replay"] is not None:
            self.replay.load_state_dict(expand_replay(payload["replay"]))
        from lore.envs.vector import VectorEnv

        self.envs = load_envs(payload["envs"], path)
        names = [e.name for e in self.envs.envs] if isinstance(self.envs, VectorEnv) else None
        if names != [self.cfg.env.name] * self.num_envs:
            raise ValueError(f"its training envs are {names}, not {self.num_envs} x {self.cfg.env.name}")
        self.obs = payload["obs"]
        self.is_first = payload["is_first"]
        self.pending = payload["pending"]
        self.agent.load_advisor_state(payload["bridge"], self.envs)
        self.eval_table.load_state_dict(payload["tables"]["eval"])
        self.episode_table.load_state_dict(payload["tables"]["episodes"])
        self.metric_table.load_state_dict(payload["tables"]["metrics"])
        set_rng_state(payload["rng"])

    def _finish(self) -> dict:
        if self.eval_table.rows and self.eval_table.rows[-1]["env_step"] != self.env_step:
            self._evaluate()
        elif not self.eval_table.rows:
            self._evaluate()
        self.agent.settle()  # before the final metrics row: it must count the LLM calls still in flight
        self._log()
        self._checkpoint()
        self.agent.close()
        last = self.eval_table.rows[-1]
        summary = {
            "env_step": self.env_step,
            "updates": self.updates,
            "episodes": self.episodes_done,
            "wall_s": round(self.wall_time, 2),
            "cpu_s": round(self.cpu_time, 2),
            "final_success_rate": last["success_rate"],
            "final_return_mean": last["return_mean"],
            **self.agent.call_counts(),
            "provenance": {**run_provenance(torch.get_num_threads()), "code_versions": self.code_versions},
        }
        atomic_write_text(self.run_dir / DONE, json.dumps(summary, indent=2) + "\n")
        return summary

    # ------------------------------------------------------------------ signals
    def _install_signal_handlers(self):
        def handler(signum, _frame):
            self._stop_signal = signum

        old = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread (e.g. embedded use): no preemption support
                pass
        return old

    @staticmethod
    def _restore_signal_handlers(old) -> None:
        for sig, h in old.items():
            signal.signal(sig, h)


def with_endpoint(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``llm.base_url`` set to the endpoint the run will call when the environment names it
    (``OPENAI_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``), so that the saved config records it."""
    from lore.llm.backends import endpoint

    url = endpoint(cfg.llm)
    if cfg.llm.base_url is not None or url is None:
        return cfg
    return dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, base_url=url))


def train(cfg: RunConfig, run_dir: str | Path, show_progress: bool | None = None,
          run_log: RunLog | None = None) -> dict:
    """Train (or resume, or no-op when complete) one run; returns the summary written to ``done``.

    ``run_log`` starts appending what the process prints to the run's ``train.log`` once the run has started
    or resumed."""
    from lore.utils.io import DirectoryLocked, exclusive_dir_lock

    run_dir = Path(run_dir)
    done = run_dir / DONE
    cfg = with_endpoint(cfg)
    check_run_state(cfg, run_dir)
    if done.exists():
        return finished_summary(cfg, run_dir)
    preflight(cfg, run_dir)
    prepare_run_dir(run_dir)
    try:
        with exclusive_dir_lock(run_dir):
            if done.exists():  # finished by the process that held the lock before us
                return finished_summary(cfg, run_dir)
            payload = resumable_checkpoint(cfg, run_dir)
            remove_stale_temporaries(run_dir)
            if cfg.train.torch_threads > 0:
                torch.set_num_threads(cfg.train.torch_threads)
            trainer = Trainer(cfg, run_dir, show_progress=show_progress)
            return trainer.run(payload, run_log)
    except DirectoryLocked as e:
        raise ConfigError(f"run directory {e}") from None
    except UnsafeFileError as e:
        raise ConfigError(f"run directory: {e}") from None
