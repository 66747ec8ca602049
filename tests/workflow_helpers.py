"""Shared helpers for the workflow tests: running Snakemake in a scratch working directory,
reading its dry-run plan, PDF text, and a single-node SLURM cluster for tests/test_slurm.py.

The Snakefile stays in the repository; ``--directory`` points Snakemake at a temporary working
directory, so results/, paper/generated/ and .snakemake/ of a test never touch the checkout.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

HANG_GUARD_S = 1800
"""Wall-clock limit of a subprocess or a wait in the tests: a guard against a hang, never a speed check (a loaded
2-core machine runs a job many times slower than an idle one). pytest-timeout's per-test limit is the same."""

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
CONFIG_DIR = REPO / "config"
VENV_BIN = Path(sys.executable).parent


def analysis_main(argv: list[str]) -> int:
    """The analysis command line: ``paper-macros`` and ``paper-build`` are :mod:`lore.paper.cli`'s, the other
    commands (``aggregate``, ``figures``, ``benchmark-report``) :mod:`lore.report.cli`'s."""
    from lore.paper.cli import COMMANDS as PAPER_COMMANDS
    from lore.paper.cli import main as paper_main
    from lore.report.cli import main as report_main

    return (paper_main if argv and argv[0] in PAPER_COMMANDS else report_main)(argv)


def snakemake_cmd(workdir: Path, *args: str, configfile: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir)]
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]
    return cmd + list(args)


def job_env(extra: dict | None = None) -> dict:
    """The test's environment with the venv's bin first on PATH (jobs call `lore`)."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MPLBACKEND", "Agg")
    env.update(extra or {})
    return env


def run_snakemake(workdir: Path, *args: str, configfile: Path | None = None, timeout: float = HANG_GUARD_S,
                  env: dict | None = None) -> subprocess.CompletedProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(snakemake_cmd(workdir, *args, configfile=configfile), capture_output=True, text=True,
                          timeout=timeout, env=job_env(env))


def child_cpu_s() -> float:
    """CPU seconds used so far by the finished child processes of this one (what a speed check may compare:
    unlike wall time, it does not grow when the machine is busy)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def path_without(programs: tuple[str, ...], shadow: Path) -> str:
    """``PATH`` with ``programs`` hidden: each folder that holds one is replaced by ``shadow/<n>``, a folder of
    links to everything else in it (e.g. a machine without TeX: ``path_without(("pdflatex", "latexmk"), ...)``)."""
    folders = []
    for i, folder in enumerate(job_env()["PATH"].split(os.pathsep)):
        if not folder or not any((Path(folder) / name).exists() for name in programs):
            folders.append(folder)
            continue
        copy = shadow / str(i)
        copy.mkdir(parents=True, exist_ok=True)
        for entry in Path(folder).iterdir():
            if entry.name not in programs and not (copy / entry.name).exists():
                (copy / entry.name).symlink_to(entry)
        folders.append(str(copy))
    return os.pathsep.join(folders)


def write_config(path: Path, base: str = "test.yaml", **changes) -> Path:
    """A copy of ``config/<base>`` with top-level keys replaced (``None`` deletes a key)."""
    data = yaml.safe_load((CONFIG_DIR / base).read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def job_counts(dry_run_output: str) -> dict[str, int]:
    """Parse the "Job stats" table of a dry run into {rule: count}."""
    counts: dict[str, int] = {}
    lines = dry_run_output.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Job stats:")
    except StopIteration:
        raise AssertionError(f"no 'Job stats:' in the dry-run output:\n{dry_run_output[-2000:]}") from None
    for line in lines[start + 3:]:
        match = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not match:
            break
        counts[match.group(1)] = int(match.group(2))
    return counts


def pdf_text(path: Path) -> str:
    return subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True,
                          check=True).stdout


def have_latex() -> bool:
    return shutil.which("pdflatex") is not None and shutil.which("pdftotext") is not None


# --------------------------------------------------------------------------- stand-in SLURM commands

