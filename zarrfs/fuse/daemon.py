"""Mount lifecycle (DESIGN §3 "returns once the mount is live", §4 "flushed on unmount/SIGTERM").

``run`` is the daemon: one process, one mount (pyfuse3 keeps global state). In order:

    check the mountpoint -> open the tree (store errors are reported before anything is mounted)
    -> start the tree's write-back timer -> pyfuse3.init (mount) -> serve in trio until
    unmounted or signalled -> unmount -> stop the write-back timer (waiting for a flush in
    progress) -> flush_all -> close the tree -> exit status

Teardown runs in reverse order whatever fails (``try/finally`` around each acquired resource).

The "live" protocol: a mount is live when ``os.path.ismount`` is true and a ``stat`` of its root
(answered by this very process, from a worker thread) succeeds. Only then does the daemon tell
systemd ``READY=1`` (``--systemd``) and write ``live`` to the status pipe. (Its pid file is
written as soon as the kernel accepted the mount, so ``zarrfs umount`` can always find it.)
A failure before that point is written to the status pipe as ``error <message>`` (or printed,
in the foreground) and the daemon exits 1.

``spawn`` is the parent side of ``zarrfs mount`` without ``-f``: it re-executes the CLI in the
foreground in a new session (no fork of a process that may already run store threads), with
stdin/stdout on /dev/null, stderr on the log file and a status pipe, and returns 0 only after
reading ``live``. ``unmount`` is ``zarrfs umount``: fusermount3 -u, then wait (bounded) until the
daemon has flushed and exited.

Signals: SIGTERM and SIGINT (trio signal receiver, open before the mount exists) end the main
loop; the daemon then unmounts, flushes and exits 0 (1 if the final flush failed, since data
written before the signal would otherwise be lost silently).
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pyfuse3
import trio

from zarrfs.core.errors import ZarrFSError
from zarrfs.fuse import credentials, runtime
from zarrfs.fuse.metrics import MetricsServer, OperationLatency, read_tree_file
from zarrfs.fuse.operations import ZarrOperations
from zarrfs.fuse.options import MountOptions, OptionError
from zarrfs.fuse.runtime import MountError
from zarrfs.views.base import VDir

log = logging.getLogger(__name__)

#: the cyclic garbage collector's thresholds while serving (Python's default: 700, 10, 10).
#: The daemon keeps what the kernel holds (inodes, nodes, open arrays: millions of objects
#: after a walk of a large tree), and with the default a full collection, which traverses all
#: of them, follows every 70,000 new objects once the heap grew by a quarter (a cold ``find``
#: over 10,000 arrays: 15-17 s of the daemon's CPU with the default, 12-13 s with a full
#: collection every 7,000,000). The young generations keep their thresholds, so short-lived
#: cycles (an exception's traceback holding a buffer) are still collected as soon as before.
GC_THRESHOLDS = (700, 10, 1000)

#: seconds the daemon waits for its own mount to answer before giving up
LIVE_TIMEOUT_S = 30.0
#: seconds ``zarrfs mount`` waits for the daemon to report (opening a remote store included)
SPAWN_TIMEOUT_S = 300.0
#: test-only: ``module:function`` replacing ``zarrfs.views.tree.open_tree`` (see tests/fuse)
TEST_TREE_FACTORY_ENV = "ZARRFS_TEST_TREE_FACTORY"

#: the device number of /dev/fuse (character device 10, 229)
_FUSE_DEVICE = os.makedev(10, 229)

#: builds the root of the mounted tree; the root also has ``flush_all()`` and ``close()``, and
#: may have ``start()``/``stop()`` (its background work: the write-back timer)
TreeFactory = Callable[[str, MountOptions], VDir]


def open_store_tree(url: str, options: MountOptions) -> VDir:
    """The production tree factory (imported lazily: the views pull in the whole core)."""
    from zarrfs.views.tree import open_tree

    return open_tree(url, options)


def default_tree_factory() -> TreeFactory:
    """``open_store_tree``, unless the test-only ``$ZARRFS_TEST_TREE_FACTORY`` names another."""
    spec = os.environ.get(TEST_TREE_FACTORY_ENV)
    if not spec:
        return open_store_tree
    module, _, name = spec.partition(":")
    factory: TreeFactory = getattr(importlib.import_module(module), name)
    return factory


def check_mountpoint(mountpoint: str) -> None:
    """Refuse a missing, non-directory, already mounted or dead mountpoint with a clear reason.

    A ``/dev/fd/N`` mountpoint must be an open descriptor of ``/dev/fuse`` (mounted already by
    whoever opened it)."""
    fd = runtime.fuse_fd(mountpoint)
    if fd is not None:
        try:
            st = os.fstat(fd)
        except OSError:
            raise MountError(f"{mountpoint}: descriptor {fd} is not open") from None
        if not stat.S_ISCHR(st.st_mode) or st.st_rdev != _FUSE_DEVICE:
            raise MountError(f"{mountpoint}: descriptor {fd} is not /dev/fuse")
        return
    if runtime.mount_info(mountpoint) is not None:
        raise MountError(
            f"{mountpoint} is already a mount point (try `zarrfs umount {mountpoint}`)"
        )
    try:
        mode = os.stat(mountpoint).st_mode
    except FileNotFoundError:
        raise MountError(f"mount point {mountpoint} does not exist") from None
    except OSError as exc:
        raise MountError(f"mount point {mountpoint}: {exc.strerror}") from None
    if not stat.S_ISDIR(mode):
        raise MountError(f"mount point {mountpoint} is not a directory")


def kernel_options(options: MountOptions, fsname: str) -> set[str]:
    """The libfuse option set: fsname/subtype for /proc/mounts and findmnt, plus -o flags."""
    escaped = fsname.replace("\\", "\\\\").replace(",", "\\,")
    chosen = {f"fsname={escaped}", "subtype=zarrfs"}
    for flag in ("ro", "allow_other", "default_permissions", "auto_unmount"):
        if getattr(options, flag):
            chosen.add(flag)
    return chosen


class Status:
    """Where the daemon reports "live" or why it failed: the status pipe, else stderr."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self.failure: str | None = None
        if fd is not None:
            os.set_inheritable(fd, False)  # fusermount3 & co. must not hold the parent waiting

    def _send(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, (line.replace("\n", " ") + "\n").encode())
            os.close(self._fd)
        except OSError:
            pass  # the waiting parent is gone; the daemon carries on
        self._fd = None

    def live(self) -> None:
        self._send("live")

    def failed(self, message: str) -> None:
        self.failure = message
        if self._fd is None and not runtime.stderr_is_journal():
            print(f"zarrfs: {message}", file=sys.stderr)  # a person at a terminal
        else:
            log.error("%s", message)  # the daemon's log file or the journal
        self._send(f"error {message}")


