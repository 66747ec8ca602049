"""PriorLayer: the stateful part of LoRe's LLM prior.

It owns everything that must survive from one step to the next and across a resume: the running
means of the uncertainty signals, the per-source advice trust, the KL multiplier ``lambda`` (dual
variable) and the counters behind :meth:`PriorLayer.metrics`. The maths lives in the pure functions
of :mod:`lore.prior.mixing`, :mod:`lore.prior.gate`, :mod:`lore.prior.trust` and :mod:`lore.prior.kl_control`.

At act time (per env)::

    beta = beta_max * min(1, u(s) / gate_full_at)    # gate == "uncertainty", u = entropy / log A in [0, 1]
    beta = beta_max                                  # gate == "fixed"
    beta = beta_max * Phi((H(s) - mean H) / sd H)    # gate == "calibrated": against H's running distribution
    beta = beta * min(1, 2 trust(source))            # prior.trust: value z + episode t + failed advised steps
    beta = beta * f(s)                               # prior.filter: share of value draws favouring the advice
    beta = 0 where mask == 0, where beta-dropout fired, in a control episode, or when the prior is disabled
    beta = largest beta' <= beta with KL(pi_mix || pi_wm) <= kl_bound   # kl_mode == "lagrangian"
    logits_mix = logits_wm + beta * stopgrad(prior_logits / T)

At update time the KL term distils ``pi_mix`` into the actor with weight ``clip(2 * trust - 1, 0, 1)``
per advised state: act optimistically (that is what produces the evidence), learn only from advice
with net positive evidence.

Calls to :meth:`act` whose batch size differs from ``num_envs`` (e.g. a separate evaluation
batch) leave the layer's state (running means, metrics) untouched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from lore.config import PriorConfig
from lore.prior.allocation import EpisodeBandit
from lore.prior.critic_filter import critic_filter
from lore.prior.gate import (
    UNCERTAINTY_KEYS,
    EMANormalizer,
    beta_dropout_keep,
    calibrated_openness,
    uncertainty_parts,
)
from lore.prior.kl_control import (
    absorption_loss,
    categorical_kl,
    dual_ascent,
    masked_mean,
    project_beta_to_kl,
)
from lore.prior.mixing import categorical_entropy, mix_logits
from lore.prior.trust import AdviceTrust, act_scale, advice_value_z, replicated_best_action

_STATE_VERSION = 3
CALIBRATED_FLOOR = 1e-3
"""The calibrated gate's floor on the entropy's running standard deviation, as a fraction of log A."""
METHOD_SEED_OFFSET = 0x4C6F5265
"""Added to the run seed for the method's own generator (:meth:`PriorLayer.seed_draws`)."""


def method_seed(seed: int) -> int:
    """The seed of the method's draws for run seed ``seed``: never DreamerV3's stream."""
    return (int(seed) + METHOD_SEED_OFFSET) % 2**63
_EMA_DECAY = 0.99
"""Decay of the running means that the logged uncertainty ratios divide by."""

# Separation of the gate's parts between advised states where the advice's top action differs
# from the policy's ("disagree") and where it is the same ("agree").
_SEPARATION_PARTS = ("u_entropy_frac", "u_value_ratio", "u_disagreement_ratio", "beta")
_SEPARATION_KEYS = tuple(f"{part}_{side}" for part in _SEPARATION_PARTS for side in ("disagree", "agree"))

# Running sums behind metrics(): reset by every metrics() call.
_ACC_KEYS = ("n_act", "beta_sum", "beta_sq", "n_applied", "beta_applied_sum", "mask_sum", "open_sum",
             "u_entropy", "u_value_var", "u_disagreement", "n_u", "entropy_wm", "entropy_mix",
             "n_loss", "prior_loss", "u_gate", "n_gate", "kl_act", "kl_clipped", "n_disagree", "n_agree",
             "n_filter", "filter_sum", "filter_informative", *_SEPARATION_KEYS)


def _zero_acc() -> dict[str, float]:
    return {key: 0.0 for key in _ACC_KEYS}


