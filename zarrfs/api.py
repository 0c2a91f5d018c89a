"""The Python API: ``zarrfs.mounted`` (DESIGN §3 "Python").

    import zarrfs, numpy as np

    with zarrfs.mounted("s3://bucket/ocean.zarr", endpoint="http://127.0.0.1:9000") as path:
        temp = np.load(f"{path}/temp/data.npy", mmap_mode="r")
        ...
    # here the mount is gone and everything written through it is in the store

pyfuse3 serves one mount per process and keeps global state, so the daemon always runs in a
child process: ``python -m zarrfs mount STORE MOUNTPOINT --foreground --status-fd N``, the very
command ``zarrfs mount`` runs detached. That makes the API usable from any Python process,
Jupyter kernels and test suites included, and a crash of the daemon never takes the caller down.

Invariants:
- ``mounted`` yields only once the mount answers (the daemon wrote ``live`` on its status pipe);
  a mount that fails raises ``MountError`` carrying the daemon's own message, and leaves no
  process and no mount behind;
- leaving the block (normally or by an exception) stops the daemon with SIGTERM, the same as
  ``systemctl stop``: it unmounts, stores every dirty byte and exits. The block is left only
  after the daemon has exited; if it reports that data could not be stored (exit status 1),
  ``MountError`` is raised with the daemon's error lines;
- keyword options are ``-o`` options (``ro=True`` is ``-o ro``, ``cache_size="64M"`` is
  ``-o cache_size=64M``, ``views=("raw", "npy")`` is ``-o views=raw:npy``); they are checked
  here, before any process starts, so a typo raises ``OptionError`` at once;
- without a mountpoint, a fresh private directory is made and removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from zarrfs.fuse import runtime
from zarrfs.fuse.credentials import split_environment
from zarrfs.fuse.options import OptionError, parse_options
from zarrfs.fuse.runtime import MountError

__all__ = ["MountError", "OptionError", "mounted", "option_strings", "store_url"]

#: seconds to wait for the daemon to report the mount live (opening a remote store included)
LIVE_TIMEOUT_S = 300.0
#: error lines of the daemon's log quoted in an exception
_QUOTED_LINES = 20


def store_url(store: str | os.PathLike[str]) -> str:
    """URLs stay as given; a plain path becomes absolute (the daemon runs in ``/``)."""
    text = os.fspath(store)
    return text if "://" in text else os.path.abspath(text)


def option_strings(options: Mapping[str, Any]) -> list[str]:
    """Keyword options -> ``-o`` items: ``True`` is a flag, ``False``/``None`` are left out,
    a list or tuple joins with ``:`` (``views=``), anything else is ``name=value``."""
    items = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            items.append(name)
        elif isinstance(value, list | tuple):
            items.append(f"{name}={':'.join(str(v) for v in value)}")
        else:
            items.append(f"{name}={value}")
    return items


def _daemon_env() -> dict[str, str]:
    """This process's environment, with this zarrfs package importable by the child."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    for name in ("NOTIFY_SOCKET", "JOURNAL_STREAM"):  # the caller's service, not the daemon's
        env.pop(name, None)
    return env


def _error_lines(log_path: Path) -> str:
    """The daemon's ERROR/CRITICAL lines and libfuse's complaints, for an exception message."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    lines = [
        line.strip()
        for line in text.splitlines()
        if " ERROR " in line or " CRITICAL " in line or line.startswith(("fuse:", "fusermount"))
    ]
    return "\n".join(lines[-_QUOTED_LINES:])


def _with_log(message: str, log_path: Path) -> str:
    details = _error_lines(log_path)
    return f"{message}\n{details}" if details else message


class _Daemon:
    """One ``zarrfs mount --foreground`` child and its log file."""

    def __init__(self, url: str, mountpoint: str, items: list[str], log_path: Path) -> None:
        self.mountpoint = mountpoint
        self.log_path = log_path
        read_fd, write_fd = os.pipe()
        command = [sys.executable, "-m", "zarrfs", "mount", url, mountpoint, "--foreground"]
        kept, environment = split_environment([",".join(items)])  # env. values stay out of ps
        if kept:
            command += ["-o", ",".join(kept)]
        try:
            with open(log_path, "wb") as log_out, open(os.devnull, "rb") as null:
                self.process = subprocess.Popen(
                    [*command, "--status-fd", str(write_fd)],
                    stdin=null,
                    stdout=log_out,
                    stderr=log_out,
                    pass_fds=(write_fd,),
                    start_new_session=True,  # a Ctrl-C for the caller does not cut a flush short
                    cwd="/",
                    env={**_daemon_env(), **environment},
                )
        finally:
            os.close(write_fd)
        self._status_fd = read_fd

    def wait_live(self) -> None:
        """Return once the mount answers; else stop the daemon and raise ``MountError``."""
        try:
            reply = runtime.read_status(self._status_fd, LIVE_TIMEOUT_S)
        except BaseException:
            self.kill()
            raise
        finally:
            os.close(self._status_fd)
        if reply == "live":
            return
        if reply.startswith("error "):
            self.process.wait()
            raise MountError(reply[len("error ") :])
        if reply == "":
            code = self.process.wait()
            raise MountError(
                _with_log(
                    f"the mount daemon exited (status {code}) before the mount was live",
                    self.log_path,
                )  # fmt: skip
            )
        self.kill()
        raise MountError(f"no answer from the mount daemon within {LIVE_TIMEOUT_S:g} s")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._drop_dead_mount()

    def stop(self) -> None:
        """SIGTERM, then wait until the daemon has unmounted, flushed and exited."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        while True:
            try:
                code = self.process.wait()
                break
            except KeyboardInterrupt:  # the flush goes on; interrupting again would lose data
                print("zarrfs: waiting for the mount daemon to store dirty data", file=sys.stderr)
        self._drop_dead_mount()
        if code != 0:
            raise MountError(
                _with_log(
                    f"unmounting {self.mountpoint}: the mount daemon exited with status {code}; "
                    "data written through the mount may not have been stored",
                    self.log_path,
                )
            )

    def _drop_dead_mount(self) -> None:
        """A daemon that died leaves a dead mount (ENOTCONN): detach it."""
        if runtime.mount_info(self.mountpoint) is not None:
            subprocess.run(
                ["fusermount3", "-u", "-z", self.mountpoint], capture_output=True, check=False
            )


@contextlib.contextmanager
def mounted(
    store: str | os.PathLike[str], mountpoint: str | os.PathLike[str] | None = None, /,
    **options: Any,
) -> Iterator[str]:  # fmt: skip
    """Mount ``store`` for the duration of a ``with`` block; yields the mount's path.

    ``store`` is anything ``zarrfs mount`` takes (a path, ``s3://...``, ``http://...``, ...);
    ``mountpoint`` an existing empty directory, or None for a new temporary one. ``options``
    are ``-o`` mount options as keywords (``ro=True``, ``cache_size="256M"``,
    ``endpoint="http://..."``). Raises ``OptionError`` for a bad option and ``MountError``
    when the mount fails or when, on leaving, written data could not be stored."""
    items = option_strings(options)
    parse_options(items)  # raises OptionError now rather than in the child
    url = store_url(store)
    scratch = Path(tempfile.mkdtemp(prefix="zarrfs-"))
    try:
        if mountpoint is None:
            path = scratch / "mnt"
            path.mkdir()
        else:
            path = Path(os.path.abspath(mountpoint))
        daemon = _Daemon(url, str(path), items, scratch / "daemon.log")
        daemon.wait_live()
        try:
            yield str(path)
        finally:
            daemon.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