@dataclass
class _Loop:
    ops: ZarrOperations
    mountpoint: str
    url: str
    status: Status
    systemd: bool
    readahead: int = 4 << 20
    signalled: bool = False
    live: bool = False


def run(
    url: str,
    mountpoint: str,
    options: MountOptions,
    tree_factory: TreeFactory,
    *,
    status_fd: int | None = None,
    systemd: bool = False,
) -> int:
    """Mount ``tree_factory(url, options)`` on ``mountpoint`` and serve it; the exit status."""
    status = Status(status_fd)
    runtime.tune_malloc()
    mountpoint = os.path.abspath(mountpoint)
    try:
        check_mountpoint(mountpoint)
    except MountError as exc:
        status.failed(str(exc))
        return 1
    try:
        names = credentials.apply_environment(options)
    except OptionError as exc:
        status.failed(str(exc))
        return 1
    if names:
        log.debug("environment set from the mount options: %s", ", ".join(names))
    try:
        tree = tree_factory(url, options)
    except ZarrFSError as exc:
        status.failed(f"cannot open {url}: {exc}")
        return 1
    except Exception as exc:
        log.debug("opening %s", url, exc_info=True)
        status.failed(f"cannot open {url}: {type(exc).__name__}: {exc}")
        return 1
    loop = _Loop(ZarrOperations(tree, options), mountpoint, url, status, systemd, options.readahead)
    try:
        metrics = _metrics_server(options, tree, loop.ops)
    except OSError as exc:
        host, port = options.metrics or ("", 0)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        status.failed(f"cannot serve metrics on {address}: {exc.strerror or exc}")
        _shutdown(tree)
        return 1
    code = 0
    try:
        _call_if_present(tree, "start")  # background work (write-back) of the tree
        gc.set_threshold(*GC_THRESHOLDS)
        trio.run(_serve, loop, kernel_options(options, url))
    except MountError as exc:
        status.failed(str(exc))
        code = 1
    except Exception:
        log.exception("the FUSE main loop failed; unmounted")
        code = 1
    finally:
        if metrics is not None:
            metrics.close()
        runtime.remove_pid_file(mountpoint)
        if systemd and not loop.signalled:  # unmounted from outside
            runtime.sd_notify("STOPPING=1")
        notes = list(getattr(tree, "discarded_scratch", list)())
        problems: list[str] = []
        lost = _shutdown(tree, problems)
        code = lost or code
        if notes:
            log.warning("dropped at unmount (memory only, never stored): %s", "; ".join(notes))
        runtime.write_result(mountpoint, lost, problems, notes)
    if status.failure is not None:
        code = 1
    if loop.live:
        log.info("unmounted %s", mountpoint)
    return code


