#!/usr/bin/env bash
# One-shot setup on a fresh machine: a .venv with LoRe and its workflow/test extras, plus the
# system packages the workflow needs (TeX Live, poppler, SLURM) when run as root, unless --no-system.
# torch is pinned to the CPU wheel through .ci/constraints.txt so no multi-GB CUDA build is pulled;
# on a GPU cluster install with your own torch instead: pip install -e ".[workflow]".
# Prints one line per step on stderr; pip's own output is kept to its errors.
set -euo pipefail
usage() {
  cat <<'USAGE'
usage: scripts/setup.sh [--no-system] [--help]

Creates .venv (Python >= 3.10, or $PYTHON) with LoRe, its workflow and test extras, and torch's CPU wheel.
As root it also installs the system packages the paper and the SLURM tests need (TeX Live, poppler,
SLURM, munge: .ci/install-system.sh).

  --no-system  skip the system packages: no TeX (run the workflow with --config paper=false), no SLURM
  --help       print this and exit
USAGE
}
SYSTEM=1
for arg in "$@"; do
  case "$arg" in
    --no-system) SYSTEM=0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup: error: unknown option '$arg' (options: --no-system, --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { echo "setup: $*" >&2; }
if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
else
  step "using the existing .venv ($(.venv/bin/python --version 2>&1))"
fi
.venv/bin/python -m pip install -qq --upgrade pip >/dev/null
# -qq keeps errors but drops warnings about the machine's own pip config (e.g. "Location ... is ignored"
# for a find-links folder that does not exist); ignoring UserWarning silences setuptools' editable-install
# banner ("be careful with folders ... same name as your package"), printed by the build backend every time.
pip_install() { PYTHONWARNINGS="ignore::UserWarning" .venv/bin/python -m pip install -qq -c .ci/constraints.txt "$@"; }
step "installing torch 2.13.0 (CPU wheel)"
pip_install "torch==2.13.0"
step "installing lore with its workflow and test extras (editable)"
pip_install -e ".[workflow,test]"
if [ "$SYSTEM" -eq 0 ]; then
  step "--no-system: no TeX Live, poppler or SLURM installed (run the workflow with --config paper=false)"
elif [ "$(id -u)" -eq 0 ]; then
  step "installing system packages (TeX Live, poppler, SLURM) where missing"
  bash .ci/install-system.sh
else
  step "not root; install TeX Live, poppler-utils and (optionally) SLURM yourself: see .ci/install-system.sh"
fi
step "done: run the tests with .venv/bin/python -m pytest -q"