class PriorLayer:
    def __init__(self, cfg: PriorConfig, num_actions: int, num_envs: int = 1):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if cfg.gate not in ("fixed", "uncertainty", "calibrated"):
            raise ValueError(f"prior.gate must be fixed|uncertainty|calibrated, got {cfg.gate!r}")
        if cfg.kl_mode not in ("none", "lagrangian"):
            raise ValueError(f"prior.kl_mode must be none|lagrangian, got {cfg.kl_mode!r}")
        if not cfg.temperature > 0:
            raise ValueError(f"prior.temperature must be > 0, got {cfg.temperature}")
        self.cfg = cfg
        self.num_actions = int(num_actions)
        self.num_envs = int(num_envs)
        self.temperature = float(cfg.temperature)
        self.lambda_kl = 0.0
        """Dual variable of the KL Lagrangian (``kl_mode == "lagrangian"``); starts at 0."""
        self.normalisers = [EMANormalizer(_EMA_DECAY) for _ in UNCERTAINTY_KEYS]
        self.trust = AdviceTrust(cfg.trust_decay, cfg.trust_gain, cfg.trust_dead_zone, cfg.trust_value_weight)
        self.bandit = EpisodeBandit()
        """``allocation: thompson``: which episodes the advice steers (lore.prior.allocation)."""
        self.control = torch.zeros(self.num_envs, dtype=torch.bool)
        """Per env: is the current episode a control episode (prior off throughout)?"""
        self.last_u: torch.Tensor | None = None
        """u(s) [num_envs] of the latest act step (the controller's trigger reads it, not a recomputation)."""
        self.act_calls = 0
        self.last_env_step = 0
        self._acc = _zero_acc()
        self.generator = torch.Generator().manual_seed(method_seed(0))
        """The method's own random draws in training (beta dropout, control episodes, advice scoring, planning),
        apart from DreamerV3's generator so that every arm of a seed samples the same actions while the prior is
        silent; :meth:`seed_draws` seeds it; part of the state."""
        self.side_generator = torch.Generator().manual_seed(method_seed(0))
        """The draws of act calls with another batch size (evaluation), which leave the state alone;
        :meth:`seed_side_draws` seeds it before each evaluation."""

    def seed_draws(self, seed: int, device: torch.device | str = "cpu") -> None:
        """Seed :attr:`generator` (on ``device``) for run seed ``seed``, on a stream apart from DreamerV3's."""
        self.generator = torch.Generator(device=device).manual_seed(method_seed(seed))
        self.side_generator = torch.Generator(device=device).manual_seed(method_seed(seed))

    def seed_side_draws(self, seed: int) -> None:
        """Seed :attr:`side_generator` (one evaluation's draws)."""
        self.side_generator.manual_seed(method_seed(seed))

    # ------------------------------------------------------------------ settings

    @property
    def beta_max(self) -> float:
        """``prior.beta_max``, or 0 when the prior is disabled."""
        return self.cfg.beta_max if self.cfg.enabled else 0.0

    # ------------------------------------------------------------------ acting

    def _uncertainty_signals(self, u: Mapping[str, torch.Tensor] | None, batch: int,
                             device: torch.device) -> list[torch.Tensor] | None:
        """The three raw signals as float ``[B]`` tensors; a missing diagnostic (value_var, disagreement) is NaN."""
        if u is None:
            return None
        signals = []
        for key in UNCERTAINTY_KEYS:
            value = u.get(key)
            if value is None:
                if key == "entropy" and self.cfg.gate != "fixed" and self.cfg.enabled:
                    raise ValueError("PriorLayer.act: uncertainty signal u['entropy'] is missing (the gate reads it)")
                value = torch.full((batch,), math.nan, device=device)
            value = torch.as_tensor(value, device=device).detach().float()
            if value.shape != (batch,):
                raise ValueError(f"PriorLayer.act: u['{key}'] must have shape [{batch}], got {tuple(value.shape)}")
            signals.append(value)
        return signals

    def _checked_prior(self, prior_logits: torch.Tensor | None, mask: torch.Tensor,
                       like: torch.Tensor) -> torch.Tensor:
        """Prior logits with rows where ``mask == 0`` zeroed; non-finite advised rows are an error."""
        if prior_logits is None:
            return torch.zeros_like(like)
        if prior_logits.shape != like.shape:
            raise ValueError(f"prior_logits shape {tuple(prior_logits.shape)} must equal logits_wm shape "
                             f"{tuple(like.shape)}")
        applied = (mask > 0)[:, None]
        prior = torch.where(applied, prior_logits.detach().to(like.dtype), torch.zeros((), dtype=like.dtype,
                                                                                        device=like.device))
        if not torch.isfinite(prior).all():
            raise ValueError("prior_logits contain NaN/inf in rows with mask > 0 (the LLM answer validator "
                             "should have rejected them)")
        return prior

    def _check_batch(self, logits_wm: torch.Tensor, mask: torch.Tensor) -> None:
        if logits_wm.dim() != 2 or logits_wm.shape[1] != self.num_actions:
            raise ValueError(f"logits_wm must be [B, {self.num_actions}], got {tuple(logits_wm.shape)}")
        if mask.shape != logits_wm.shape[:1]:
            raise ValueError(f"mask must be [B]={tuple(logits_wm.shape[:1])}, got {tuple(mask.shape)}")

    def preview_u(self, u: Mapping[str, torch.Tensor] | None, batch: int) -> torch.Tensor | None:
        """The gate's ``u [B]`` for this step's signals without updating the running means (:meth:`act` does),
        or None without signals: what the LLM controller reads when it is consulted before acting."""
        signals = self._uncertainty_signals(u, batch, torch.device("cpu"))
        if signals is None:
            return None
        with torch.no_grad():
            return self.gate_u(signals)[0].detach().cpu()

    def gate_u(self, signals: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``u [B]`` in [0, 1] (the entropy part) and the three parts from the raw signals (running means as they
        stand); a signal nobody computed (NaN throughout) has a NaN part."""
        parts = uncertainty_parts(signals, self.num_actions, [n.mean for n in self.normalisers])
        parts = [part if bool(torch.isfinite(signal).any()) else torch.full_like(part, math.nan)
                 for part, signal in zip(parts, signals, strict=True)]
        return parts[0], parts

    def trust_scale(self, source: torch.Tensor | None, batch: int, device: torch.device) -> torch.Tensor:
        """Per-env multiplier of beta from each env's advice source: ``min(1, 2 trust)`` (1 without ``prior.trust``).

        Uninformed advice (trust 0.5) acts at full strength, so good advice can lead the agent to the reward that
        produces the evidence; advice with evidence of harm fades out.
        """
        if self.thompson:  # the bandit decides whole episodes; an advised one acts at full strength
            return torch.ones(batch, device=device)
        return act_scale(self._trust_per_row(source, batch, device))

    def absorb_weight(self, source: torch.Tensor | None, rows: int, device: torch.device) -> torch.Tensor:
        """Per-row weight of the KL absorption term: ``clip(2 * trust - 1, 0, 1)`` (1 without ``prior.trust``).

        Act optimistically, learn conservatively: uninformed advice (trust 0.5) still steers the advised
        episodes at full strength, which is what produces the evidence, but only advice with net positive
        evidence is distilled into the policy. Distilling uninformed advice is a bet with zero expected
        value, and it is the one that is not undone when the evidence turns.
        """
        if self.thompson:  # distil the advice as far as the bandit believes it beats the agent's own episodes
            return torch.full((rows,), max(2.0 * self.bandit.p_advice_better() - 1.0, 0.0), device=device)
        return (2.0 * self._trust_per_row(source, rows, device) - 1.0).clamp(0.0, 1.0)

    def _trust_per_row(self, source: torch.Tensor | None, rows: int, device: torch.device) -> torch.Tensor:
        """Trust of each row's advice source ``[rows]``; 1 (fully trusted) without ``prior.trust`` or a source."""
        if not self.cfg.trust or source is None:
            return torch.ones(rows, device=device)
        codes = torch.as_tensor(source, device=device).reshape(-1)
        return self.trust.values_for(codes).to(device)

    def act(self, logits_wm: torch.Tensor, prior_logits: torch.Tensor | None, mask: torch.Tensor,
            u: Mapping[str, torch.Tensor] | None, env_step: int,
            generator: torch.Generator | None = None,
            source: torch.Tensor | None = None,
            is_first: torch.Tensor | None = None, control_drawn: bool = False,
            advice_filter: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits_mix [B,A], beta [B])`` for one act step of ``B`` envs (see the module docstring).

        ``source [B]``: the advice source code of each env (:func:`lore.prior.trust.source_code`);
        ``advice_filter [B]``: the critic filter's multiplier (:meth:`filter_advice`), with ``prior.filter``;
        ``is_first [B]``: episode starts, where each env draws whether the episode is a control episode
        (unless ``control_drawn``: :meth:`draw_control_episodes` already ran for this step).
        """
        mask = torch.as_tensor(mask, device=logits_wm.device)
        self._check_batch(logits_wm, mask)
        batch, device = logits_wm.shape[0], logits_wm.device
        stateful = batch == self.num_envs
        if generator is None:
            generator = self.generator if stateful else self.side_generator
        prior = self._checked_prior(prior_logits, mask, logits_wm)
        signals = self._uncertainty_signals(u, batch, device)

        with torch.no_grad():
            if signals is not None and stateful:
                for normaliser, signal in zip(self.normalisers, signals, strict=True):
                    normaliser.update(signal)
            beta_max_now = self.beta_max
            u_comb, parts = None, None
            if signals is not None:
                u_comb, parts = self.gate_u(signals)
            if not self.cfg.enabled:
                beta = torch.zeros(batch, device=device)
            else:
                if self.cfg.gate == "fixed":
                    beta = torch.full((batch,), beta_max_now, device=device)
                elif self.cfg.gate == "calibrated":
                    entropy = self.normalisers[0]
                    beta = beta_max_now * calibrated_openness(signals[0], entropy.mean, entropy.var,
                                                              CALIBRATED_FLOOR * math.log(self.num_actions)).to(device)
                else:
                    if u_comb is None:
                        raise ValueError("PriorLayer.act: gate 'uncertainty' needs u = {'entropy', "
                                         "'value_var', 'disagreement'}")
                    beta = beta_max_now * (u_comb.to(device) / self.cfg.gate_full_at).clamp(max=1.0)
                beta = beta * self.trust_scale(source, batch, device)
                if advice_filter is not None:
                    beta = beta * torch.as_tensor(advice_filter, device=device).to(beta.dtype)
                keep = beta_dropout_keep(batch, self.cfg.dropout, generator, device)
                if stateful:
                    if not control_drawn:
                        self.draw_control_episodes(is_first, generator)
                    keep = keep & ~self.control.to(device)
                beta = beta * keep * (mask > 0)
            beta = beta.to(logits_wm.dtype)
            beta_unbounded = beta
            if self.cfg.enabled and self.cfg.kl_mode == "lagrangian" and bool((beta > 0).any()):
                beta = project_beta_to_kl(logits_wm, prior / self.temperature, beta, self.cfg.kl_bound)

        logits_mix = mix_logits(logits_wm, prior, beta, self.temperature)

        if stateful:
            self.last_u = None if u_comb is None else u_comb.detach().cpu()
            self.act_calls += 1
            self.last_env_step = int(env_step)
            self._record_act(logits_wm, logits_mix, beta, beta_unbounded, mask, prior, signals, u_comb, parts)
        return logits_mix, beta

    def filter_advice(self, q_draws: torch.Tensor, prior_logits: torch.Tensor, logits_wm: torch.Tensor,
                      rows: torch.Tensor) -> torch.Tensor:
        """The critic filter's multiplier of beta ``[B]`` (:mod:`lore.prior.critic_filter`): ``q_draws [R, D, A]``
        one-step values (return-scale units) of the ``R`` advised rows ``rows [B]`` bool, 1 at the other rows.
        An act batch of ``num_envs`` rows counts in :meth:`metrics` (``filter_pass``, ``filter_informative_frac``)."""
        rows = torch.as_tensor(rows, device=logits_wm.device).bool()
        out = torch.ones(logits_wm.shape[0], dtype=logits_wm.dtype, device=logits_wm.device)
        if not bool(rows.any()):
            return out
        f, informative = critic_filter(q_draws, prior_logits[rows], logits_wm[rows], self.temperature,
                                       self.cfg.trust_min_gap)
        out[rows] = f.to(out.dtype)
        if logits_wm.shape[0] == self.num_envs:
            self._acc["n_filter"] += float(f.numel())
            self._acc["filter_sum"] += float(f.double().sum())
            self._acc["filter_informative"] += float(informative.double().sum())
        return out

    def episode_record(self, env_index: int) -> dict[str, float]:
        """What the episode in flight on env ``env_index`` was, for ``episodes.csv`` (read before
        :meth:`observe_episode`): ``control`` (1: ran without the prior)."""
        return {"control": float(bool(self.control[env_index]))}

    def observe_episode(self, env_index: int, episode_return: float, failed: bool = False) -> None:
        """An episode of env ``env_index`` ended (``failed``: :func:`lore.prior.trust.is_failure`): its return is
        evidence for the trust (advised vs control) and, with ``allocation: thompson``, for the bandit.

        Called before the env's next act step, so ``control`` still describes the episode that ended.
        """
        if not self.cfg.enabled:
            return
        if self.thompson:
            self.bandit.observe(float(episode_return), bool(failed), advised=not bool(self.control[env_index]))
        if self.cfg.trust and (self.cfg.control_episodes > 0 or self.thompson):
            self.trust.episodes.observe(float(episode_return), bool(self.control[env_index]))

    @property
    def thompson(self) -> bool:
        """Whether a bandit decides which episodes the advice steers (``allocation: thompson``)."""
        return self.cfg.allocation == "thompson"

    def observe_steps(self, changed: torch.Tensor, source: torch.Tensor, failed: torch.Tensor) -> None:
        """One env step of every env: whether the advice changed the action, its source code and whether the
        step ended the episode in failure (the trust's step-failure evidence)."""
        if self.cfg.enabled and self.cfg.trust:
            self.trust.steps.observe(torch.as_tensor(changed), torch.as_tensor(source), torch.as_tensor(failed))

    def draw_control_episodes(self, is_first: torch.Tensor | None, generator: torch.Generator | None = None) -> None:
        """At each env's episode start, make the episode a control episode with prob ``control_episodes``.

        Called by :meth:`act`, or before it when the LLM is consulted before acting (the controller must know
        whether the new episode uses advice before it asks)."""
        if is_first is None or not self.cfg.enabled or (self.cfg.control_episodes <= 0 and not self.thompson):
            return
        starts = torch.as_tensor(is_first).reshape(-1).bool().cpu()
        if not bool(starts.any()):
            return
        generator = self.generator if generator is None else generator
        if self.thompson:
            draw = ~self.bandit.draw_advised(self.num_envs, generator)
        else:
            draw = (torch.rand(self.num_envs, generator=generator, device=generator.device)
                    < self.cfg.control_episodes).cpu()
        self.control = torch.where(starts, draw, self.control)

    def _record_act(self, logits_wm, logits_mix, beta, beta_unbounded, mask, prior, signals, u_comb, parts) -> None:
        acc = self._acc
        with torch.no_grad():
            sums: dict[str, torch.Tensor] = {}  # 0-dim float64 sums, read back to the host in one go
            if u_comb is not None:
                acc["n_gate"] += u_comb.numel()
                sums["u_gate"] = u_comb.double().sum()
            beta = beta.detach().double()
            applied = mask > 0
            acc["n_act"] += beta.numel()
            sums["beta_sum"] = beta.sum()
            sums["beta_sq"] = (beta * beta).sum()
            sums["n_applied"] = applied.sum().double()
            sums["beta_applied_sum"] = beta[applied].sum()
            sums["mask_sum"] = applied.double().sum()
            sums["kl_clipped"] = (beta_unbounded.double() > beta + 1e-9).double().sum()
            if bool(applied.any()):  # how far the policy that acts departs from the base policy
                kl = categorical_kl(logits_mix.detach()[applied].double(), logits_wm.detach()[applied].double())
                sums["kl_act"] = kl.sum()
                if parts is not None:
                    disagree = logits_wm.detach().argmax(-1) != prior.argmax(-1)
                    for side, rows in (("disagree", applied & disagree), ("agree", applied & ~disagree)):
                        sums[f"n_{side}"] = rows.double().sum()
                        for name, value in zip(_SEPARATION_PARTS, [*parts, beta], strict=True):
                            sums[f"{name}_{side}"] = value.double()[rows].sum()
            sums["open_sum"] = (beta > 0).double().sum()
            sums["entropy_wm"] = categorical_entropy(logits_wm.detach().double()).sum()
            sums["entropy_mix"] = categorical_entropy(logits_mix.detach().double()).sum()
            if signals is not None:
                acc["n_u"] += beta.numel()
                for key, signal in zip(("u_entropy", "u_value_var", "u_disagreement"), signals, strict=True):
                    if bool(torch.isfinite(signal).any()):
                        sums[key] = torch.nan_to_num(signal.double()).sum()
                    else:
                        acc[key] += math.nan
            for key, value in zip(sums, torch.stack(list(sums.values())).tolist(), strict=True):
                acc[key] += value

    # ------------------------------------------------------------------ training

    @staticmethod
    def _flatten(logits: torch.Tensor, **per_row: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``[..., A]`` and ``[...]`` tensors -> ``[N, A]`` and ``[N]`` (in the order given)."""
        lead = logits.shape[:-1]
        out = [logits.reshape(-1, logits.shape[-1])]
        for name, tensor in per_row.items():
            tensor = torch.as_tensor(tensor, device=logits.device)
            if tensor.shape != lead:
                raise ValueError(f"PriorLayer: {name} has shape {tuple(tensor.shape)}, expected "
                                 f"{tuple(lead)} to match logits {tuple(logits.shape)}")
            out.append(tensor.reshape(-1))
        return tuple(out)

    def actor_loss(self, logits_wm: torch.Tensor, prior_logits: torch.Tensor, mask: torch.Tensor,
                   beta: torch.Tensor, source: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Prior term of the actor loss for ``logits_wm [..., A]`` (with grad) and per-row ``[...]`` inputs.

        ``lagrangian``: ``lambda * masked_mean(w * relu(KL(pi_mix || pi_wm) - delta))`` over advised rows, where
        ``pi_mix`` uses the stored ``beta`` and is a stop-gradient target (the gradient reaches ``logits_wm``
        through ``pi_wm`` only) and ``w`` is each row's absorption weight (1 without ``prior.trust``);
        ``none`` / disabled: 0. ``kl_mix_wm`` (masked mean) is reported in both modes.
        """
        if logits_wm.shape[-1] != self.num_actions:
            raise ValueError(f"logits_wm last dim must be {self.num_actions}, got {tuple(logits_wm.shape)}")
        if prior_logits.shape != logits_wm.shape:
            raise ValueError(f"prior_logits shape {tuple(prior_logits.shape)} != logits_wm {tuple(logits_wm.shape)}")
        if source is None:
            source = torch.zeros(logits_wm.shape[:-1], device=logits_wm.device)
        logits, mask, beta, source = self._flatten(logits_wm, mask=mask, beta=beta, source=source)
        prior = self._checked_prior(prior_logits.reshape(-1, self.num_actions), mask, logits)
        loss, kl_mix_wm = self.absorption(logits, prior, mask, beta, self.loss_inputs(source, logits.device))
        metrics = {
            "kl_mix_wm": kl_mix_wm.item(),
            "prior_loss": loss.detach().item(),
            "lambda_kl": self.current_lambda(),
            "prior_mask_frac_train": (mask > 0).float().mean().item() if mask.numel() else 0.0,
        }
        self.record_loss(metrics["prior_loss"])
        return loss, metrics

    def loss_inputs(self, source: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        """The layer's state that :meth:`absorption` reads, as tensors: ``weight`` [N] per advice source code
        ``source`` [N], ``lambda_kl`` and ``temperature`` 0-dim."""
        return {"weight": self.absorb_weight(source, source.shape[0], device),
                "lambda_kl": torch.tensor(self.current_lambda(), device=device),
                "temperature": torch.tensor(self.temperature, device=device)}

    def absorption(self, logits: torch.Tensor, prior: torch.Tensor, mask: torch.Tensor, beta: torch.Tensor,
                   inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(actor-loss term, ``kl_mix_wm``) for logits, prior [N, A] and mask, beta [N]; reads no host state.

        ``inputs`` from :meth:`loss_inputs`. Without ``lagrangian`` the term is 0 and ``kl_mix_wm`` the masked
        mean of ``KL(pi_mix || pi_wm)``.
        """
        if self.cfg.enabled and self.cfg.kl_mode == "lagrangian":
            # pi_mix is the target (stop-gradient): with a gradient through both sides the actor can also
            # shrink the KL by turning deterministic (a peaked pi_wm barely moves under a finite tilt).
            # With sg(pi_mix) the gradient is lambda * (pi_wm - pi_mix): it moves pi_wm towards the tilt.
            # The constraint is on the trust-weighted KL, E[w (KL - delta)] <= 0: the dual variable does not
            # grow on advice that is not being absorbed (w = 0 gives KL = delta, no dual step).
            return absorption_loss(logits, prior, mask, beta, inputs["weight"], inputs["lambda_kl"],
                                   inputs["temperature"], self.cfg.kl_delta)
        if not self.cfg.enabled:
            beta = torch.zeros_like(beta)
        with torch.no_grad():
            tilt = (prior.to(logits.dtype) / inputs["temperature"]) * beta.to(logits.dtype)[:, None]
            kl_mix_wm = masked_mean(categorical_kl(logits + tilt, logits), mask)
        return logits.sum() * 0.0, kl_mix_wm

    def record_loss(self, prior_loss: float) -> None:
        """Count one actor-loss evaluation in the layer's metrics."""
        self._acc["n_loss"] += 1
        self._acc["prior_loss"] += prior_loss

    def current_lambda(self) -> float:
        """The KL multiplier in use: the dual variable with ``kl_mode: lagrangian``, else 0."""
        return self.lambda_kl if self.cfg.enabled and self.cfg.kl_mode == "lagrangian" else 0.0

    def update_lambda(self, kl_mean: float) -> None:
        """Dual ascent on ``lambda`` with the masked-mean ``KL(pi_mix || pi_wm)`` (lagrangian mode only)."""
        if self.cfg.enabled and self.cfg.kl_mode == "lagrangian":
            self.lambda_kl = dual_ascent(self.lambda_kl, float(kl_mean), self.cfg.kl_delta, self.cfg.kl_eta,
                                         self.cfg.lambda_max)

    def wants_advice_values(self) -> bool:
        """Whether the agent should score advised replay states (for the advice trust)."""
        return self.cfg.enabled and self.cfg.trust

    def observe_advice_values(self, q_values: torch.Tensor, prior_logits: torch.Tensor,
                              codes: torch.Tensor) -> dict[str, float]:
        """Evidence from one update: one-step values of advised states, ``q [N, A]`` or draws ``[N, D, A]``.

        The mean over draws (return-scale units) feeds the per-source trust (value z-score of the
        advice); states where all ``D`` draws agree on the best action say how often the advice's top action
        is the best one (logged, not used).
        """
        q_draws = q_values[:, None, :] if q_values.dim() == 2 else q_values
        if (q_draws.dim() != 3 or q_draws.shape[::2] != prior_logits.shape
                or codes.shape != q_draws.shape[:1]):
            raise ValueError(f"observe_advice_values: q {tuple(q_values.shape)}, prior {tuple(prior_logits.shape)}, "
                             f"codes {tuple(codes.shape)} must be [N, (D,) A], [N, A], [N]")
        if q_draws.shape[0] == 0:
            return {}
        q_draws = q_draws.detach().double().cpu()
        q = q_draws.mean(1)
        prior = prior_logits.detach().double().cpu()
        z = advice_value_z(q, prior, self.cfg.trust_min_gap)
        self.trust.observe(z, codes.detach().cpu())
        informative = q.std(-1, unbiased=False) > self.cfg.trust_min_gap
        best, labelled = replicated_best_action(q_draws, self.cfg.trust_min_gap)
        return {"advice_value_z": float(z.mean()), "advice_informative_frac": float(informative.double().mean()),
                "advice_labelled_frac": float(labelled.double().mean()),
                "advice_top_is_best": float((prior.argmax(-1) == best)[labelled].double().mean())
                if bool(labelled.any()) else math.nan}

    # ------------------------------------------------------------------ reporting and state

    def metrics(self) -> dict[str, float]:
        """Means over the act / actor_loss calls since the previous ``metrics()`` call (NaN when none).

        ``u_*`` are the raw signals; ``u_gate`` the bounded uncertainty u in [0, 1] the gate uses.
        """
        acc = self._acc
        nan = math.nan

        def ratio(num: float, den: float) -> float:
            return num / den if den > 0 else nan

        beta_mean = ratio(acc["beta_sum"], acc["n_act"])
        beta_sq = ratio(acc["beta_sq"], acc["n_act"])
        out = {
            "beta_mean": beta_mean,
            "beta_std": math.sqrt(max(beta_sq - beta_mean ** 2, 0.0)) if acc["n_act"] > 0 else nan,
            "beta_mean_applied": ratio(acc["beta_applied_sum"], acc["n_applied"]),
            "prior_mask_frac": ratio(acc["mask_sum"], acc["n_act"]),
            "u_entropy": ratio(acc["u_entropy"], acc["n_u"]),
            "u_value_var": ratio(acc["u_value_var"], acc["n_u"]),
            "u_disagreement": ratio(acc["u_disagreement"], acc["n_u"]),
            "u_gate": ratio(acc["u_gate"], acc["n_gate"]),
            # act time, advised states; the agent logs the replay-state value the Lagrangian uses
            # (kl_mix_wm_train)
            "kl_mix_wm": ratio(acc["kl_act"], acc["n_applied"]),
            "prior_loss": ratio(acc["prior_loss"], acc["n_loss"]),
            "lambda_kl": self.current_lambda(),
            "temperature": self.temperature,
            "entropy_wm": ratio(acc["entropy_wm"], acc["n_act"]),
            "entropy_mix": ratio(acc["entropy_mix"], acc["n_act"]),
            "gate_open_frac": ratio(acc["open_sum"], acc["n_act"]),
            "beta_max_now": self.beta_max,
            "kl_bound_active_frac": ratio(acc["kl_clipped"], acc["n_applied"]),
            **({"filter_pass": ratio(acc["filter_sum"], acc["n_filter"]),
                "filter_informative_frac": ratio(acc["filter_informative"], acc["n_filter"])}
               if self.cfg.filter else {}),
            **self.trust.metrics(),
            **(self.bandit.metrics() if self.thompson else {}),
        }
        for key in _SEPARATION_KEYS:
            out[key] = ratio(acc[key], acc["n_" + key.rsplit("_", 1)[1]])
        self._acc = _zero_acc()
        return out

    def state_dict(self) -> dict:
        return {
            "version": _STATE_VERSION,
            "temperature": self.temperature,
            "lambda_kl": self.lambda_kl,
            "normalisers": [n.state_dict() for n in self.normalisers],
            "control": self.control.tolist(),
            "trust": self.trust.state_dict(),
            "bandit": self.bandit.state_dict(),
            "act_calls": self.act_calls,
            "last_env_step": self.last_env_step,
            "acc": dict(self._acc),
            "generator": self.generator.get_state().tolist(),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"PriorLayer.load_state_dict: checkpoint has prior-layer state version "
                             f"{state.get('version')}, this release reads {_STATE_VERSION}")
        self.temperature = float(state["temperature"])
        self.lambda_kl = float(state["lambda_kl"])
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        control = torch.tensor(state["control"], dtype=torch.bool)
        if control.shape != (self.num_envs,):
            raise ValueError(f"PriorLayer.load_state_dict: saved state has {control.numel()} envs, "
                             f"this layer has num_envs={self.num_envs}")
        self.control = control
        self.trust.load_state_dict(state["trust"])
        self.bandit.load_state_dict(state["bandit"])
        for normaliser, saved in zip(self.normalisers, state["normalisers"], strict=True):
            normaliser.load_state_dict(saved)
        self.act_calls = int(state["act_calls"])
        self.last_env_step = int(state["last_env_step"])
        self._acc = {**_zero_acc(), **{k: float(v) for k, v in state["acc"].items()}}
