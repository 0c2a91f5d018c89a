"""Open a relative path below a directory descriptor in one system call, never through a link.

Linux ``openat2(2)`` (5.6+) with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` resolves a whole
relative path in the kernel and refuses (``ELOOP``) any symbolic link met on the way, the last
component included (with ``O_PATH | O_NOFOLLOW`` a final link is opened itself, as a link), and
any step out of the starting directory (``EXDEV``). That is the containment rule of the local
store, which otherwise walks the path one ``openat(O_NOFOLLOW)`` per component: one system
call instead of one per component (plus as many ``close``), which is most of the cost of
stat'ing or reading a small metadata document.

``open_beneath`` returns None when ``openat2`` cannot decide (not available: ``ENOSYS``,
``EPERM`` under some seccomp filters; a link or an escape: ``ELOOP``, ``EXDEV``; a concurrent
rename: ``EAGAIN``; ``ENOTDIR``, which ``O_NOFOLLOW | O_DIRECTORY`` also answers for a final
link); the caller then walks the path component by component, which gives the precise answer
and error. ``ENOENT`` (a component missing) raises ``FileNotFoundError`` as ``os.open`` would.
Python has no binding for ``openat2``; it is called through ``ctypes`` (which releases the GIL
for the call).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

from zarrfs.core.libc import function

__all__ = ["open_beneath", "available"]

#: the ``openat2`` system call number (the same on every Linux architecture but alpha)
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
#: answers after which the component-by-component walk must decide
_UNDECIDED = frozenset(
    {
        errno.ENOSYS,
        errno.EPERM,
        errno.ENOTDIR,
        errno.ELOOP,
        errno.EXDEV,
        errno.EAGAIN,
        errno.EINTR,
        errno.EINVAL,
        errno.E2BIG,
    }
)


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


def _load() -> object | None:
    if not sys.platform.startswith("linux") or os.uname().machine == "alpha":
        return None
    return function("syscall", None, ctypes.c_long)  # variadic: no argument types


_syscall = _load()
_hows: dict[int, _OpenHow] = {}
#: set False after the first ENOSYS (or a filter answering EPERM for a plain open)
_enabled = _syscall is not None


def available() -> bool:
    """``openat2`` may be used (not yet refused by the kernel)."""
    return _enabled


def open_beneath(dir_fd: int, path: str, flags: int) -> int | None:
    """A descriptor of ``path`` (relative, no ``..``) opened below ``dir_fd`` with ``flags``,
    following no link; None when only a component walk can tell (see the module docstring)."""
    global _enabled
    if not _enabled or _syscall is None:
        return None
    how = _hows.get(flags)
    if how is None:
        how = _hows.setdefault(flags, _OpenHow(flags, 0, _RESOLVE))
    fd = _syscall(  # type: ignore[operator]
        _SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)
    )
    if fd >= 0:
        return int(fd)
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        _enabled = False
        return None
    if err == errno.ENOENT:
        raise FileNotFoundError(err, os.strerror(err), path)
    if err in _UNDECIDED:
        return None
    raise OSError(err, os.strerror(err), path)
