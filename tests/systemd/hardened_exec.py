"""Run a command under the sandbox zarrfs@.service asks systemd for, without systemd.

    python hardened_exec.py SYSCALLS_FILE NAMESPACES -- COMMAND [ARG...]

There is no systemd as PID 1 in the test container, so the kernel-enforced parts of the unit's
hardening are applied here by hand before ``execve`` — the same kernel mechanisms systemd uses:

- ``CapabilityBoundingSet=CAP_SYS_ADMIN``: every other capability is dropped from the bounding
  set, so the root process keeps only CAP_SYS_ADMIN after exec;
- ``NoNewPrivileges=yes``: ``PR_SET_NO_NEW_PRIVS``;
- ``MemoryDenyWriteExecute=yes``: ``PR_SET_MDWE`` (no writable+executable mappings);
- ``SystemCallFilter=`` + ``SystemCallErrorNumber=EPERM`` + ``SystemCallArchitectures=native``:
  a seccomp filter through libseccomp that allows exactly the system calls named in
  SYSCALLS_FILE (one per line, the unit's sets expanded by ``systemd-analyze syscall-filter``)
  and answers EPERM to everything else;
- ``RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6``: ``socket(2)`` is allowed for those
  families only (others get EPERM from the same filter);
- ``RestrictNamespaces=``: ``clone``/``unshare``/``setns`` are allowed only without the flags of
  namespace types missing from NAMESPACES (comma-separated, e.g. ``mnt``; empty: none), and
  ``clone3`` answers ENOSYS (its flags cannot be inspected, so libc falls back to ``clone``).

Device access (``DeviceAllow=``) and namespaces are not emulated (no cgroup of our own here).
Failures to set up the sandbox exit 125, so a test can tell them from the command's own status.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import sys

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_MDWE = 65
PR_MDWE_REFUSE_EXEC_GAIN = 1
CAP_SYS_ADMIN = 21
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ = 4
SCMP_CMP_MASKED_EQ = 7
SCMP_ACT_ERRNO_ENOSYS = 0x00050000 | 38
ALLOWED_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)
#: RestrictNamespaces= names -> clone(2) flags
NAMESPACE_FLAGS = {
    "mnt": 0x00020000, "cgroup": 0x02000000, "uts": 0x04000000, "ipc": 0x08000000,
    "user": 0x10000000, "pid": 0x20000000, "net": 0x40000000,
}  # fmt: skip


class ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def fail(message: str) -> None:
    print(f"hardened_exec: {message}", file=sys.stderr)
    sys.exit(125)


def prctl(libc: ctypes.CDLL, *args: int) -> None:
    if libc.prctl(*[ctypes.c_ulong(a) for a in args], *[ctypes.c_ulong(0)] * (5 - len(args))):
        fail(f"prctl{args}: {os.strerror(ctypes.get_errno())}")


def drop_capabilities(libc: ctypes.CDLL) -> None:
    last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last_cap + 1):
        if cap != CAP_SYS_ADMIN:
            prctl(libc, PR_CAPBSET_DROP, cap)


def load_filter(names: list[str], namespaces: set[str]) -> None:
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(ArgCmp),
    ]  # fmt: skip
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    errno_eperm = 0x00050000 | 1
    ctx = lib.seccomp_init(errno_eperm)
    if not ctx:
        fail("seccomp_init failed")
    for name in names:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0 or name in ("socket", "clone", "clone3", "unshare", "setns"):
            continue  # another architecture's call, or filtered by its arguments below
        if lib.seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, number, 0, None) < 0:
            fail(f"cannot allow {name}")
    if "socket" in names:
        number = lib.seccomp_syscall_resolve_name(b"socket")
        for family in ALLOWED_FAMILIES:
            cmp = ArgCmp(0, SCMP_CMP_EQ, int(family), 0)
            if lib.seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, number, 1, ctypes.byref(cmp)) < 0:
                fail("cannot allow socket()")
    forbidden = sum(flag for name, flag in NAMESPACE_FLAGS.items() if name not in namespaces)
    for name in ("clone", "unshare", "setns"):
        if name in names:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            cmp = ArgCmp(0, SCMP_CMP_MASKED_EQ, forbidden, 0)
            if lib.seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, number, 1, ctypes.byref(cmp)) < 0:
                fail(f"cannot allow {name}()")
    if "clone3" in names:  # its flags cannot be inspected: ENOSYS makes libc fall back to clone
        number = lib.seccomp_syscall_resolve_name(b"clone3")
        if lib.seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO_ENOSYS, number, 0, None) < 0:
            fail("cannot refuse clone3()")
    if lib.seccomp_load(ctx) < 0:
        fail("seccomp_load failed")


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 4 or args[2] != "--":
        fail("usage: hardened_exec.py SYSCALLS_FILE NAMESPACES -- COMMAND [ARG...]")
    with open(args[0]) as f:
        names = [line.strip() for line in f if line.strip()]
    namespaces = set(args[1].split(",")) - {""}
    command = args[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    drop_capabilities(libc)
    prctl(libc, PR_SET_NO_NEW_PRIVS, 1)
    prctl(libc, PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)
    load_filter(names, namespaces)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        fail(f"cannot run {command[0]}: {exc}")


if __name__ == "__main__":
    main()
