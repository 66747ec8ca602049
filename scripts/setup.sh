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
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -c .ci/constraints.txt "torch==2.13.0" -e ".[workflow,test]"
if [ "$(id -u)" -eq 0 ]; then
  bash .ci/install-system.sh
else
  echo "setup: not root; install TeX Live, poppler-utils and (optionally) SLURM yourself: see .ci/install-system.sh" >&2
fi
