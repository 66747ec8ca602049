"""Mutation check of the DreamerV3 code: do the dreamer tests notice a broken ingredient?

Each mutant below breaks exactly one DreamerV3 ingredient or default (unimix off, KL averaged
instead of summed over latents, continue target flipped, entropy sign flipped, ``is_first``
ignored, ...) by replacing one exact source snippet. For every mutant the script copies the
repository's ``lore/`` package and the dreamer test files into a scratch directory (the working
tree is never touched), applies the mutation there, runs

    pytest -x -q tests/test_dreamer_math.py tests/test_dreamer_agent.py tests/test_dreamer_ingredients.py \
                 tests/test_trust_gate.py

against the mutated copy and records whether a test failed ("killed") or all passed ("survived").
The mutation score is killed / total.

By default the runs are forked from one parent process that has already imported torch, numpy,
gymnasium and pytest (but never ``lore``), which makes a mutant cost ~2 s of CPU instead of ~6 s;
``--no-fork`` runs a fresh ``python -m pytest`` subprocess per mutant instead. Either way the child
asserts that ``lore`` was imported from the scratch copy. The per-mutant limit counts CPU seconds, so
a run starved by other jobs on a shared machine is not mistaken for a mutant that hangs.

Two groups: ``main`` (the list written before the ingredient tests) and ``heldout``
(written after them, to estimate how well the tests catch errors they were not tailored to).
Scores and the surviving (equivalent) mutants are in docs/testing.md.

Usage (run it nice'd on a shared machine; ~8 min for all 224 mutants on one free core):

    nice -n 19 .venv/bin/python benchmarks/mutation_check.py                 # all mutants
    nice -n 19 .venv/bin/python benchmarks/mutation_check.py --only math.kl  # name substring(s)
    .venv/bin/python benchmarks/mutation_check.py --list                     # list + validate snippets
    nice -n 19 .venv/bin/python benchmarks/mutation_check.py --json /tmp/mutants.json

Exit status: 0 when the score reaches ``--min-score`` (default 0, i.e. report only), 1 otherwise,
2 when the unmutated code already fails the tests or a snippet no longer matches the source.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TESTS = ("tests/test_dreamer_math.py", "tests/test_dreamer_agent.py", "tests/test_dreamer_ingredients.py",
                 "tests/test_trust_gate.py")
"""The dreamer tests, and test_trust_gate.py for the critic heads (bootstrap) and the advice trust."""
SUPPORT_FILES = ("tests/conftest.py", "pyproject.toml")

FILES = {
    "math": "lore/dreamer/math.py",
    "networks": "lore/dreamer/networks.py",
    "rssm": "lore/dreamer/rssm.py",
    "world_model": "lore/dreamer/world_model.py",
    "behavior": "lore/dreamer/behavior.py",
    "agent": "lore/dreamer/agent.py",
    "config": "lore/config/sections.py",
    "presets": "lore/presets.py",
    "trust": "lore/prior/trust.py",
    "layer": "lore/prior/layer.py",
    "kl_control": "lore/prior/kl_control.py",
}


@dataclass(frozen=True)
class Mutant:
    name: str          # "<file key>.<what breaks>"
    path: str          # file relative to the repository root
    old: str           # exact source snippet ...
    new: str           # ... and its replacement
    occurrence: int = 0  # 0: ``old`` must occur exactly once; k >= 1: replace the k-th occurrence
    group: str = "main"  # "main": the list written before the tests; "heldout": written after the tests (see HELDOUT); "fast": FAST;
    # "prior": PRIOR

    def apply(self, text: str) -> str:
        count = text.count(self.old)
        if count == 0:
            raise StaleMutant(f"{self.name}: snippet not found in {self.path}: {self.old!r}")
        if self.occurrence == 0:
            if count != 1:
                raise StaleMutant(f"{self.name}: snippet occurs {count} times in {self.path} (give occurrence)")
            return text.replace(self.old, self.new)
        if self.occurrence > count:
            raise StaleMutant(f"{self.name}: occurrence {self.occurrence} of {count}")
        start = -1
        for _ in range(self.occurrence):
            start = text.index(self.old, start + 1)
        return text[:start] + self.new + text[start + len(self.old):]


class StaleMutant(Exception):
    pass


def M(name: str, old: str, new: str, occurrence: int = 0, group: str = "main", path: str | None = None) -> Mutant:
    """A mutant of the file its name's prefix names (``path``: another file, where the ingredient moved)."""
    return Mutant(name, path or FILES[name.split(".")[0]], old, new, occurrence, group)


def H(name: str, old: str, new: str, occurrence: int = 0) -> Mutant:
    return M(name, old, new, occurrence, group="heldout")


# --------------------------------------------------------------------------- the mutants

