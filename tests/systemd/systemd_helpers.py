"""Helpers for the systemd/fstab tests: the shipped units read as systemd reads them, a real
Zarr store, daemons started the way systemd or mount(8) starts them, and cleanup.

The unit files are the source of truth: ``exec_start`` and ``exec_start_pre`` turn the unit's
command lines into argv (with ``${VAR}`` and ``$$`` expanded as systemd does), and
``hardened_prefix`` turns its sandbox settings into a ``hardened_exec.py`` command prefix, so a
change to the unit changes what these tests run.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import GzipCodec

from zarrfs.fuse import runtime

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
UNITS = REPO / "systemd"
SERVICE = UNITS / "zarrfs@.service"
#: the path the shipped units use for the zarrfs executable (scripts/setup.sh links it)
INSTALLED_ZARRFS = "/usr/local/bin/zarrfs"
#: this checkout's entry point, substituted for INSTALLED_ZARRFS in the tests
VENV_ZARRFS = str(Path(sys.executable).parent / "zarrfs")

#: the PATH systemd gives services (and mount(8) gives mount helpers)
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

ARRAY = "temp"
SHAPE, CHUNKS = (32, 48), (8, 16)


# -- a real store ------------------------------------------------------------------------------


def make_store(root: Path) -> np.ndarray:
    """A v3 group with one gzip-compressed uint16 array ``temp``; returns its content."""
    group = zarr.open_group(str(root), mode="w")
    array = group.create_array(
        ARRAY, shape=SHAPE, chunks=CHUNKS, dtype="<u2", fill_value=0,
        compressors=[GzipCodec(level=1)],
    )  # fmt: skip
    model = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    array[...] = model
    return model


def read_store(root: Path) -> np.ndarray:
    """The array as zarr-python reads it from the store (not through the mount)."""
    return np.asarray(zarr.open_array(str(root / ARRAY), mode="r")[...])


# -- unit files ----------------------------------------------------------------------------------


def unit_settings(path: Path) -> list[tuple[str, str, str]]:
    """``(section, key, value)`` for every assignment of a unit file, in order."""
    found = []
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.append((section, key.strip(), value.strip()))
    return found


def setting(path: Path, key: str) -> list[str]:
    return [value for _, k, value in unit_settings(path) if k == key]


def _expand(word: str, env: dict[str, str]) -> str:
    """systemd's expansion inside one word: ``${VAR}`` -> value (unset: ""), ``$$`` -> ``$``."""
    return re.sub(
        r"\$\$|\$\{(\w+)\}",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), ""),
        word,
    )


def command_line(value: str, env: dict[str, str]) -> list[str]:
    """argv of an ``Exec*=`` value (prefix characters such as ``-`` removed)."""
    value = value.lstrip("-@:+!")
    if "%" in value.replace("%%", ""):
        raise ValueError(f"specifiers are not expanded here: {value}")
    words = shlex.split(value.replace("%%", "%"))
    argv = [_expand(word, env) for word in words]
    return [VENV_ZARRFS if arg == INSTALLED_ZARRFS else arg for arg in argv]


def environment_files(config: dict[str, str], service: Path = SERVICE) -> dict[str, str]:
    """The environment the unit gives its commands: ``Environment=`` then the config file."""
    env: dict[str, str] = {}
    for value in setting(service, "Environment"):
        key, _, val = value.partition("=")
        env[key] = val
    env.update(config)
    return env


def exec_start(config: dict[str, str], service: Path = SERVICE) -> list[str]:
    (value,) = setting(service, "ExecStart")
    return command_line(value, environment_files(config, service))


