"""``lore eval``: evaluate a run's checkpoint on fresh episodes, the way training evaluates.

    lore eval --run-dir RUN [--episodes N] [--seed S] [--with-prior] [--env ID] [--frames DIR] [--out FILE]

Reads ``RUN/config.yaml`` and ``RUN/checkpoint.pt`` and writes one row with the columns of the
run's ``eval.csv`` (``env_step`` is the checkpoint's), followed by provenance and prior-usage
columns (``eval_seed``, ``env``, ``with_prior``, ``prior_applied_frac``, ``beta_mean``,
``action_changed_frac``, ``llm_calls``), to ``--out`` (default ``RUN/eval_<tag>.csv``), atomically.

Checked before anything runs: ``--episodes`` in 1..10000, ``--seed`` in 0..2**32-1, ``--out`` / ``--frames``
not below a file and not onto the run's own files (:data:`PROTECTED`), and the checkpoint written with
the config in ``config.yaml`` (its parameter names and shapes included).

Same protocol as training (:func:`lore.train.evaluate.evaluate_policy`, ``eval.parallel`` episodes side by
side; one after another with ``--with-prior``): episode ``k`` is the layout
``reset(seed=10_000_000 + 1000 * S + k)`` and the policy samples from a generator seeded with
``7919 * S + eval_index``, where ``S`` is ``--seed`` (default: the run's seed) and ``eval_index`` is
the index of the ``eval.csv`` row taken at the checkpoint's step (or the next index when there is
none). So with the defaults a finished run's last ``eval.csv`` row is reproduced exactly (same
device and thread count), and the numbers depend on nothing but the checkpoint and the options.

Read-only on the run: no run-directory lock is taken (the checkpoint is replaced by atomic rename,
so reading it while the run trains is safe, and the training is never blocked), no LLM ledger is
written, and the persistent LLM cache is neither read nor written (its content would make the
numbers depend on history). The only file written in the run directory is the output.

``--with-prior`` mixes the LLM prior in as at act time in training, through the same
:class:`~lore.method.advisor.LLMBridge` and controller (fresh: full budget, no remembered
answers), with the run's backend (``scripted`` works offline) and its advice trust and
temperature from the checkpoint; training-only randomisation is off (beta dropout, control
episodes), so every step may use the advice. CEM planning is not applied.
A non-inline backend (Gemini) is waited for, so that an answer applies where it was asked for.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from lore.config import ConfigError, RunConfig, config_from_saved
from lore.utils.io import atomic_write

PROTECTED = ("eval.csv", "episodes.csv", "metrics.csv", "config.yaml", "checkpoint.pt", "done",
             "llm_calls.jsonl", "llm_cache.sqlite", "train.log", "tb", "replay_memmap")
"""Files (and folders) of the run that ``--out`` / ``--frames`` may never name or lie in; hidden files
(``.lock``, temporaries) and the cache's SQLite siblings (``llm_cache.sqlite-wal`` ...) are the run's too."""
MAX_EPISODES = 10_000
MAX_SEED = 2**32 - 1


@dataclasses.dataclass
class EvalOptions:
    run_dir: str
    episodes: int | None = None
    seed: int | None = None
    with_prior: bool = False
    env: str | None = None
    frames: str | None = None
    out: str | None = None
    device: str | None = None


def run_eval(opts: EvalOptions) -> dict:
    """Evaluate and write the output file; returns the row written (plus ``out``).

    Bad input raises :class:`~lore.config.ConfigError` (or ``CheckpointError`` / ``LLMConfigError``)
    before anything is written.
    """
    from lore.train.checkpoint import CheckpointError
    from lore.train.records import CsvTable
    from lore.train.run_dir import resolve_device

    run_dir = Path(opts.run_dir)
    cfg, payload, (cfg_path, ckpt_path) = _read_run(opts, run_dir)
    seed = cfg.seed if opts.seed is None else int(opts.seed)
    episodes = cfg.eval.episodes if opts.episodes is None else int(opts.episodes)
    device = resolve_device(opts.device or cfg.device)

    env, run_env = _make_eval_env(cfg, opts.env, seed)
    # Episodes side by side as in training (the draws depend on the wave size); the prior's LLM bridge
    # drives one env, so --with-prior evaluates one episode after another.
    wave = 1 if opts.with_prior else min(cfg.eval.parallel, episodes)
    envs = [env] + [_make_eval_env(cfg, opts.env, seed)[0] for _ in range(wave - 1)]
    frames = _FrameWriter(Path(opts.frames), env) if opts.frames else None

    env_step = int(payload["env_step"])
    tag = f"step{env_step}_seed{seed}_n{episodes}" + ("_prior" if opts.with_prior else "") + (
        f"_{env.name}" if env.name != cfg.env.name else "")
    out = Path(opts.out) if opts.out else run_dir / f"eval_{tag}.csv"
    _check_out(out, run_dir)

    if cfg.train.torch_threads > 0:
        torch.set_num_threads(cfg.train.torch_threads)
    agent_cfg = _prior_eval_config(cfg) if opts.with_prior else cfg
    try:
        agent = _load_agent(agent_cfg, env, payload, device, with_prior=opts.with_prior)
        bridge = _make_bridge(cfg, env, agent, payload.get("bridge"), with_prior=opts.with_prior, seed=seed)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
        what = str(e) if isinstance(e, CheckpointError) else f"{e.__class__.__name__}: {str(e)[:300]}"
        raise CheckpointError(f"checkpoint {ckpt_path} does not fit {cfg_path}: {what}") from e
    if cfg.train.policy == "random":  # the random baseline's run: evaluate the policy it ran, not its idle network
        from lore.train.random_policy import UniformRandomPolicy

        agent = UniformRandomPolicy(int(env.action_space.n), seed)
    ecfg = dataclasses.replace(cfg, seed=seed, eval=dataclasses.replace(cfg.eval, episodes=episodes))
    rows = (payload.get("tables") or {}).get("eval") or []
    at_step = [i for i, r in enumerate(rows) if r.get("env_step") == env_step]
    eval_index = at_step[-1] if at_step else len(rows)

    session = _PriorSession(bridge, env_step) if opts.with_prior else None
    usage = _Usage()
    on_reset, on_act, on_step = _hooks(session, frames, usage)
    from lore.train.evaluate import evaluate_policy

    try:
        result = evaluate_policy(
            agent, envs, ecfg, device, eval_index,
            llm_inputs=session.inputs if session is not None else bridge.eval_inputs,
            act_env_step=env_step if opts.with_prior else 0,
            on_reset=on_reset, on_act=on_act, on_step=on_step,
            consult=session.consult if session is not None and bridge.asks_before_act else None)
    finally:
        llm_calls = bridge.metrics().get("llm_calls", 0.0)
        bridge.close()
        if frames is not None:
            frames.close()
        for e in envs:
            e.close()
        if run_env is not env:
            run_env.close()
    assert result is not None  # no should_stop: evaluate_policy always finishes
    row = {"env_step": env_step, **result, "eval_seed": seed, "env": env.name, "with_prior": int(opts.with_prior),
           **usage.summary(), "llm_calls": float(llm_calls)}
    table = CsvTable(out)
    table.append(row)
    table.flush()
    return {**row, "out": str(out), "action_counts": dict(usage.actions)}


def _read_run(opts: EvalOptions, run_dir: Path) -> tuple[RunConfig, dict, tuple[Path, Path]]:
    """The run's config and checkpoint, checked against each other and the options -> (config, checkpoint
    payload, (config path, checkpoint path)); ConfigError or CheckpointError before anything is written."""
    from lore.train.checkpoint import CheckpointError, load_checkpoint
    from lore.train.run_dir import CHECKPOINT, checkpoint_mismatch

    if not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} does not exist")
    cfg_path, ckpt_path = run_dir / "config.yaml", run_dir / CHECKPOINT
    for path in (cfg_path, ckpt_path):
        if not path.is_file():
            raise ConfigError(f"{path} not found: {run_dir} is not a run directory with a checkpoint yet")
    check_options(opts, run_dir)
    cfg = config_from_saved(cfg_path)
    if opts.with_prior:
        _check_prior_possible(cfg)
    payload = load_checkpoint(ckpt_path)
    mismatch = checkpoint_mismatch(payload, cfg)
    if mismatch:
        raise CheckpointError(f"checkpoint {ckpt_path} does not fit {cfg_path}: {mismatch}")
    return cfg, payload, (cfg_path, ckpt_path)


def _hooks(session, frames, usage):
    """``evaluate_policy``'s (on_reset, on_act, on_step): the prior session, the frame writer, the usage."""

    def on_reset(k, env_, obs):
        if session is not None:
            session.on_reset()
        if frames is not None:
            frames.on_reset(k, env_, obs)

    def on_act(out_, actions):
        usage.on_act(out_)
        if session is not None:
            session.after_act(out_, actions)

    def on_step(k, env_, action, obs, reward, done):
        usage.actions[int(action)] += 1  # envs still in their episode only (a finished one idles)
        if session is not None:
            session.on_step(action, reward, done)
        if frames is not None:
            frames.on_step(k, env_, obs, done)

    return on_reset, on_act, on_step