MUTANTS: list[Mutant] = [
    # ---- math.py: symlog / two-hot
    M("math.symlog_identity", "return torch.sign(x) * torch.log1p(torch.abs(x))", "return x"),
    M("math.symlog_no_sign", "return torch.sign(x) * torch.log1p(torch.abs(x))",
      "return torch.log1p(torch.abs(x))"),
    M("math.symexp_exp_not_expm1", "torch.sign(x) * torch.expm1(torch.abs(x))",
      "torch.sign(x) * torch.exp(torch.abs(x))"),
    M("math.bins_limit_10", "limit: float = 20.0", "limit: float = 10.0"),
    M("math.bins_not_uniform", "half = torch.linspace(0.0, limit, (num_bins + 1) // 2, device=device)",
      "half = torch.linspace(0.0, 1.0, (num_bins + 1) // 2, device=device) ** 2 * limit"),
    M("math.twohot_encode_no_symlog", "y = symlog(x).clamp(bins[0], bins[-1])", "y = x.clamp(bins[0], bins[-1])"),
    M("math.twohot_encode_weights_swapped",
      "target.scatter_(-1, below.unsqueeze(-1), (1.0 - w_above).unsqueeze(-1))\n"
      "    target.scatter_add_(-1, above.unsqueeze(-1), w_above.unsqueeze(-1))",
      "target.scatter_(-1, below.unsqueeze(-1), w_above.unsqueeze(-1))\n"
      "    target.scatter_add_(-1, above.unsqueeze(-1), (1.0 - w_above).unsqueeze(-1))"),
    M("math.twohot_logprob_no_symlog", "y = symlog(target).clamp(bins[0], bins[-1])",
      "y = target.clamp(bins[0], bins[-1])"),
    M("math.twohot_logprob_weights_swapped", "return (1.0 - w_above) * lp_below + w_above * lp_above",
      "return w_above * lp_below + (1.0 - w_above) * lp_above"),
    M("math.twohot_mean_plus", "return (right - left) @ bins[m + 1:]", "return (right + left) @ bins[m + 1:]"),
    M("math.twohot_mean_no_flip", "left = probs[..., :m].flip(-1)", "left = probs[..., :m]"),
    M("math.twohot_decode_no_symexp", "return symexp(twohot_mean_symlog(torch.softmax(logits, -1), bins))",
      "return twohot_mean_symlog(torch.softmax(logits, -1), bins)"),
    M("math.twohot_loss_unnormalised", "return -twohot_log_prob(torch.log_softmax(logits, -1), target, bins)",
      "return -twohot_log_prob(logits, target, bins)"),
    # ---- math.py: categoricals
    M("math.unimix_probs_off", "return (1.0 - mix) * probs + mix / logits.shape[-1]", "return probs"),
    M("math.unimix_probs_not_divided", "return (1.0 - mix) * probs + mix / logits.shape[-1]",
      "return (1.0 - mix) * probs + mix"),
    M("math.unimix_logits_off", "return torch.log(unimix_probs(logits, mix))", "return torch.log_softmax(logits, -1)"),
    M("math.kl_mean_over_latents", "return (p_log.exp() * (p_log - q_log)).sum((-2, -1))",
      "return (p_log.exp() * (p_log - q_log)).sum(-1).mean(-1)"),
    M("math.kl_reversed", "return (p_log.exp() * (p_log - q_log)).sum((-2, -1))",
      "return (q_log.exp() * (q_log - p_log)).sum((-2, -1))"),
    M("math.entropy_sign", "return -(log_p.exp() * log_p).sum(-1)", "return (log_p.exp() * log_p).sum(-1)"),
    M("math.kl_balance_stopgrad_swapped",
      "dyn = kl_categorical(post_logits.detach(), prior_logits)\n    rep = kl_categorical(post_logits, prior_logits.detach())",
      "dyn = kl_categorical(post_logits, prior_logits.detach())\n    rep = kl_categorical(post_logits.detach(), prior_logits)"),
    M("math.kl_balance_dyn_no_stopgrad", "dyn = kl_categorical(post_logits.detach(), prior_logits)",
      "dyn = kl_categorical(post_logits, prior_logits)"),
    M("math.kl_balance_rep_no_stopgrad", "rep = kl_categorical(post_logits, prior_logits.detach())",
      "rep = kl_categorical(post_logits, prior_logits)"),
    M("math.free_bits_off_dyn", "return dyn_kl_sum.clamp(min=free), rep_kl_sum.clamp(min=free)",
      "return dyn_kl_sum, rep_kl_sum.clamp(min=free)"),
    M("math.free_bits_off_rep", "return dyn_kl_sum.clamp(min=free), rep_kl_sum.clamp(min=free)",
      "return dyn_kl_sum.clamp(min=free), rep_kl_sum"),
    M("math.free_bits_subtracted", "return dyn_kl_sum.clamp(min=free), rep_kl_sum.clamp(min=free)",
      "return (dyn_kl_sum - free).clamp(min=0.0), (rep_kl_sum - free).clamp(min=0.0)"),
    M("math.sample_mode_not_gumbel", "index = (logits + gumbel).argmax(-1)", "index = logits.argmax(-1)"),
    M("math.straight_through_no_grad", "return one_hot + probs - probs.detach()", "return one_hot"),
    M("math.straight_through_probs", "return one_hot + probs - probs.detach()", "return probs"),
    M("math.gumbel_sign", "return -torch.log(-torch.log(u.clamp(tiny, 1.0 - 1e-7)))",
      "return torch.log(-torch.log(u.clamp(tiny, 1.0 - 1e-7)))"),
    M("math.gumbel_uniform", "return -torch.log(-torch.log(u.clamp(tiny, 1.0 - 1e-7)))", "return u"),
    # ---- math.py: returns and normalisation
    M("math.lambda_no_continue", "disc = gamma * continues", "disc = gamma * torch.ones_like(continues)"),
    M("math.lambda_no_bootstrap", "last = values[-1]", "last = torch.zeros_like(values[-1])"),
    M("math.lambda_interm_value_t", "interm = rewards + disc * (1.0 - lam) * values[1:]",
      "interm = rewards + disc * (1.0 - lam) * values[:-1]"),
    M("math.lambda_tail_no_lambda", "last = interm[t] + disc[t] * lam * last", "last = interm[t] + disc[t] * last"),
    M("math.lambda_tail_no_gamma", "last = interm[t] + disc[t] * lam * last",
      "last = interm[t] + continues[t] * lam * last"),
    M("math.lambda_not_reversed", "return torch.stack(out[::-1])", "return torch.stack(out)"),
    M("math.percentiles_swapped", "q = torch.tensor([low / 100.0, high / 100.0], device=flat.device)",
      "q = torch.tensor([high / 100.0, low / 100.0], device=flat.device)"),
    M("math.percentiles_min_max", "q = torch.tensor([low / 100.0, high / 100.0], device=flat.device)",
      "q = torch.tensor([0.0, 1.0], device=flat.device)"),
    M("math.percentile_scale_no_floor", "return torch.clamp(hi - lo, min=1.0)", "return hi - lo"),
    M("math.retnorm_decay_flipped",
      "return (torch.where(finite, decay * low + (1.0 - decay) * lo, low),\n"
      "            torch.where(finite, decay * high + (1.0 - decay) * hi, high))",
      "return (torch.where(finite, (1.0 - decay) * low + decay * lo, low),\n"
      "            torch.where(finite, (1.0 - decay) * high + decay * hi, high))"),
    M("math.retnorm_no_floor", "return torch.clamp(high - low, min=1.0)", "return high - low"),
    M("math.retnorm_bias_corrected_init", "self.low = torch.zeros((), device=device)\n"
      "        self.high = torch.zeros((), device=device)",
      "self.low = torch.zeros((), device=device)\n        self.high = torch.full((), 100.0, device=device)"),
    M("math.loss_scales_dyn_rep_swapped", '"dyn": d.kl_dyn,\n        "rep": d.kl_rep,',
      '"dyn": d.kl_rep,\n        "rep": d.kl_dyn,'),
    M("math.loss_scales_slow_reg_off", '"slow_reg": d.slow_critic_reg,', '"slow_reg": 0.0,'),
    M("math.loss_scales_continue_from_reward", '"continue": d.continue_scale,', '"continue": d.reward_scale,'),
    M("math.combine_unscaled", "return sum(scales[k] * v for k, v in losses.items())",
      "return sum(v for k, v in losses.items())"),

    # ---- networks.py
    M("networks.init_fan_in", "std = math.sqrt(scale / ((fan_in + fan_out) / 2.0)) / 0.87962566103423978",
      "std = math.sqrt(scale / fan_in) / 0.87962566103423978"),
    M("networks.init_no_trunc_correction",
      "std = math.sqrt(scale / ((fan_in + fan_out) / 2.0)) / 0.87962566103423978",
      "std = math.sqrt(scale / ((fan_in + fan_out) / 2.0))"),
    M("networks.init_untruncated", "nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std)",
      "nn.init.normal_(weight, 0.0, std)"),
    M("networks.ln_eps", "LN_EPS = 1e-3", "LN_EPS = 1e-5"),
    M("networks.normlinear_bias", "linear(in_dim, out_dim, bias=False), nn.LayerNorm(out_dim, eps=LN_EPS), nn.SiLU()",
      "linear(in_dim, out_dim, bias=True), nn.LayerNorm(out_dim, eps=LN_EPS), nn.SiLU()"),
    M("networks.normlinear_relu", "linear(in_dim, out_dim, bias=False), nn.LayerNorm(out_dim, eps=LN_EPS), nn.SiLU()",
      "linear(in_dim, out_dim, bias=False), nn.LayerNorm(out_dim, eps=LN_EPS), nn.ReLU()"),
    M("networks.normlinear_no_norm", "linear(in_dim, out_dim, bias=False), nn.LayerNorm(out_dim, eps=LN_EPS), nn.SiLU()",
      "linear(in_dim, out_dim, bias=False), nn.Identity(), nn.SiLU()"),
    M("networks.mlp_out_scale_ignored", "self.out = linear(units, out_dim, scale=out_scale)",
      "self.out = linear(units, out_dim)"),
    M("networks.encoder_no_symlog", "parts.append(self.mlp(symlog(vec)))", "parts.append(self.mlp(vec))"),
    M("networks.decoder_no_symlog", "target = symlog(torch.cat([obs[k].float() for k in self.vector_keys], -1))",
      "target = torch.cat([obs[k].float() for k in self.vector_keys], -1)"),
    M("networks.decoder_mean_not_sum", "total = total + ((pred - target) ** 2).sum(-1)",
      "total = total + ((pred - target) ** 2).mean(-1)"),
    M("networks.decoder_image_mean_not_sum", "total = total + ((pred - target) ** 2).sum((-3, -2, -1))",
      "total = total + ((pred - target) ** 2).mean((-3, -2, -1))"),
    M("networks.cnn_input_not_centred", ".float() / 255.0 - 0.5", ".float() / 255.0"),
    M("networks.cnn_decoder_no_offset", "x = self.net(x) + 0.5", "x = self.net(x)"),
    M("networks.features_mask_ignored", "return self.net(symlog(features)) * mask.float().unsqueeze(-1)",
      "return self.net(symlog(features))"),

    # ---- rssm.py
    M("rssm.gru_no_update_bias", "update = torch.sigmoid(update - 1.0)", "update = torch.sigmoid(update)"),
    M("rssm.gru_update_swapped", "return update * cand + (1.0 - update) * deter",
      "return (1.0 - update) * cand + update * deter"),
    M("rssm.gru_no_reset_gate", "cand = torch.tanh(reset * cand)", "cand = torch.tanh(cand)"),
    M("rssm.gru_no_norm", "parts = self.norm(self.linear(torch.cat([deter, x], -1)))",
      "parts = self.linear(torch.cat([deter, x], -1))"),
    M("rssm.unimix_off", "self.stoch_dim, self.classes), self.unimix)", "self.stoch_dim, self.classes), 0.0)"),
    M("rssm.sample_no_straight_through",
      "return straight_through(sample_one_hot(logits.detach(), noise), logits.exp())",
      "return sample_one_hot(logits.detach(), noise)"),
    M("rssm.initial_deter_no_tanh", "deter = torch.tanh(self.initial_deter).expand(batch_size, -1)",
      "deter = self.initial_deter.expand(batch_size, -1)"),
    M("rssm.initial_stoch_probs", "stoch = nn.functional.one_hot(logits.argmax(-1), self.classes).to(deter.dtype)",
      "stoch = logits.exp()"),
    M("rssm.obs_step_is_first_ignored",
      "if not torch.compiler.is_compiling() and not bool(is_first.any()):\n            return state, prev_action",
      "if True:\n            return state, prev_action"),
    M("rssm.obs_step_action_not_zeroed", "return state, prev_action * keep[:, None]", "return state, prev_action"),
    M("rssm.obs_step_uses_prior", "post_logits = self._posterior(deter, self.obs_embed(embed))",
      "post_logits = self.prior_logits(deter)"),
    M("rssm.posterior_ignores_deter", "self.obs_norm(self.obs_deter(deter) + embed_part)",
      "self.obs_norm(embed_part)"),
    M("rssm.observe_is_first_ignored", "if torch.compiler.is_compiling() or bool(first.any()):", "if False:"),
    M("rssm.observe_action_not_zeroed", "action = prev_actions[:, i] * keep", "action = prev_actions[:, i]"),
    M("rssm.observe_stale_embed", "logits = self._posterior(deter, embed_part[:, i])",
      "logits = self._posterior(deter, embed_part[:, 0])"),
    M("rssm.observe_mode_not_sample", "sample_one_hot(logits.detach(), noise[:, i])",
      "sample_one_hot(logits.detach(), 0.0 * noise[:, i])"),
    M("rssm.observe_prior_is_posterior", '"prior_logits": self.prior_logits(deter),',
      '"prior_logits": torch.stack(posts, 1).detach(),'),
    M("rssm.img_step_mode_not_sample", "if sample:\n            stoch = self.sample(logits, generator, noise)",
      "if False:\n            stoch = self.sample(logits, generator, noise)"),
    M("rssm.imagine_start_not_detached", "state = {k: v.detach() for k, v in start.items()}",
      "state = dict(start)"),
    M("rssm.imagine_dynamics_with_grad", "with torch.no_grad():\n                state, _ = self.img_step",
      "if True:\n                state, _ = self.img_step"),
    M("rssm.imagine_policy_on_start", "action = policy(feats[-1], k).detach()", "action = policy(feats[0], k).detach()"),

    # ---- world_model.py
    M("world_model.prev_action_not_shifted",
      "prev_actions = torch.cat([torch.zeros_like(action[:, :1]), action[:, :-1]], 1)", "prev_actions = action"),
    M("world_model.chunk_start_not_reset", "reset[:, 0] = True", "reset[:, 0] = reset[:, 0]"),
    M("world_model.continue_target_flipped", 'cont_target = 1.0 - data["is_terminal"].float()',
      'cont_target = data["is_terminal"].float()'),
    M("world_model.continue_target_ones", 'cont_target = 1.0 - data["is_terminal"].float()',
      'cont_target = torch.ones_like(data["is_terminal"].float())'),
    M("world_model.reward_target_shifted", 'twohot_loss(self.reward_head(feat), data["reward"].float(), self.bins)',
      'twohot_loss(self.reward_head(feat), data["reward"].roll(-1, 1).float(), self.bins)'),
    M("world_model.free_bits_zero", "free_bits_kl(dyn_kl, rep_kl, self.free_bits)",
      "free_bits_kl(dyn_kl, rep_kl, 0.0)"),
    M("world_model.free_bits_after_mean",
      'dyn_loss, rep_loss = free_bits_kl(dyn_kl, rep_kl, self.free_bits)\n'
      '        losses["dyn"], losses["rep"] = dyn_loss.mean(), rep_loss.mean()',
      'dyn_loss, rep_loss = free_bits_kl(dyn_kl.mean(), rep_kl.mean(), self.free_bits)\n'
      '        losses["dyn"], losses["rep"] = dyn_loss, rep_loss'),
    M("world_model.dyn_rep_swapped", 'losses["dyn"], losses["rep"] = dyn_loss.mean(), rep_loss.mean()',
      'losses["dyn"], losses["rep"] = rep_loss.mean(), dyn_loss.mean()'),
    M("world_model.reward_head_not_zero_init", "out_dim=m.bins, out_scale=0.0)", "out_dim=m.bins, out_scale=1.0)"),
    M("world_model.continue_prob_is_logit", "return torch.sigmoid(self.continue_head(feat).squeeze(-1))",
      "return self.continue_head(feat).squeeze(-1)"),
    M("world_model.unimix_not_from_config", "unimix=d.unimix)", "unimix=0.0)"),
    M("world_model.free_bits_not_from_config", "self.free_bits = d.free_bits", "self.free_bits = 0.5"),
    M("terms.prior_kl_ignores_confidence", "weight = mask.float() * confidence.float().clamp(min=0.0)",
      "weight = mask.float()", path="lore/method/terms.py"),

    # ---- behavior.py
    M("behavior.actor_unimix_off", "return unimix_logits(self.net(feat), self.unimix)",
      "return torch.log_softmax(self.net(feat), -1)"),
    M("behavior.critic_not_zero_init", "bins.shape[0], out_scale=0.0)", "bins.shape[0], out_scale=1.0)"),
    M("behavior.ema_full_copy", "p_slow.lerp_(p_fast, fraction)", "p_slow.copy_(p_fast)"),
    M("behavior.ema_inverted", "p_slow.lerp_(p_fast, fraction)", "p_slow.lerp_(p_fast, 1.0 - fraction)"),
    M("behavior.weights_not_divided_by_gamma", "return torch.cumprod(gamma * conts, 0) / gamma",
      "return torch.cumprod(gamma * conts, 0)"),
    M("behavior.weights_no_discount", "return torch.cumprod(gamma * conts, 0) / gamma",
      "return torch.cumprod(conts, 0)"),
    M("behavior.weights_ignore_start_terminal", "conts = torch.cat([first_continue[None], continues], 0)",
      "conts = torch.cat([torch.ones_like(first_continue)[None], continues], 0)"),
    M("behavior.reinforce_entropy_sign", "loss = -log_pi * advantage.detach() - entropy_scale * entropy",
      "loss = -log_pi * advantage.detach() + entropy_scale * entropy"),
    M("behavior.reinforce_sign", "loss = -log_pi * advantage.detach() - entropy_scale * entropy",
      "loss = log_pi * advantage.detach() - entropy_scale * entropy"),
    M("behavior.reinforce_unweighted", "return (loss * weight.detach()).mean(), entropy.detach().mean()",
      "return loss.mean(), entropy.detach().mean()"),
    M("behavior.reinforce_greedy_logprob", "log_pi = (log_probs * actions).sum(-1)",
      "log_pi = log_probs.max(-1).values"),
    M("behavior.head_mask_not_rescaled", "return (uniform < keep).float() / keep", "return (uniform < keep).float()"),
    M("behavior.slow_reg_targets_returns", "reg = -twohot_log_prob(log_probs, slow_values.detach(), bins)",
      "reg = -twohot_log_prob(log_probs, returns.detach()[None], bins)"),
    M("behavior.critic_unweighted", "return (ce * w).mean((1, 2)).sum(), (reg * w).mean((1, 2)).sum()",
      "return ce.mean((1, 2)).sum(), reg.mean((1, 2)).sum()"),
    M("behavior.critic_heads_averaged", "return (ce * w).mean((1, 2)).sum(), (reg * w).mean((1, 2)).sum()",
      "return (ce * w).mean((1, 2)).mean(), (reg * w).mean((1, 2)).mean()"),

    # ---- agent.py
    M("agent.imag_continue_probability", "continues = (self.wm.continue_head(feat[1:]).squeeze(-1) > 0).float()",
      "continues = torch.sigmoid(self.wm.continue_head(feat[1:]).squeeze(-1))"),
    M("agent.imag_continue_flipped", "continues = (self.wm.continue_head(feat[1:]).squeeze(-1) > 0).float()",
      "continues = (self.wm.continue_head(feat[1:]).squeeze(-1) < 0).float()"),
    M("agent.imag_continue_at_start_state", "continues = (self.wm.continue_head(feat[1:])",
      "continues = (self.wm.continue_head(feat[:-1])"),
    M("agent.imag_reward_at_start_state", "rewards = self.wm.reward(feat[1:])", "rewards = self.wm.reward(feat[:-1])"),
    M("agent.imag_start_terminal_ignored", 'imagination_weights(1.0 - rows["is_terminal"].float(),',
      'imagination_weights(torch.ones_like(rows["is_terminal"].float()),'),
    M("agent.values_from_first_head", "values = head_values.mean(0)  # [H+1, N]", "values = head_values[0]"),
    M("agent.values_from_slow_critic", "values = head_values.mean(0)  # [H+1, N]",
      "values = self.slow_critic.values(feat).mean(0)"),
    M("agent.gamma_lambda_swapped", "lambda_returns(rewards, values, continues, d.gamma, d.lam)",
      "lambda_returns(rewards, values, continues, d.lam, d.gamma)"),
    M("agent.retnorm_not_updated",
      "low, high = ema_percentiles(*moments, returns, d.retnorm_decay, d.retnorm_low, d.retnorm_high)",
      "low, high = moments"),
    M("agent.advantage_no_baseline", "advantage = (returns - values[:-1]) / scale", "advantage = returns / scale"),
    M("agent.advantage_not_normalised", "advantage = (returns - values[:-1]) / scale",
      "advantage = returns - values[:-1]"),
    M("agent.advantage_next_value_baseline", "advantage = (returns - values[:-1]) / scale",
      "advantage = (returns - values[1:]) / scale"),
    M("agent.actor_weight_shifted", "reinforce_loss(logits, actions, advantage, weight[:-1], d.actor_entropy)",
      "reinforce_loss(logits, actions, advantage, weight[1:], d.actor_entropy)"),
    M("agent.actor_entropy_not_from_config", "reinforce_loss(logits, actions, advantage, weight[:-1], d.actor_entropy)",
      "reinforce_loss(logits, actions, advantage, weight[:-1], 0.0)"),
    M("agent.critic_on_next_states", "critic_losses(value_logits[:, :-1], returns",
      "critic_losses(value_logits[:, 1:], returns"),
    M("agent.critic_weight_shifted", "per_head(weight[:-1]) * row_weight[:, None, :]",
      "per_head(weight[1:]) * row_weight[:, None, :]"),
    M("agent.slow_critic_full_copy", "ema_update_(self.slow_critic, self.critic, d.slow_critic_fraction)",
      "ema_update_(self.slow_critic, self.critic, 1.0)"),
    M("agent.slow_critic_never_updated", "if math.isfinite(grad_norm_critic):", "if False:"),
    M("agent.imagination_greedy",
      'return F.one_hot((logits.detach() + noise["actor"][step]).argmax(-1), self.num_actions).float()',
      "return F.one_hot(logits.detach().argmax(-1), self.num_actions).float()"),
    M("agent.wm_lr_from_ac", "lr=d.wm_lr, eps=d.wm_eps", "lr=d.ac_lr, eps=d.wm_eps"),
    M("agent.actor_eps_from_wm", "self.actor.parameters(), lr=d.ac_lr, eps=d.ac_eps",
      "self.actor.parameters(), lr=d.ac_lr, eps=d.wm_eps"),
    M("agent.critic_lr_from_wm", "self.critic.parameters(), lr=d.ac_lr, eps=d.ac_eps",
      "self.critic.parameters(), lr=d.wm_lr, eps=d.ac_eps"),
    M("agent.wm_clip_from_ac", "list(self.wm.parameters()), d.wm_clip)", "list(self.wm.parameters()), d.ac_clip)"),
    M("agent.actor_clip_from_wm", "list(self.actor.parameters()), d.ac_clip)",
      "list(self.actor.parameters()), d.wm_clip)"),
    M("agent.act_prev_action_from_wm_policy", 'new_state["prev_action"] = F.one_hot(action, self.num_actions)',
      'new_state["prev_action"] = F.one_hot(own, self.num_actions)'),

    # ---- config/sections.py: published DreamerV3 defaults (the dreamer section; batch shape in train)
    M("config.gamma", "gamma: float = ranged(1.0 - 1.0 / 333.0,", "gamma: float = ranged(0.99,"),
    M("config.lam", "lam: float = ranged(0.95,", "lam: float = ranged(0.9,"),
    M("config.horizon", "horizon: int = ranged(15,", "horizon: int = ranged(16,"),
    M("config.imag_last", "imag_last: int = ranged(0,", "imag_last: int = ranged(8,"),
    M("config.actor_entropy", "actor_entropy: float = ranged(3e-4,", "actor_entropy: float = ranged(1e-3,"),
    M("config.free_bits", "free_bits: float = ranged(1.0,", "free_bits: float = ranged(0.5,"),
    M("config.kl_dyn", "kl_dyn: float = ranged(0.5,", "kl_dyn: float = ranged(1.0,"),
    M("config.kl_rep", "kl_rep: float = ranged(0.1,", "kl_rep: float = ranged(0.5,"),
    M("config.unimix", "unimix: float = ranged(0.01,", "unimix: float = ranged(0.0,"),
    M("config.retnorm_decay", "retnorm_decay: float = ranged(0.99,", "retnorm_decay: float = ranged(0.999,"),
    M("config.retnorm_low", "retnorm_low: float = ranged(5.0,", "retnorm_low: float = ranged(0.0,"),
    M("config.retnorm_high", "retnorm_high: float = ranged(95.0,", "retnorm_high: float = ranged(100.0,"),
    M("config.slow_critic_fraction", "slow_critic_fraction: float = ranged(0.02,", "slow_critic_fraction: float = ranged(0.01,"),
    M("config.slow_critic_reg", "slow_critic_reg: float = ranged(1.0,", "slow_critic_reg: float = ranged(0.0,"),
    M("config.decoder_scale", "decoder_scale: float = ranged(1.0,", "decoder_scale: float = ranged(2.0,"),
    M("config.reward_scale", "reward_scale: float = ranged(1.0,", "reward_scale: float = ranged(2.0,"),
    M("config.continue_scale", "continue_scale: float = ranged(1.0,", "continue_scale: float = ranged(2.0,"),
    M("config.wm_lr", "wm_lr: float = ranged(1e-4,", "wm_lr: float = ranged(3e-4,"),
    M("config.wm_eps", "wm_eps: float = ranged(1e-8,", "wm_eps: float = ranged(1e-5,"),
    M("config.wm_clip", "wm_clip: float = ranged(1000.0,", "wm_clip: float = ranged(100.0,"),
    M("config.ac_lr", "ac_lr: float = ranged(3e-5,", "ac_lr: float = ranged(4e-5,"),
    M("config.ac_eps", "ac_eps: float = ranged(1e-5,", "ac_eps: float = ranged(1e-8,"),
    M("config.ac_clip", "ac_clip: float = ranged(100.0,", "ac_clip: float = ranged(1000.0,"),
    M("config.batch_size", "batch_size: int = ranged(16,", "batch_size: int = ranged(32,"),
    M("config.batch_length", "batch_length: int = ranged(64,", "batch_length: int = ranged(32,"),
    M("config.replay_capacity", "replay_capacity: int = ranged(1_000_000,", "replay_capacity: int = ranged(100_000,"),
    # ---- presets.py: the two-hot support size and the paper's S / M sizes
    M("presets.bins_xs", '"xs": dict(deter=256, stoch=32, classes=16, units=256, layers=1, cnn_depth=16, bins=255',
      '"xs": dict(deter=256, stoch=32, classes=16, units=256, layers=1, cnn_depth=16, bins=257'),
    M("presets.m_units", '"m": dict(deter=1024, stoch=32, classes=32, units=640,',
      '"m": dict(deter=1024, stoch=32, classes=32, units=512,'),
]


