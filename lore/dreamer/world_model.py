"""World model: encoder (+ late-fused LLM features) -> RSSM -> decoder / reward / continue heads,
plus the stop-gradient side learners: the disagreement ensemble and the distilled PriorNet."""

from __future__ import annotations

import math

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


def disagreement(pred_logits: Tensor) -> Tensor:
    """Ensemble disagreement [...] from member predictions [K, ..., S, C] of next-latent logits.

    Variance of the predicted class probabilities across the K members, summed over classes and
    averaged over latents (Plan2Explore's epistemic signal). Its range is [0, 1 - 1/min(K, C)]: the top is
    reached when the members are each certain of a different class.
    """
    probs = torch.softmax(pred_logits, -1)
    # explicit population variance: torch.var over a leading dim is several times slower on CPU
    var = (probs - probs.mean(0)).square().mean(0)
    return var.sum(-1).mean(-1)


def masked_prior_kl(prior_logits: Tensor, student_logits: Tensor, mask: Tensor, confidence: Tensor) -> Tensor:
    """Σ w·KL(ρ ‖ π_student) / Σ w with w = mask·confidence; 0 when no step carries a prior.

    prior_logits, student_logits [N, A]; mask, confidence [N].
    """
    weight = mask.float() * confidence.float().clamp(min=0.0)
    log_rho = torch.log_softmax(prior_logits, -1)
    log_q = torch.log_softmax(student_logits, -1)
    kl = (log_rho.exp() * (log_rho - log_q)).sum(-1)
    return (weight * kl).sum() / weight.sum().clamp(min=1e-6)