# --------------------------------------------------------------------------- checks


def _check_prior_possible(cfg: RunConfig) -> None:
    if cfg.llm.backend == "none" or not cfg.prior.enabled:
        raise ConfigError(f"--with-prior: this run has no LLM prior (llm.backend={cfg.llm.backend}, "
                          f"prior.enabled={str(cfg.prior.enabled).lower()}, ablation {cfg.ablation})")
    if cfg.llm.backend == "replay":
        raise ConfigError("--with-prior: llm.backend=replay only replays the recorded run's own calls; "
                          "evaluate with the backend that recorded them")


def _make_eval_env(cfg: RunConfig, env_id: str | None, seed: int):
    """The evaluation env (``--env`` or the run's) and the run's own env (for the space check)."""
    from lore.envs import make_env, make_env_from_config

    try:
        run_env = make_env_from_config(cfg.env, seed=10_000_000 + seed)
    except ValueError as e:
        raise ConfigError(f"env: {e}") from e
    if env_id is None or env_id == cfg.env.name:
        return run_env, run_env
    try:
        env = make_env(env_id, 10_000_000 + seed, obs=cfg.env.obs, view=cfg.env.view,
                       max_episode_steps=cfg.env.max_episode_steps,
                       crafter_area=cfg.env.crafter_area, crafter_view=cfg.env.crafter_view)
    except ValueError as e:
        run_env.close()
        raise ConfigError(f"--env: {e}") from e
    problems = []
    if env.observation_space != run_env.observation_space:
        problems.append(f"observation space {_space(env.observation_space)} vs {_space(run_env.observation_space)}")
    if env.action_space != run_env.action_space:
        problems.append(f"action space {env.action_space} vs {run_env.action_space}")
    if problems:
        env.close()
        run_env.close()
        raise ConfigError(f"--env {env_id} does not fit the run's agent (trained on {cfg.env.name}): "
                          + "; ".join(problems))
    return env, run_env


