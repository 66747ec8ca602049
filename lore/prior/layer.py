"""PriorLayer: the stateful part of LoRe's LLM prior.

It owns everything that must survive from one step to the next and across a resume: the EMA
normalisers of the three uncertainty signals, the per-env hysteresis flags of the gate, the KL
multiplier ``lambda`` (dual variable), the temperature ``T`` and the counters behind
:meth:`PriorLayer.metrics`. The maths lives in the pure functions of :mod:`lore.prior.mixing`,
:mod:`lore.prior.gate`, :mod:`lore.prior.temperature` and :mod:`lore.prior.kl_control`.

At act time (per env, ``u`` = EMA-normalised weighted uncertainty)::

    beta = beta_max(env_step) * sigmoid(kappa * (u - tau))   # gate == "uncertainty", tau by hysteresis
    beta = beta_max(env_step)                                # gate == "fixed"
    beta = 0 where mask == 0, where beta-dropout fired, or when the prior is disabled
    logits_mix = logits_wm + beta * stopgrad(prior_logits / T)

Calls to :meth:`act` whose batch size differs from ``num_envs`` (e.g. a separate evaluation
batch) use the gate without hysteresis memory (every env starts closed) and leave the layer's
state (normalisers, flags, metrics) untouched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from lore.config import PriorConfig
from lore.prior.gate import (
    UNCERTAINTY_KEYS,
    EMANormalizer,
    beta_dropout_keep,
    beta_max_schedule,
    combine_uncertainty,
    hysteresis_beta,
    hysteresis_update,
)
from lore.prior.kl_control import (
    advantage_bonus,
    categorical_kl,
    dual_ascent,
    lagrangian_penalty,
    masked_mean,
    prior_kl_regulariser,
)
from lore.prior.mixing import categorical_entropy, mix_logits
from lore.prior.temperature import fit_temperature

_STATE_VERSION = 1

# Running sums behind metrics(): reset by every metrics() call.
_ACC_KEYS = ("n_act", "beta_sum", "beta_sq", "n_applied", "beta_applied_sum", "mask_sum", "open_sum",
             "u_entropy", "u_value_var", "u_disagreement", "n_u", "entropy_wm", "entropy_mix",
             "n_loss", "prior_loss", "u_gate", "n_gate", "kl_act")


def _zero_acc() -> dict[str, float]:
    return {key: 0.0 for key in _ACC_KEYS}


class PriorLayer:
    def __init__(self, cfg: PriorConfig, num_actions: int, num_envs: int = 1, total_steps: int = 1):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if cfg.gate not in ("fixed", "uncertainty"):
            raise ValueError(f"prior.gate must be fixed|uncertainty, got {cfg.gate!r}")
        if cfg.kl_mode not in ("none", "lagrangian", "prior_reg", "bonus"):
            raise ValueError(f"prior.kl_mode must be none|lagrangian|prior_reg|bonus, got {cfg.kl_mode!r}")
        if cfg.tau_low > cfg.tau_high:
            raise ValueError(f"prior.tau_low ({cfg.tau_low}) must be <= prior.tau_high ({cfg.tau_high})")
        if not 0 < cfg.temperature_min <= cfg.temperature_max:
            raise ValueError("prior.temperature_min/max must satisfy 0 < min <= max")
        if not cfg.temperature > 0:
            raise ValueError(f"prior.temperature must be > 0, got {cfg.temperature}")
        self.cfg = cfg
        self.num_actions = int(num_actions)
        self.num_envs = int(num_envs)
        self.total_steps = max(int(total_steps), 1)
        self.anneal_end = cfg.anneal_end if cfg.anneal_end > 0 else self.total_steps
        if cfg.anneal != "none" and self.anneal_end <= cfg.warmup_steps:
            raise ValueError(f"prior.anneal_end ({self.anneal_end}, 0 = train.steps) must be after "
                             f"prior.warmup_steps ({cfg.warmup_steps}): annealing starts when the warm-up ends")
        self.beta_max_at(0)  # validates the schedule settings now rather than at the first step
        self.temperature = float(min(max(cfg.temperature, cfg.temperature_min), cfg.temperature_max))
        self.lambda_kl = 0.0
        """Dual variable of the KL Lagrangian (``kl_mode == "lagrangian"``); starts at 0."""
        self.normalisers = [EMANormalizer(cfg.ema_decay) for _ in UNCERTAINTY_KEYS]
        self.gate_open = torch.zeros(self.num_envs, dtype=torch.bool)
        self.act_calls = 0
        self.last_env_step = 0
        self.last_refit_step: int | None = None
        self.refits = 0
        self.refits_skipped = 0
        self._acc = _zero_acc()

    # ------------------------------------------------------------------ schedule

    def beta_max_at(self, env_step: int) -> float:
        """``beta_max`` after warm-up (linear over ``warmup_steps`` env steps) and annealing; 0 if disabled."""
        if not self.cfg.enabled:
            return 0.0
        return beta_max_schedule(env_step, self.cfg.beta_max, self.cfg.warmup_steps, self.cfg.anneal,
                                 self.anneal_end)

    @property
    def weights(self) -> tuple[float, float, float]:
        return (self.cfg.w_entropy, self.cfg.w_value, self.cfg.w_disagreement)

    # ------------------------------------------------------------------ acting

    def _uncertainty_signals(self, u: Mapping[str, torch.Tensor] | None, batch: int,
                             device: torch.device) -> list[torch.Tensor] | None:
        """The three raw signals as float ``[B]`` tensors; a signal with weight 0 may be missing."""
        if u is None:
            return None
        signals = []
        for key, weight in zip(UNCERTAINTY_KEYS, self.weights, strict=True):
            value = u.get(key)
            if value is None:
                if weight > 0 and self.cfg.gate == "uncertainty" and self.cfg.enabled:
                    raise ValueError(f"PriorLayer.act: uncertainty signal u['{key}'] is missing "
                                     f"(its weight is {weight}; set it to 0 to drop the signal)")
                value = torch.zeros(batch, device=device)
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

    def act(self, logits_wm: torch.Tensor, prior_logits: torch.Tensor | None, mask: torch.Tensor,
            u: Mapping[str, torch.Tensor] | None, env_step: int,
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits_mix [B,A], beta [B])`` for one act step of ``B`` envs (see the module docstring)."""
        mask = torch.as_tensor(mask, device=logits_wm.device)
        self._check_batch(logits_wm, mask)
        batch, device = logits_wm.shape[0], logits_wm.device
        stateful = batch == self.num_envs
        prior = self._checked_prior(prior_logits, mask, logits_wm)
        signals = self._uncertainty_signals(u, batch, device)

        with torch.no_grad():
            if signals is not None and stateful:
                for normaliser, signal in zip(self.normalisers, signals, strict=True):
                    normaliser.update(signal)
            beta_max_now = self.beta_max_at(env_step)
            is_open, u_comb = None, None
            if not self.cfg.enabled:
                beta = torch.zeros(batch, device=device)
            else:
                if self.cfg.gate == "fixed":
                    beta = torch.full((batch,), beta_max_now, device=device)
                else:
                    if signals is None:
                        raise ValueError("PriorLayer.act: gate 'uncertainty' needs u = {'entropy', "
                                         "'value_var', 'disagreement'}")
                    u_comb = combine_uncertainty(*signals, weights=self.weights, normalisers=self.normalisers)
                    previous = self.gate_open.to(device) if stateful else torch.zeros(batch, dtype=torch.bool,
                                                                                      device=device)
                    is_open = hysteresis_update(previous, u_comb, self.cfg.tau_low, self.cfg.tau_high)
                    beta = hysteresis_beta(u_comb, is_open, beta_max_now, self.cfg.kappa,
                                           self.cfg.tau_low, self.cfg.tau_high)
                keep = beta_dropout_keep(batch, self.cfg.dropout, generator, device)
                beta = beta * keep * (mask > 0)
            beta = beta.to(logits_wm.dtype)

        logits_mix = mix_logits(logits_wm, prior, beta, self.temperature)

        if stateful:
            if is_open is not None:
                self.gate_open = is_open.detach().cpu()
            self.act_calls += 1
            self.last_env_step = int(env_step)
            self._record_act(logits_wm, logits_mix, beta, mask, signals, u_comb)
        return logits_mix, beta

    def _record_act(self, logits_wm, logits_mix, beta, mask, signals, u_comb) -> None:
        acc = self._acc
        with torch.no_grad():
            if u_comb is not None:
                acc["n_gate"] += u_comb.numel()
                acc["u_gate"] += u_comb.double().sum().item()
            beta = beta.detach().double()
            applied = mask > 0
            acc["n_act"] += beta.numel()
            acc["beta_sum"] += beta.sum().item()
            acc["beta_sq"] += (beta * beta).sum().item()
            acc["n_applied"] += applied.sum().item()
            acc["beta_applied_sum"] += beta[applied].sum().item()
            acc["mask_sum"] += applied.double().sum().item()
            if bool(applied.any()):  # how far the policy that acts departs from the base policy
                kl = categorical_kl(logits_mix.detach()[applied].double(), logits_wm.detach()[applied].double())
                acc["kl_act"] += kl.sum().item()
            if self.cfg.gate == "fixed":  # a fixed gate is always open while the prior is on
                acc["open_sum"] += float(beta.numel()) if self.cfg.enabled else 0.0
            else:
                acc["open_sum"] += self.gate_open.double().sum().item()
            acc["entropy_wm"] += categorical_entropy(logits_wm.detach().double()).sum().item()
            acc["entropy_mix"] += categorical_entropy(logits_mix.detach().double()).sum().item()
            if signals is not None:
                acc["n_u"] += beta.numel()
                for key, signal in zip(("u_entropy", "u_value_var", "u_disagreement"), signals, strict=True):
                    acc[key] += torch.nan_to_num(signal.double()).sum().item()

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
                   confidence: torch.Tensor, beta: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Prior term of the actor loss for ``logits_wm [..., A]`` (with grad) and per-row ``[...]`` inputs.

        ``lagrangian``: ``lambda * relu(KL(pi_mix || pi_wm) - delta)``, masked mean, where ``pi_mix``
        uses the stored ``beta`` and is a stop-gradient target (the gradient reaches ``logits_wm`` through
        ``pi_wm`` only); ``prior_reg``:
        ``lambda_kl * mean(mask * confidence * KL(pi_wm || rho))`` with ``rho = softmax(prior / T)``;
        ``bonus`` / ``none`` / disabled: 0. ``kl_mix_wm`` (masked mean) is reported in every mode.
        """
        if logits_wm.shape[-1] != self.num_actions:
            raise ValueError(f"logits_wm last dim must be {self.num_actions}, got {tuple(logits_wm.shape)}")
        if prior_logits.shape != logits_wm.shape:
            raise ValueError(f"prior_logits shape {tuple(prior_logits.shape)} != logits_wm {tuple(logits_wm.shape)}")
        logits, mask, confidence, beta = self._flatten(logits_wm, mask=mask, confidence=confidence, beta=beta)
        prior = self._checked_prior(prior_logits.reshape(-1, self.num_actions), mask, logits)
        if not self.cfg.enabled:
            beta = torch.zeros_like(beta)
        logits_mix = mix_logits(logits, prior, beta.to(logits.dtype), self.temperature)
        mode = self.cfg.kl_mode if self.cfg.enabled else "none"
        if mode == "lagrangian":
            # pi_mix is the target (stop-gradient): with a gradient through both sides the actor can
            # also shrink the KL by turning deterministic (a peaked pi_wm barely moves under a finite
            # tilt), which we measured as an entropy collapse to 0.15 nats within 2k env steps.
            # With sg(pi_mix) the gradient is lambda * (pi_wm - pi_mix): it moves pi_wm towards the tilt.
            kl = categorical_kl(logits_mix.detach(), logits)
            loss = lagrangian_penalty(kl, self.lambda_kl, self.cfg.kl_delta, mask)
            kl_mix_wm = masked_mean(kl.detach(), mask)
        else:
            with torch.no_grad():
                kl_mix_wm = masked_mean(categorical_kl(logits_mix, logits), mask)
            if mode == "prior_reg":
                weight = (mask > 0).to(logits.dtype) * confidence.to(logits.dtype)
                loss = prior_kl_regulariser(logits, prior / self.temperature, weight, self.cfg.lambda_kl)
            else:
                loss = logits.sum() * 0.0
        metrics = {
            "kl_mix_wm": kl_mix_wm.item(),
            "prior_loss": loss.detach().item(),
            "lambda_kl": self.current_lambda(),
            "prior_mask_frac_train": (mask > 0).float().mean().item() if mask.numel() else 0.0,
        }
        if mode == "prior_reg":
            with torch.no_grad():
                metrics["kl_wm_prior"] = masked_mean(categorical_kl(logits, prior / self.temperature), mask).item()
        self._acc["n_loss"] += 1
        self._acc["prior_loss"] += metrics["prior_loss"]
        return loss, metrics

    def advantage_bonus(self, prior_logits: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``beta_bonus * log rho(a) * mask`` per row (``rho = softmax(prior / T)``); 0 unless ``kl_mode == "bonus"``."""
        if prior_logits.shape[-1] != self.num_actions:
            raise ValueError(f"prior_logits last dim must be {self.num_actions}, got {tuple(prior_logits.shape)}")
        lead = prior_logits.shape[:-1]
        prior, actions, mask = self._flatten(prior_logits, actions=actions, mask=mask)
        if not (self.cfg.enabled and self.cfg.kl_mode == "bonus"):
            return torch.zeros(lead, dtype=prior.dtype, device=prior.device)
        prior = self._checked_prior(prior, mask, prior)
        bonus = advantage_bonus(prior / self.temperature, actions, mask, self.cfg.beta_bonus)
        return bonus.reshape(lead)

    def current_lambda(self) -> float:
        """The KL multiplier in use: the dual variable (lagrangian), ``lambda_kl`` (prior_reg), else 0."""
        if not self.cfg.enabled:
            return 0.0
        if self.cfg.kl_mode == "lagrangian":
            return self.lambda_kl
        if self.cfg.kl_mode == "prior_reg":
            return self.cfg.lambda_kl
        return 0.0

    def update_lambda(self, kl_mean: float) -> None:
        """Dual ascent on ``lambda`` with the masked-mean ``KL(pi_mix || pi_wm)`` (lagrangian mode only)."""
        if self.cfg.enabled and self.cfg.kl_mode == "lagrangian":
            self.lambda_kl = dual_ascent(self.lambda_kl, float(kl_mean), self.cfg.kl_delta, self.cfg.kl_eta,
                                         self.cfg.lambda_max)

    def refit_due(self, env_step: int) -> bool:
        """Whether ``temperature_refit_every`` env steps passed since the last refit (align_temperature on)."""
        if not (self.cfg.enabled and self.cfg.align_temperature):
            return False
        if self.last_refit_step is None:
            return True
        return env_step - self.last_refit_step >= self.cfg.temperature_refit_every

    def refit_temperature(self, logits_wm: torch.Tensor, prior_logits: torch.Tensor,
                          mask: torch.Tensor | None = None, env_step: int | None = None) -> float:
        """Refit ``T`` in ``[temperature_min, temperature_max]`` on rows with advice; returns the new ``T``.

        No-op unless ``align_temperature``. Rows with ``mask == 0`` (if a mask is given) and rows whose
        prior is constant (uniform: ``T`` changes nothing there) are ignored; no usable row keeps ``T``.

        A near-uniform policy carries no information about the right scale, and matching the prior to
        it drives ``T`` to ``temperature_max`` (which switches the prior off). So the refit is skipped
        (``T`` kept, counted in ``temperature_refits_skipped``) while the mean policy entropy on the
        rows exceeds ``prior.temperature_fit_max_entropy * log A`` (read with ``getattr``, default 1.0:
        never skipped).
        """
        if not (self.cfg.enabled and self.cfg.align_temperature):
            return self.temperature
        if logits_wm.shape != prior_logits.shape or logits_wm.shape[-1] != self.num_actions:
            raise ValueError(f"refit_temperature: logits_wm {tuple(logits_wm.shape)} and prior_logits "
                             f"{tuple(prior_logits.shape)} must both be [..., {self.num_actions}]")
        logits = logits_wm.detach().reshape(-1, self.num_actions)
        prior = prior_logits.detach().reshape(-1, self.num_actions).to(logits.dtype)
        rows = torch.isfinite(prior).all(-1) & ((prior.amax(-1) - prior.amin(-1)) > 1e-6)
        if mask is not None:
            rows = rows & (torch.as_tensor(mask, device=logits.device).reshape(-1) > 0)
        if env_step is not None:
            self.last_refit_step = int(env_step)
        if rows.sum() == 0:
            return self.temperature
        max_entropy = float(self.cfg.temperature_fit_max_entropy)
        entropy = categorical_entropy(logits[rows].double()).mean().item()
        if max_entropy < 1.0 and entropy > max_entropy * math.log(self.num_actions):
            self.refits_skipped += 1
            return self.temperature
        self.temperature = fit_temperature(logits[rows], prior[rows], self.cfg.temperature_min,
                                           self.cfg.temperature_max, fallback=self.temperature)
        self.refits += 1
        return self.temperature

    # ------------------------------------------------------------------ reporting and state

    def metrics(self) -> dict[str, float]:
        """Means over the act / actor_loss calls since the previous ``metrics()`` call (NaN when none).

        ``u_*`` are the raw signals; ``u_gate`` the EMA-normalised weighted mean the gate thresholds.
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
            "beta_max_now": self.beta_max_at(self.last_env_step),
            "temperature_refits": float(self.refits),
            "temperature_refits_skipped": float(self.refits_skipped),
        }
        self._acc = _zero_acc()
        return out

    def state_dict(self) -> dict:
        return {
            "version": _STATE_VERSION,
            "temperature": self.temperature,
            "lambda_kl": self.lambda_kl,
            "gate_open": self.gate_open.tolist(),
            "normalisers": [n.state_dict() for n in self.normalisers],
            "act_calls": self.act_calls,
            "last_env_step": self.last_env_step,
            "last_refit_step": self.last_refit_step,
            "refits": self.refits,
            "refits_skipped": self.refits_skipped,
            "acc": dict(self._acc),
        }

    def load_state_dict(self, state: dict) -> None:
        self.temperature = float(state["temperature"])
        self.lambda_kl = float(state["lambda_kl"])
        if "version" not in state:  # written by the minimal placeholder layer: only T and lambda
            return
        gate_open = torch.tensor(state["gate_open"], dtype=torch.bool)
        if gate_open.shape != (self.num_envs,):
            raise ValueError(f"PriorLayer.load_state_dict: saved state has {gate_open.numel()} envs, "
                             f"this layer has num_envs={self.num_envs}")
        self.gate_open = gate_open
        for normaliser, saved in zip(self.normalisers, state["normalisers"], strict=True):
            normaliser.load_state_dict(saved)
        self.act_calls = int(state["act_calls"])
        self.last_env_step = int(state["last_env_step"])
        self.last_refit_step = None if state["last_refit_step"] is None else int(state["last_refit_step"])
        self.refits = int(state["refits"])
        self.refits_skipped = int(state.get("refits_skipped", 0))
        self._acc = {**_zero_acc(), **{k: float(v) for k, v in state["acc"].items()}}
