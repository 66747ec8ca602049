"""The sections of a run's configuration: one dataclass each, holding every setting's default and, for a
numeric setting, its accepted range (``ranged(default, Limit(...))``, checked by :mod:`lore.config.validate`).

These defaults are the single source of truth: a YAML file and ``--set`` overrides are applied on top of them.
The model sizes (:class:`~lore.presets.ModelConfig`) live with their presets in :mod:`lore.presets`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from lore.presets import ModelConfig
from lore.validation import Limit, ranged

MAX_STEPS = 10**12
"""Env-step counts and intervals stay below 10**12: at 10**5 steps/s that is 300 years of training, so
anything larger is a typo (or an attempt at an overflow)."""
MAX_COUNT = 10**9
"""Counts of calls, samples or labels: 10**9 is beyond what one run can use."""
MAX_SCALE = 1e6
"""Loss scales and mixing weights are relative: at 1e6 every other term has already vanished."""

MAX_LLM_TIMEOUT_S = 600.0
"""Longest wait for one LLM answer (``llm.timeout_s``): ten minutes is already a hung server."""
MAX_LLM_RETRIES = 10
"""Most retries of one LLM call (``llm.retries``): with the pauses capped (:data:`MAX_BACKOFF_S`) a call of
the longest timeout ends within two hours."""
MAX_BACKOFF_S = 10.0
"""Longest pause before a retry of an LLM call that the exponential backoff alone asks for (``llm.backoff_s``
is its first step)."""

# Ranges shared by several settings (a setting with a range of its own writes it out in its field).
_UNIT = Limit(0.0, 1.0)                               # a probability or a fraction
_DECAY = Limit(0.0, 1.0, hi_open=True)                # an EMA decay: 1 would never move
_SCALE = Limit(0.0, MAX_SCALE)                        # a loss scale or weight (0 switches the term off)
_POSITIVE = Limit(0.0, 1e3, lo_open=True)             # temperatures, KL bounds (nats), gains
_LR = Limit(0.0, 1.0, lo_open=True)                   # Adam: a step of ~lr per parameter; > 1 diverges at once
_EPS = Limit(0.0, 1.0, lo_open=True)
_CLIP = Limit(0.0, 1e12, lo_open=True)                # gradient-norm clips (1e12 = effectively off)
_STEPS = Limit(0, MAX_STEPS, hi_open=True)            # env-step counts where 0 means "off" / "from the start"
_INTERVAL = Limit(1, MAX_STEPS, hi_open=True)         # every N env steps: 0 or less never advances
_COUNT = Limit(1, MAX_COUNT)
_MILLISECONDS = Limit(0.0, 3_600_000.0)


@dataclass
class EnvConfig:
    name: str = "MiniGrid-DoorKey-5x5-v0"
    """Any ``MiniGrid-*`` id, or ``crafter`` / ``CrafterReward-v1`` / ``CrafterNoReward-v1``."""
    # Envs are stepped one after another in this process, each with its own replay stream.
    num_envs: int = ranged(1, Limit(1, 1024))
    obs: Literal["symbolic", "pixels", "both"] = "symbolic"
    """``symbolic`` is the CPU default; a pixel world model costs ~2.3 s per update on 2 cores."""
    view: Literal["egocentric", "full"] = "egocentric"
    """MiniGrid only: the agent's 7x7 egocentric view (standard) or the full grid."""
    max_episode_steps: int | None = ranged(None, Limit(1, MAX_STEPS, hi_open=True))
    """None keeps the environment's own limit (DoorKey-5x5: 250, Crafter: 10000)."""
    # Crafter's world generator needs >= 16 cells a side and costs area**2 per reset (1024 = 256x the default).
    crafter_area: int = ranged(64, Limit(16, 1024))
    # The local map is view**2 one-hot cells per step in replay (odd: the player sits in the centre).
    crafter_view: int = ranged(9, Limit(1, 63))
    """Side of the local semantic map around the player (Crafter)."""