def _space(space) -> str:
    return "{" + ", ".join(f"{k}: {s.dtype}{tuple(s.shape)}" for k, s in space.spaces.items()) + "}"


def check_options(opts: EvalOptions, run_dir: Path) -> None:
    """The numbers in range and the output paths usable, before anything is loaded or written."""
    if opts.episodes is not None and not 1 <= opts.episodes <= MAX_EPISODES:
        raise ConfigError(f"--episodes must be in 1..{MAX_EPISODES}, got {opts.episodes}")
    if opts.seed is not None and not 0 <= opts.seed <= MAX_SEED:
        raise ConfigError(f"--seed must be in 0..{MAX_SEED} (2**32 - 1), got {opts.seed}")
    if opts.out is not None:
        _check_out(Path(opts.out), run_dir)
    if opts.frames is not None:
        frames = Path(opts.frames)
        problem = _path_problem(frames, run_dir) or (
            "exists and is not a directory" if frames.exists() and not frames.is_dir() else "")
        if problem:
            raise ConfigError(f"--frames {frames} {problem}")


def _check_out(out: Path, run_dir: Path) -> None:
    problem = _path_problem(out, run_dir) or ("is a directory; name a file" if out.is_dir() else "")
    if problem:
        raise ConfigError(f"--out {out} {problem}")


