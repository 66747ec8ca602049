"""LoReAgent: the LoRe method composed around a DreamerV3 agent; what the trainer holds.

It owns the DreamerV3 agent (:class:`lore.dreamer.agent.DreamerAgent`), the prior layer (gate, trust, KL
control, temperature: :class:`lore.prior.layer.PriorLayer`), the terms it plugs into DreamerV3
(:mod:`lore.method.terms`) and, in training, the advisor (:class:`lore.method.advisor.LLMBridge`: the LLM
call controller, the feature sandbox, the planner and the distillation monitor). DreamerV3 is reached through
its three doors only: the logits transform of :meth:`DreamerAgent.act`, the actor-loss term and the extra
head; the late-fused features enter as the encoder's input.

The trainer's interface: :meth:`initial_state`, :meth:`begin`, :meth:`explore`, :meth:`empty_fields`,
:meth:`observe`, :meth:`train_step`, :meth:`act` (evaluation), :meth:`eval_features`, :meth:`metrics`,
:meth:`call_counts`,
:meth:`state_dict` / :meth:`load_state_dict` / :meth:`upgrade_state`, :meth:`advisor_state` /
:meth:`load_advisor_state`, :meth:`settle`, :meth:`close`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import gymnasium
import numpy as np
import torch

from lore.dreamer.agent import DreamerAgent
from lore.method.terms import PriorNet, PriorTerm, prior_batch_keys, sanitise_prior
from lore.prior.layer import PriorLayer
from lore.prior.trust import is_failure

Tensor = torch.Tensor

FEATURE_KEYS = {"features": "llm_features", "features_mask": "llm_features_mask"}
"""DreamerV3's late-fusion batch keys and the replay keys that hold them."""


@dataclass
class ActOutput:
    action: Tensor          # [B] int64, sampled from logits_mix
    state: dict             # recurrent state for the next act() call
    logits_wm: Tensor       # [B, A] world-model policy, before any prior
    logits_mix: Tensor      # [B, A] after the prior layer
    beta: Tensor            # [B]
    u_entropy: Tensor       # [B]
    u_value_var: Tensor     # [B]
    action_changed: Tensor  # [B] bool: a_mix != a_wm under the same Gumbel noise
    latent: Tensor          # [B, D] posterior features (planner / PriorNet input)


@dataclass
class Collected:
    """One training act step: the actions to execute, the next state, the per-env replay fields of the step
    and the act-time metrics."""

    actions: np.ndarray
    state: dict
    fields: dict[str, np.ndarray]
    metrics: dict[str, float]


class _Aliased(Mapping):
    """A batch read with DreamerV3's feature keys mapped to the replay's."""

    def __init__(self, batch):
        self.batch = batch

    def __getitem__(self, key):
        return self.batch[FEATURE_KEYS.get(key, key)]

    def __iter__(self):
        return iter(self.batch.keys())

    def __len__(self):
        return len(self.batch.keys())