_FAKE_SBATCH = """\
import json, os, sys
from pathlib import Path
state = Path(os.environ["FAKE_SLURM_DIR"])
jobs = state / "jobs.jsonl"
job_id = 1000 + (len(jobs.read_text().splitlines()) if jobs.exists() else 0)
with open(jobs, "a") as fh:
    fh.write(json.dumps({"id": job_id, "argv": sys.argv[1:]}) + "\\n")
print(job_id)
"""
_FAKE_SQUEUE = """\
import json, os
from pathlib import Path
jobs = Path(os.environ["FAKE_SLURM_DIR"]) / "jobs.jsonl"
for line in (jobs.read_text().splitlines() if jobs.exists() else []):
    print(f"{json.loads(line)['id']}|{os.environ.get('FAKE_SLURM_STATE', 'FAILED')}")
"""
_FAKE_SCONTROL = """\
print("MinJobAge               = 600 sec")
print("MaxArraySize            = 1001")
"""
_FAKE_SINFO = """\
print("PARTITION")
print("debug*")
"""


def fake_slurm(directory: Path, state: str = "FAILED") -> dict[str, str]:
    """Environment for Snakemake with stand-ins of the SLURM commands on PATH.

    ``sbatch`` records its arguments in ``<directory>/jobs.jsonl`` (read them back with
    :func:`fake_sbatch_calls`) and runs nothing; ``squeue`` reports every submitted job in ``state``;
    ``sinfo``/``scontrol`` answer what the executor plugin asks; ``sacct``, ``sacctmgr`` and ``sshare``
    fail as on a cluster without accounting. Enough to see, without a cluster, the exact sbatch call
    of a job and what the workflow does with a job state.
    """
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {"sbatch": _FAKE_SBATCH, "squeue": _FAKE_SQUEUE, "scontrol": _FAKE_SCONTROL, "sinfo": _FAKE_SINFO,
               "sacct": "raise SystemExit(1)\n", "sacctmgr": "raise SystemExit(1)\n",
               "sshare": "raise SystemExit(1)\n", "scancel": ""}
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)
    return {"PATH": os.pathsep.join([str(bin_dir), str(VENV_BIN), os.environ.get("PATH", "")]),
            "FAKE_SLURM_DIR": str(directory), "FAKE_SLURM_STATE": state}


def fake_sbatch_calls(directory: Path) -> list[list[str]]:
    """The argument lists of the ``sbatch`` calls recorded by :func:`fake_slurm`, in order."""
    import json

    jobs = directory / "jobs.jsonl"
    return [json.loads(line)["argv"] for line in jobs.read_text().splitlines()] if jobs.exists() else []


# --------------------------------------------------------------------------- SLURM

SLURM_DAEMONS = ("munged", "slurmctld", "slurmd")


def slurm_unavailable_reason() -> str | None:
    """Why this machine cannot start a single-node SLURM cluster (None if it can)."""
    if not sys.platform.startswith("linux"):
        return "SLURM needs Linux"
    if os.geteuid() != 0:
        return "starting slurmctld/slurmd/munged needs root (CI runs as root)"
    missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "sinfo") if not shutil.which(b)]
    if missing:
        return f"SLURM binaries missing: {', '.join(missing)} (run .ci/install-system.sh)"
    return None


class SlurmUnavailable(RuntimeError):
    """This machine could run SLURM, but not a test cluster of ours (the message says why)."""


CONF_MARKER = "# lore test cluster: written by tests/workflow_helpers.py"
URGENT_PARTITION = "urgent"
"""A partition whose jobs preempt (requeue) the jobs of the default partition `debug`."""
DEFAULT_CONF = Path("/etc/slurm/slurm.conf")