def _metrics_server(options: MountOptions, tree: VDir, ops: ZarrOperations) -> MetricsServer | None:
    """The ``-o metrics=`` endpoint, bound (OSError if the address cannot be used) and serving."""
    if options.metrics is None:
        return None
    ops.latency = OperationLatency()
    server = MetricsServer(
        options.metrics, lambda: read_tree_file(tree, ".zarrfs", "stats.json"), ops.latency
    )
    server.start()
    return server


def _call_if_present(tree: VDir, name: str) -> None:
    """``tree.name()`` when the tree has it (``start``/``stop`` are optional)."""
    method = getattr(tree, name, None)
    if method is not None:
        method()


def _shutdown(tree: VDir, problems: list[str] | None = None) -> int:
    """Flush and close the tree after the mount is gone; 1 if data may have been lost (each
    failure also appended to ``problems``)."""
    code = 0
    for step in ("stop", "flush_all", "close"):
        try:
            _call_if_present(tree, step)
        except Exception as exc:
            log.exception("%s of the tree failed while shutting down", step)
            if problems is not None and not (code and step == "close"):  # (close flushes again)
                problems.append(f"data written through the mount could not be stored: {exc}")
            code = 1
    return code


async def _serve(loop: _Loop, fuse_options: set[str]) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        try:
            pyfuse3.init(loop.ops, loop.mountpoint, fuse_options)
        except RuntimeError as exc:
            raise MountError(f"cannot mount on {loop.mountpoint}: {exc}") from None
        runtime.write_pid_file(loop.mountpoint)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_signals, loop, signals)
                nursery.start_soon(_announce_when_live, loop)
                nursery.start_soon(loop.ops.expire_kernel_listings)
                await pyfuse3.main()
                nursery.cancel_scope.cancel()
        finally:
            # libfuse skips the unmount when the kernel already dropped the connection
            pyfuse3.close(unmount=True)


async def _watch_signals(loop: _Loop, signals: AsyncIterator[int]) -> None:
    async for signum in signals:
        log.info("%s received: unmounting %s", signal.Signals(signum).name, loop.mountpoint)
        if loop.systemd:
            runtime.sd_notify("STOPPING=1")
        loop.signalled = True
        pyfuse3.terminate()
        return


def _wait_until_live(mountpoint: str) -> None:
    if runtime.fuse_fd(mountpoint) is not None:
        return  # mounted before the daemon started; the kernel queues requests until it reads
    deadline = time.monotonic() + LIVE_TIMEOUT_S
    while True:
        try:
            if os.path.ismount(mountpoint):
                os.stat(mountpoint)
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise MountError(f"{mountpoint} does not answer: {exc.strerror}") from None
        if time.monotonic() > deadline:
            raise MountError(f"{mountpoint} did not become a mount point")
        time.sleep(0.02)


async def _announce_when_live(loop: _Loop) -> None:
    try:
        await trio.to_thread.run_sync(_wait_until_live, loop.mountpoint, abandon_on_cancel=True)
    except MountError as exc:
        loop.status.failed(str(exc))
        pyfuse3.terminate()
        return
    loop.live = True
    runtime.set_readahead(loop.mountpoint, loop.readahead)
    if loop.systemd:
        runtime.sd_notify(f"READY=1\nSTATUS=serving {loop.url} on {loop.mountpoint}")
    log.info("mounted %s on %s (pid %d)", loop.url, loop.mountpoint, os.getpid())
    loop.status.live()


# -- the other side: the `zarrfs mount` parent and `zarrfs umount` ----------------------------