@dataclass
class DreamerConfig:
    """DreamerV3 hyper-parameters (2023 paper settings unless stated)."""

    gamma: float = ranged(1.0 - 1.0 / 333.0, Limit(0.0, 1.0, lo_open=True))
    lam: float = ranged(0.95, _UNIT)
    horizon: int = ranged(15, Limit(1, 1000))  # imagined steps: activations grow B*T*H
    imag_last: int = ranged(0, Limit(0, 65_536))  # and <= train.batch_length
    """Imagine only from the last N steps of each replayed sequence (0 = every posterior state,
    DreamerV3's default). A CPU speed knob: the critic ensemble on B*T*H states dominates an update."""
    value_bootstrap: float = ranged(0.5, Limit(0.0, 1.0, lo_open=True))
    """Probability that a critic head trains on an imagination start state (bootstrapped heads, so
    their spread measures value uncertainty; 1 = every head on every state, no spread)."""
    actor_entropy: float = ranged(3e-4, _SCALE)
    free_bits: float = ranged(1.0, Limit(0.0, 1e3))  # nats; 32 latents x ln(1024) classes is only 222
    kl_dyn: float = ranged(0.5, _SCALE)
    kl_rep: float = ranged(0.1, _SCALE)
    unimix: float = ranged(0.01, Limit(0.0, 1.0, hi_open=True))  # 1 would be a uniform policy
    retnorm_decay: float = ranged(0.99, _DECAY)
    retnorm_low: float = ranged(5.0, Limit(0.0, 100.0))  # percentiles
    retnorm_high: float = ranged(95.0, Limit(0.0, 100.0))
    slow_critic_fraction: float = ranged(0.02, _UNIT)
    slow_critic_reg: float = ranged(1.0, _SCALE)
    decoder_scale: float = ranged(1.0, _SCALE)
    reward_scale: float = ranged(1.0, _SCALE)
    continue_scale: float = ranged(1.0, _SCALE)
    wm_lr: float = ranged(1e-4, _LR)
    wm_eps: float = ranged(1e-8, _EPS)
    wm_clip: float = ranged(1000.0, _CLIP)
    ac_lr: float = ranged(3e-5, _LR)
    ac_eps: float = ranged(1e-5, _EPS)
    ac_clip: float = ranged(100.0, _CLIP)


@dataclass
class TrainConfig:
    steps: int = ranged(50_000, Limit(1, MAX_STEPS, hi_open=True))
    """Total environment steps (summed over vectorised envs)."""
    prefill: int = ranged(1_000, _STEPS)  # and < train.steps
    """Random-policy env steps collected before the first update."""
    train_ratio: float = ranged(512.0, Limit(0.0, 1e6))  # 1e6 is ~1000 updates per env step at the default batch
    """Replayed steps per env step; updates per env step = train_ratio / (batch_size * batch_length)."""
    batch_size: int = ranged(16, Limit(1, 65_536))  # and batch_size * batch_length <= 2**20
    batch_length: int = ranged(64, Limit(2, 65_536))  # and <= train.steps
    replay_capacity: int = ranged(1_000_000, Limit(1, 10**10))  # and >= 4 * train.batch_length
    replay_memmap: bool = False
    checkpoint_every: int = ranged(5_000, _INTERVAL)
    save_replay: bool = True
    """Store the replay buffer in checkpoints (exact resume); off saves disk on big runs."""
    torch_threads: int = ranged(1, Limit(0, 1024))
    """Intra-op threads for torch (0 = torch's default). 1 is fastest for these small networks and
    keeps parallel jobs (snakemake --cores N) from stalling each other (OpenMP threads spin-wait when a
    core is taken)."""
    log_every: int = ranged(500, _INTERVAL)
    tensorboard: bool = True
    progress: bool = True
    precision: Literal["float32", "bfloat16"] = "float32"
    """Autocast dtype of the update's forward passes. ``bfloat16`` runs matmuls and convolutions in bf16
    (softmaxes, norms and the losses stay float32 under autocast); a GPU option: on most CPUs bf16 is
    slower. Acting stays float32 (``benchmarks/bench_precision.py`` times both)."""
    policy: Literal["dreamer", "random"] = "dreamer"
    """``random``: the uniform-random baseline (``--ablation random``): it acts at random, never updates, and is
    evaluated by the same code as an agent."""
    compile: Literal["off", "networks", "update"] = "off"
    """``update``: the world-model losses, the imagination with the actor and critic losses, and the act-time
    policy forward each as one compiled graph (backward included; CUDA graphs on a GPU); ``networks``: each
    network compiled on its own; ``off``: eager. Both compiled modes pay a compile time on the first updates
    (seconds to minutes per distinct batch shape; ``benchmarks/bench_compile.py`` measures it)."""


