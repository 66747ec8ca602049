"""DreamerV3 RSSM: LayerNorm GRU ``deter`` + ``stoch`` categorical latents with 1% unimix.

A state is a dict ``{"deter": [N, D], "stoch": [N, S, C]}`` (``stoch`` one-hot samples with
straight-through gradients). Pairing convention (replay index t): the RSSM consumes the action
taken *before* obs t, ``prev_action[t] = action[t-1]`` (zeros where ``is_first[t]``), with obs t.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from lore.dreamer.math import gumbel_noise, sample_one_hot, straight_through, unimix_logits
from lore.dreamer.networks import LN_EPS, NormLinear, linear

Tensor = torch.Tensor
State = dict[str, Tensor]


class LayerNormGRUCell(nn.Module):
    """DreamerV3's GRU: one Linear(no bias)+LayerNorm on [deter, x] -> reset/candidate/update.

    The update gate is biased by -1 so a fresh cell mostly keeps its state.
    """

    def __init__(self, in_dim: int, deter: int):
        super().__init__()
        self.linear = linear(in_dim + deter, 3 * deter, bias=False)
        self.norm = nn.LayerNorm(3 * deter, eps=LN_EPS)

    def forward(self, x: Tensor, deter: Tensor) -> Tensor:
        parts = self.norm(self.linear(torch.cat([deter, x], -1)))
        reset, cand, update = parts.chunk(3, -1)
        reset = torch.sigmoid(reset)
        cand = torch.tanh(reset * cand)
        update = torch.sigmoid(update - 1.0)
        return update * cand + (1.0 - update) * deter


class RSSM(nn.Module):
    def __init__(self, deter: int, stoch: int, classes: int, units: int, num_actions: int, embed_dim: int,
                 unimix: float = 0.01):
        super().__init__()
        self.deter_dim, self.stoch_dim, self.classes = deter, stoch, classes
        self.num_actions, self.unimix = num_actions, unimix
        self.img_in = NormLinear(stoch * classes + num_actions, units)
        self.gru = LayerNormGRUCell(units, deter)
        self.img_out = nn.Sequential(NormLinear(deter, units), linear(units, stoch * classes))
        # obs_out's first layer is split so the embedding part can be computed for all T at once
        self.obs_deter = linear(deter, units, bias=False)
        self.obs_embed = linear(embed_dim, units, bias=False)
        self.obs_norm = nn.LayerNorm(units, eps=LN_EPS)
        self.obs_stats = linear(units, stoch * classes)
        # learned initial deter (tanh of a parameter, zeros at init), initial stoch = prior mode
        self.initial_deter = nn.Parameter(torch.zeros(deter))

    @property
    def feat_dim(self) -> int:
        return self.deter_dim + self.stoch_dim * self.classes

    # ------------------------------------------------------------------ pieces

    def _latent_logits(self, raw: Tensor) -> Tensor:
        """[..., S*C] -> unimixed log-probs [..., S, C]."""
        return unimix_logits(raw.reshape(*raw.shape[:-1], self.stoch_dim, self.classes), self.unimix)

    def prior_logits(self, deter: Tensor) -> Tensor:  # [..., D] -> [..., S, C]
        return self._latent_logits(self.img_out(deter))

    def sample(self, logits: Tensor, generator: torch.Generator | None, noise: Tensor | None = None) -> Tensor:
        """Straight-through one-hot sample [..., S, C] from unimixed logits (Gumbel ``noise`` [..., S, C],
        drawn from ``generator`` when not given)."""
        if noise is None:
            noise = gumbel_noise(logits.shape, generator, logits.device, logits.dtype)
        return straight_through(sample_one_hot(logits.detach(), noise), logits.exp())

    @staticmethod
    def features(state: State) -> Tensor:
        """[..., D + S*C]: the latent the heads, actor and critic read."""
        stoch = state["stoch"]
        return torch.cat([state["deter"], stoch.reshape(*stoch.shape[:-2], -1)], -1)

    def initial_state(self, batch_size: int) -> State:
        deter = torch.tanh(self.initial_deter).expand(batch_size, -1)
        logits = self.prior_logits(deter)
        stoch = nn.functional.one_hot(logits.argmax(-1), self.classes).to(deter.dtype)
        return {"deter": deter, "stoch": stoch}

    def _reset(self, state: State, prev_action: Tensor, is_first: Tensor) -> tuple[State, Tensor]:
        """Replace state and action by the initial state / zeros where ``is_first`` [N]."""
        if not torch.compiler.is_compiling() and not bool(is_first.any()):
            return state, prev_action
        keep = (~is_first.bool()).to(prev_action.dtype)
        init = self.initial_state(is_first.shape[0])
        state = {
            "deter": state["deter"] * keep[:, None] + init["deter"] * (1.0 - keep[:, None]),
            "stoch": state["stoch"] * keep[:, None, None] + init["stoch"] * (1.0 - keep[:, None, None]),
        }
        return state, prev_action * keep[:, None]

    # ------------------------------------------------------------------ steps

    def img_deter(self, state: State, action: Tensor) -> tuple[Tensor, Tensor]:
        """The deterministic half of a prior step: (state_t, one-hot action_t [N, A]) -> (deter_{t+1} [N, D],
        prior logits [N, S, C]) that every sample of ``stoch_{t+1}`` is drawn from."""
        stoch = state["stoch"].reshape(state["stoch"].shape[0], -1)
        x = self.img_in(torch.cat([stoch, action], -1))
        deter = self.gru(x, state["deter"])
        return deter, self.prior_logits(deter)

    def img_step(self, state: State, action: Tensor, generator: torch.Generator | None = None,
                 sample: bool = True, noise: Tensor | None = None) -> tuple[State, Tensor]:
        """Prior step: (state_t, one-hot action_t [N, A]) -> (state_{t+1}, prior logits [N, S, C])."""
        deter, logits = self.img_deter(state, action)
        if sample:
            stoch = self.sample(logits, generator, noise)
        else:
            stoch = nn.functional.one_hot(logits.argmax(-1), self.classes).to(logits.dtype)
        return {"deter": deter, "stoch": stoch}, logits

    def _posterior(self, deter: Tensor, embed_part: Tensor) -> Tensor:
        h = torch.nn.functional.silu(self.obs_norm(self.obs_deter(deter) + embed_part))
        return self._latent_logits(self.obs_stats(h))

    def obs_step(self, state: State, prev_action: Tensor, embed: Tensor, is_first: Tensor,
                 generator: torch.Generator | None = None, sample: bool = True,
                 noise: Tensor | None = None) -> tuple[State, Tensor, Tensor]:
        """Posterior step with obs t -> (post state, post logits [N, S, C], prior logits [N, S, C]).

        ``prev_action`` [N, A] is the action taken before obs t; where ``is_first`` [N] the state
        and that action are reset to the initial state and zeros first.
        """
        state, prev_action = self._reset(state, prev_action, is_first)
        stoch = state["stoch"].reshape(state["stoch"].shape[0], -1)
        deter = self.gru(self.img_in(torch.cat([stoch, prev_action], -1)), state["deter"])
        post_logits = self._posterior(deter, self.obs_embed(embed))
        if sample:
            post = self.sample(post_logits, generator, noise)
        else:
            post = nn.functional.one_hot(post_logits.argmax(-1), self.classes).to(post_logits.dtype)
        return {"deter": deter, "stoch": post}, post_logits, self.prior_logits(deter)

    def observe(self, embed: Tensor, prev_actions: Tensor, is_first: Tensor,
                start: State | None = None, generator: torch.Generator | None = None,
                noise: Tensor | None = None) -> dict[str, Tensor]:
        """Filter a sequence: embed [B, T, E], prev_actions [B, T, A], is_first [B, T] (Gumbel ``noise``
        [B, T, S, C], drawn from ``generator`` when not given) ->
        ``deter`` [B, T, D], ``stoch`` [B, T, S, C], ``post_logits``, ``prior_logits`` [B, T, S, C].

        The prior logits depend on ``deter`` only, so they are computed for all steps at once
        after the loop; only the recurrence itself runs step by step.
        """
        b, t = embed.shape[:2]
        if prev_actions.shape[:2] != (b, t) or is_first.shape != (b, t):
            raise ValueError(f"observe: embed {tuple(embed.shape)}, prev_actions {tuple(prev_actions.shape)} "
                             f"and is_first {tuple(is_first.shape)} must share [B, T]")
        state = start if start is not None else self.initial_state(b)
        embed_part = self.obs_embed(embed)  # [B, T, U], batched
        if noise is None:
            noise = gumbel_noise((b, t, self.stoch_dim, self.classes), generator, embed.device, embed.dtype)
        init = self.initial_state(b)
        keeps = (~is_first.bool()).to(embed.dtype)  # [B, T]
        actions = prev_actions * keeps[..., None]  # [B, T, A]: zeros at episode starts
        # the steps where some row starts an episode (one host read for the whole sequence)
        blend = [True] * t if torch.compiler.is_compiling() else is_first.bool().any(0).tolist()
        deters, stochs, posts = [], [], []
        for i in range(t):
            deter, stoch = state["deter"], state["stoch"]
            if blend[i]:  # the blend is exact where keep = 1
                keep = keeps[:, i, None]  # [B, 1]
                deter = deter * keep + init["deter"] * (1.0 - keep)
                stoch = stoch * keep[..., None] + init["stoch"] * (1.0 - keep[..., None])
            x = self.img_in(torch.cat([stoch.reshape(b, -1), actions[:, i]], -1))
            deter = self.gru(x, deter)
            logits = self._posterior(deter, embed_part[:, i])
            stoch = straight_through(sample_one_hot(logits.detach(), noise[:, i]), logits.exp())
            state = {"deter": deter, "stoch": stoch}
            deters.append(deter)
            stochs.append(stoch)
            posts.append(logits)
        deter = torch.stack(deters, 1)
        return {
            "deter": deter,
            "stoch": torch.stack(stochs, 1),
            "post_logits": torch.stack(posts, 1),
            "prior_logits": self.prior_logits(deter),
        }

    def imagine(self, start: State, policy: Callable[[Tensor, int], Tensor], horizon: int,
                generator: torch.Generator | None = None, noise: Tensor | None = None) -> dict[str, Tensor]:
        """Roll the prior forward ``horizon`` steps from start states [N, ...] (Gumbel ``noise`` [H, N, S, C]
        of the latent samples, drawn from ``generator`` step by step when not given).

        ``policy(feat [N, F], step) -> one-hot action [N, A]`` picks a_k at s_k. The dynamics run
        without gradient (discrete actions are trained by REINFORCE, and no actor/critic gradient
        may reach the world model); the policy itself may build a graph on the detached features.
        Returns ``feat`` [H+1, N, F] (s_0 .. s_H), ``action`` [H, N, A] (a_k taken at s_k).
        """
        state = {k: v.detach() for k, v in start.items()}
        feats, actions = [self.features(state)], []
        for k in range(horizon):
            action = policy(feats[-1], k).detach()
            with torch.no_grad():
                state, _ = self.img_step(state, action, generator, noise=None if noise is None else noise[k])
            feats.append(self.features(state))
            actions.append(action)
        return {"feat": torch.stack(feats), "action": torch.stack(actions)}