# Held-out mutants: written after tests/test_dreamer_ingredients.py existed and run once before any
# test was adjusted to them, to estimate how well the tests catch errors nobody tailored them to
# (docs/testing.md reports that first score as well as the current one).
HELDOUT: list[Mutant] = [
    H("networks.cnn_encoder_no_channel_norm", "blocks += [conv(a, b), ChannelNorm(b), nn.SiLU()]",
      "blocks += [conv(a, b), nn.Identity(), nn.SiLU()]"),
    H("networks.ensemble_norm_eps", "F.layer_norm(x, x.shape[-1:], eps=LN_EPS) * self.weight",
      "F.layer_norm(x, x.shape[-1:], eps=1e-5) * self.weight"),
    H("networks.decoder_image_target_not_scaled", "target = obs[k].float() / 255.0", "target = obs[k].float()"),
    H("networks.features_no_symlog", "return self.net(symlog(features)) * mask", "return self.net(features) * mask"),
    H("rssm.img_step_ignores_action", "x = self.img_in(torch.cat([stoch, action], -1))",
      "x = self.img_in(torch.cat([stoch, 0.0 * action], -1))"),
    H("rssm.obs_step_reset_keeps_deter",
      '"deter": state["deter"] * keep[:, None] + init["deter"] * (1.0 - keep[:, None]),', '"deter": state["deter"],'),
    H("rssm.observe_reset_keeps_stoch", 'stoch = stoch * keep[..., None] + init["stoch"] * (1.0 - keep[..., None])',
      "stoch = stoch"),
    H("rssm.features_stoch_first", 'return torch.cat([state["deter"], stoch.reshape(*stoch.shape[:-2], -1)], -1)',
      'return torch.cat([stoch.reshape(*stoch.shape[:-2], -1), state["deter"]], -1)'),
    H("rssm.observe_same_noise_every_step", "sample_one_hot(logits.detach(), noise[:, i])",
      "sample_one_hot(logits.detach(), noise[:, 0])"),
    H("rssm.img_step_prior_from_old_deter", "deter = self.gru(x, state[\"deter\"])\n        logits = self.prior_logits(deter)",
      "deter = self.gru(x, state[\"deter\"])\n        logits = self.prior_logits(state[\"deter\"])"),
    H("rssm.obs_step_prior_from_old_deter", "post_logits, self.prior_logits(deter)",
      'post_logits, self.prior_logits(state["deter"])'),
    H("world_model.kl_arguments_swapped", 'kl_balance(post["post_logits"], post["prior_logits"])',
      'kl_balance(post["prior_logits"], post["post_logits"])'),
    H("world_model.continue_head_on_deter_only", "losses[\"continue\"] = F.binary_cross_entropy_with_logits("
      "self.continue_head(feat).squeeze(-1), cont_target)",
      "losses[\"continue\"] = F.binary_cross_entropy_with_logits("
      "self.continue_head(feat * (torch.arange(feat.shape[-1]) < post[\"deter\"].shape[-1])).squeeze(-1), cont_target)"),
    H("behavior.slow_critic_is_the_critic", "slow = copy.deepcopy(module)\n    for p in slow.parameters():\n"
      "        p.requires_grad_(False)", "slow = module"),
    H("behavior.weights_cumsum", "return torch.cumprod(gamma * conts, 0) / gamma", "return torch.cumsum(gamma * conts, 0) / gamma"),
    H("behavior.critic_target_is_slow_value", "ce = -twohot_log_prob(log_probs, returns.detach()[None], bins)",
      "ce = -twohot_log_prob(log_probs, slow_values.detach(), bins)"),
    H("agent.retnorm_on_advantages",
      "low, high = ema_percentiles(*moments, returns, d.retnorm_decay, d.retnorm_low, d.retnorm_high)",
      "low, high = ema_percentiles(*moments, returns - values[:-1], d.retnorm_decay, d.retnorm_low, d.retnorm_high)"),
    H("agent.start_terminal_from_is_first", 'for k in ("is_terminal", *self.batch_keys)}',
      'for k in ("is_terminal", *self.batch_keys)} | {"is_terminal": data["is_first"][:, t - last:].reshape(-1)}'),
    H("agent.imag_last_takes_the_first_steps", "post = {k: post[k][:, -last:] for k in",
      "post = {k: post[k][:, :last] for k in"),
    H("agent.act_ignores_is_first",
      'self.wm.rssm.obs_step({"deter": deter, "stoch": stoch}, prev_action, embed, is_first,',
      'self.wm.rssm.obs_step({"deter": deter, "stoch": stoch}, prev_action, embed, torch.zeros_like(is_first),'),
    H("agent.values_from_last_head", "values = head_values.mean(0)  # [H+1, N]", "values = head_values[-1]"),
    H("agent.imagination_from_prior_mode",
      'traj = self.wm.rssm.imagine(start, policy, self.cfg.dreamer.horizon, noise=noise["stoch"])',
      "traj = self.wm.rssm.imagine({**start, \"stoch\": start[\"stoch\"].detach() * 0 + "
      "F.one_hot(start[\"stoch\"].argmax(-1), start[\"stoch\"].shape[-1]).float()}, policy, "
      "self.cfg.dreamer.horizon, noise=noise[\"stoch\"])"),
    H("config.value_bootstrap", "value_bootstrap: float = ranged(0.5,", "value_bootstrap: float = ranged(1.0,"),
]