@dataclass
class EvalConfig:
    every: int = ranged(2_500, _INTERVAL)
    episodes: int = ranged(10, Limit(1, 100_000))
    greedy: bool = False
    """Evaluate with the mode of the policy instead of a sample."""
    parallel: int = ranged(20, Limit(1, 1024))
    """Eval episodes run side by side, one batched agent forward per step (1: one after another). The
    agent's draws depend on it, so ``lore eval`` uses the run's value to reproduce eval.csv."""


@dataclass
class ControllerConfig:
    """When the LLM is asked (see :mod:`lore.llm.controller`)."""

    budget: int = ranged(500, Limit(0, MAX_COUNT))
    cooldown: int = ranged(100, _STEPS)
    cooldown_after_success: int = ranged(250, _STEPS)
    """Env steps, counted from the step a question was asked, without a new question: ``cooldown`` after any
    question, ``cooldown_after_success`` after one that got a valid answer (from the LLM, the answer cache or
    PriorNet), whether or not that answer led to a reward."""
    cache_ttl: int = ranged(5_000, _STEPS)
    """Env steps an answer for a state key stays valid."""
    trigger_beta: float = ranged(0.5, Limit(0.0, 1e3))  # compared with beta <= prior.beta_max
    trigger_episode_start: bool = True
    trigger_novelty: bool = True
    trigger_plateau: int = ranged(0, _STEPS)
    """Call when no reward was seen for this many env steps (0 disables)."""


@dataclass
class LLMConfig:
    backend: Literal["none", "scripted", "gemini", "openai", "replay"] = "scripted"
    model: str = "gemini-2.5-flash-lite"
    """The model's name at its endpoint (``openai``: as the server lists it under ``GET /v1/models``)."""
    base_url: str | None = None
    """``gemini``: overrides the Gemini endpoint (the SDK also honours GOOGLE_GEMINI_BASE_URL); ``openai``: the
    OpenAI-compatible server, e.g. ``http://127.0.0.1:8000/v1`` (or OPENAI_BASE_URL)."""
    api_version: str | None = None
    """Gemini API version (``gemini`` only)."""
    timeout_s: float = ranged(20.0, Limit(0.0, MAX_LLM_TIMEOUT_S, lo_open=True))
    """Seconds one attempt may take, from connecting to the last byte of the answer; one call (its attempts,
    the pauses between them and a ``response_format`` fallback) ends by ``timeout_s × (retries + 1)``."""
    retries: int = ranged(3, Limit(0, MAX_LLM_RETRIES))
    backoff_s: float = ranged(0.5, Limit(0.0, MAX_BACKOFF_S))
    """First pause before a retry; it doubles per retry up to ``MAX_BACKOFF_S`` (a server's ``Retry-After``
    wins where longer, up to 60 s)."""
    allow_plain_http: bool = False
    """Send the API key over plain ``http://`` to another machine (refused otherwise; loopback is always
    allowed)."""
    max_wait_ms: float = ranged(0.0, _MILLISECONDS)
    """The env loop waits at most this long for an answer; 0 = never blocks."""
    cache_path: str | None = "{run_dir}/llm_cache.sqlite"
    """Writable persistent (backend, model, prompt) answer cache; ``{run_dir}`` stands for the run directory;
    None disables (lore.llm.cache explains the scope)."""
    shared_cache: str | None = None
    """Read-only answer cache consulted after ``cache_path`` (never written; must not change while runs read it)."""
    replay_ledger: str | None = None
    """``llm_calls.jsonl`` of an earlier run, for ``backend: replay``."""
    simulated_latency_ms: float = ranged(0.0, _MILLISECONDS)
    """Scripted backend only: sleep this long per call (cost benchmarks)."""
    logit_clip: float = ranged(10.0, _POSITIVE)
    plan_max_len: int = ranged(32, Limit(1, 4096))
    """Longest plan accepted from (and asked of) the LLM."""
    plan_logit: float = ranged(4.0, Limit(0.0, 1e3))
    """Logit given to the plan's next action while the agent follows a plan."""
    max_inflight: int = ranged(1, Limit(1, 64))
    """Background calls that may run at once."""
    ask_before_act: bool = False
    """Ask about the state being acted in, before acting, so that an answer that comes back in time steers
    this step; ``false``: ask after the act, and the answer applies when the state key recurs."""
    controller: ControllerConfig = field(default_factory=ControllerConfig)