class WorldModel(nn.Module):
    def __init__(self, obs_space: gymnasium.spaces.Dict, num_actions: int, cfg):
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
        # Plan2Explore one-step predictors: [deter, stoch, action] -> next stoch logits
        self.ensemble = EnsembleMLP(m.ensemble, feat + num_actions, m.units, m.layers, m.stoch * m.classes)
        self.train_ensemble = True
        """Whether the update trains the ensemble (the agent turns it off where nothing reads disagreement)."""
        self.prior_net = MLP(feat, m.units, m.layers, out_dim=num_actions) if cfg.distill.enabled else None
        self.register_buffer("bins", make_bins(m.bins), persistent=False)

    @property
    def feat_dim(self) -> int:
        return self.rssm.feat_dim

    def embed(self, obs: dict[str, Tensor], features: Tensor | None = None,
              features_mask: Tensor | None = None) -> Tensor:
        """obs [..., *shape] (+ LLM features [..., F], mask [...]) -> posterior input [..., E]."""
        embed = self.encoder(obs)
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
            return sampled_one_hot_features(feat.detach(), self.rssm.deter_dim, self.rssm.classes)
        return one_hot_features(feat, self.rssm.deter_dim, self.rssm.classes)

    def predict_next_latent(self, feat: Tensor | OneHotFeatures, action: Tensor) -> Tensor:
        """feat [..., F], one-hot action [..., A] -> member logits [K, ..., S, C]."""
        x = feat.append_group(action) if isinstance(feat, OneHotFeatures) else None
        if x is None:  # dense features, or an action that is not one-hot
            x = torch.cat([feat.to_dense() if isinstance(feat, OneHotFeatures) else feat, action], -1)
        out = self.ensemble(x)
        return out.reshape(*out.shape[:-1], self.rssm.stoch_dim, self.rssm.classes)

    def expected_disagreement(self, feat: Tensor, policy_probs: Tensor) -> Tensor:
        """E_{a~π}[disagreement(s, a)] for feat [N, F], π [N, A] -> [N] (act-time signal)."""
        n, a = policy_probs.shape
        feats = feat[:, None].expand(n, a, feat.shape[-1])
        actions = torch.eye(a, device=feat.device)[None].expand(n, a, a)
        per_action = disagreement(self.predict_next_latent(feats, actions))  # [N, A]
        return (policy_probs * per_action).sum(-1)

    def reward(self, feat: Tensor) -> Tensor:
        return twohot_decode(self.reward_head(feat), self.bins)

    def continue_prob(self, feat: Tensor) -> Tensor:
        return torch.sigmoid(self.continue_head(feat).squeeze(-1))

    def loss(self, data: dict[str, Tensor], generator: torch.Generator | None = None, noise: Tensor | None = None
             ) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]:
        """Unscaled losses (scalars), the posterior sequence and metrics (0-dim tensors) for one [B, T] batch.

        ``data``: ``obs`` dict, ``action`` [B, T] int (taken after obs t), ``reward`` [B, T] (received
        on arriving at obs t), ``is_first``/``is_terminal`` [B, T] bool, ``llm_*`` tensors; ``noise`` [B, T, S, C]:
        the posterior samples' Gumbel noise (drawn from ``generator`` when not given).
        """
        action = F.one_hot(data["action"].long(), self.num_actions).float()  # [B, T, A]
        is_first = data["is_first"].bool()
        # obs t is paired with action[t-1]; the chunk's first step has no known predecessor, so it
        # starts from the initial state like an episode start
        prev_actions = torch.cat([torch.zeros_like(action[:, :1]), action[:, :-1]], 1)
        reset = is_first.clone()
        reset[:, 0] = True
        embed = self.embed(data["obs"], data.get("llm_features"), data.get("llm_features_mask"))
        post = self.rssm.observe(embed, prev_actions, reset, generator=generator, noise=noise)
        feat = torch.cat([post["deter"], post["stoch"].flatten(-2)], -1)  # [B, T, F]

        losses: dict[str, Tensor] = {}
        losses["decoder"] = self.decoder.loss(feat, data["obs"]).mean()
        losses["reward"] = twohot_loss(self.reward_head(feat), data["reward"].float(), self.bins).mean()
        cont_target = 1.0 - data["is_terminal"].float()  # truncation is not termination
        losses["continue"] = F.binary_cross_entropy_with_logits(self.continue_head(feat).squeeze(-1), cont_target)
        dyn_kl, rep_kl = kl_balance(post["post_logits"], post["prior_logits"])  # [B, T] each
        dyn_loss, rep_loss = free_bits_kl(dyn_kl, rep_kl, self.free_bits)
        losses["dyn"], losses["rep"] = dyn_loss.mean(), rep_loss.mean()

        nan = feat.new_full((), math.nan)
        metrics = {
            "kl_dyn": dyn_kl.detach().mean(),
            "kl_rep": rep_kl.detach().mean(),
            "loss_ensemble": nan,
            "u_disagreement_train": nan,
            "post_entropy": -(post["post_logits"].detach().exp() * post["post_logits"].detach()).sum(-1).mean(),
        }
        losses["ensemble"] = feat.new_zeros(())
        if self.train_ensemble:
            # disagreement ensemble: (s_t, a_t) -> posterior at t+1, where t+1 continues the episode
            pred = self.predict_next_latent(self.one_hot(feat[:, :-1].detach()), action[:, :-1])  # [K, B, T-1, S, C]
            target = post["post_logits"][:, 1:].detach().exp()
            ce = -(target * torch.log_softmax(pred, -1)).sum((-2, -1))  # [K, B, T-1]
            valid = (~is_first[:, 1:]).float()
            per_member = (ce * valid).sum((1, 2)) / valid.sum().clamp(min=1.0)  # [K]
            losses["ensemble"] = per_member.sum()  # each member trained as if alone
            metrics["loss_ensemble"] = per_member.detach().mean()
            metrics["u_disagreement_train"] = disagreement(pred.detach()).mean()
        if self.prior_net is not None:
            flat = feat.detach().reshape(-1, feat.shape[-1])
            losses["prior_net"] = masked_prior_kl(
                data["llm_prior_logits"].reshape(flat.shape[0], -1), self.prior_net(flat),
                data["llm_mask"].reshape(-1), data["llm_confidence"].reshape(-1))
        return losses, post, metrics