# Fast paths: the one-hot first layers, the fused critic loss and the critic heads on their own rows.
# Each must give the dense / plain numbers; a mutant that breaks that equality (or a gradient) must fail
# a test. Run against the dreamer tests plus test_trust_gate.py, which holds the bootstrapped critic
# heads' tests (``--tests`` adds files).
FAST: list[Mutant] = [
    M("networks.onehot_no_group_offset",
      "return idx + torch.arange(groups.shape[-2], device=groups.device) * groups.shape[-1]", "return idx",
      group="fast"),
    M("networks.onehot_accepts_soft_groups", "tol: float = 1e-5", "tol: float = 0.6", group="fast"),
    M("networks.onehot_block_with_gradient", "if width <= 0 or width % classes or feat.requires_grad:",
      "if width <= 0 or width % classes:", group="fast"),
    M("networks.project_drops_dense_part",
      "return F.linear(x.dense, weight[:, :d]) + selected.reshape(*lead, weight.shape[0])",
      "return selected.reshape(*lead, weight.shape[0])", group="fast"),
    M("networks.selected_rows_backward_unsorted", "order = torch.argsort(flat, stable=True)",
      "order = torch.arange(flat.shape[0], device=flat.device)", group="fast"),
    M("behavior.fused_regulariser_toward_returns", "reg = lse - target_logit(slow_below, slow_above)",
      "reg = lse - target_logit(ret_below, ret_above)", group="fast"),
    M("behavior.fused_gradient_not_averaged", "c_ce = grad_ce * w / (h * n)", "c_ce = grad_ce * w", group="fast"),
    M("behavior.fused_gradient_target_sign", "grad.scatter_add_(-1, index, (-(1.0 - above) * c).unsqueeze(-1))",
      "grad.scatter_add_(-1, index, ((1.0 - above) * c).unsqueeze(-1))", group="fast"),
    M("behavior.fused_weights_swapped", "return (1.0 - above) * lo + above * hi", "return above * lo + (1.0 - above) * hi",
      group="fast"),
    M("networks.member_slice_first_layer_rows",
      "k, rows = len(picked), slice(picked.start * self.units, picked.stop * self.units)",
      "k, rows = len(picked), slice(0, len(picked) * self.units)", group="fast"),
    # the critic heads on their own rows and the ensemble trained only where it is read (2026-11-26)
    M("behavior.own_rows_takes_the_other_rows", "order = torch.sort((~kept).to(torch.int8), dim=1, stable=True)",
      "order = torch.sort(kept.to(torch.int8), dim=1, stable=True)", group="fast"),
    M("behavior.own_rows_unweighted", "torch.where(valid, head_weight.gather(1, order),",
      "torch.where(valid, torch.ones_like(head_weight).gather(1, order),", group="fast"),
    M("behavior.rows_loss_not_rescaled", "w = (weight.detach() * (h * m / total)).contiguous()",
      "w = weight.detach().contiguous()", group="fast"),
    M("networks.forward_rows_first_member_weights",
      "firsts.append(project(taken, self.first.weight[k * self.units:(k + 1) * self.units])",
      "firsts.append(project(taken, self.first.weight[:self.units])", group="fast"),
    M("agent.own_rows_values_not_written",
      "values.scatter_(2, spread(index), twohot_decode(own_logits.detach(), self.wm.bins))",
      "values.scatter_(2, spread(index), torch.zeros_like(twohot_decode(own_logits.detach(), self.wm.bins)))",
      group="fast"),
    M("layer.uncomputed_part_reported", "parts = [part if bool(torch.isfinite(signal).any()) else",
      "parts = [part if True else", group="fast"),
]


