"""The sandbox for untrusted LLM-written feature code (``docs/sandbox.md`` has the threat model).

A security boundary of its own, kept apart from the LLM client (:mod:`lore.llm` imports from here,
never the other way round):

* :mod:`lore.sandbox.runner`: the parent side, :class:`FeatureSandbox` (worker pool, deadlines,
  validation of the replies, disabling code that keeps failing);
* :mod:`lore.sandbox.worker`: the static checker both sides share, and the worker process itself
  (loaded by file path in a fresh interpreter; standard library and numpy only, no ``lore`` import).
"""

from lore.sandbox.runner import FAILURE_KINDS, FeatureResult, FeatureSandbox, SandboxError, code_id
from lore.sandbox.worker import check_source

__all__ = ["FAILURE_KINDS", "FeatureResult", "FeatureSandbox", "SandboxError", "check_source", "code_id"]