def _path_problem(path: Path, run_dir: Path) -> str:
    """Why an output of the eval may not go to ``path`` (``""`` when it may)."""
    try:
        absolute = Path(os.path.abspath(path))
        blocker = next((p for p in absolute.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            return f"is below {blocker}, which is a file, not a directory"
        target, run = path.resolve(), run_dir.resolve()
    except (OSError, ValueError) as e:  # a NUL byte, a symlink loop, a name too long
        return f"is not a usable path ({e})"
    if target == run:
        return "is the run directory itself; name a path outside the run's files"
    if target.is_relative_to(run):
        first = target.relative_to(run).parts[0]
        if first in PROTECTED or first.startswith(".") or first.startswith("llm_cache.sqlite"):
            return f"would overwrite the run's own {first}; name another file"
    return ""


# --------------------------------------------------------------------------- agent and advisor


def _prior_eval_config(cfg: RunConfig) -> RunConfig:
    """The agent's config for ``--with-prior``: one env (so the prior layer keeps the u(s) of each act
    step, which the controller's trigger reads) and no training-only randomisation of beta."""
    prior = dataclasses.replace(cfg.prior, dropout=0.0, control_episodes=0.0)
    return dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_envs=1), prior=prior)


def _load_agent(cfg: RunConfig, env, payload: dict, device: torch.device, with_prior: bool):
    from lore.method import LoReAgent
    from lore.train.checkpoint import CheckpointError, agent_mismatch

    agent = LoReAgent(env.observation_space, int(env.action_space.n), cfg, device)
    state = agent.upgrade_state(payload["agent"])
    mismatch = agent_mismatch(agent.state_dict(), state)
    if mismatch:
        raise CheckpointError(mismatch)
    if with_prior:  # the run's per-env control-episode flags do not apply to the single eval env
        state = {**state, "prior": {**state["prior"], "control": [False]}}
    agent.load_state_dict(state)
    return agent


def _make_bridge(cfg: RunConfig, env, agent, saved: dict | None, with_prior: bool, seed: int):
    """The trainer's :class:`LLMBridge` on the eval env, with the adopted feature program restored.

    Without ``--with-prior`` only the feature program is used (as in training's evaluation); the
    offline scripted backend stands in for the run's, so no API key is needed. The controller state
    (budget used, remembered answers) is not restored: the eval starts a fresh one, and the scripted
    advisor's noise is seeded by the evaluation seed.
    """
    from lore.envs.vector import VectorEnv
    from lore.llm.backends import REMOTE_BACKENDS, longest_call_s
    from lore.method.advisor import LLMBridge

    llm = dataclasses.replace(cfg.llm, cache_path=None, simulated_latency_ms=0.0)
    if not with_prior and llm.backend != "none":
        llm = dataclasses.replace(llm, backend="scripted")
    if with_prior and llm.backend in REMOTE_BACKENDS:  # wait for each answer: it applies where it was asked
        llm = dataclasses.replace(llm, max_wait_ms=1000.0 * longest_call_s(llm))
    bcfg = dataclasses.replace(cfg, seed=seed, llm=llm, env=dataclasses.replace(cfg.env, num_envs=1))
    bridge = LLMBridge(bcfg, None, VectorEnv([env]), agent)
    if saved is not None:
        bridge.load_state_dict({**saved, "controller": None})
    return bridge


class _PriorSession:
    """Drives the bridge around each eval step as the trainer's collect step does (one env)."""

    def __init__(self, bridge, env_step: int):
        self.bridge = bridge
        self.env_step = int(env_step)

    def on_reset(self) -> None:
        self.bridge.on_reset(np.ones(1, dtype=bool))

    def inputs(self, envs) -> dict:
        return self.bridge.inputs(self.env_step)

    def consult(self, u):
        ask = self.bridge.consult(self.env_step, False)
        return ask(u) if ask is not None else None

    def after_act(self, out, actions: np.ndarray) -> None:
        beta = out.beta.float().cpu().numpy()
        self.bridge.after_act(self.env_step, out, np.asarray(actions), beta, False)

    def on_step(self, action: int, reward: float, done: bool) -> None:
        self.env_step += 1
        self.bridge.on_env_step(self.env_step, np.asarray([action]), np.asarray([reward], np.float32),
                                np.asarray([done]))


class _Usage:
    """How much the prior steered the evaluated agent (zeros without ``--with-prior``)."""

    def __init__(self):
        self.steps = 0
        self.applied = 0.0
        self.beta = 0.0
        self.changed = 0.0
        self.actions: Counter[int] = Counter()  # what the evaluated policy did (action id -> env steps)

    def on_act(self, out) -> None:
        self.steps += 1
        if not hasattr(out, "beta"):  # a reference policy (the random baseline) has no prior
            return
        beta = float(out.beta.float().mean().item())
        self.applied += float(beta > 0)
        self.beta += beta
        self.changed += float(out.action_changed.float().mean().item())

    def summary(self) -> dict:
        n = max(self.steps, 1)
        return {"prior_applied_frac": self.applied / n, "beta_mean": self.beta / n,
                "action_changed_frac": self.changed / n}