# The advice trust: its maths in lore/prior/trust.py and where PriorLayer applies it. Written after
# the trust tests; run against the same test files (test_trust_gate.py holds the trust tests).
PRIOR: list[Mutant] = [
    M("trust.value_z_sign", "return ((advised - mean) / (std + min_gap))", "return ((mean - advised) / (std + min_gap))",
      group="prior"),
    M("trust.value_z_no_floor", "return ((advised - mean) / (std + min_gap))",
      "return ((advised - mean) / (std + 1e-12))", group="prior"),
    M("trust.best_action_not_unanimous", "return best, unanimous & (top2[:, 0] - top2[:, 1] > min_gap)",
      "return best, (top2[:, 0] - top2[:, 1] > min_gap)", group="prior"),
    M("trust.best_action_no_margin", "return best, unanimous & (top2[:, 0] - top2[:, 1] > min_gap)",
      "return best, unanimous", group="prior"),
    M("trust.no_gain", "x = max(min(gain * mean_z, 60.0), -60.0)", "x = max(min(mean_z, 60.0), -60.0)", group="prior"),
    M("trust.no_dead_zone", "return math.copysign(max(abs(t) - width, 0.0), t)", "return t", group="prior"),
    M("trust.pooled_variance_drops_control",
      "within = max(qa - wa * ma * ma, 0.0) + max(qc - wc * mc * mc, 0.0)", "within = max(qa - wa * ma * ma, 0.0)",
      group="prior"),
    M("trust.no_minimum_episodes", "if min(wa, wc) < self.min_episodes - 1e-6:", "if min(wa, wc) < 1e-6:",
      group="prior"),
    M("trust.episodes_all_advised", 'st = self.stats["control" if control else "advised"]',
      'st = self.stats["advised"]', group="prior"),
    M("trust.ema_not_bias_corrected",
      "return 0.0 if self._count[name] == 0 else self._ema[name] / (1.0 - self.decay ** self._count[name])",
      "return 0.0 if self._count[name] == 0 else self._ema[name]", group="prior"),
    M("trust.episode_evidence_ignored",
      "return (self.value_weight * self.mean_z(name) + dead_zone(self.episodes.t_statistic(), self.episode_dead_zone)",
      "return (self.value_weight * self.mean_z(name) + 0.0", group="prior"),
    M("trust.failure_z_sign", "return (failed_ctrl / n_ctrl - failed_adv / n_adv) / se",
      "return (failed_adv / n_adv - failed_ctrl / n_ctrl) / se", group="prior"),
    M("trust.failure_z_no_pseudo_counts", "pooled = (failed_adv + failed_ctrl + 1.0) / (n_adv + n_ctrl + 2.0)",
      "pooled = (failed_adv + failed_ctrl) / (n_adv + n_ctrl)", group="prior"),
    M("trust.harm_only_credits_benefit", "return min(dead_zone(z, width), 0.0)", "return dead_zone(z, width)",
      group="prior"),
    M("trust.truncation_is_failure", "return bool(terminated) and float(last_reward) <= 0.0",
      "return float(last_reward) <= 0.0", group="prior"),
    M("trust.act_scale_unclamped", "return (2.0 * trust).clamp(max=1.0)", "return 2.0 * trust", group="prior"),
    M("trust.rows_without_advice_scaled", "table = torch.tensor([1.0] + [self.value(n) for n in ADVICE_SOURCES]",
      "table = torch.tensor([0.5] + [self.value(n) for n in ADVICE_SOURCES]", group="prior"),
    M("layer.absorb_uninformed_advice", "return (2.0 * self._trust_per_row(source, rows, device) - 1.0).clamp(0.0, 1.0)",
      "return (2.0 * self._trust_per_row(source, rows, device)).clamp(0.0, 1.0)", group="prior"),
    # PriorLayer.absorption's loss is kl_control.absorption_loss
    M("layer.absorption_target_not_detached",
      "target = (logits + (prior.detach().to(logits.dtype) / temperature) * beta.detach()[:, None]).detach()",
      "target = (logits + (prior.detach().to(logits.dtype) / temperature) * beta.detach()[:, None])", group="prior",
      path=FILES["kl_control"]),
    M("layer.absorb_weight_ignored", "loss = lambda_kl * masked_mean(torch.relu(kl - delta) * weight, mask)",
      "loss = lambda_kl * masked_mean(torch.relu(kl - delta), mask)", group="prior", path=FILES["kl_control"]),
    M("layer.trust_scale_ignored", "beta = beta * self.trust_scale(source, batch, device)", "beta = beta * 1.0",
      group="prior"),
    M("layer.gate_reads_value_spread", "return parts[0], parts", "return parts[1], parts", group="prior"),
]