def exec_start_pre(
    config: dict[str, str], prefix: list[str] | None = None, service: Path = SERVICE
) -> subprocess.CompletedProcess[str]:
    """Run the unit's ExecStartPre by hand, in the environment the unit gives it."""
    (value,) = setting(service, "ExecStartPre")
    env = {**os.environ, "PATH": SYSTEMD_PATH, **environment_files(config, service)}
    argv = [*(prefix or []), *command_line(value, env)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@functools.cache
def syscall_group(name: str) -> frozenset[str]:
    """The system calls of ``@name``, nested groups expanded (``systemd-analyze``)."""
    out = subprocess.run(
        ["systemd-analyze", "syscall-filter", name], capture_output=True, text=True, check=True
    ).stdout
    calls: set[str] = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith("#"):
            calls |= syscall_group(line) if line.startswith("@") else {line}
    return frozenset(calls)


def allowed_syscalls(service: Path = SERVICE) -> set[str]:
    """The allow list ``SystemCallFilter=`` lines build (the first is an allow list)."""
    allowed: set[str] = set()
    for value in setting(service, "SystemCallFilter"):
        deny = value.startswith("~")
        names: set[str] = set()
        for item in value.lstrip("~").split():
            names |= syscall_group(item) if item.startswith("@") else {item}
        allowed = allowed - names if deny else allowed | names
    return allowed


def allowed_namespaces(service: Path = SERVICE) -> set[str]:
    every = {"cgroup", "ipc", "net", "mnt", "pid", "user", "uts"}
    (value,) = setting(service, "RestrictNamespaces") or ["no"]
    if value in ("no", "false"):
        return every
    if value in ("yes", "true"):
        return set()
    if value.startswith("~"):
        return every - set(value[1:].split())
    return set(value.split())


def hardened_prefix(tmp_path: Path, service: Path = SERVICE) -> list[str]:
    """Command prefix applying the unit's capability, seccomp, MDWE and namespace settings."""
    assert setting(service, "CapabilityBoundingSet") == ["CAP_SYS_ADMIN"]
    assert setting(service, "NoNewPrivileges") == ["yes"]
    assert setting(service, "MemoryDenyWriteExecute") == ["yes"]
    assert setting(service, "SystemCallErrorNumber") == ["EPERM"]
    assert setting(service, "RestrictAddressFamilies") == ["AF_UNIX AF_INET AF_INET6"]
    calls = tmp_path / "syscalls.txt"
    calls.write_text("\n".join(sorted(allowed_syscalls(service))) + "\n")
    namespaces = ",".join(sorted(allowed_namespaces(service)))
    prefix = [sys.executable, str(HERE / "hardened_exec.py"), str(calls), namespaces, "--"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode == 125 and "prctl(65" in probe.stderr:
        pytest.skip(
            "the kernel has no PR_SET_MDWE (Linux >= 6.3) to stand for MemoryDenyWriteExecute="
        )
    assert probe.returncode == 0, probe.stderr
    return prefix


# -- processes and mounts -------------------------------------------------------------------


def require(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (bash scripts/setup.sh --test installs them)")


def zarrfs_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["ZARRFS_RUNTIME_DIR"] = str(tmp_path / "run")
    env["PYTHONPATH"] = str(REPO)
    for name in ("NOTIFY_SOCKET", "JOURNAL_STREAM", "ZARRFS_TEST_TREE_FACTORY"):
        env.pop(name, None)
    env.update(extra)
    return env


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def is_mounted(mountpoint: Path) -> bool:
    return runtime.mount_info(str(mountpoint)) is not None


def wait_until_live(mountpoint: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the daemon has logged that its mount is live (its own check is over)."""

    def live() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited with {proc.returncode}:\n{log.read_text()}")
        return is_mounted(mountpoint) and f"on {mountpoint} (pid {proc.pid})" in log.read_text()

    wait_for(live, 30, f"{mountpoint} to be mounted")
    os.stat(mountpoint)


def abort_connection(mountpoint: Path) -> None:
    """End the FUSE connection of ``mountpoint`` so nothing can stay blocked on it.

    Needed when a daemon hangs, or was killed while one of its own threads waited on its own
    mount (that thread never returns, so the process never exits and the connection never
    closes). ``umount -f`` aborts the connection even when the unmount itself is refused.
    """
    found = runtime.mount_info(str(mountpoint))
    if found is None or not found[0].startswith("fuse"):
        return
    abort = Path(f"/sys/fs/fuse/connections/{os.minor(found[2])}/abort")
    if abort.exists():
        abort.write_text("1")
    else:
        subprocess.run(["umount", "-f", str(mountpoint)], capture_output=True, timeout=10)


def force_unmount(mountpoint: Path) -> None:
    """Detach whatever is mounted on ``mountpoint`` (aborting a hung connection first)."""
    for _ in range(5):
        found = runtime.mount_info(str(mountpoint))
        if found is None:
            return
        if found[0].startswith("fuse"):
            try:
                subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], timeout=10)
                continue
            except subprocess.TimeoutExpired:
                abort_connection(mountpoint)
        subprocess.run(["umount", "-l", str(mountpoint)], timeout=10)


def running(pid: int) -> bool:
    """True while any thread of ``pid`` runs (a killed daemon whose thread waits on its own
    mount shows a zombie leader but cannot be reaped)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X"):
            return True
    return False


def stop_pid(pid: int, mountpoints: Sequence[Path] = ()) -> None:
    """Stop a process this test started (directly or not): SIGTERM, SIGKILL, then abort the
    FUSE connections of ``mountpoints`` if it still cannot exit."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5), (None, 10)):
        if not running(pid):
            return
        if sig is None:
            for mountpoint in mountpoints:
                abort_connection(mountpoint)
        else:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def daemon_pid(mountpoint: Path) -> int:
    """The pid in the daemon's pid file (``$ZARRFS_RUNTIME_DIR`` of this test)."""
    return int(runtime.pid_file(str(mountpoint)).read_text().split()[0])


_HOLDER = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, bytes.fromhex(sys.argv[2]), int(sys.argv[3]))
print("written", flush=True)
sys.stdin.readline()
os.close(fd)
print("closed", flush=True)
"""


class Holder:
    """A process that writes ``data`` at ``offset`` of ``path`` and keeps the file open until
    ``close()``.

    The test process itself must not hold the descriptor: FUSE sends FLUSH on every close of
    a descriptor, including the copies a fork hands to a child (``fusermount3``, ``zarrfs
    umount``) that are closed on exec, and that FLUSH would write the dirty data early.
    """

    def __init__(self, path: Path, data: bytes, offset: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(path), data.hex(), str(offset)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "written\n"

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline() == "closed\n"
        self.proc.wait(timeout=30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
