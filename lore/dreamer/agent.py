"""DreamerAgent: DreamerV3 world model + actor-critic + LoRe's prior layer (contract: docs/CONTRACTS.md).

Replay conventions (one row per env step t): ``obs.<name>`` is obs t, ``reward[t]`` the reward
received on arriving at obs t (0 at an episode's first step), ``is_terminal[t]`` whether obs t is a
true termination (not a time limit), and ``action[t]`` the action taken *after* observing obs t.
The RSSM therefore consumes ``action[t-1]`` with obs t; the reward and continue heads read the
posterior at t.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import gymnasium
import torch
import torch.nn.functional as F

from lore.dreamer.behavior import (
    Actor,
    Critic,
    bootstrap_head_mask,
    critic_losses,
    critic_losses_on_rows,
    ema_update_,
    imagination_weights,
    make_slow_copy,
    own_rows,
    reinforce_loss,
)
from lore.dreamer.math import (
    ReturnNormalizer,
    build_loss_scales,
    categorical_entropy,
    check_scales_used,
    combine_losses,
    ema_percentiles,
    gumbel_noise,
    lambda_returns,
    return_scale,
    twohot_decode,
)
from lore.dreamer.networks import MLP, CNNDecoder, CNNEncoder, EnsembleMLP, compile_in_place
from lore.dreamer.rssm import LayerNormGRUCell
from lore.dreamer.world_model import WorldModel
from lore.prior.layer import PriorLayer

Tensor = torch.Tensor

WM_LOSSES = ("decoder", "reward", "continue", "dyn", "rep", "ensemble", "prior_net")
ACTOR_LOSSES = ("actor", "prior")
COMPILED_NETWORKS = (MLP, CNNEncoder, CNNDecoder, EnsembleMLP, LayerNormGRUCell)
"""What ``train.compile: networks`` compiles: the networks, not the Python loops (observe, imagine) that call them."""
COMPILE_GRAPH_LIMIT = 64
CRITIC_LOSSES = ("critic", "slow_reg")


@dataclass
class ActOutput:
    action: Tensor          # [B] int64, sampled from logits_mix
    state: dict             # recurrent state for the next act() call
    logits_wm: Tensor       # [B, A] world-model policy, before any prior
    logits_mix: Tensor      # [B, A] after the prior layer
    beta: Tensor            # [B]
    u_entropy: Tensor       # [B]
    u_value_var: Tensor     # [B]
    u_disagreement: Tensor  # [B]
    action_changed: Tensor  # [B] bool: a_mix != a_wm under the same Gumbel noise
    latent: Tensor          # [B, D] posterior features (planner / PriorNet input)


def compile_options(device: torch.device) -> dict:
    """``torch.compile`` settings of ``train.compile: update``: whole functions, no graph break, fixed shapes;
    on CUDA the graphs are captured and replayed (``reduce-overhead``)."""
    return {"fullgraph": True, "dynamic": False, "mode": "reduce-overhead" if device.type == "cuda" else None}


def read_scalars(tensors: Mapping[str, Tensor]) -> dict[str, float]:
    """0-dim tensors -> floats in one device-to-host read (NaN as ``math.nan``)."""
    values = torch.stack([v.detach().float() for v in tensors.values()]).tolist()
    return {k: v if v == v else math.nan for k, v in zip(tensors, values, strict=True)}


def gumbel_argmax_pair(logits_a: Tensor, logits_b: Tensor, generator: torch.Generator | None,
                       sample: bool = True) -> tuple[Tensor, Tensor]:
    """Actions [B] from two logit sets with the SAME Gumbel noise (argmax when ``sample`` is False)."""
    if not sample:
        return logits_a.argmax(-1), logits_b.argmax(-1)
    noise = gumbel_noise(logits_a.shape, generator, logits_a.device, logits_a.dtype)
    return (logits_a + noise).argmax(-1), (logits_b + noise).argmax(-1)


def _get(batch, key: str):
    try:
        return batch[key]
    except KeyError:
        return None


class DreamerAgent:
    def __init__(self, obs_space: gymnasium.spaces.Dict, num_actions: int, cfg, device="cpu"):
        if num_actions < 2:
            raise ValueError(f"num_actions must be >= 2, got {num_actions}")
        for name in ("deter", "stoch", "classes", "units", "layers", "bins", "value_heads", "ensemble"):
            if getattr(cfg.model, name) is None:
                raise ValueError(f"cfg.model.{name} is None: resolve the preset first (lore.presets.resolve_model)")
        self.cfg = cfg
        self.device = torch.device(device)
        self.num_actions = num_actions
        self.obs_keys = sorted(obs_space.spaces)
        d, m = cfg.dreamer, cfg.model

        self.wm = WorldModel(obs_space, num_actions, cfg).to(self.device)
        feat = self.wm.feat_dim
        self.actor = Actor(feat, num_actions, m.units, m.layers, d.unimix).to(self.device)
        self.critic = Critic(feat, m.value_heads, m.units, m.layers, self.wm.bins).to(self.device)
        self.slow_critic = make_slow_copy(self.critic)
        self.prior = PriorLayer(cfg.prior, num_actions, num_envs=cfg.env.num_envs)
        self.retnorm = ReturnNormalizer(d.retnorm_decay, d.retnorm_low, d.retnorm_high, device=self.device)
        self.loss_scales = build_loss_scales(cfg)
        expected = [k for k in WM_LOSSES if k != "prior_net" or cfg.distill.enabled]
        check_scales_used(self.loss_scales, [*expected, *ACTOR_LOSSES, *CRITIC_LOSSES])
        unscaled = sorted(set(expected) - set(self.loss_scales))
        if unscaled:
            raise KeyError(f"losses {unscaled} have no entry in LOSS_SCALES")

        # the compiled update steps with fused Adam (one kernel for all parameters; the same maths up to
        # rounding); eager keeps torch's default, so that its runs stay bit-identical to the recorded ones
        adam = {"fused": True} if cfg.train.compile == "update" else {}
        self.wm_opt = torch.optim.Adam(self.wm.parameters(), lr=d.wm_lr, eps=d.wm_eps, **adam)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=d.ac_lr, eps=d.ac_eps, **adam)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=d.ac_lr, eps=d.ac_eps, **adam)

        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(cfg.seed))
        # the gate reads the policy entropy alone: the disagreement ensemble is neither trained nor queried
        # (its signal is NaN, its loss 0, its metrics NaN)
        self.reads_disagreement = False
        self.wm.train_ensemble = self.reads_disagreement
        self.autocast_dtype = torch.bfloat16 if cfg.train.precision == "bfloat16" else None
        mode = cfg.train.compile
        # bootstrapped heads with separate weights (EnsembleMLP) can each run on their own rows; the compiled
        # update reads no data-dependent shape, so there every head runs on every row (0-weighted where not its own)
        self._critic_on_rows = d.value_bootstrap < 1.0 and mode != "update"
        self.compiled: list[str] = []
        self._wm_losses_fn, self._behaviour_fn, self._act_fn = self._world_model_losses, self._behaviour, self._act_core
        if mode == "networks":
            # one code object (MLP.forward) serves many heads, each with its own shapes and grad modes:
            # dynamo's default of 8 graphs per code object would silently fall back to eager
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, COMPILE_GRAPH_LIMIT)
            for root in (self.wm, self.actor, self.critic, self.slow_critic):
                self.compiled += compile_in_place(root, COMPILED_NETWORKS)
        elif mode == "update":
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, COMPILE_GRAPH_LIMIT)
            options = compile_options(self.device)
            self._wm_losses_fn = torch.compile(self._world_model_losses, **options)
            self._behaviour_fn = torch.compile(self._behaviour, **options)
            self._act_fn = torch.compile(self._act_core, **options)
            self.compiled = ["world_model_losses", "behaviour", "act"]
        self.nonfinite_skips = 0
        self.train_steps = 0
        self.env_step = 0
        self._scales_checked = False

    # ------------------------------------------------------------------ acting

    def initial_state(self, batch_size: int) -> dict[str, Tensor]:
        with torch.no_grad():
            state = self.wm.rssm.initial_state(batch_size)
        return {"deter": state["deter"].clone(), "stoch": state["stoch"].clone(),
                "prev_action": torch.zeros(batch_size, self.num_actions, device=self.device)}

    def set_action(self, state: dict[str, Tensor], action: Tensor) -> dict[str, Tensor]:
        """The state with ``prev_action`` replaced by the action actually executed (e.g. a planner's)."""
        return {**state, "prev_action": F.one_hot(action.long().to(self.device), self.num_actions).float()}

    def _llm_act_inputs(self, llm: Mapping | None, batch: int) -> dict[str, Tensor]:
        llm = dict(llm or {})
        a, n_feat = self.num_actions, self.cfg.features.n_features

        def take(key, shape):
            value = llm.get(key)
            if value is None:
                return torch.zeros(shape, device=self.device)
            value = torch.as_tensor(value, device=self.device).float()
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
        out["prior_logits"] = _sanitise_prior(out["prior_logits"], out["mask"])
        out["source"] = take("source", (batch,))
        return out

    @torch.no_grad()
    def act(self, obs: Mapping[str, Tensor], is_first: Tensor, state: dict[str, Tensor],
            llm: Mapping | None = None, env_step: int = 0, sample: bool = True,
            consult: Callable[[Tensor | None], Mapping | None] | None = None) -> ActOutput:
        """One act step. ``consult(u [B] or None)``, when given, is called once the policy has seen this step's
        observation and before the prior is mixed in: it may ask the LLM about the state being acted in and
        returns fresh ``llm`` entries (``prior_logits``, ``mask``, ``confidence``, ``source``) or None."""
        self.env_step = int(env_step)
        is_first = torch.as_tensor(is_first, device=self.device).bool().reshape(-1)
        batch = is_first.shape[0]
        obs = {k: torch.as_tensor(obs[k], device=self.device) for k in self._check_obs_keys(obs)}
        llm_in = self._llm_act_inputs(llm, batch)
        m = self.cfg.model
        noise = gumbel_noise((batch, m.stoch, m.classes), self.generator, self.device)
        deter, stoch, latent, logits_wm, entropy, value_var = self._act_fn(
            obs, llm_in["features"], llm_in["features_mask"], state["deter"], state["stoch"], state["prev_action"],
            is_first, noise)
        post = {"deter": deter.clone(), "stoch": stoch.clone()}  # the next step's input outlives a graph replay
        u = {
            "entropy": entropy,
            "value_var": value_var,
            "disagreement": (self.wm.expected_disagreement(latent, logits_wm.exp()) if self.reads_disagreement
                             else torch.full((latent.shape[0],), math.nan, device=latent.device)),
        }
        if consult is not None:
            if batch == self.prior.num_envs:  # the control draw decides whether this episode may ask at all
                self.prior.draw_control_episodes(is_first, self.generator)
            fresh = consult(self.prior.preview_u(u, batch))
            if fresh:
                llm_in = self._llm_act_inputs({**dict(llm or {}), **fresh}, batch)
        logits_mix, beta = self.prior.act(logits_wm, llm_in["prior_logits"], llm_in["mask"], u,
                                          self.env_step, generator=self.generator, source=llm_in["source"],
                                          is_first=is_first, control_drawn=consult is not None)
        action, action_wm = gumbel_argmax_pair(logits_mix, logits_wm, self.generator, sample)
        new_state = {"deter": post["deter"], "stoch": post["stoch"],
                     "prev_action": F.one_hot(action, self.num_actions).float()}
        return ActOutput(action=action, state=new_state, logits_wm=logits_wm, logits_mix=logits_mix,
                         beta=beta, u_entropy=u["entropy"], u_value_var=u["value_var"],
                         u_disagreement=u["disagreement"], action_changed=action != action_wm, latent=latent)

    def _act_core(self, obs: dict[str, Tensor], features: Tensor, features_mask: Tensor, deter: Tensor,
                  stoch: Tensor, prev_action: Tensor, is_first: Tensor, noise: Tensor) -> tuple[Tensor, ...]:
        """The policy forward of one act step -> (posterior deter [B, D], stoch [B, S, C], latent [B, F],
        logits_wm [B, A], entropy [B], value variance over the critic heads [B]); reads nothing back to the host."""
        embed = self.wm.embed(obs, features, features_mask)
        post, _, _ = self.wm.rssm.obs_step({"deter": deter, "stoch": stoch}, prev_action, embed, is_first,
                                           noise=noise)
        latent = self.wm.rssm.features(post)
        logits_wm = self.actor(latent)
        return (post["deter"], post["stoch"], latent, logits_wm, categorical_entropy(logits_wm),
                self.critic.values(latent).var(0, unbiased=False))

    def prior_net_logits(self, latent: Tensor) -> Tensor:
        """PriorNet's action log-probs [B, A] for posterior features [B, D] (distill must be enabled)."""
        if self.wm.prior_net is None:
            raise RuntimeError("prior_net_logits: the PriorNet exists only with distill.enabled = true")
        with torch.no_grad():
            return torch.log_softmax(self.wm.prior_net(latent.to(self.device)), -1)

    def plan_callables(self) -> dict:
        """``{step, reward, cont, value}`` on latents [N, D] for :mod:`lore.plan` (no gradient).

        ``step(latent, action_onehot [N, A])`` is one prior step with a sampled ``stoch`` (drawn from
        the agent's generator); ``reward`` is the reward of the transition into the latent, ``cont``
        its continue probability, ``value`` the critic's value (the mean of its heads).
        """
        rssm, deter_dim = self.wm.rssm, self.cfg.model.deter

        @torch.no_grad()
        def step(latent: Tensor, action: Tensor) -> Tensor:
            state = {"deter": latent[:, :deter_dim],
                     "stoch": latent[:, deter_dim:].reshape(-1, rssm.stoch_dim, rssm.classes)}
            nxt, _ = rssm.img_step(state, action.to(latent.dtype), self.generator)
            return rssm.features(nxt)

        @torch.no_grad()
        def reward(latent: Tensor) -> Tensor:
            return self.wm.reward(latent)

        @torch.no_grad()
        def cont(latent: Tensor) -> Tensor:
            return self.wm.continue_prob(latent)

        @torch.no_grad()
        def value(latent: Tensor) -> Tensor:
            return self.critic.values(latent).mean(0)

        return {"step": step, "reward": reward, "cont": cont, "value": value}

    def _check_obs_keys(self, obs: Mapping) -> list[str]:
        missing = [k for k in self.obs_keys if k not in obs]
        if missing:
            raise KeyError(f"observation key(s) {missing} missing (got {sorted(obs)})")
        return self.obs_keys

    # ------------------------------------------------------------------ training

    def _prepare_batch(self, batch) -> dict:
        """Replay batch [B, T] (TensorDict or mapping with the replay keys) -> tensors on device."""
        def need(key):
            value = _get(batch, key)
            if value is None:
                raise KeyError(f"train batch lacks required key '{key}'")
            return value.to(self.device)

        def need_obs(name):
            value = _get(batch, f"obs.{name}")
            if value is None:  # also accept a nested layout: batch["obs"][name] / key ("obs", name)
                nested = _get(batch, "obs")
                value = _get(nested, name) if nested is not None else None
            if value is None:
                raise KeyError(f"train batch lacks required key 'obs.{name}'")
            return value.to(self.device)

        data = {"obs": {k: need_obs(k) for k in self.obs_keys}}
        for key in ("action", "reward", "is_first", "is_terminal"):
            data[key] = need(key)
        if data["action"].dim() != 2:
            raise ValueError(f"batch['action'] must be [B, T] integer actions, got shape {tuple(data['action'].shape)}")
        b, t = data["action"].shape
        if t < 2:
            raise ValueError(f"train batch needs at least 2 time steps, got T={t}")
        bad = int(data["action"].min()), int(data["action"].max())
        if bad[0] < 0 or bad[1] >= self.num_actions:
            raise ValueError(f"batch['action'] values {bad} outside [0, {self.num_actions})")
        defaults = {
            "llm_prior_logits": (b, t, self.num_actions), "llm_mask": (b, t), "llm_confidence": (b, t),
            "llm_beta": (b, t), "llm_features": (b, t, self.cfg.features.n_features), "llm_features_mask": (b, t),
            "llm_source": (b, t),
        }
        for key, shape in defaults.items():
            value = _get(batch, key)
            data[key] = torch.zeros(shape, device=self.device) if value is None else value.to(self.device).float()
        data["llm_prior_logits"] = _sanitise_prior(data["llm_prior_logits"], data["llm_mask"])
        return data

    def _autocast(self):
        """bf16 autocast of an update's forward pass where ``train.precision`` asks for it."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _optimise(self, groups: list[tuple[torch.optim.Optimizer, Tensor, list, float]]) -> list[float]:
        """One backward of the finite losses, then per ``(optimiser, loss, params, clip)`` group: clip and step,
        or skip the step (and count it) when its loss or gradients are not finite -> gradient norms."""
        for opt, *_ in groups:
            opt.zero_grad(set_to_none=True)
        finite = [bool(torch.isfinite(loss)) for _, loss, _, _ in groups]
        kept = [loss for (_, loss, _, _), ok in zip(groups, finite, strict=True) if ok]
        if kept:
            sum(kept).backward()
        norms = []
        for (opt, _, params, clip), ok in zip(groups, finite, strict=True):
            if not ok:
                self.nonfinite_skips += 1
                norms.append(math.nan)
                continue
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
            if not bool(torch.isfinite(norm)):
                opt.zero_grad(set_to_none=True)
                self.nonfinite_skips += 1
            else:
                opt.step()
            norms.append(float(norm))
        return norms

    def _imagination_starts(self, b: int, t: int) -> int:
        """How many start states imagination uses for a [B, T] batch (all, or the last ``imag_last`` of each row)."""
        imag_last = int(self.cfg.dreamer.imag_last)
        if imag_last < 0:
            raise ValueError(f"dreamer.imag_last must be >= 0 (0 = all steps), got {imag_last}")
        return b * (imag_last if 0 < imag_last < t else t)

    def _update_noise(self, b: int, t: int, observe: bool = True) -> dict[str, Tensor]:
        """Every random draw of one update from the agent's generator, in the order the update uses them.

        ``obs`` [B, T, S, C]: the posterior samples' Gumbel noise; per imagination step k the action's
        ``actor[k]`` [N, A], then the latent's ``stoch[k]`` [N, S, C]; ``heads`` [K, N]: the bootstrap
        weights of the critic heads (:func:`bootstrap_head_mask`; no draw when every head sees every state).
        """
        d, m, g, dev = self.cfg.dreamer, self.cfg.model, self.generator, self.device
        n = self._imagination_starts(b, t)
        noise = {"obs": gumbel_noise((b, t, m.stoch, m.classes), g, dev)} if observe else {}
        actor, stoch = [], []
        for _ in range(d.horizon):
            actor.append(gumbel_noise((n, self.num_actions), g, dev))
            stoch.append(gumbel_noise((n, m.stoch, m.classes), g, dev))
        noise.update(actor=torch.stack(actor), stoch=torch.stack(stoch))
        noise["heads"] = bootstrap_head_mask(self.critic.net.members, n, d.value_bootstrap, g, dev)
        return noise

    def _world_model_losses(self, data: dict, noise: Tensor) -> tuple[Tensor, dict, dict, dict]:
        """(scaled total, losses, detached posterior ``deter``/``stoch``, metrics) of one batch; reads nothing
        back to the host (the part ``train.compile: update`` compiles)."""
        with self._autocast():
            losses, post, metrics = self.wm.loss(data, noise=noise)
        total = combine_losses(losses, self.loss_scales)
        return total, losses, {"deter": post["deter"].detach(), "stoch": post["stoch"].detach()}, metrics

    def _behaviour(self, post: dict[str, Tensor], data: dict, noise: dict[str, Tensor],
                   prior_in: dict[str, Tensor], moments: tuple[Tensor, Tensor]) -> tuple[dict, dict, dict, dict]:
        """Imagine from every posterior state and build the actor and critic losses; reads nothing back to the host.

        ``noise`` from :meth:`_update_noise`, ``prior_in`` from :meth:`PriorLayer.loss_inputs`, ``moments`` the
        return normaliser's (low, high). Returns (actor losses, critic losses, metric tensors, side outputs:
        the new moments, the imagination internals and the advised start states). No gradient reaches the
        world model: starts are detached and the dynamics and reward/continue heads run without grad.
        """
        d = self.cfg.dreamer
        n = noise["actor"].shape[1]
        if n < post["deter"].shape[0] * post["deter"].shape[1]:  # imag_last: the last steps of each sequence
            last = n // post["deter"].shape[0]
            post = {k: post[k][:, -last:] for k in ("deter", "stoch")}
            data = {**data, **{k: data[k][:, -last:] for k in
                               ("is_terminal", "llm_prior_logits", "llm_mask", "llm_confidence", "llm_beta",
                                "llm_source")}}
        start = {"deter": post["deter"].reshape(n, -1).detach(),
                 "stoch": post["stoch"].reshape(n, *post["stoch"].shape[2:]).detach()}
        view = self.wm.one_hot  # imagined stoch is one-hot: first layers add the selected rows
        actor_logits: list[Tensor] = []

        def policy(feat: Tensor, step: int) -> Tensor:
            logits = self.actor(view(feat))
            actor_logits.append(logits)
            return F.one_hot((logits.detach() + noise["actor"][step]).argmax(-1), self.num_actions).float()

        traj = self.wm.rssm.imagine(start, policy, d.horizon, noise=noise["stoch"])
        dense_feat, actions = traj["feat"], traj["action"]  # [H+1, N, F], [H, N, A]
        feat = view(dense_feat)
        logits = torch.stack(actor_logits)  # [H, N, A]
        heads = self.critic.net.members
        with torch.no_grad():
            rewards = self.wm.reward(feat[1:])  # [H, N]
            continues = (self.wm.continue_head(feat[1:]).squeeze(-1) > 0).float()  # mode, as DreamerV3
            first_cont = 1.0 - data["is_terminal"].reshape(n).float()
            weight = imagination_weights(first_cont, continues, d.gamma)  # [H+1, N]
            # [k, H, N]; with the heads on their own rows, the slow copy is read on those rows only
            slow_values = None if self._critic_on_rows else self.slow_critic.values(feat[:-1])

        head_weight = noise["heads"]  # [K, N]
        # bootstrapped separate heads train on their own rows only (same losses at a fraction of the
        # backward); the returns still bootstrap from every head on every state, without a graph
        rows = own_rows(head_weight) if self._critic_on_rows else None
        if rows is None:
            value_logits = self.critic(feat)  # [k, H+1, N, bins]
            head_values = twohot_decode(value_logits.detach(), self.wm.bins)
        else:
            value_logits, head_values = self._critic_on_own_rows(feat, head_weight, rows[0])
        with torch.no_grad():
            # bootstrap from the current critic (mean over heads), not from the slow copy
            values = head_values.mean(0)  # [H+1, N]
            returns = lambda_returns(rewards, values, continues, d.gamma, d.lam)  # [H, N]
            low, high = ema_percentiles(*moments, returns, d.retnorm_decay, d.retnorm_low, d.retnorm_high)
            scale = return_scale(low, high)
            advantage = (returns - values[:-1]) / scale  # [H, N]

        prior_logits = data["llm_prior_logits"].reshape(n, -1)
        mask = data["llm_mask"].reshape(n)
        loss_actor, entropy = reinforce_loss(logits, actions, advantage, weight[:-1], d.actor_entropy)
        loss_prior, kl_mix_wm = self.prior.absorption(logits[0], prior_logits, mask, data["llm_beta"].reshape(n),
                                                      prior_in)
        if rows is None:
            loss_critic, loss_slow = critic_losses(value_logits[:, :-1], returns, slow_values, weight[:-1],
                                                   self.wm.bins, head_weight, fused=True)
        else:
            index, row_weight = rows  # [K, M] each
            per_head = lambda x: x[:, index].permute(1, 0, 2)  # noqa: E731  [H, N] -> [K, H, M]
            with torch.no_grad():
                slow_rows = twohot_decode(self.slow_critic.net.forward_rows(feat[:-1], index), self.wm.bins)
            loss_critic, loss_slow = critic_losses_on_rows(
                value_logits[:, :-1], per_head(returns), slow_rows,
                per_head(weight[:-1]) * row_weight[:, None, :], self.wm.bins, returns.numel())

        metrics = {
            "entropy_imag": entropy,
            "return_scale": scale,
            "imag_return_mean": returns.mean(),
            "imag_reward_mean": rewards.mean(),
            "value_mean": values.mean(),
            "advantage_abs_mean": advantage.abs().mean(),
            "imag_weight_mean": weight.mean(),
            "loss_slow_reg": loss_slow.detach() / heads,
            "kl_mix_wm": kl_mix_wm,
            "prior_loss": loss_prior.detach(),
            "prior_mask_frac_train": (mask > 0).float().mean(),
        }
        actor_losses = {"actor": loss_actor, "prior": loss_prior}
        critic_losses_ = {"critic": loss_critic, "slow_reg": loss_slow}
        side = {"moments": (low, high), "start": start, "prior_logits": prior_logits, "mask": mask,
                "codes": data["llm_source"].reshape(n),
                "internals": {"feat": dense_feat, "actions": actions, "returns": returns, "values": values,
                              "weight": weight},
                "actor_total": combine_losses(actor_losses, self.loss_scales),
                "critic_total": combine_losses(critic_losses_, self.loss_scales)}
        return actor_losses, critic_losses_, metrics, side

    def _prior_inputs(self, data: dict) -> dict[str, Tensor]:
        """The prior layer's state the actor-loss term reads, for the imagination starts of ``data``."""
        b, t = data["action"].shape
        n = self._imagination_starts(b, t)
        return self.prior.loss_inputs(data["llm_source"][:, t - n // b:].reshape(n), self.device)

    def _finish_behaviour(self, metrics: dict[str, Tensor], side: dict) -> dict[str, float]:
        """Host side of :meth:`_behaviour`: the new return moments, the prior layer's bookkeeping and advice
        scores -> float metrics (one read of every metric)."""
        self.retnorm.low, self.retnorm.high = (v.clone() for v in side["moments"])  # outlive a graph replay
        out = read_scalars(metrics)
        out["lambda_kl"] = self.prior.current_lambda()
        out["prior_mask_frac_train"] = out.pop("prior_mask_frac_train") if side["mask"].numel() else 0.0
        self.prior.record_loss(out["prior_loss"])
        if self.prior.wants_advice_values():
            out.update(self._score_advice(side["start"], side["prior_logits"], side["mask"], side["codes"],
                                          out["return_scale"]))
        return out

    def behaviour_losses(self, post: dict[str, Tensor], data: dict) -> tuple[dict, dict, dict, dict]:
        """Imagine from every posterior state and build the actor and critic losses (eager).

        Returns (actor losses, critic losses, float metrics, internals); updates the return normaliser.
        """
        b, t = data["action"].shape
        noise = self._update_noise(b, t, observe=False)
        with self._autocast():
            actor_l, critic_l, metrics, side = self._behaviour(post, data, noise, self._prior_inputs(data),
                                                               (self.retnorm.low, self.retnorm.high))
        return actor_l, critic_l, self._finish_behaviour(metrics, side), side["internals"]
    def _critic_on_own_rows(self, feat, head_weight: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
        """Each head on its own rows with a graph, on the others without: feat [H+1, N, ...], bootstrap
        weights [K, N], own rows [K, M] -> (own logits [K, H+1, M, bins], every head's values [K, H+1, N]).

        Every (head, state) pair is evaluated once, as one dense forward would, but only the own rows keep
        activations for the backward. Padding rows repeat row 0, whose value they rewrite unchanged.
        """
        others, _ = own_rows((head_weight == 0).float())  # [K, M']
        own_logits = self.critic.net.forward_rows(feat, index)  # [K, H+1, M, bins]
        with torch.no_grad():
            other_values = twohot_decode(self.critic.net.forward_rows(feat, others), self.wm.bins)  # [K, H+1, M']
            values = other_values.new_empty(head_weight.shape[0], feat.shape[0], feat.shape[1])  # [K, H+1, N]
            spread = lambda idx: idx[:, None, :].expand(-1, feat.shape[0], -1)  # noqa: E731
            values.scatter_(2, spread(others), other_values)
            values.scatter_(2, spread(index), twohot_decode(own_logits.detach(), self.wm.bins))
        return own_logits, values

    @torch.no_grad()
    def advice_q_values(self, start: dict[str, Tensor], samples: int = 1) -> Tensor:
        """One-step values ``Q(s, a) = r(s') + gamma * c(s') * V_k(s')`` of every action: states [M] -> [M, D, A].

        ``samples`` imagined prior steps per (state, action) pair, each scored by every critic head
        ``k``: ``D = samples * heads`` draws whose spread is the estimate's own uncertainty.
        """
        m, a = start["deter"].shape[0], self.num_actions
        state = {k: v.repeat_interleave(a, 0) for k, v in start.items()}  # [M*A, ...], actions vary fastest
        actions = torch.eye(a, device=self.device).repeat(m, 1)
        draws = []
        for _ in range(samples):
            nxt, _ = self.wm.rssm.img_step(state, actions, self.generator)
            feat = self.wm.rssm.features(nxt)
            q = self.wm.reward(feat) + self.cfg.dreamer.gamma * self.wm.continue_prob(feat) * self.critic.values(feat)
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
            pick = torch.randperm(rows.numel(), generator=self.generator, device=self.generator.device)[:limit]
            rows = rows[pick.to(rows.device)]
        q = self.advice_q_values({k: v[rows] for k, v in start.items()}, self.cfg.prior.advice_samples)
        return self.prior.observe_advice_values(q / float(scale), prior_logits[rows], codes[rows])

    def train_step(self, batch) -> dict[str, float]:
        """One DreamerV3 update (world model, then actor and critic in imagination) -> flat metrics."""
        d = self.cfg.dreamer
        data = self._prepare_batch(batch)
        b, t = data["action"].shape
        noise = self._update_noise(b, t)
        skips_before = self.nonfinite_skips

        wm_total, wm_losses, post, wm_metrics = self._wm_losses_fn(data, noise["obs"])
        (grad_norm_wm,) = self._optimise([(self.wm_opt, wm_total, list(self.wm.parameters()), d.wm_clip)])

        with self._autocast():
            actor_losses, critic_losses_, ac_tensors, side = self._behaviour_fn(
                post, data, noise, self._prior_inputs(data), (self.retnorm.low, self.retnorm.high))
        grad_norm_actor, grad_norm_critic = self._optimise([
            (self.actor_opt, side["actor_total"], list(self.actor.parameters()), d.ac_clip),
            (self.critic_opt, side["critic_total"], list(self.critic.parameters()), d.ac_clip)])
        if math.isfinite(grad_norm_critic):  # the critic stepped: move the slow copy
            ema_update_(self.slow_critic, self.critic, d.slow_critic_fraction)
        ac_metrics = self._finish_behaviour(ac_tensors, side)

        kl_mix = ac_metrics.get("kl_mix_wm")
        if kl_mix is not None and math.isfinite(kl_mix):
            self.prior.update_lambda(kl_mix)
        if not self._scales_checked:
            check_scales_used(self.loss_scales, [*wm_losses, *actor_losses, *critic_losses_])
            self._scales_checked = True
        self.train_steps += 1

        scalars = {"wm_loss": wm_total, **{f"loss_{k}": v for k, v in wm_losses.items()}, **wm_metrics,
                   "loss_actor": actor_losses["actor"], "loss_prior": actor_losses["prior"],
                   "loss_critic": critic_losses_["critic"] / self.critic.net.members}
        metrics = {
            **read_scalars(scalars),
            **ac_metrics,
            "grad_norm_wm": grad_norm_wm,
            "grad_norm_actor": grad_norm_actor,
            "grad_norm_critic": grad_norm_critic,
            "nonfinite_skips": float(self.nonfinite_skips),
            "nonfinite_skips_step": float(self.nonfinite_skips - skips_before),
        }
        # The prior layer reports the act-time KL (advised states) as kl_mix_wm; this one is measured on
        # replay states and is what the Lagrangian's dual ascent sees.
        if "kl_mix_wm" in metrics:
            metrics["kl_mix_wm_train"] = metrics.pop("kl_mix_wm")
        return metrics

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict:
        return {
            "wm": self.wm.state_dict(),
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "slow_critic": self.slow_critic.state_dict(),
            "wm_opt": self.wm_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "retnorm": self.retnorm.state_dict(),
            "prior": self.prior.state_dict(),
            "generator": self.generator.get_state(),
            "nonfinite_skips": self.nonfinite_skips,
            "train_steps": self.train_steps,
            "env_step": self.env_step,
        }

    def load_state_dict(self, state: Mapping) -> None:
        missing = [k for k in ("wm", "actor", "critic", "slow_critic", "wm_opt", "actor_opt", "critic_opt",
                               "retnorm", "prior", "generator") if k not in state]
        if missing:
            raise KeyError(f"agent checkpoint lacks {missing}")
        self.wm.load_state_dict(state["wm"])
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.slow_critic.load_state_dict(state["slow_critic"])
        self.wm_opt.load_state_dict(state["wm_opt"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.retnorm.load_state_dict(state["retnorm"])
        self.prior.load_state_dict(state["prior"])
        self.generator.set_state(state["generator"].cpu())
        self.nonfinite_skips = int(state.get("nonfinite_skips", 0))
        self.train_steps = int(state.get("train_steps", 0))
        self.env_step = int(state.get("env_step", 0))

    def parameters(self):
        """All trainable parameters (world model, actor, critic)."""
        yield from self.wm.parameters()
        yield from self.actor.parameters()
        yield from self.critic.parameters()


def _sanitise_prior(prior_logits: Tensor, mask: Tensor) -> Tensor:
    """Zero the prior logits where no prior applies and replace non-finite entries (a NaN
    multiplied by a zero weight would still poison a loss)."""
    prior_logits = torch.nan_to_num(prior_logits.float(), nan=0.0, posinf=0.0, neginf=-1e4)
    return torch.where(mask.unsqueeze(-1) > 0, prior_logits, torch.zeros_like(prior_logits))