# --------------------------------------------------------------------------- running

PRELOAD = ("torch", "numpy", "gymnasium", "yaml", "tqdm", "tensordict", "pytest", "_pytest.assertion.rewrite")


@dataclass
class Result:
    name: str
    path: str
    status: str            # killed | survived | timeout | stale
    seconds: float
    group: str = "main"
    first_failure: str = ""


def validate(mutants: list[Mutant]) -> list[str]:
    """Every snippet applies (uniquely) and the mutated file still parses; returns the problems."""
    problems, cache = [], {}
    for mutant in mutants:
        text = cache.setdefault(mutant.path, (REPO / mutant.path).read_text())
        try:
            new = mutant.apply(text)
        except StaleMutant as exc:
            problems.append(str(exc))
            continue
        if new == text:
            problems.append(f"{mutant.name}: the mutation changes nothing")
            continue
        try:
            ast.parse(new)
        except SyntaxError as exc:
            problems.append(f"{mutant.name}: mutated file does not parse: {exc}")
    names = [m.name for m in mutants]
    problems += [f"duplicate mutant name {n}" for n in sorted({n for n in names if names.count(n) > 1})]
    return problems


def make_workspace(tests: list[str]) -> Path:
    """Scratch copy of lore/ (sources only, no bytecode), the test files and pytest's config."""
    ws = Path(tempfile.mkdtemp(prefix="lore-mutants-"))
    shutil.copytree(REPO / "lore", ws / "lore", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for rel in (*SUPPORT_FILES, *tests):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, ws / rel)
    return ws