class SlurmCluster:
    """A one-node SLURM cluster on this machine, or the one already running.

    ``start()`` reuses a cluster that answers ``sinfo``; otherwise it writes a config at the
    default path (``/etc/slurm/slurm.conf``: job steps drop ``SLURM_CONF``, so srun inside a
    job only finds the default), starts munged, slurmctld and slurmd as root and waits for the
    node to be idle. ``stop()`` stops only the daemons this object started, by PID, and removes
    the config only if it wrote it. A foreign config at the default path is never touched.
    """

    def __init__(self, root: Path = Path("/tmp/lore-slurm"), conf: Path = DEFAULT_CONF):
        self.root = root
        self.conf = conf
        self.started: dict[str, int] = {}
        self.wrote_conf = False
        self.env: dict[str, str] = {}

    # -- queries
    def _answers(self) -> bool:
        try:
            proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            return False
        states = proc.stdout.split()
        return proc.returncode == 0 and any(s.rstrip("*~#") in ("idle", "mixed", "allocated") for s in states)

    def start(self, timeout: float = 60) -> SlurmCluster:
        if self.conf.exists() and self._answers():
            return self  # reuse a running cluster; we started nothing, so stop() leaves it alone
        if self.conf.exists() and CONF_MARKER not in self.conf.read_text():
            raise SlurmUnavailable(f"{self.conf} exists (not written by these tests) and no cluster answers "
                                   f"`sinfo`; start that cluster, or move the file away to let the test start one")
        # A fresh state directory: jobs of an earlier test cluster must not come back.
        shutil.rmtree(self.root / "state", ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._write_config()
            self._start_munge()
            self._spawn("slurmctld", ["slurmctld", "-D"])
            self._wait(lambda: "UP" in subprocess.run(["scontrol", "ping"], capture_output=True,
                                                      text=True).stdout,
                       timeout, "slurmctld to answer `scontrol ping`")
            self._spawn("slurmd", ["slurmd", "-D"])
            self._wait(self._answers, timeout, "the node to become idle")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.started.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.time() + 15
            while time.time() < deadline and _alive(pid):
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
            try:
                os.waitpid(pid, 0)  # reap our own children (munged is not one: it daemonises)
            except ChildProcessError:
                pass
        if self.wrote_conf and self.conf.exists() and CONF_MARKER in self.conf.read_text():
            self.conf.unlink()
            self.wrote_conf = False

    # -- internals
    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if ready():
                return
            time.sleep(0.5)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in self.root.glob("*.log"))
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - owned by the daemon
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.started[name] = proc.pid
        time.sleep(0.5)
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited at once ({proc.returncode}):\n"
                               f"{(self.root / f'{name}.log').read_text()[-2000:]}")

    def _start_munge(self) -> None:
        socket_path = Path("/run/munge/munge.socket.2")
        if socket_path.exists() and subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
            return  # a munged is already running (someone else's: leave it)
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            subprocess.run(["mungekey", "--create"], check=True, capture_output=True)
        for d in ("/run/munge", "/var/lib/munge", "/var/log/munge"):
            Path(d).mkdir(parents=True, exist_ok=True)
        pidfile = self.root / "munged.pid"
        subprocess.run(["munged", "--force", f"--pid-file={pidfile}"], check=True, capture_output=True)
        self.started["munged"] = int(pidfile.read_text().split()[0])

    def _write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        cpus = os.cpu_count() or 1
        mem_mb = _total_memory_mb()
        for sub in ("state", "spool"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.conf.parent.mkdir(parents=True, exist_ok=True)
        self.wrote_conf = True
        self.conf.write_text("\n".join([
            CONF_MARKER,
            "ClusterName=loretest",
            f"SlurmctldHost={host}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld-daemon.log'}",
            f"SlurmdLogFile={self.root / 'slurmd-daemon.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerType=sched/backfill",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=600",
            "KillWait=30",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            f"NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN",
            # Preemption as on a shared cluster: a job of the `urgent` partition (higher PriorityTier)
            # preempts jobs of `debug`, which SLURM requeues (jobs submitted with --requeue).
            "PreemptType=preempt/partition_prio",
            "PreemptMode=REQUEUE",
            f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO "
            "PriorityTier=1",
            f"PartitionName={URGENT_PARTITION} Nodes={host} MaxTime=INFINITE State=UP OverSubscribe=NO "
            "PriorityTier=100 PreemptMode=OFF",
            "",
        ]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child still "exists"; treat it as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _total_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 - 512  # leave room for the OS
    return 2000


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` (links not followed, FIFOs and devices never opened) with a digest of its
    bytes, or what it is."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                seen[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                seen[rel] = "dir"
            elif path.is_file():
                seen[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                seen[rel] = "special"
    return seen
