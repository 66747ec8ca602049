"""The worker's syscall filter: a seccomp-BPF program for x86_64, built and installed with ctypes.

A deny-list over an allow-by-default filter, so the interpreter keeps working: new processes and
programs, sockets, signalling or tracing other processes, mount and namespace changes, filesystem
mutation, write opens, privilege and limit changes and other kernel attack surface are refused;
``clone`` only for threads; the x32 ABI and other architectures are refused or killed. Standard
library only: the worker process loads this module.
"""

from __future__ import annotations

import ctypes
import os

_CLONE_THREAD = 0x00010000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_EPERM, _ENOSYS = 1, 38

# x86_64 syscalls refused outright (EPERM): new processes/programs, sockets, signalling or tracing
# other processes, namespace/mount/root changes, filesystem mutation, privilege and limit changes,
# and kernel attack surface feature code never needs.
_X86_64_DENIED_SYSCALLS = {
    "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
    "socket": 41, "socketpair": 53, "connect": 42, "accept": 43, "accept4": 288, "bind": 49, "listen": 50,
    "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "mount": 165, "umount2": 166, "unshare": 272, "setns": 308, "chroot": 161, "pivot_root": 155,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "creat": 85, "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316,
    "mkdir": 83, "mkdirat": 258, "rmdir": 84, "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260,
    "truncate": 76, "ftruncate": 77, "mknod": 133, "mknodat": 259, "utime": 132, "utimes": 235,
    "utimensat": 280, "futimesat": 261, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
    "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
    "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117, "setresgid": 119,
    "setgroups": 116, "setfsuid": 122, "setfsgid": 123, "capset": 126, "setrlimit": 160, "prctl": 157,
    "personality": 135,
    "memfd_create": 319, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
    "request_key": 249, "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
    "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "quotactl": 179,
    "settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "sethostname": 170, "setdomainname": 171,
    "iopl": 172, "ioperm": 173, "lookup_dcookie": 212, "vmsplice": 278, "fanotify_init": 300,
    "inotify_init": 253, "inotify_init1": 294, "landlock_create_ruleset": 444,
}
_SYS_CLONE, _SYS_CLONE3, _SYS_OPEN, _SYS_OPENAT, _SYS_OPENAT2, _SYS_PRLIMIT64 = 56, 435, 2, 257, 437, 302
# O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND: opening for anything but reading.
_OPEN_WRITE_FLAGS = 0x1 | 0x2 | 0x40 | 0x200 | 0x400

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06


def _seccomp_program() -> list[tuple[int, int, int, int]]:
    """The x86_64 seccomp filter as ``(code, jt, jf, k)`` instructions (see the table above)."""

    def arg_low(i: int) -> int:  # offset of the low 32 bits of syscall argument i in seccomp_data
        return 16 + 8 * i

    deny = _SECCOMP_RET_ERRNO | _EPERM
    allow = _SECCOMP_RET_ALLOW
    prog = [
        (_LD_W_ABS, 0, 0, 4),  # arch
        (_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET_K, 0, 0, _SECCOMP_RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, 0),  # syscall number
        (_JGE_K, 0, 1, _X32_SYSCALL_BIT),  # the x32 ABI aliases every call: refuse it wholesale
        (_RET_K, 0, 0, deny),
    ]
    for number in sorted(set(_X86_64_DENIED_SYSCALLS.values())):
        prog += [(_JEQ_K, 0, 1, number), (_RET_K, 0, 0, deny)]
    # clone: threads only (numpy may start BLAS threads), never a new process.
    prog += [(_JEQ_K, 0, 4, _SYS_CLONE), (_LD_W_ABS, 0, 0, arg_low(0)), (_JSET_K, 1, 0, _CLONE_THREAD),
             (_RET_K, 0, 0, deny), (_RET_K, 0, 0, allow)]
    # clone3/openat2 pass their flags in a struct the filter cannot read; ENOSYS makes libc fall back.
    prog += [(_JEQ_K, 0, 1, _SYS_CLONE3), (_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS)]
    prog += [(_JEQ_K, 0, 1, _SYS_OPENAT2), (_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS)]
    # open/openat: read-only opens only.
    for number, flags_arg in ((_SYS_OPEN, 1), (_SYS_OPENAT, 2)):
        prog += [(_JEQ_K, 0, 4, number), (_LD_W_ABS, 0, 0, arg_low(flags_arg)),
                 (_JSET_K, 0, 1, _OPEN_WRITE_FLAGS), (_RET_K, 0, 0, deny), (_RET_K, 0, 0, allow)]
    # prlimit64: reading limits is fine, setting them (new_limit != NULL) is not.
    prog += [(_JEQ_K, 0, 6, _SYS_PRLIMIT64), (_LD_W_ABS, 0, 0, arg_low(2)), (_JEQ_K, 0, 2, 0),
             (_LD_W_ABS, 0, 0, arg_low(2) + 4), (_JEQ_K, 1, 0, 0), (_RET_K, 0, 0, deny),
             (_RET_K, 0, 0, allow)]
    prog.append((_RET_K, 0, 0, allow))
    return prog


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def install_seccomp(libc) -> str | None:
    """Install the filter on this process (``libc`` opened with ``use_errno``); None on success, else
    why not."""
    if os.uname().machine != "x86_64":
        return f"seccomp filter only written for x86_64, this is {os.uname().machine}"
    prog = _seccomp_program()
    array = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), ctypes.cast(array, ctypes.POINTER(_SockFilter)))
    ulong = ctypes.c_ulong
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        return f"PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}"
    if libc.prctl(_PR_SET_SECCOMP, ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), ulong(0), ulong(0)) != 0:
        return f"PR_SET_SECCOMP failed: {os.strerror(ctypes.get_errno())}"
    return None

