"""DreamerAgent: DreamerV3's world model and actor-critic, learned from replay, acting by the actor.

The extension points (a transform of the action logits at act time, an extra actor-loss term, an extra
head on the stopped latent features, late-fused features) are documented in :mod:`lore.dreamer`.

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
from typing import Protocol

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
    one_hot_float,
    return_scale,
    twohot_decode,
)
from lore.dreamer.networks import MLP, CNNDecoder, CNNEncoder, EnsembleMLP, compile_in_place
from lore.dreamer.rssm import LayerNormGRUCell
from lore.dreamer.world_model import WorldModel

Tensor = torch.Tensor

WM_LOSSES = ("decoder", "reward", "continue", "dyn", "rep")
ACTOR_LOSSES = ("actor",)
COMPILED_NETWORKS = (MLP, CNNEncoder, CNNDecoder, EnsembleMLP, LayerNormGRUCell)
"""What ``train.compile: networks`` compiles: the networks, not the Python loops (observe, imagine) that call them."""
COMPILE_GRAPH_LIMIT = 64
CRITIC_LOSSES = ("critic", "slow_reg")


@dataclass
class PolicyStep:
    """The policy forward of one act step, before an action is drawn (what a logits transform reads)."""

    logits: Tensor     # [B, A] the actor's log-probs
    latent: Tensor     # [B, F] posterior features
    entropy: Tensor    # [B] entropy of the actor's distribution
    value_var: Tensor  # [B] variance of the critic heads' values
    is_first: Tensor   # [B] bool episode starts
    generator: torch.Generator  # the agent's generator: a transform that draws keeps the run reproducible
    posterior: dict[str, Tensor] | None = None  # {deter [B, D], stoch [B, S, C]}: the state to imagine from


@dataclass
class ActOutput:
    action: Tensor          # [B] int64, sampled from ``logits``
    state: dict             # recurrent state for the next act() call
    logits: Tensor          # [B, A] the logits the action was drawn from (after the transform, if any)
    step: PolicyStep        # the policy forward (``step.logits``: before any transform)
    action_changed: Tensor  # [B] bool: the action differs from the actor's own under the same Gumbel noise


class ActorTerm(Protocol):
    """An extra actor-loss term on the imagination's start states (extension point, see :mod:`lore.dreamer`).

    Per update: :meth:`inputs` (host side, before the loss), :meth:`loss` (in the update's graph: no host reads)
    and :meth:`finish` (host side, after the actor and critic stepped), in that order.
    """

    name: str     # the loss's name: its LOSS_SCALES key and its metric ``loss_<name>``
    scale: float  # its entry in LOSS_SCALES

    def inputs(self, rows: dict[str, Tensor]) -> dict[str, Tensor]: ...

    def loss(self, logits: Tensor, rows: dict[str, Tensor], inputs: dict[str, Tensor]
             ) -> tuple[Tensor, dict[str, Tensor]]: ...

    def finish(self, metrics: dict[str, float], start: dict[str, Tensor]) -> None: ...


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
    """DreamerV3 for discrete actions: :meth:`act` (the policy), :meth:`train_step` (one update from a replay
    batch), :meth:`state_dict` / :meth:`load_state_dict`.

    ``batch_keys``: extra replay keys ``{name: trailing shape}`` that ``actor_term`` and ``head`` read from a
    ``[B, T]`` batch (as float; zeros where a batch lacks one); ``actor_term``: an :class:`ActorTerm`;
    ``head(feat_dim)``: builds an extra head on the stopped latent features (its ``name``, ``scale`` and
    ``loss(feat, data)``), trained with the world model.
    """

    def __init__(self, obs_space: gymnasium.spaces.Dict, num_actions: int, cfg, device="cpu", *,
                 batch_keys: Mapping[str, tuple[int, ...]] | None = None, actor_term: ActorTerm | None = None,
                 head: Callable[[int], torch.nn.Module] | None = None):
        if num_actions < 2:
            raise ValueError(f"num_actions must be >= 2, got {num_actions}")
        for name in ("deter", "stoch", "classes", "units", "layers", "bins", "value_heads", "ensemble"):
            if getattr(cfg.model, name) is None:
                raise ValueError(f"cfg.model.{name} is None: resolve the preset first (lore.presets.resolve_model)")
        self.cfg = cfg
        self.device = torch.device(device)
        self.num_actions = num_actions
        self.obs_keys = sorted(obs_space.spaces)
        self.batch_keys = dict(batch_keys or {})
        self.actor_term = actor_term
        d, m = cfg.dreamer, cfg.model

        self.wm = WorldModel(obs_space, num_actions, cfg, head).to(self.device)
        feat = self.wm.feat_dim
        self.actor = Actor(feat, num_actions, m.units, m.layers, d.unimix).to(self.device)
        self.critic = Critic(feat, m.value_heads, m.units, m.layers, self.wm.bins).to(self.device)
        self.slow_critic = make_slow_copy(self.critic)
        self.retnorm = ReturnNormalizer(d.retnorm_decay, d.retnorm_low, d.retnorm_high, device=self.device)
        self.loss_scales = self._loss_scales()

        # the compiled update steps with fused Adam (one kernel for all parameters; the same maths up to
        # rounding); eager steps with the multi-tensor form, which runs the single-tensor form's kernels per
        # parameter (bit-identical to torch's default loop, so recorded runs stay reproducible) with less Python
        adam = {"fused": True, "foreach": None} if cfg.train.compile == "update" else {"foreach": True, "fused": None}
        self._adam_options = adam
        self.wm_opt = torch.optim.Adam(self.wm.parameters(), lr=d.wm_lr, eps=d.wm_eps, **adam)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=d.ac_lr, eps=d.ac_eps, **adam)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=d.ac_lr, eps=d.ac_eps, **adam)

        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(cfg.seed))
        self.autocast_dtype = torch.bfloat16 if cfg.train.precision == "bfloat16" else None
        # bootstrapped heads with separate weights (EnsembleMLP) can each run on their own rows; the compiled
        # update reads no data-dependent shape, so there every head runs on every row (0-weighted where not its own)
        self._critic_on_rows = d.value_bootstrap < 1.0 and cfg.train.compile != "update"
        self._wm_losses_fn, self._behaviour_fn, self._act_fn = self._world_model_losses, self._behaviour, self._act_core
        self.compiled = self._compile(cfg.train.compile)
        self.nonfinite_skips = 0
        self.train_steps = 0
        self.env_step = 0
        """The env step a user of the agent last acted at (recorded in checkpoints; the agent does not read it)."""
        self._scales_checked = False
        # imagined states and detached posteriors are one-hot samples by construction: in float32 the checked view
        # always finds them so, and the unchecked one gives the same columns without its reductions and host reads
        self._one_hot_view = self.wm.one_hot if self.autocast_dtype is not None else self.wm.sampled_one_hot

    def _loss_scales(self) -> dict[str, float]:
        """LOSS_SCALES with the extensions' entries; every expected loss must have one."""
        scales = build_loss_scales(self.cfg)
        extra = [ext for ext in (self.actor_term, getattr(self.wm, self.wm.head_name or "", None)) if ext is not None]
        scales.update({ext.name: float(ext.scale) for ext in extra})
        expected = [*WM_LOSSES, *ACTOR_LOSSES, *CRITIC_LOSSES, *(ext.name for ext in extra)]
        check_scales_used(scales, expected)
        unscaled = sorted(set(expected) - set(scales))
        if unscaled:
            raise KeyError(f"losses {unscaled} have no entry in LOSS_SCALES")
        return scales

    def _compile(self, mode: str) -> list[str]:
        """``train.compile``: ``networks`` compiles the networks in place, ``update`` the update's two halves
        and the act step as whole graphs; returns what was compiled."""
        if mode == "networks":
            # one code object (MLP.forward) serves many heads, each with its own shapes and grad modes:
            # dynamo's default of 8 graphs per code object would silently fall back to eager
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, COMPILE_GRAPH_LIMIT)
            compiled = []
            for root in (self.wm, self.actor, self.critic, self.slow_critic):
                compiled += compile_in_place(root, COMPILED_NETWORKS)
            return compiled
        if mode == "update":
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, COMPILE_GRAPH_LIMIT)
            options = compile_options(self.device)
            self._wm_losses_fn = torch.compile(self._world_model_losses, **options)
            self._behaviour_fn = torch.compile(self._behaviour, **options)
            self._act_fn = torch.compile(self._act_core, **options)
            return ["world_model_losses", "behaviour", "act"]
        return []

    # ------------------------------------------------------------------ acting

    def initial_state(self, batch_size: int) -> dict[str, Tensor]:
        with torch.no_grad():
            state = self.wm.rssm.initial_state(batch_size)
        return {"deter": state["deter"].clone(), "stoch": state["stoch"].clone(),
                "prev_action": torch.zeros(batch_size, self.num_actions, device=self.device)}

    def set_action(self, state: dict[str, Tensor], action: Tensor) -> dict[str, Tensor]:
        """The state with ``prev_action`` replaced by the action actually executed (e.g. a planner's)."""
        return {**state, "prev_action": F.one_hot(action.long().to(self.device), self.num_actions).float()}

    @torch.no_grad()
    def act(self, obs: Mapping[str, Tensor], is_first: Tensor, state: dict[str, Tensor],
            features: tuple[Tensor, Tensor] | None = None, sample: bool = True,
            transform: Callable[[PolicyStep], Tensor] | None = None) -> ActOutput:
        """One act step of ``B`` envs: the posterior with this step's observation, then an action drawn from the
        actor's logits, or from ``transform(step)`` [B, A] when given (extension point).

        ``features``: late-fused features ``([B, F], mask [B])`` for the encoder (zeros without).
        """
        is_first = torch.as_tensor(is_first, device=self.device).bool().reshape(-1)
        batch = is_first.shape[0]
        obs = {k: torch.as_tensor(obs[k], device=self.device) for k in self._check_obs_keys(obs)}
        feats, feats_mask = self._act_features(features, batch)
        m = self.cfg.model
        noise = gumbel_noise((batch, m.stoch, m.classes), self.generator, self.device)
        deter, stoch, latent, logits, entropy, value_var = self._act_fn(
            obs, feats, feats_mask, state["deter"], state["stoch"], state["prev_action"], is_first, noise)
        step = PolicyStep(logits=logits, latent=latent, entropy=entropy, value_var=value_var, is_first=is_first,
                          generator=self.generator, posterior={"deter": deter, "stoch": stoch})
        # the next step's input outlives a graph replay
        new_state = {"deter": deter.clone(), "stoch": stoch.clone()}
        acting = logits if transform is None else transform(step)
        action, own = gumbel_argmax_pair(acting, logits, self.generator, sample)
        new_state["prev_action"] = F.one_hot(action, self.num_actions).float()
        return ActOutput(action=action, state=new_state, logits=acting, step=step, action_changed=action != own)

    def _act_features(self, features: tuple[Tensor, Tensor] | None, batch: int) -> tuple[Tensor, Tensor]:
        """The late-fused features of an act step and their mask, checked; zeros without."""
        n_feat = self.cfg.features.n_features
        if features is None:
            return torch.zeros(batch, n_feat, device=self.device), torch.zeros(batch, device=self.device)
        out = []
        for name, value, shape in zip(("features", "features_mask"), features, ((batch, n_feat), (batch,)),
                                      strict=True):
            value = torch.as_tensor(value, device=self.device).float()
            if tuple(value.shape) != shape:
                raise ValueError(f"{name} has shape {tuple(value.shape)}, expected {shape}")
            out.append(value)
        return out[0], out[1]

    def _act_core(self, obs: dict[str, Tensor], features: Tensor, features_mask: Tensor, deter: Tensor,
                  stoch: Tensor, prev_action: Tensor, is_first: Tensor, noise: Tensor) -> tuple[Tensor, ...]:
        """The policy forward of one act step -> (posterior deter [B, D], stoch [B, S, C], latent [B, F],
        logits [B, A], entropy [B], value variance over the critic heads [B]); reads nothing back to the host."""
        embed = self.wm.embed(obs, features, features_mask)
        post, _, _ = self.wm.rssm.obs_step({"deter": deter, "stoch": stoch}, prev_action, embed, is_first,
                                           noise=noise)
        latent = self.wm.rssm.features(post)
        logits = self.actor(latent)
        return (post["deter"], post["stoch"], latent, logits, categorical_entropy(logits),
                self.critic.values(latent).var(0, unbiased=False))

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
        features = {"features": (self.cfg.features.n_features,), "features_mask": ()}
        for key, tail in {**features, **self.batch_keys}.items():
            value = _get(batch, key)
            data[key] = torch.zeros((b, t, *tail), device=self.device) if value is None else value.to(self.device).float()
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
            norm = torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
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

    def _start_rows(self, data: dict) -> dict[str, Tensor]:
        """``is_terminal`` and the extra ``batch_keys`` at the imagination's start states ([N, ...] each)."""
        b, t = data["action"].shape
        last = self._imagination_starts(b, t) // b
        return {k: data[k][:, t - last:].reshape(b * last, *data[k].shape[2:])
                for k in ("is_terminal", *self.batch_keys)}

    def _behaviour(self, post: dict[str, Tensor], rows: dict[str, Tensor], noise: dict[str, Tensor],
                   term_inputs: dict[str, Tensor], moments: tuple[Tensor, Tensor]) -> tuple[dict, dict, dict, dict]:
        """Imagine from every posterior state and build the actor and critic losses; reads nothing back to the host.

        ``rows`` from :meth:`_start_rows`, ``noise`` from :meth:`_update_noise`, ``term_inputs`` from the actor
        term's ``inputs``, ``moments`` the return normaliser's (low, high). Returns (actor losses, critic losses,
        metric tensors, side outputs: the new moments, the start states and the imagination internals). No
        gradient reaches the world model: starts are detached and the dynamics and reward/continue heads run
        without grad.
        """
        d = self.cfg.dreamer
        n = noise["actor"].shape[1]
        if n < post["deter"].shape[0] * post["deter"].shape[1]:  # imag_last: the last steps of each sequence
            last = n // post["deter"].shape[0]
            post = {k: post[k][:, -last:] for k in ("deter", "stoch")}
        start = {"deter": post["deter"].reshape(n, -1).detach(),
                 "stoch": post["stoch"].reshape(n, *post["stoch"].shape[2:]).detach()}
        traj, logits = self._imagine(start, noise)
        dense_feat, actions = traj["feat"], traj["action"]  # [H+1, N, F], [H, N, A]
        feat = self._one_hot_view(dense_feat)  # imagined stoch is one-hot: first layers add the selected rows
        with torch.no_grad():
            rewards = self.wm.reward(feat[1:])  # [H, N]
            continues = (self.wm.continue_head(feat[1:]).squeeze(-1) > 0).float()  # mode, as DreamerV3
            weight = imagination_weights(1.0 - rows["is_terminal"].float(), continues, d.gamma)  # [H+1, N]
        values, returns, advantage, value_out = self._values_and_returns(feat, rewards, continues, noise["heads"],
                                                                          moments)
        loss_actor, entropy = reinforce_loss(logits, actions, advantage, weight[:-1], d.actor_entropy)
        actor_losses = {"actor": loss_actor}
        term_metrics = {}
        if self.actor_term is not None:
            actor_losses[self.actor_term.name], term_metrics = self.actor_term.loss(logits[0], rows, term_inputs)
        loss_critic, loss_slow = self._critic_losses(feat, returns, weight, noise["heads"], value_out)
        metrics = {
            "entropy_imag": entropy,
            "return_scale": value_out["scale"],
            "imag_return_mean": returns.mean(),
            "imag_reward_mean": rewards.mean(),
            "value_mean": values.mean(),
            "advantage_abs_mean": advantage.abs().mean(),
            "imag_weight_mean": weight.mean(),
            "loss_slow_reg": loss_slow.detach() / self.critic.net.members,
            **term_metrics,
        }
        critic_losses_ = {"critic": loss_critic, "slow_reg": loss_slow}
        side = {"moments": value_out["moments"], "start": start,
                "internals": {"feat": dense_feat, "actions": actions, "returns": returns, "values": values,
                              "weight": weight},
                "actor_total": combine_losses(actor_losses, self.loss_scales),
                "critic_total": combine_losses(critic_losses_, self.loss_scales)}
        return actor_losses, critic_losses_, metrics, side

    def _imagine(self, start: dict[str, Tensor], noise: dict[str, Tensor]) -> tuple[dict[str, Tensor], Tensor]:
        """Roll the actor out for ``dreamer.horizon`` steps from ``start`` -> (trajectory, actor logits [H, N, A])."""
        view = self._one_hot_view
        actor_logits: list[Tensor] = []

        def policy(feat: Tensor, step: int) -> Tensor:
            logits = self.actor(view(feat))
            actor_logits.append(logits)
            return one_hot_float((logits.detach() + noise["actor"][step]).argmax(-1), self.num_actions)

        traj = self.wm.rssm.imagine(start, policy, self.cfg.dreamer.horizon, noise=noise["stoch"])
        return traj, torch.stack(actor_logits)

    def _values_and_returns(self, feat, rewards: Tensor, continues: Tensor, head_weight: Tensor,
                            moments: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor, dict]:
        """The critic on the imagined states -> (values [H+1, N], lambda-returns [H, N], normalised advantages
        [H, N], and what the critic losses reuse: value logits, own rows, slow values, scale, new moments)."""
        d = self.cfg.dreamer
        with torch.no_grad():
            # [k, H, N]; with the heads on their own rows, the slow copy is read on those rows only
            slow_values = None if self._critic_on_rows else self.slow_critic.values(feat[:-1])
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
        return values, returns, advantage, {"logits": value_logits, "rows": rows, "slow": slow_values,
                                            "scale": scale, "moments": (low, high)}

    def _critic_losses(self, feat, returns: Tensor, weight: Tensor, head_weight: Tensor,
                       value_out: dict) -> tuple[Tensor, Tensor]:
        """(critic loss, slow-critic regulariser) of every head, on every row or on its own rows."""
        rows, value_logits = value_out["rows"], value_out["logits"]
        if rows is None:
            return critic_losses(value_logits[:, :-1], returns, value_out["slow"], weight[:-1], self.wm.bins,
                                 head_weight, fused=True)
        index, row_weight = rows  # [K, M] each
        per_head = lambda x: x[:, index].permute(1, 0, 2)  # noqa: E731  [H, N] -> [K, H, M]
        with torch.no_grad():
            slow_rows = twohot_decode(self.slow_critic.net.forward_rows(feat[:-1], index), self.wm.bins)
        return critic_losses_on_rows(value_logits[:, :-1], per_head(returns), slow_rows,
                                     per_head(weight[:-1]) * row_weight[:, None, :], self.wm.bins, returns.numel())

    def _finish_behaviour(self, metrics: dict[str, Tensor], side: dict) -> dict[str, float]:
        """Host side of :meth:`_behaviour`: the new return moments and the actor term's bookkeeping -> float
        metrics (one read of every metric)."""
        self.retnorm.low, self.retnorm.high = (v.clone() for v in side["moments"])  # outlive a graph replay
        out = read_scalars(metrics)
        if self.actor_term is not None:
            self.actor_term.finish(out, side["start"])
        return out

    def _term_inputs(self, rows: dict[str, Tensor]) -> dict[str, Tensor]:
        return self.actor_term.inputs(rows) if self.actor_term is not None else {}

    def behaviour_losses(self, post: dict[str, Tensor], data: dict) -> tuple[dict, dict, dict, dict]:
        """Imagine from every posterior state and build the actor and critic losses (eager).

        Returns (actor losses, critic losses, float metrics, internals); updates the return normaliser.
        """
        b, t = data["action"].shape
        noise = self._update_noise(b, t, observe=False)
        rows = self._start_rows(data)
        with self._autocast():
            actor_l, critic_l, metrics, side = self._behaviour(post, rows, noise, self._term_inputs(rows),
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

    def train_step(self, batch) -> dict[str, float]:
        """One DreamerV3 update (world model, then actor and critic in imagination) -> flat metrics."""
        d = self.cfg.dreamer
        data = self._prepare_batch(batch)
        b, t = data["action"].shape
        noise = self._update_noise(b, t)
        skips_before = self.nonfinite_skips

        wm_total, wm_losses, post, wm_metrics = self._wm_losses_fn(data, noise["obs"])
        (grad_norm_wm,) = self._optimise([(self.wm_opt, wm_total, list(self.wm.parameters()), d.wm_clip)])

        rows = self._start_rows(data)
        with self._autocast():
            actor_losses, critic_losses_, ac_tensors, side = self._behaviour_fn(
                post, rows, noise, self._term_inputs(rows), (self.retnorm.low, self.retnorm.high))
        grad_norm_actor, grad_norm_critic = self._optimise([
            (self.actor_opt, side["actor_total"], list(self.actor.parameters()), d.ac_clip),
            (self.critic_opt, side["critic_total"], list(self.critic.parameters()), d.ac_clip)])
        if math.isfinite(grad_norm_critic):  # the critic stepped: move the slow copy
            ema_update_(self.slow_critic, self.critic, d.slow_critic_fraction)
        ac_metrics = self._finish_behaviour(ac_tensors, side)

        if not self._scales_checked:
            check_scales_used(self.loss_scales, [*wm_losses, *actor_losses, *critic_losses_])
            self._scales_checked = True
        self.train_steps += 1

        scalars = {"wm_loss": wm_total, **{f"loss_{k}": v for k, v in wm_losses.items()}, **wm_metrics,
                   **{f"loss_{k}": v for k, v in actor_losses.items()},
                   "loss_critic": critic_losses_["critic"] / self.critic.net.members}
        return {
            **read_scalars(scalars),
            **ac_metrics,
            "grad_norm_wm": grad_norm_wm,
            "grad_norm_actor": grad_norm_actor,
            "grad_norm_critic": grad_norm_critic,
            "nonfinite_skips": float(self.nonfinite_skips),
            "nonfinite_skips_step": float(self.nonfinite_skips - skips_before),
        }

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
            "generator": self.generator.get_state(),
            "nonfinite_skips": self.nonfinite_skips,
            "train_steps": self.train_steps,
            "env_step": self.env_step,
        }

    def upgrade_state(self, state: Mapping) -> dict:
        """``state`` (from :meth:`state_dict`) with a world model saved with a one-step latent ensemble
        (``wm.ensemble.*``) read as one without it: those parameters and their optimiser entries are dropped."""
        wm = state.get("wm")
        if not isinstance(wm, Mapping) or not any(k.startswith("ensemble.") for k in wm):
            return dict(state)
        names = [name for name, _ in self.wm.named_parameters()]
        saved = [k for k in wm if k in set(names) or k.startswith("ensemble.")]  # the saved parameter order
        new_index = {i: names.index(k) for i, k in enumerate(saved) if not k.startswith("ensemble.")}
        opt = state["wm_opt"]
        groups = [{**g, "params": [new_index[i] for i in g["params"] if i in new_index]} for g in opt["param_groups"]]
        return {**state, "wm": {k: v for k, v in wm.items() if not k.startswith("ensemble.")},
                "wm_opt": {"state": {new_index[i]: v for i, v in opt["state"].items() if i in new_index},
                           "param_groups": groups}}

    def load_state_dict(self, state: Mapping) -> None:
        missing = [k for k in ("wm", "actor", "critic", "slow_critic", "wm_opt", "actor_opt", "critic_opt",
                               "retnorm", "generator") if k not in state]
        if missing:
            raise KeyError(f"agent checkpoint lacks {missing}")
        state = self.upgrade_state(state)
        self.wm.load_state_dict(state["wm"])
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.slow_critic.load_state_dict(state["slow_critic"])
        self.wm_opt.load_state_dict(state["wm_opt"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        for opt in (self.wm_opt, self.actor_opt, self.critic_opt):  # a checkpoint saved with other step options
            for group in opt.param_groups:
                group.update(self._adam_options)
        self.retnorm.load_state_dict(state["retnorm"])
        self.generator.set_state(state["generator"].cpu())
        self.nonfinite_skips = int(state.get("nonfinite_skips", 0))
        self.train_steps = int(state.get("train_steps", 0))
        self.env_step = int(state.get("env_step", 0))

    def parameters(self):
        """All trainable parameters (world model, actor, critic)."""
        yield from self.wm.parameters()
        yield from self.actor.parameters()
        yield from self.critic.parameters()