# --------------------------------------------------------------------------- frames


class _FrameWriter:
    """PNG per step under ``DIR/episode_KKK/`` and, with imageio, ``DIR/episode_KKK.gif``.

    Pixel envs save the agent's ``pixels`` observation; symbolic ones ``env.render()`` (RGB).
    """

    def __init__(self, directory: Path, env):
        if directory.exists() and not directory.is_dir():
            raise ConfigError(f"--frames {directory} exists and is not a directory")
        self.directory = directory
        self.pixels = "pixels" in env.observation_space.spaces
        try:
            import imageio.v2 as imageio
        except ImportError:
            imageio = None
        self.imageio = imageio
        if imageio is None:
            try:
                from PIL import Image  # noqa: F401
            except ImportError:
                raise ConfigError("--frames needs imageio or Pillow to write PNG files") from None
        if not self.pixels:  # probe now, before anything is written
            try:
                env.reset(seed=0)
                _check_frame(env.render())
            except Exception as e:  # noqa: BLE001 - any failure means: no RGB frames from this env
                raise ConfigError(f"--frames: {env.name} has symbolic observations and cannot render RGB "
                                  f"frames ({type(e).__name__}: {e}); use env.obs=pixels") from None
        self.steps: dict[int, int] = {}
        self.frames: dict[int, list[np.ndarray]] = {}  # each running episode's, for its GIF (imageio only)

    def _frame(self, env, obs) -> np.ndarray:
        return _check_frame(np.asarray(obs["pixels"]) if self.pixels else env.render())

    def on_reset(self, episode: int, env, obs) -> None:
        self.steps[episode] = 0
        self.frames[episode] = []
        (self.directory / f"episode_{episode:03d}").mkdir(parents=True, exist_ok=True)
        self._save(episode, self._frame(env, obs))

    def on_step(self, episode: int, env, obs, done: bool) -> None:
        self._save(episode, self._frame(env, obs))
        if done:
            self._finish_episode(episode)

    def _save(self, episode: int, frame: np.ndarray) -> None:
        path = self.directory / f"episode_{episode:03d}" / f"step_{self.steps[episode]:05d}.png"
        self.steps[episode] += 1
        if self.imageio is not None:
            atomic_write(path, lambda tmp: self.imageio.imwrite(tmp, frame, format="png"))
            self.frames[episode].append(frame)
        else:
            from PIL import Image

            atomic_write(path, lambda tmp: Image.fromarray(frame).save(tmp, format="PNG"))

    def _finish_episode(self, episode: int) -> None:
        frames = self.frames.pop(episode, [])
        if self.imageio is not None and frames:
            atomic_write(self.directory / f"episode_{episode:03d}.gif",
                         lambda tmp: self.imageio.mimsave(tmp, frames, format="gif", duration=0.1))

    def close(self) -> None:
        for episode in list(self.frames):
            self._finish_episode(episode)


def _check_frame(frame) -> np.ndarray:
    frame = np.array(frame)  # a copy: the env may reuse its buffers
    if frame.ndim != 3 or frame.shape[-1] not in (3, 4) or frame.dtype != np.uint8:
        raise ValueError(f"expected an RGB uint8 image [H, W, 3], got {frame.dtype}{tuple(frame.shape)}")
    return frame


def format_row(row: dict) -> str:
    """One human line for the terminal."""
    parts = [f"env_step {row['env_step']}", f"episodes {row['episodes']}",
             f"success_rate {row['success_rate']:.3f}", f"return_mean {row['return_mean']:.3f}"]
    if "crafter_score" in row and math.isfinite(row["crafter_score"]):
        parts.append(f"crafter_score {row['crafter_score']:.2f}")
    if row.get("with_prior"):
        parts.append(f"prior_applied_frac {row['prior_applied_frac']:.2f}")
    return f"lore: eval {row['env']}: " + ", ".join(parts) + f" -> {row['out']}"