def spawn(cli_args: list[str], mountpoint: str, environment: dict[str, str] | None = None) -> int:
    """Run ``zarrfs <cli_args> --status-fd N`` detached; 0 once it reports the mount live.

    ``environment`` is added to the daemon's environment (``env.`` options: never in argv)."""
    mountpoint = os.path.abspath(mountpoint)
    try:
        check_mountpoint(mountpoint)  # before touching the log of a daemon already serving it
    except MountError as exc:
        print(f"zarrfs: {exc}", file=sys.stderr)
        return 1
    log_path = runtime.log_file(mountpoint)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, **(environment or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    read_fd, write_fd = os.pipe()
    try:
        with open(log_path, "wb") as log_out, open(os.devnull, "r+b") as null:
            child = subprocess.Popen(
                [sys.executable, "-m", "zarrfs", *cli_args, "--status-fd", str(write_fd)],
                stdin=null,
                stdout=null,
                stderr=log_out,
                pass_fds=(write_fd, *_inherited_fuse_fd(mountpoint)),
                start_new_session=True,
                cwd="/",
                env=env,
            )
        os.close(write_fd)
        reply = runtime.read_status(read_fd, SPAWN_TIMEOUT_S)
    except KeyboardInterrupt:
        child.terminate()
        print("zarrfs: interrupted; the mount daemon was stopped", file=sys.stderr)
        return 130
    finally:
        os.close(read_fd)
    if reply == "live":
        return 0
    if reply.startswith("error "):
        print(f"zarrfs: {reply[6:]}", file=sys.stderr)
        for line in _libfuse_complaints(log_path):
            print(f"  {line}", file=sys.stderr)
    elif reply == "":
        code = child.poll()
        print(
            f"zarrfs: the mount daemon exited (status {code}) before the mount was live; "
            f"its log is {log_path}",
            file=sys.stderr,
        )
    else:
        child.terminate()
        print(f"zarrfs: no answer from the mount daemon within {SPAWN_TIMEOUT_S:g} s; stopped it",
              file=sys.stderr)  # fmt: skip
    return 1


def _inherited_fuse_fd(mountpoint: str) -> tuple[int, ...]:
    """The ``/dev/fuse`` descriptor a ``/dev/fd/N`` mountpoint names, kept open in the daemon."""
    fd = runtime.fuse_fd(mountpoint)
    return () if fd is None else (fd,)


def _libfuse_complaints(log_path: os.PathLike[str]) -> list[str]:
    """What libfuse/fusermount3 printed (the reason a mount was refused)."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            return [line.rstrip() for line in f if line.startswith(("fuse:", "fusermount"))]
    except OSError:
        return []


def _flush_through_control_file(mountpoint: str) -> str | None:
    """Write ``.zarrfs/flush`` of the mount; None once every dirty byte is stored, else why not.
    A read-only mount holds no dirty data (and refuses the write): nothing to do."""
    try:
        if os.statvfs(mountpoint).f_flag & os.ST_RDONLY:
            return None
    except OSError:
        pass  # (the write below reports what is wrong)
    path = os.path.join(mountpoint, ".zarrfs", "flush")
    try:
        with open(path, "wb", buffering=0) as control:
            control.write(b"1")
    except OSError as exc:
        return f"its dirty data could not be stored ({path}: {exc.strerror or exc})"
    return None


def unmount(mountpoint: str, *, lazy: bool = False, timeout: float = 120.0) -> int:
    """``zarrfs umount``: unmount, then wait until the daemon has flushed and exited."""
    mountpoint = os.path.abspath(mountpoint)
    found = runtime.mount_info(mountpoint)
    if found is None:
        print(f"zarrfs: {mountpoint} is not mounted", file=sys.stderr)
        return 1
    if found[0] != runtime.FSTYPE:
        print(f"zarrfs: {mountpoint} is a {found[0]} mount, not zarrfs", file=sys.stderr)
        return 1
    pid = runtime.find_daemon(mountpoint)
    if pid is None and not lazy:
        # a daemon serving a /dev/fd/N descriptor (or another user's): no pid to wait for, so
        # have it store its dirty data before the mount goes
        problem = _flush_through_control_file(mountpoint)
        if problem:
            print(f"zarrfs: cannot unmount {mountpoint}: {problem}", file=sys.stderr)
            return 1
    command = ["fusermount3", "-u", *(["-z"] if lazy else []), mountpoint]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        print("zarrfs: fusermount3 not found (install the fuse3 package)", file=sys.stderr)
        return 1
    if result.returncode != 0:
        reason = result.stderr.strip()
        if "busy" in reason.lower():
            reason = (
                f"{mountpoint} is busy: a process has a file open or its working directory "
                "there; close it and retry, or use `zarrfs umount --lazy`"
            )
        print(f"zarrfs: cannot unmount: {reason}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + timeout
    while pid is not None and runtime.process_alive(pid):
        if time.monotonic() > deadline:
            print(
                f"zarrfs: {mountpoint} is unmounted but its daemon (pid {pid}) is still running "
                f"after {timeout:g} s (still flushing?)",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.05)
    return runtime.report_result(mountpoint, pid)
