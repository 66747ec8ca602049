#!/usr/bin/env bash
# System packages for the workflow tests: TeX (the paper), poppler (pdftotext), SLURM + munge.
# Idempotent and non-interactive; installs only what is missing. Needs root (CI is root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# Minimal TeX Live set for paper/lore.tex: pdflatex + amsmath/graphicx (base),
# booktabs/hyperref/natbib/xcolor (recommended), Latin Modern/Times fonts (fonts-recommended).
PACKAGES=(
  texlive-latex-base texlive-latex-recommended texlive-fonts-recommended latexmk
  poppler-utils
  slurmctld slurmd slurm-client munge
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-system: all packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-system: need root to install: ${missing[*]}" >&2
  exit 1
fi

echo "install-system: installing ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