def _first_failure(log: str) -> str:
    for line in log.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:200]
    for line in log.splitlines():
        if "Error" in line or "error" in line:
            return line.strip()[:200]
    return log.strip().splitlines()[-1][:200] if log.strip() else ""


def _pytest_args(tests: list[str]) -> list[str]:
    # pytest-timeout off: its wall-clock limit would turn a run starved by other jobs into a "kill"; -n 0 overrides
    # pyproject's xdist workers, which would import lore afresh instead of in the forked child that checks where from
    return ["-x", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:timeout", "--no-header", "-W", "ignore",
            *tests]


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a running process has used, from /proc; None where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_with_cpu_limit(pid: int, limit: float) -> int | None:
    """Wait for child ``pid``; SIGKILL it (and return None) once it has used ``limit`` CPU seconds.

    CPU time, not wall time: on a shared machine a nice'd run can be starved for minutes by other
    jobs, and a starved run must not count as a mutant killed by a timeout. Where /proc is missing
    the limit applies to wall time instead.
    """
    start = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        used = _cpu_seconds(pid)
        if (used if used is not None else time.monotonic() - start) > limit:
            os.kill(pid, signal.SIGKILL)  # our own child
            os.waitpid(pid, 0)
            return None
        time.sleep(0.05)


def _run_forked(ws: Path, tests: list[str], timeout: float, log_path: Path) -> tuple[str, str]:
    """Fork, import the mutated ``lore`` from ``ws`` in the child and run pytest there."""
    pid = os.fork()
    if pid == 0:  # child
        code = 98
        try:
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(ws)
            sys.path.insert(0, str(ws))
            sys.dont_write_bytecode = True
            import pytest

            code = int(pytest.main(_pytest_args(tests)))
            lore = sys.modules.get("lore")
            if lore is None or not str(Path(lore.__file__).resolve()).startswith(str(ws.resolve())):
                print(f"\nMUTATION-CHECK: lore was imported from {getattr(lore, '__file__', None)}, not {ws}")
                code = 97
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    status = _wait_with_cpu_limit(pid, timeout)
    if status is None:
        return "timeout", f"more than {timeout:.0f} CPU seconds"
    code = os.waitstatus_to_exitcode(status)
    log = log_path.read_text(errors="replace")
    if code in (97, 98):
        raise RuntimeError(f"mutation-check child failed to run (code {code}):\n{log[-3000:]}")
    return ("survived" if code == 0 else "killed"), ("" if code == 0 else _first_failure(log))


