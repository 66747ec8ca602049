#!/usr/bin/env bash
# One-shot setup on a fresh machine: a .venv with LoRe and its workflow/test extras, plus the
# system packages the workflow needs (TeX Live, poppler, SLURM) when run as root.
# torch is pinned to the CPU wheel through .ci/constraints.txt so no multi-GB CUDA build is pulled;
# on a GPU cluster install with your own torch instead: pip install -e ".[workflow]".
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -qq --upgrade pip >/dev/null
# -qq keeps errors but drops warnings about the machine's own pip config (e.g. "Location ... is ignored"
# for a find-links folder that does not exist); ignoring UserWarning silences setuptools' editable-install
# banner ("be careful with folders ... same name as your package"), printed by the build backend every time.
PYTHONWARNINGS="ignore::UserWarning" \
  .venv/bin/python -m pip install -qq -c .ci/constraints.txt "torch==2.13.0" -e ".[workflow,test]"
if [ "$(id -u)" -eq 0 ]; then
  bash .ci/install-system.sh
else
  echo "setup: not root; install TeX Live, poppler-utils and (optionally) SLURM yourself: see .ci/install-system.sh" >&2
fi