@dataclass
class AdvisorConfig:
    """The offline scripted advisor."""

    mode: Literal["good", "noisy", "adversarial"] = "good"
    accuracy: float = ranged(1.0, _UNIT)
    """Probability the advice is right (``noisy`` draws a wrong action otherwise)."""
    confidence: float = ranged(0.9, _UNIT)


@dataclass
class PriorConfig:
    """Logit mixing ``l_mix = l_wm + beta(s) * stopgrad(l_llm / T)`` and its controls."""

    enabled: bool = False
    """Mix the LLM prior into the acting policy; off, beta = 0 at every step (the ablations set it)."""
    beta_max: float = ranged(1.0, Limit(0.0, 1e3))
    """Largest mixing weight beta, in [0, 1000]: 1 lets a confident prior dominate a uniform policy; lower it for weak advisors."""
    gate: Literal["fixed", "uncertainty", "calibrated"] = "uncertainty"
    """``fixed``: beta = beta_max; ``uncertainty``: beta = beta_max * min(1, u(s) / gate_full_at), advice only where the policy is unsure; ``calibrated``: beta = beta_max * Phi(z) of the entropy against its running distribution, closing where the policy is surer than usual."""
    gate_full_at: float = ranged(0.5, Limit(0.0, 1.0, lo_open=True))
    """Policy uncertainty u in (0, 1] (entropy / log A) at and above which the uncertainty gate is fully open; lower opens it more."""
    trust: bool = False
    """Scale beta (min(1, 2 trust)) and the KL absorption (clip(2 trust - 1, 0, 1)) by the per-source advice trust (lore.prior.trust)."""
    trust_gain: float = ranged(3.0, _POSITIVE)
    """trust = sigmoid(trust_gain * evidence), gain > 0, evidence in z / t units; higher reacts to less evidence."""
    trust_dead_zone: float = ranged(1.0, Limit(0.0, 100.0))
    """Standard errors in [0, 100] of the episode t and the step-failure z that count as no evidence; higher ignores more noise."""
    trust_value_weight: float = ranged(1.0, Limit(0.0, 100.0))
    """Weight in [0, 100] of the critic's value z-score of the advice in the trust evidence; 0 leaves the critic out."""
    trust_decay: float = ranged(0.99, _DECAY)
    """EMA decay in [0, 1) of the value z-score evidence, per update; closer to 1 averages over more updates."""
    trust_min_gap: float = ranged(1e-3, Limit(0.0, MAX_SCALE, lo_open=True))
    """Q spread across actions (return-scale units, > 0) below which a state cannot tell the actions apart; raise it for noisy critics."""
    trust_states: int = ranged(128, Limit(1, 1_000_000))
    """Advised replay states scored per update, in [1, 1e6]; more gives steadier evidence at more update cost."""
    advice_samples: int = ranged(4, Limit(1, 64))
    """Imagined latent samples per (state, action) when scoring advice, in [1, 64]; more gives steadier values at more cost."""
    dropout: float = ranged(0.1, Limit(0.0, 1.0, hi_open=True))
    """Probability in [0, 1) of forcing beta = 0 for an act step, so that the base policy stays exercised."""
    control_episodes: float = ranged(0.25, Limit(0.0, 1.0, hi_open=True))
    """Probability in [0, 1) that an episode runs without the prior: the control group of the trust's episode t."""
    allocation: Literal["share", "thompson"] = "share"
    """How episodes are split between the advice and the agent's own policy. ``share``: control_episodes of them run without the prior and beta follows the trust; ``thompson``: a sceptical bandit over episode outcomes (lore.prior.allocation) picks each episode, advised ones at full strength."""
    filter: bool = False
    """Act-time critic filter (lore.prior.critic_filter): scale beta by the share of value draws in which the advice beats the policy, where the critic can tell actions apart; costs one imagined step per action at advised act steps."""
    temperature: float = ranged(1.0, _POSITIVE)
    """Temperature T in (0, 1000] dividing the prior logits; above 1 flattens overconfident advice."""
    kl_mode: Literal["none", "lagrangian"] = "none"
    """``lagrangian``: act-time KL trust region and the absorption term with a dual-ascent multiplier; ``none``: neither."""
    kl_bound: float = ranged(2.0, _POSITIVE)
    """lagrangian: act-time trust region, KL(pi_mix || pi_wm) <= kl_bound nats per state, in (0, 1000]; lower keeps the policy closer to its own."""
    kl_delta: float = ranged(0.1, Limit(0.0, 1e3))
    """lagrangian: nats of replay-state KL(pi_mix || pi_wm) the absorption term tolerates, in [0, 1000]."""
    kl_eta: float = ranged(0.05, Limit(0.0, 1e3))
    """lagrangian: dual step size of the multiplier per update, lambda += kl_eta * (KL - kl_delta), in [0, 1000]."""
    lambda_max: float = ranged(10.0, _SCALE)
    """lagrangian: upper clip of the multiplier lambda, in [0, 1e6]."""