def _run_subprocess(ws: Path, tests: list[str], timeout: float, log_path: Path) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ws), "PYTHONDONTWRITEBYTECODE": "1"}
    check = subprocess.run([sys.executable, "-c", "import lore; print(lore.__file__)"], cwd=ws, env=env,
                           capture_output=True, text=True)
    if not check.stdout.strip().startswith(str(ws)):
        raise RuntimeError(f"lore imports from {check.stdout.strip() or check.stderr}, not from {ws}")
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", *_pytest_args(tests)], cwd=ws, env=env,
                                stdout=log_file, stderr=subprocess.STDOUT)
        status = _wait_with_cpu_limit(proc.pid, timeout)
    proc.returncode = -9 if status is None else os.waitstatus_to_exitcode(status)
    if status is None:
        return "timeout", f"more than {timeout:.0f} CPU seconds"
    log = log_path.read_text(errors="replace")
    return ("survived" if proc.returncode == 0 else "killed"), ("" if proc.returncode == 0 else _first_failure(log))


def run(mutants: list[Mutant], tests: list[str], fork: bool, timeout: float, verbose: bool) -> list[Result]:
    ws = make_workspace(tests)
    runner = _run_forked if fork else _run_subprocess
    if fork:
        import importlib

        import torch

        torch.set_num_threads(1)
        for name in PRELOAD:
            importlib.import_module(name)
        assert "lore" not in sys.modules, "the parent must not import lore (the child imports the mutant)"
    results = []
    try:
        log_path = ws / "pytest.log"
        start = time.monotonic()
        status, failure = runner(ws, tests, timeout, log_path)
        if status != "survived":
            print(f"the UNMUTATED code fails the tests ({status}): {failure}\n{log_path.read_text()[-3000:]}")
            sys.exit(2)
        print(f"unmutated code: tests pass ({time.monotonic() - start:.1f} s); {len(mutants)} mutants\n")
        for i, mutant in enumerate(mutants, 1):
            target = ws / mutant.path
            original = (REPO / mutant.path).read_text()
            try:
                target.write_text(mutant.apply(original))
            except StaleMutant as exc:
                results.append(Result(mutant.name, mutant.path, "stale", 0.0, mutant.group, str(exc)))
                print(f"[{i:3d}/{len(mutants)}] STALE     {mutant.name}: {exc}")
                continue
            start = time.monotonic()
            try:
                status, failure = runner(ws, tests, timeout, log_path)
            finally:
                target.write_text(original)
            seconds = time.monotonic() - start
            results.append(Result(mutant.name, mutant.path, status, seconds, mutant.group, failure))
            detail = f"  <- {failure}" if verbose and failure else ""
            print(f"[{i:3d}/{len(mutants)}] {status.upper():9s} {mutant.name} ({seconds:.1f} s){detail}", flush=True)
    finally:
        shutil.rmtree(ws, ignore_errors=True)
    return results


def summarise(results: list[Result]) -> dict:
    scored = [r for r in results if r.status != "stale"]
    killed = [r for r in scored if r.status in ("killed", "timeout")]
    by_file: dict[str, list[int]] = {}
    by_group: dict[str, list[int]] = {}
    for r in scored:
        for table, key in ((by_file, r.path), (by_group, r.group)):
            entry = table.setdefault(key, [0, 0])
            entry[0] += r.status in ("killed", "timeout")
            entry[1] += 1
    return {
        "killed": len(killed),
        "total": len(scored),
        "score": len(killed) / len(scored) if scored else float("nan"),
        "stale": [r.name for r in results if r.status == "stale"],
        "survivors": [r.name for r in scored if r.status == "survived"],
        "by_file": {k: {"killed": v[0], "total": v[1]} for k, v in sorted(by_file.items())},
        "by_group": {k: {"killed": v[0], "total": v[1]} for k, v in sorted(by_group.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="run mutants whose name contains any of these")
    parser.add_argument("--group", choices=("main", "heldout", "fast", "prior", "all"), default="all",
                        help="main: mutants written before the tests; heldout: mutants written after the tests; all: both")
    parser.add_argument("--list", action="store_true", help="list the mutants, validate the snippets and exit")
    parser.add_argument("--tests", nargs="*", default=list(DEFAULT_TESTS), help="test files to run per mutant")
    parser.add_argument("--no-fork", action="store_true", help="a fresh python subprocess per mutant (slower)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="CPU seconds per mutant before it counts as killed (the unmutated tests need ~10)")
    parser.add_argument("--json", type=Path, default=None, help="write the per-mutant results here")
    parser.add_argument("--min-score", type=float, default=0.0, help="exit 1 when the score is below this")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the first failing test per mutant")
    args = parser.parse_args(argv)

    pool = {"main": MUTANTS, "heldout": HELDOUT, "fast": FAST, "prior": PRIOR,
            "all": MUTANTS + HELDOUT + FAST + PRIOR}[args.group]
    mutants = pool if not args.only else [m for m in pool if any(s in m.name for s in args.only)]
    problems = validate(mutants)
    if args.list:
        for m in mutants:
            print(f"{m.name:50s} {m.path}")
        print(f"\n{len(mutants)} mutants; " + ("all snippets apply" if not problems else f"{len(problems)} problems:"))
        for p in problems:
            print("  " + p)
        return 2 if problems else 0
    if problems:
        print("stale mutants (the source changed; update MUTANTS):\n  " + "\n  ".join(problems))
        return 2
    tests = [t for t in args.tests if (REPO / t).exists()]
    missing = sorted(set(args.tests) - set(tests))
    if missing:
        print(f"note: test file(s) {missing} do not exist; running {tests}")
    results = run(mutants, tests, fork=not args.no_fork, timeout=args.timeout, verbose=args.verbose)
    summary = summarise(results)
    print(f"\nmutation score: {summary['killed']}/{summary['total']} killed = {100 * summary['score']:.1f}%")
    for path, entry in [*summary["by_group"].items(), *summary["by_file"].items()]:
        print(f"  {path:28s} {entry['killed']:3d}/{entry['total']:3d}")
    if summary["survivors"]:
        print("survivors:\n  " + "\n  ".join(summary["survivors"]))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "tests": tests,
                                         "results": [asdict(r) for r in results]}, indent=1))
    return 0 if summary["score"] >= args.min_score else 1


if __name__ == "__main__":
    sys.exit(main())