class LoReAgent:
    def __init__(self, obs_space: gymnasium.spaces.Dict, num_actions: int, cfg, device="cpu", *,
                 envs=None, run_dir: Path | None = None):
        """The agent; with ``envs`` (and ``run_dir``), also the advisor that asks the LLM about them."""
        self.cfg = cfg
        self.num_actions = num_actions
        self.prior = PriorLayer(cfg.prior, num_actions, num_envs=cfg.env.num_envs)
        m = cfg.model
        head = ((lambda feat: PriorNet(feat, m.units, m.layers, num_actions, cfg.distill.loss_scale))
                if cfg.distill.enabled else None)
        self.dreamer = DreamerAgent(obs_space, num_actions, cfg, device, batch_keys=prior_batch_keys(num_actions),
                                    actor_term=PriorTerm(self.prior, self._score_advice), head=head)
        self.device = self.dreamer.device
        self.prior.seed_draws(cfg.seed, self.device)
        self.advisor = None
        self._last: tuple | None = None
        if envs is not None:
            from lore.method.advisor import LLMBridge

            self.advisor = LLMBridge(cfg, run_dir, envs, self)

    @property
    def generator(self) -> torch.Generator:
        return self.dreamer.generator

    @property
    def method_generator(self) -> torch.Generator:
        """The method's own draws (the prior layer's generator): never DreamerV3's stream."""
        return self.prior.generator

    def seed_eval_draws(self, seed: int) -> None:
        """Seed the method's draws of one evaluation (act calls of another batch size than training's)."""
        self.prior.seed_side_draws(seed)

    @property
    def prior_net(self) -> PriorNet | None:
        return getattr(self.dreamer.wm, PriorNet.name, None)

    # ------------------------------------------------------------------ acting

    def initial_state(self, batch_size: int) -> dict[str, Tensor]:
        return self.dreamer.initial_state(batch_size)

    def set_action(self, state: dict[str, Tensor], action: Tensor) -> dict[str, Tensor]:
        return self.dreamer.set_action(state, action)

    def _llm_act_inputs(self, llm: Mapping | None, batch: int) -> dict[str, Tensor]:
        llm = dict(llm or {})
        a, n_feat, device = self.num_actions, self.cfg.features.n_features, self.device

        def take(key, shape):
            value = llm.get(key)
            if value is None:
                return torch.zeros(shape, device=device)
            value = torch.as_tensor(value, device=device).float()
            if tuple(value.shape) != shape:
                raise ValueError(f"llm['{key}'] has shape {tuple(value.shape)}, expected {shape}")
            return value

        out = {
            "prior_logits": take("prior_logits", (batch, a)),
            "mask": take("mask", (batch,)),
            "confidence": take("confidence", (batch,)),
            "features": take("features", (batch, n_feat)),
            "features_mask": take("features_mask", (batch,)),
        }
        out["prior_logits"] = sanitise_prior(out["prior_logits"], out["mask"])
        out["source"] = take("source", (batch,))
        return out

    @torch.no_grad()
    def act(self, obs: Mapping[str, Tensor], is_first: Tensor, state: dict[str, Tensor],
            llm: Mapping | None = None, env_step: int = 0, sample: bool = True,
            consult: Callable[[Tensor | None], Mapping | None] | None = None) -> ActOutput:
        """One act step with the prior mixed into the actor's logits. ``llm``: the advice and features of each
        env (``prior_logits``, ``mask``, ``confidence``, ``source``, ``features``, ``features_mask``).
        ``consult(u [B] or None)``, when given, is called once the policy has seen this step's observation and
        before the prior is mixed in: it may ask the LLM about the state being acted in and returns fresh
        ``llm`` entries (``prior_logits``, ``mask``, ``confidence``, ``source``) or None."""
        self.dreamer.env_step = int(env_step)
        batch = torch.as_tensor(is_first).reshape(-1).shape[0]
        llm_in = self._llm_act_inputs(llm, batch)
        mixed: dict[str, Tensor] = {}

        def transform(step) -> Tensor:
            nonlocal llm_in
            u = {"entropy": step.entropy, "value_var": step.value_var}
            if consult is not None:
                if batch == self.prior.num_envs:  # the control draw decides whether this episode may ask at all
                    self.prior.draw_control_episodes(step.is_first)
                fresh = consult(self.prior.preview_u(u, batch))
                if fresh:
                    llm_in = self._llm_act_inputs({**dict(llm or {}), **fresh}, batch)
            logits_mix, mixed["beta"] = self.prior.act(
                step.logits, llm_in["prior_logits"], llm_in["mask"], u, env_step,
                source=llm_in["source"], is_first=step.is_first, control_drawn=consult is not None,
                advice_filter=self._advice_filter(step, llm_in))
            return logits_mix

        out = self.dreamer.act(obs, is_first, state, (llm_in["features"], llm_in["features_mask"]), sample,
                               transform)
        step = out.step
        return ActOutput(action=out.action, state=out.state, logits_wm=step.logits, logits_mix=out.logits,
                         beta=mixed["beta"], u_entropy=step.entropy, u_value_var=step.value_var,
                         action_changed=out.action_changed, latent=step.latent)

    def _advice_filter(self, step, llm_in: Mapping[str, Tensor]) -> Tensor | None:
        """The critic filter's multiplier of beta [B] at this act step (``prior.filter``), else None."""
        prior = self.prior
        if not (prior.cfg.enabled and prior.cfg.filter):
            return None
        rows = llm_in["mask"] > 0
        q = None
        if bool(rows.any()):
            generator = prior.generator if rows.shape[0] == prior.num_envs else prior.side_generator
            start = {k: v[rows] for k, v in step.posterior.items()}
            q = self.advice_q_values(start, self.cfg.prior.advice_samples, generator)
            q = q / float(self.dreamer.retnorm.scale())
        return prior.filter_advice(q, llm_in["prior_logits"], step.logits, rows)

    # ------------------------------------------------------------------ the training loop's side

    def begin(self, is_first: np.ndarray) -> None:
        """The training envs start their episodes."""
        self.advisor.on_reset(is_first)

    def explore(self, obs: dict[str, Tensor], is_first: Tensor, state: dict[str, Tensor], env_step: int,
                prefill: bool) -> Collected:
        """One training act step of every env: the advisor's inputs, the act (uniform-random actions in
        ``prefill``), planning, and the fields the replay stores with the step."""
        advisor, n = self.advisor, self.cfg.env.num_envs
        llm_in = advisor.inputs(env_step)
        llm_t = {k: torch.as_tensor(v, device=self.device) for k, v in llm_in.items()}
        out = self.act(obs, is_first, state, llm_t, env_step, sample=True, consult=advisor.consult(env_step, prefill))
        metrics = {}
        if prefill:
            actions = np.random.randint(0, self.num_actions, size=n)
            beta = np.zeros(n, dtype=np.float32)
        else:
            actions = advisor.maybe_plan(env_step, out, out.action.cpu().numpy())
            beta = out.beta.float().cpu().numpy()
            metrics = {"llm_action_changed_frac": out.action_changed.float().mean().item(),
                       "llm_prior_applied_frac": float(np.mean(llm_in["mask"]))}
        state = self.set_action(out.state, torch.as_tensor(actions, device=self.device))
        fields = {"llm_beta": beta, **{f"llm_{k}": v for k, v in llm_in.items()}}
        advisor.after_act(env_step, out, actions, beta, prefill)
        self._last = (out, llm_in, prefill)
        return Collected(actions=actions, state=state, fields=fields, metrics=metrics)

    def empty_fields(self) -> dict:
        """The replay fields of a row no act step produced (an episode's last observation)."""
        return {"llm_beta": np.float32(0.0), **self.advisor.empty_llm_row()}

    def observe(self, env_step: int, actions: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
                done: np.ndarray, ended: list[tuple[int, float]]) -> dict[int, dict[str, float]]:
        """The envs stepped (``ended``: (env, return) of the episodes that ended): evidence for the trust and
        the controller -> per ended env, what its episode was (for ``episodes.csv``: ``failed``, 1 when it ended
        in failure, :func:`lore.prior.trust.is_failure`; ``control`` with the prior)."""
        out, llm_in, prefill = self._last
        if not prefill:
            failed = torch.as_tensor([is_failure(terminated[i], reward[i]) for i in range(len(actions))])
            self.prior.observe_steps(out.action_changed, torch.as_tensor(llm_in["source"]), failed)
        records = {}
        for i, episode_return in ended:
            records[i] = self.prior.episode_record(i) if self.prior.cfg.enabled else {}
            records[i]["failed"] = float(is_failure(terminated[i], reward[i]))
            if env_step > self.cfg.train.prefill:  # prefill episodes act at random
                self.prior.observe_episode(i, episode_return, is_failure(terminated[i], reward[i]))
        self.advisor.on_env_step(env_step, actions, reward, done)
        return records

    def train_step(self, batch) -> dict[str, float]:
        """One DreamerV3 update with the prior's terms -> flat metrics."""
        metrics = self.dreamer.train_step(_Aliased(batch))
        # the prior layer reports the act-time KL (advised states) as kl_mix_wm; this one is measured on
        # replay states and is what the Lagrangian's dual ascent sees
        if "kl_mix_wm" in metrics:
            metrics["kl_mix_wm_train"] = metrics.pop("kl_mix_wm")
        return metrics

    def eval_features(self, envs: list) -> dict[str, np.ndarray] | None:
        """The late-fused features of the eval envs (the adopted feature program; no prior)."""
        return self.advisor.eval_inputs(envs)

    # ------------------------------------------------------------------ the prior's reads of the world model

    @torch.no_grad()
    def advice_q_values(self, start: dict[str, Tensor], samples: int = 1,
                        generator: torch.Generator | None = None) -> Tensor:
        """One-step values ``Q(s, a) = r(s') + gamma * c(s') * V_k(s')`` of every action: states [M] -> [M, D, A].

        ``samples`` imagined prior steps per (state, action) pair, each scored by every critic head
        ``k``: ``D = samples * heads`` draws whose spread is the estimate's own uncertainty. The samples share
        the step's deterministic half and differ in their latent draws, drawn from ``generator`` (default: the
        method's training stream).
        """
        wm, critic = self.dreamer.wm, self.dreamer.critic
        m, a = start["deter"].shape[0], self.num_actions
        state = {k: v.repeat_interleave(a, 0) for k, v in start.items()}  # [M*A, ...], actions vary fastest
        actions = torch.eye(a, device=self.device).repeat(m, 1)
        deter, logits = wm.rssm.img_deter(state, actions)  # [M*A, D], [M*A, S, C]
        draws = []
        for _ in range(samples):
            nxt = {"deter": deter, "stoch": wm.rssm.sample(logits, generator or self.method_generator)}
            feat = wm.rssm.features(nxt)
            q = wm.reward(feat) + self.cfg.dreamer.gamma * wm.continue_prob(feat) * critic.values(feat)
            draws.append(q.reshape(-1, m, a))  # [heads, M, A]
        return torch.cat(draws, 0).permute(1, 0, 2)

    def _score_advice(self, start: dict[str, Tensor], prior_logits: Tensor, mask: Tensor, codes: Tensor,
                      scale: float) -> dict[str, float]:
        """Score up to ``prior.trust_states`` advised start states and feed the prior layer's trust and T."""
        rows = torch.nonzero(mask > 0).flatten()
        if rows.numel() == 0:
            return {}
        limit = int(self.cfg.prior.trust_states)
        if rows.numel() > limit:
            gen = self.method_generator
            pick = torch.randperm(rows.numel(), generator=gen, device=gen.device)[:limit]
            rows = rows[pick.to(rows.device)]
        q = self.advice_q_values({k: v[rows] for k, v in start.items()}, self.cfg.prior.advice_samples)
        return self.prior.observe_advice_values(q / float(scale), prior_logits[rows], codes[rows])

    def prior_net_logits(self, latent: Tensor) -> Tensor:
        """PriorNet's action log-probs [B, A] for posterior features [B, D] (distill must be enabled)."""
        if self.prior_net is None:
            raise RuntimeError("prior_net_logits: the PriorNet exists only with distill.enabled = true")
        with torch.no_grad():
            return torch.log_softmax(self.prior_net(latent.to(self.device)), -1)

    def plan_callables(self) -> dict:
        """``{step, reward, cont, value}`` on latents [N, D] for :mod:`lore.plan` (no gradient).

        ``step(latent, action_onehot [N, A])`` is one prior step with a sampled ``stoch`` (drawn from
        the method's generator); ``reward`` is the reward of the transition into the latent, ``cont``
        its continue probability, ``value`` the critic's value (the mean of its heads).
        """
        wm, critic, deter_dim = self.dreamer.wm, self.dreamer.critic, self.cfg.model.deter
        rssm = wm.rssm

        @torch.no_grad()
        def step(latent: Tensor, action: Tensor) -> Tensor:
            state = {"deter": latent[:, :deter_dim],
                     "stoch": latent[:, deter_dim:].reshape(-1, rssm.stoch_dim, rssm.classes)}
            nxt, _ = rssm.img_step(state, action.to(latent.dtype), self.method_generator)
            return rssm.features(nxt)

        return {"step": step, "reward": torch.no_grad()(wm.reward), "cont": torch.no_grad()(wm.continue_prob),
                "value": torch.no_grad()(lambda latent: critic.values(latent).mean(0))}

    # ------------------------------------------------------------------ reporting and state

    def metrics(self) -> dict[str, float]:
        """The prior layer's means since the previous call, then the advisor's counters."""
        return {**self.prior.metrics(), **(self.advisor.metrics() if self.advisor is not None else {})}

    def call_counts(self) -> dict[str, float]:
        """The advisor's ``llm_calls*`` counters (for a run's summary)."""
        return {k: v for k, v in self.advisor.metrics().items() if k.startswith("llm_calls")}

    def prior_state(self) -> dict:
        return self.prior.state_dict()

    def load_prior_state(self, state: dict) -> None:
        self.prior.load_state_dict(state)

    def state_dict(self) -> dict:
        """DreamerV3's state with the prior layer's under ``prior``."""
        state = self.dreamer.state_dict()
        return {**{k: v for k, v in state.items() if k not in ("generator", "nonfinite_skips", "train_steps",
                                                                "env_step")},
                "prior": self.prior.state_dict(),
                **{k: state[k] for k in ("generator", "nonfinite_skips", "train_steps", "env_step")}}

    def upgrade_state(self, state: Mapping) -> dict:
        """A saved :meth:`state_dict` as this release reads it (:meth:`DreamerAgent.upgrade_state`)."""
        return self.dreamer.upgrade_state(state)

    def load_state_dict(self, state: Mapping) -> None:
        if "prior" not in state:
            raise KeyError("agent checkpoint lacks ['prior']")
        self.dreamer.load_state_dict({k: v for k, v in state.items() if k != "prior"})
        self.prior.load_state_dict(state["prior"])

    def advisor_state(self) -> dict:
        return self.advisor.state_dict()

    def load_advisor_state(self, state: dict, envs) -> None:
        """The advisor's saved state, asking about ``envs`` (the restored training envs)."""
        self.advisor.envs = envs
        self.advisor.load_state_dict(state)

    def settle(self) -> None:
        """End of the run: LLM calls still in flight are applied or recorded (before the final metrics)."""
        self.advisor.settle()

    def close(self) -> None:
        self.advisor.close()

    def parameters(self):
        """All trainable parameters (world model, actor, critic)."""
        return self.dreamer.parameters()