@dataclass
class FeaturesConfig:
    """LLM-written feature code run in the sandbox and fused late into the encoder."""

    enabled: bool = False
    # The feature sandbox's own limits (lore.sandbox.runner.FeatureSandbox): at most 4096 features, a
    # positive per-observation timeout (a worker's CPU lifetime is 600 s), >= 16 MB of address space for
    # the worker (up to 1 TB), 1..64 worker processes, clip <= 1e30 (float32 range).
    n_features: int = ranged(8, Limit(1, 4096))
    timeout_s: float = ranged(1.0, Limit(0.0, 600.0, lo_open=True))
    memory_mb: int = ranged(256, Limit(16, 1 << 20))
    workers: int = ranged(1, Limit(1, 64))
    clip: float = ranged(1000.0, Limit(0.0, 1e30, lo_open=True))
    """Feature values are clipped to [-clip, clip] after the finiteness check."""


@dataclass
class PlanConfig:
    """CEM in latent space seeded by the LLM plan."""

    enabled: bool = False
    every: int = ranged(1, _INTERVAL)
    horizon: int = ranged(8, Limit(1, 1000))
    samples: int = ranged(64, Limit(1, 100_000))  # CEM rolls out samples x horizon latent steps per call
    elites: int = ranged(8, Limit(1, 100_000))  # and <= plan.samples
    iterations: int = ranged(4, Limit(1, 1000))
    init: Literal["llm", "prior", "uniform"] = "llm"
    smoothing: float = ranged(0.1, _UNIT)
    act: Literal["plan", "mix"] = "plan"
    mix_weight: float = ranged(1.0, Limit(0.0, 1e3))


@dataclass
class DistillConfig:
    """PriorNet: distil the LLM prior into a head on the latent."""

    enabled: bool = False
    trust_kl: float = ranged(0.3, _POSITIVE)
    min_samples: int = ranged(16, _COUNT)
    """Held-out comparisons (distinct LLM answers) before PriorNet may answer."""
    check_every: int = ranged(10, _COUNT)
    """Every n-th due LLM call is still made and compared with PriorNet (held-out KL)."""
    loss_scale: float = ranged(1.0, _SCALE)


@dataclass
class RunConfig:
    # Seeds: numpy's SeedSequence (per-env seeds) rejects negatives; Crafter draws worlds from a 31-bit
    # seed and the evaluation envs use seed + 10_000_000, which must stay below 2**32 for numpy.
    seed: int = ranged(0, Limit(0, 2**31 - 1))
    device: Literal["auto", "cpu", "cuda"] = "auto"
    ablation: str = "rl_only"
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    dreamer: DreamerConfig = field(default_factory=DreamerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    advisor: AdvisorConfig = field(default_factory=AdvisorConfig)
    prior: PriorConfig = field(default_factory=PriorConfig)
    features: FeaturesConfig = field(default_factory=FeaturesConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
