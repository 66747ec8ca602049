"""scripts/setup.sh's options: --help prints the usage, an unknown option is one error line (nothing installed)."""

from __future__ import annotations

import subprocess

from workflow_helpers import HANG_GUARD_S, REPO

SETUP = REPO / "scripts" / "setup.sh"


def _setup(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SETUP), *args], capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_help_prints_the_usage_and_names_no_system():
    proc = _setup("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: scripts/setup.sh")
    assert "--no-system" in proc.stdout and "paper=false" in proc.stdout and not proc.stderr


def test_an_unknown_option_is_one_line_and_installs_nothing():
    proc = _setup("--no-system", "--no-tex")
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip() == "setup: error: unknown option '--no-tex' (options: --no-system, --help)"
