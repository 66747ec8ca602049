"""The worker's confinement of its own process, before any untrusted code runs.

:func:`harden` enters new network/mount/IPC/UTS namespaces, chroots into the worker's empty
directory, drops to uid ``nobody`` (or clears its capabilities inside a user namespace), sets the
resource limits and installs the syscall filter of :mod:`lore.sandbox.seccomp`. Standard library
only: the worker process loads this module.
"""

from __future__ import annotations

import ctypes
import os
import resource

from lore.sandbox.seccomp import install_seccomp

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_NOBODY = 65534


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _drop_capabilities(libc) -> str | None:
    """Clear every capability of this process (used inside an unprivileged user namespace)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    if libc.syscall(ctypes.c_long(126), ctypes.byref(header), ctypes.byref(data)) != 0:  # capset
        return f"capset failed: {os.strerror(ctypes.get_errno())}"
    return None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _vm_size_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def harden(config: dict) -> dict:
    """Confine this process before any untrusted code runs; returns what was achieved.

    Order matters: namespaces and chroot need privileges that the uid drop removes; the resource
    limits come after the uid drop (RLIMIT_NPROC is per user); seccomp comes last because it forbids
    the calls made before it.
    """
    libc = _libc()
    report: dict = {"uid_before": os.getuid(), "notes": []}
    notes = report["notes"]
    vm_baseline = _vm_size_bytes()
    open_fds = [fd for fd in map(int, os.listdir("/proc/self/fd")) if _is_open(fd)]
    is_root = os.geteuid() == 0

    flags = _CLONE_NEWNET | _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWUTS
    if not is_root:
        flags |= _CLONE_NEWUSER  # unprivileged user namespaces give the other namespaces without root
    in_namespaces = libc.unshare(ctypes.c_int(flags)) == 0
    if not in_namespaces:
        notes.append(f"unshare failed: {os.strerror(ctypes.get_errno())}")
    report["netns"] = in_namespaces

    report["chroot"] = False
    if config.get("root_dir") and (is_root or in_namespaces):
        try:
            os.chroot(config["root_dir"])
            os.chdir("/")
            report["chroot"] = True
        except OSError as e:
            notes.append(f"chroot failed: {e}")

    if is_root:
        try:
            os.setgroups([])
            os.setgid(_NOBODY)
            os.setuid(_NOBODY)
        except OSError as e:
            notes.append(f"dropping to uid {_NOBODY} failed: {e}")
    elif in_namespaces:
        error = _drop_capabilities(libc)
        if error:
            notes.append(error)
    report["uid"] = os.getuid()

    memory_bytes = vm_baseline + int(config["memory_mb"]) * 1024 * 1024
    cpu_s = int(config["cpu_lifetime_s"])
    limits = {
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_FSIZE": (0, 0),
        "RLIMIT_NOFILE": (max(open_fds) + 1, max(open_fds) + 1),
        "RLIMIT_AS": (memory_bytes, memory_bytes),
        "RLIMIT_CPU": (cpu_s, cpu_s + 1),
        "RLIMIT_NPROC": (0, 0),
    }
    applied = {}
    for name, value in limits.items():
        try:
            resource.setrlimit(getattr(resource, name), value)
            applied[name] = value[0]
        except (OSError, ValueError) as e:
            notes.append(f"{name} not set: {e}")
    report["rlimits"] = applied
    report["vm_baseline_mb"] = round(vm_baseline / 2**20, 1)

    error = install_seccomp(libc)
    report["seccomp"] = error is None
    if error:
        notes.append(error)
    report["network_isolated"] = bool(report["netns"] or report["seccomp"])
    report["environ_keys"] = sorted(os.environ)
    return report
