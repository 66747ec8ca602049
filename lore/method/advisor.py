"""The method's advisor: LLM advice, feature code, planning and distillation.

``LLMBridge`` (held by :class:`lore.method.agent.LoReAgent`) turns the controller's answers into the
per-env tensors the agent consumes at act time (prior logits, mask, confidence, sandboxed features),
asks for new advice (at most one background call per env step), runs CEM planning when enabled and
feeds the distillation monitor. With ``llm.backend: none`` it
produces zeros and does nothing else, so ``rl_only`` runs pay nothing for it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from lore.config import RunConfig
from lore.prior.trust import source_code

log = logging.getLogger(__name__)


class LLMBridge:
    def __init__(self, cfg: RunConfig, run_dir: Path, envs, agent):
        self.cfg = cfg
        self.envs = envs
        self.agent = agent
        self.num_envs = envs.num_envs
        self.num_actions = int(envs.action_space.n)
        self.n_features = cfg.features.n_features
        self.enabled = cfg.llm.backend != "none"
        self.controller = None
        self.sandbox = None
        self.planner = None
        self.monitor = None
        self.feature_code: str | None = None
        self.feature_code_id: str | None = None
        self.feature_failures = 0
        self.dropped_feature_codes: set[str] = set()  # code ids the sandbox disabled after repeated failures
        self.act_steps = 0
        self.last_latent: torch.Tensor | None = None
        self.last_llm: dict | None = None
        self.current_advice: list = [None] * self.num_envs
        self.compared_keys: list = [None] * self.num_envs
        if not self.enabled:
            return
        from lore.llm.controller import LLMController
        from lore.llm.prompt import features_spec

        spec = features_spec(envs.family, self.n_features) if cfg.features.enabled else None
        self.controller = LLMController(cfg, run_dir, envs.action_names, envs.family, features_spec=spec)
        if cfg.features.enabled:
            from lore.sandbox import FeatureSandbox

            self.sandbox = FeatureSandbox.from_config(cfg.features)
        if cfg.plan.enabled:
            from lore.plan.planner import Planner

            self.planner = Planner(cfg.plan, self.num_actions, cfg.dreamer.gamma, seed=cfg.seed)
        if cfg.distill.enabled:
            from lore.prior.distill import DistillationMonitor

            self.monitor = DistillationMonitor(cfg.distill)
            self.controller.set_surrogate(self._surrogate)
            self.controller.on_heldout(self._heldout)

    # ------------------------------------------------------------------ act-time inputs
    def empty_llm_row(self) -> dict:
        return {
            "llm_prior_logits": np.zeros(self.num_actions, np.float32),
            "llm_mask": np.float32(0.0),
            "llm_confidence": np.float32(0.0),
            "llm_features": np.zeros(self.n_features, np.float32),
            "llm_features_mask": np.float32(0.0),
            "llm_source": np.float32(0.0),
        }

    def inputs(self, env_step: int) -> dict[str, np.ndarray]:
        n, a = self.num_envs, self.num_actions
        out = {
            "prior_logits": np.zeros((n, a), np.float32),
            "mask": np.zeros(n, np.float32),
            "confidence": np.zeros(n, np.float32),
            "features": np.zeros((n, self.n_features), np.float32),
            "features_mask": np.zeros(n, np.float32),
            "source": np.zeros(n, np.float32),
        }
        self.current_plans: list = [None] * n
        self.current_advice: list = [None] * n
        if self.controller is None:
            self.last_llm = out
            return out
        for i in range(n):
            self._apply_current(i, env_step, out)
        if self.sandbox is not None and self.feature_code is not None:
            results = self.sandbox.run_batch(self.feature_code, [self.envs.state_snapshot(i) for i in range(n)])
            for i, res in enumerate(results):
                if res.ok:
                    out["features"][i] = res.features
                    out["features_mask"][i] = 1.0
                else:
                    self.feature_failures += 1
            self._drop_feature_code_if_disabled()
        self.last_llm = out
        return out

    def _apply_current(self, i: int, env_step: int, out: dict[str, np.ndarray]) -> None:
        """Env ``i``'s row of ``out`` from the advice that applies to its state now (left as is without)."""
        advice = self.controller.current(i, self.envs.state_key(i), env_step)
        if advice is None:
            return
        self.current_advice[i] = advice
        out["prior_logits"][i] = advice.prior_logits
        out["mask"][i] = 1.0
        out["confidence"][i] = advice.confidence
        out["source"][i] = source_code(advice.source)
        self.current_plans[i] = getattr(advice, "plan", None)
        code = getattr(advice, "features_code", None)
        if code and self.sandbox is not None and code != self.feature_code:
            self._adopt_feature_code(code)  # runs from the next step: this one's features are embedded

    def consult(self, env_step: int, prefill: bool):
        """The ``consult`` callback of :meth:`lore.method.agent.LoReAgent.act` for this step, or None.

        With ``llm.ask_before_act`` (and advice that something acts on), the controller is asked about the
        state being acted in, with this step's gate ``u``; envs that had no advice at :meth:`inputs` and got an
        answer in time have their rows of the step's inputs filled in place, so the replay stores what the act
        used. Prefill acts at random: no advice is asked for."""
        if prefill or not self.asks_before_act:
            return None

        def consult(u: torch.Tensor | None) -> dict[str, np.ndarray]:
            out = self.last_llm
            gate = self.gate_values(u if u is not None else torch.zeros(self.num_envs))
            self._ask(env_step, gate)
            for i in range(self.num_envs):
                if out["mask"][i] == 0:
                    self._apply_current(i, env_step, out)
            return {k: out[k] for k in ("prior_logits", "mask", "confidence", "source")}

        return consult

    @property
    def asks_before_act(self) -> bool:
        return self.controller is not None and self.cfg.llm.ask_before_act and self.advice_used()

    def eval_inputs(self, envs: list) -> dict[str, np.ndarray] | None:
        """Evaluation sees the adopted feature program (an observation transform) but no LLM prior.

        ``envs``: the eval envs stepped side by side; one sandbox round trip for all of them.
        """
        if self.sandbox is None or self.feature_code is None:
            return None
        results = self.sandbox.run_batch(self.feature_code, [env.state_snapshot() for env in envs])
        self._drop_feature_code_if_disabled()
        return {"features": np.stack([res.features for res in results]).astype(np.float32),
                "features_mask": np.asarray([1.0 if res.ok else 0.0 for res in results], np.float32)}

    def _adopt_feature_code(self, code: str) -> None:
        """A new feature program is adopted only if the sandbox accepts it (static check) and it was
        not dropped before (the LLM may keep sending a program that keeps timing out)."""
        from lore.sandbox import code_id

        if code_id(code) in self.dropped_feature_codes:
            return
        if self.sandbox.check(code) is None:
            self.feature_code = code
            self.feature_code_id = code_id(code)
        else:
            self.feature_failures += 1

    def _drop_feature_code_if_disabled(self) -> None:
        """The sandbox disables code after repeated failures (each timeout costs ``timeout_s`` per
        step): stop running it; features are zeros with mask 0 until a new program is adopted."""
        if self.feature_code is None or not self.sandbox.is_disabled(self.feature_code):
            return
        log.warning("feature program %s dropped after repeated failures in the sandbox", self.feature_code_id)
        self.dropped_feature_codes.add(self.feature_code_id)
        self.feature_code = None
        self.feature_code_id = None

    # ------------------------------------------------------------------ after acting
    def advice_used(self) -> bool:
        """Whether anything acts on the advice itself (mixing, the plan, PriorNet's distillation).

        Without, the LLM is asked only for feature code (the ``features`` arm), and not again once a feature
        program runs: its advice would go unread.
        """
        c = self.cfg
        return c.prior.enabled or c.plan.enabled or c.distill.enabled

    def gate_values(self, u: torch.Tensor | None = None) -> np.ndarray:
        """The controller's trigger per env, in [0, 1]: state uncertainty u(s) of this act step (``u``, or the
        prior layer's last) times the trust in the LLM's answers (asking is worth its cost where the agent is
        unsure and the answers would act)."""
        layer = self.agent.prior
        u = layer.last_u if u is None else u
        if self.cfg.prior.trust:
            u = u * layer.trust.value("llm")
        return u.numpy()

    def after_act(self, env_step: int, out, actions: np.ndarray, beta: np.ndarray, prefill: bool) -> None:
        self._env_step = env_step
        self.last_latent = out.latent
        self.act_steps += 1
        if self.controller is None:
            return
        if self.monitor is not None and not self.monitor.trusted():
            self._compare_fresh_answers(out)
        if prefill:
            return  # random prefill actions: advice would be wasted budget
        if not self.advice_used() and self.feature_code is not None:
            return  # only the feature program was wanted, and one is running
        if not self.asks_before_act:
            self._ask(env_step, self.gate_values())

    def _ask(self, env_step: int, gate: np.ndarray) -> None:
        """Offer every env's current state to the controller (it asks about at most one)."""
        from lore.llm.controller import EnvQuery

        envs = self.envs
        queries = [
            EnvQuery(env_index=i, state_key=envs.state_key(i),
                     describe=(lambda i=i: envs.describe(i)), snapshot=(lambda i=i: envs.state_snapshot(i)),
                     beta=float(gate[i]), is_first=bool(self._is_first[i]) if hasattr(self, "_is_first") else False,
                     reward=0.0, may_ask=not bool(self.agent.prior.control[i]))  # control: advice unused
            for i in range(self.num_envs)
        ]
        self.controller.maybe_request(env_step, queries)

    def on_reset(self, is_first: np.ndarray) -> None:
        self._is_first = is_first.copy()
        self._env_step = 0

    def on_env_step(self, env_step: int, actions: np.ndarray, reward: np.ndarray, done: np.ndarray) -> None:
        self._is_first = done.copy()
        if self.controller is None:
            return
        for i in range(self.num_envs):
            self.controller.observe_action(i, int(actions[i]), self.envs.state_key(i), float(reward[i]), bool(done[i]))

    def maybe_plan(self, env_step: int, out, actions: np.ndarray) -> np.ndarray:
        if self.planner is None or not self.planner.should_plan(self.act_steps):
            return actions
        llm = self.last_llm or {}
        plan = self.planner.plan(self.agent, out.latent, llm_plan=self.current_plans,
                                 prior_logits=torch.as_tensor(llm.get("prior_logits")),
                                 prior_mask=torch.as_tensor(llm.get("mask")),
                                 policy_action=out.action, policy_logits=out.logits_mix)
        return plan.action.cpu().numpy()

    # ------------------------------------------------------------------ distillation
    def _surrogate(self, env_index: int):
        if self.monitor is None or not self.monitor.trusted() or self.last_latent is None:
            return None
        with torch.no_grad():
            logits = self.agent.prior_net_logits(self.last_latent[env_index:env_index + 1])[0]
        self.monitor.record_saved()
        return logits.cpu().numpy().astype(np.float32)

    def _heldout(self, surrogate_logits, llm_logits) -> None:
        """A held-out check made while PriorNet is trusted: keep measuring it against the LLM."""
        if self.monitor is not None:
            self.monitor.observe(torch.as_tensor(surrogate_logits), torch.as_tensor(llm_logits))

    def _compare_fresh_answers(self, out) -> None:
        """Before trust: each fresh LLM answer (not yet in replay, so held out) is compared with PriorNet."""
        for i, advice in enumerate(self.current_advice):
            if advice is None or advice.source != "llm":
                continue
            key = self.envs.state_key(i)
            if self.compared_keys[i] == key:
                continue
            self.compared_keys[i] = key
            with torch.no_grad():
                net = self.agent.prior_net_logits(out.latent[i:i + 1])[0]
            self.monitor.observe(net.cpu(), torch.as_tensor(advice.prior_logits))

    # ------------------------------------------------------------------ reporting / state
    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.controller is not None:
            out.update({k: float(v) for k, v in self.controller.counters().items()})
        if self.sandbox is not None:
            out.update({f"sandbox_{k}": float(v) for k, v in self.sandbox.counters().items()})
            out["feature_failures"] = float(self.feature_failures)
            out["feature_program_adopted"] = float(self.feature_code is not None)
            out["feature_programs_dropped"] = float(len(self.dropped_feature_codes))
        if self.planner is not None:
            out.update(self.planner.metrics())
        if self.monitor is not None:
            out.update(self.monitor.metrics())
        return out

    def state_dict(self) -> dict:
        return {
            "controller": self.controller.state_dict() if self.controller is not None else None,
            "planner": self.planner.state_dict() if self.planner is not None else None,
            "monitor": self.monitor.state_dict() if self.monitor is not None else None,
            "feature_code": self.feature_code,
            "feature_failures": self.feature_failures,
            "dropped_feature_codes": sorted(self.dropped_feature_codes),
            "act_steps": self.act_steps,
            "is_first": getattr(self, "_is_first", None),
        }

    def load_state_dict(self, state: dict) -> None:
        if self.controller is not None and state["controller"] is not None:
            self.controller.load_state_dict(state["controller"])
        if self.planner is not None and state["planner"] is not None:
            self.planner.load_state_dict(state["planner"])
        if self.monitor is not None and state["monitor"] is not None:
            self.monitor.load_state_dict(state["monitor"])
        self.dropped_feature_codes = set(state.get("dropped_feature_codes", ()))  # absent in older checkpoints
        if state["feature_code"] is not None and self.sandbox is not None:
            self._adopt_feature_code(state["feature_code"])
        self.feature_failures = state["feature_failures"]
        self.act_steps = state["act_steps"]
        if state.get("is_first") is not None:
            self._is_first = state["is_first"]

    def settle(self) -> None:
        """End of the run: LLM calls still in flight are applied or recorded as failures (LLMController.settle),
        so that the final metrics row that follows agrees with ``llm_calls.jsonl``."""
        if self.controller is not None:
            self.controller.settle()

    def close(self) -> None:
        if self.controller is not None:
            self.controller.close()
        if self.sandbox is not None:
            self.sandbox.close()
