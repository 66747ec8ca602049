"""The sandbox for untrusted LLM-written feature code (``docs/sandbox.md`` has the threat model).

A security boundary of its own, kept apart from the LLM client (:mod:`lore.llm` imports from here,
never the other way round). The parent side:

* :mod:`lore.sandbox.runner`: :class:`FeatureSandbox`, the worker pool (batches, deadlines, cache);
* :mod:`lore.sandbox.process`: one worker process (start, handshake, framed I/O, kill);
* :mod:`lore.sandbox.validation`: layer 3, the checks of a worker's untrusted reply;
* :mod:`lore.sandbox.streaks`: disabling code that keeps failing.

Shared by both sides (standard library and numpy only):

* :mod:`lore.sandbox.rules`: the allow-lists and deny-lists;
* :mod:`lore.sandbox.checker`: layer 1, the static check (:func:`check_source`);
* :mod:`lore.sandbox.addresses`: text without memory addresses;
* :mod:`lore.sandbox.results`: the failure kinds and the conversion of what the code returned;
* :mod:`lore.sandbox.protocol`: framing, message layout and size caps between the two.

The worker side, loaded by file path in a fresh interpreter (no ``lore`` package code runs there):

* :mod:`lore.sandbox.worker`: the worker's entry point, serving requests;
* :mod:`lore.sandbox.namespace`: the restricted globals feature code runs in;
* :mod:`lore.sandbox.hardening` and :mod:`lore.sandbox.seccomp`: the process's confinement.
"""

from lore.sandbox.checker import check_source
from lore.sandbox.process import SandboxError
from lore.sandbox.results import FAILURE_KINDS
from lore.sandbox.runner import FeatureSandbox, code_id
from lore.sandbox.validation import FeatureResult

__all__ = ["FAILURE_KINDS", "FeatureResult", "FeatureSandbox", "SandboxError", "check_source", "code_id"]
