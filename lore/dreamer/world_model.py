"""World model: encoder (+ late-fused features) -> RSSM -> decoder / reward / continue heads, plus an
optional extra head trained on the stopped latent features (an extension point, see :mod:`lore.dreamer`)."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium
import torch
import torch.nn.functional as F
from torch import nn

from lore.dreamer.math import free_bits_kl, kl_balance, make_bins, twohot_decode, twohot_loss
from lore.dreamer.networks import (
    MLP,
    EnsembleMLP,
    FeatureEncoder,
    ObsDecoder,
    ObsEncoder,
    OneHotFeatures,
    one_hot_features,
    sampled_one_hot_features,
)
from lore.dreamer.rssm import RSSM

Tensor = torch.Tensor


class WorldModel(nn.Module):
    def __init__(self, obs_space: gymnasium.spaces.Dict, num_actions: int, cfg,
                 head: Callable[[int], nn.Module] | None = None):
        """``head(feat_dim)``, when given, builds a module with a ``name`` and ``loss(feat [N, F], data)``:
        it is registered under that name and its loss, on the stopped features, joins the world-model loss."""
        super().__init__()
        m, d = cfg.model, cfg.dreamer
        self.num_actions = num_actions
        self.free_bits = d.free_bits
        self.encoder = ObsEncoder(obs_space, m.units, m.layers, m.cnn_depth)
        embed_dim = self.encoder.out_dim
        self.feature_encoder = None
        if cfg.features.enabled:
            self.feature_encoder = FeatureEncoder(cfg.features.n_features, m.feature_units)
            embed_dim += self.feature_encoder.out_dim
        self.rssm = RSSM(m.deter, m.stoch, m.classes, m.units, num_actions, embed_dim, unimix=d.unimix)
        feat = self.rssm.feat_dim
        self.decoder = ObsDecoder(obs_space, feat, m.units, m.layers, m.cnn_depth)
        self.reward_head = MLP(feat, m.units, m.layers, out_dim=m.bins, out_scale=0.0)
        self.continue_head = MLP(feat, m.units, m.layers, out_dim=1)
        # the initial weights of a one-step latent ensemble (``model.ensemble`` members) are drawn and dropped:
        # every initial weight drawn after them, and so every recorded run, depends on these draws
        EnsembleMLP(m.ensemble, feat + num_actions, m.units, m.layers, m.stoch * m.classes)
        self.head_name: str | None = None
        if head is not None:
            module = head(feat)
            self.head_name = module.name
            self.add_module(module.name, module)
        self.register_buffer("bins", make_bins(m.bins), persistent=False)

    @property
    def feat_dim(self) -> int:
        return self.rssm.feat_dim

    def embed(self, obs: dict[str, Tensor], features: Tensor | None = None,
              features_mask: Tensor | None = None, vector: Tensor | None = None) -> Tensor:
        """obs [..., *shape] (+ LLM features [..., F], mask [...]) -> posterior input [..., E]; ``vector``: the
        encoder's :meth:`~lore.dreamer.networks.ObsEncoder.vector_input` of ``obs`` when already computed."""
        embed = self.encoder(obs, vector)
        if self.feature_encoder is not None:
            if features is None or features_mask is None:
                lead = embed.shape[:-1]
                features = torch.zeros(*lead, self.feature_encoder.n_features, device=embed.device)
                features_mask = torch.zeros(lead, device=embed.device)
            embed = torch.cat([embed, self.feature_encoder(features, features_mask)], -1)
        return embed

    def one_hot(self, feat: Tensor) -> OneHotFeatures | Tensor:
        """Latent features [..., F] as deter + hot stoch columns when the stoch part is an exact one-hot
        sample without gradient (imagined or detached posterior states); else unchanged."""
        if torch.compiler.is_compiling():  # in a compiled graph the features are known to be such samples
            return self.sampled_one_hot(feat)
        return one_hot_features(feat, self.rssm.deter_dim, self.rssm.classes)

    def sampled_one_hot(self, feat: Tensor) -> OneHotFeatures:
        """Latent features [..., F] whose stoch part is one-hot samples (imagined states, detached posteriors) as
        deter + hot stoch columns, read by argmax without the checks of :meth:`one_hot` (no host read)."""
        return sampled_one_hot_features(feat.detach(), self.rssm.deter_dim, self.rssm.classes)

    def reward(self, feat: Tensor) -> Tensor:
        return twohot_decode(self.reward_head(feat), self.bins)

    def continue_prob(self, feat: Tensor) -> Tensor:
        return torch.sigmoid(self.continue_head(feat).squeeze(-1))

    def loss(self, data: dict[str, Tensor], generator: torch.Generator | None = None, noise: Tensor | None = None
             ) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]:
        """Unscaled losses (scalars), the posterior sequence and metrics (0-dim tensors) for one [B, T] batch.

        ``data``: ``obs`` dict, ``action`` [B, T] int (taken after obs t), ``reward`` [B, T] (received
        on arriving at obs t), ``is_first``/``is_terminal`` [B, T] bool, optionally ``features`` [B, T, F] and
        ``features_mask`` [B, T] (late fusion) and the extra head's keys; ``noise`` [B, T, S, C]:
        the posterior samples' Gumbel noise (drawn from ``generator`` when not given).
        """
        action = F.one_hot(data["action"].long(), self.num_actions).float()  # [B, T, A]
        is_first = data["is_first"].bool()
        # obs t is paired with action[t-1]; the chunk's first step has no known predecessor, so it
        # starts from the initial state like an episode start
        prev_actions = torch.cat([torch.zeros_like(action[:, :1]), action[:, :-1]], 1)
        reset = is_first.clone()
        reset[:, 0] = True
        vector = self.encoder.vector_input(data["obs"])  # the encoder's input is the decoder's target
        embed = self.embed(data["obs"], data.get("features"), data.get("features_mask"), vector)
        post = self.rssm.observe(embed, prev_actions, reset, generator=generator, noise=noise)
        feat = torch.cat([post["deter"], post["stoch"].flatten(-2)], -1)  # [B, T, F]

        losses: dict[str, Tensor] = {}
        losses["decoder"] = self.decoder.loss(feat, data["obs"], vector).mean()
        losses["reward"] = twohot_loss(self.reward_head(feat), data["reward"].float(), self.bins).mean()
        cont_target = 1.0 - data["is_terminal"].float()  # truncation is not termination
        losses["continue"] = F.binary_cross_entropy_with_logits(self.continue_head(feat).squeeze(-1), cont_target)
        dyn_kl, rep_kl = kl_balance(post["post_logits"], post["prior_logits"])  # [B, T] each
        dyn_loss, rep_loss = free_bits_kl(dyn_kl, rep_kl, self.free_bits)
        losses["dyn"], losses["rep"] = dyn_loss.mean(), rep_loss.mean()

        metrics = {
            "kl_dyn": dyn_kl.detach().mean(),
            "kl_rep": rep_kl.detach().mean(),
            "post_entropy": -(post["post_logits"].detach().exp() * post["post_logits"].detach()).sum(-1).mean(),
        }
        if self.head_name is not None:
            flat = feat.detach().reshape(-1, feat.shape[-1])
            losses[self.head_name] = getattr(self, self.head_name).loss(flat, data)
        return losses, post, metrics
