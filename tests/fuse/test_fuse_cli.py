"""The mount lifecycle through the ``zarrfs`` command: daemonize, umount, errors, systemd."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from fuse_fake_tree import HELLO
from fuse_mount_helpers import (
    REPO,
    force_unmount,
    stop_process,
    wait_for_mount,
    zarrfs_cmd,
    zarrfs_env,
)

from zarrfs import cli
from zarrfs.fuse import runtime

pytestmark = pytest.mark.timeout(60)


def zarrfs(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        zarrfs_cmd(*args),
        capture_output=True,
        text=True,
        env=env or zarrfs_env(tmp_path),
        cwd=REPO,
        timeout=45,
    )


def daemon_pid(tmp_path: Path, mountpoint: Path) -> int:
    pid_file = tmp_path / "run" / runtime.pid_file(str(mountpoint)).name
    return int(pid_file.read_text().split()[0])


@pytest.fixture
def mountpoint(tmp_path: Path):
    mp = tmp_path / "mnt"
    mp.mkdir()
    yield mp
    pid_file = tmp_path / "run" / runtime.pid_file(str(mp)).name
    pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
    force_unmount(mp)
    if pid is not None and runtime.process_alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_mount_returns_when_live_and_umount_waits_for_the_daemon(tmp_path, mountpoint) -> None:
    env = zarrfs_env(tmp_path)
    env["ZARRFS_FAKE_FLUSH_DELAY"] = "1.5"  # the daemon's final flush takes a while
    result = zarrfs(tmp_path, "mount", "fake://tree", str(mountpoint), env=env)
    assert result.returncode == 0, result.stderr
    # live at the moment the command returned: no polling here
    assert runtime.mount_info(str(mountpoint))[0] == "fuse.zarrfs"
    assert (mountpoint / "hello.txt").read_bytes() == HELLO
    pid = daemon_pid(tmp_path, mountpoint)
    assert runtime.process_alive(pid) and pid != os.getpid()
    assert os.getsid(pid) != os.getsid(0)  # detached into its own session

    result = zarrfs(tmp_path, "umount", str(mountpoint))
    assert result.returncode == 0, result.stderr
    assert not runtime.process_alive(pid)  # flushed and exited before umount returned
    assert runtime.mount_info(str(mountpoint)) is None
    assert (tmp_path / "events").read_text().split() == ["flush_all", "close"]


def test_mount_fuse3_form_and_busy_umount(tmp_path, mountpoint) -> None:
    result = zarrfs(tmp_path, "fake://tree", str(mountpoint), "-o", "ro,_netdev,x-systemd.foo")
    assert result.returncode == 0, result.stderr
    assert os.statvfs(mountpoint).f_flag & os.ST_RDONLY
    with pytest.raises(OSError):
        os.open(mountpoint / "data.bin", os.O_WRONLY)
    fd = os.open(mountpoint / "hello.txt", os.O_RDONLY)
    try:
        busy = zarrfs(tmp_path, "umount", str(mountpoint))
        assert busy.returncode == 1
        assert "busy" in busy.stderr
        assert runtime.mount_info(str(mountpoint)) is not None
    finally:
        os.close(fd)
    assert zarrfs(tmp_path, "umount", str(mountpoint)).returncode == 0


def test_store_error_is_reported_by_the_parent(tmp_path, mountpoint) -> None:
    result = zarrfs(tmp_path, "mount", "fake://broken", str(mountpoint))
    assert result.returncode == 1
    assert "cannot open fake://broken" in result.stderr
    assert "does not answer" in result.stderr
    assert "Traceback" not in result.stderr
    assert runtime.mount_info(str(mountpoint)) is None


@pytest.mark.parametrize("foreground", [False, True])
def test_mountpoint_problems(tmp_path, mountpoint, foreground) -> None:
    flag = ["-f"] if foreground else []
    missing = zarrfs(tmp_path, "mount", "fake://tree", str(tmp_path / "nope"), *flag)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    (tmp_path / "file").write_text("x")
    not_dir = zarrfs(tmp_path, "mount", "fake://tree", str(tmp_path / "file"), *flag)
    assert not_dir.returncode == 1 and "not a directory" in not_dir.stderr
    assert zarrfs(tmp_path, "mount", "fake://tree", str(mountpoint)).returncode == 0
    again = zarrfs(tmp_path, "mount", "fake://tree", str(mountpoint), *flag)
    assert again.returncode == 1 and "already a mount point" in again.stderr
    log = tmp_path / "run" / runtime.log_file(str(mountpoint)).name
    assert "mounted fake://tree" in log.read_text()  # the serving daemon's log is untouched
    assert zarrfs(tmp_path, "umount", str(mountpoint)).returncode == 0


def test_usage_errors_exit_2(tmp_path, mountpoint) -> None:
    unknown = zarrfs(tmp_path, "mount", "fake://tree", str(mountpoint), "-o", "ro,bogus=1")
    assert unknown.returncode == 2
    assert "unknown mount option: 'bogus=...'" in unknown.stderr
    malformed = zarrfs(tmp_path, "mount", "fake://tree", str(mountpoint), "-o", "cache_size=x")
    assert malformed.returncode == 2 and "cache_size" in malformed.stderr
    assert zarrfs(tmp_path, "mount", "fake://tree").returncode == 2
    assert runtime.mount_info(str(mountpoint)) is None


def test_umount_of_something_not_mounted(tmp_path, mountpoint) -> None:
    result = zarrfs(tmp_path, "umount", str(mountpoint))
    assert result.returncode == 1 and "not mounted" in result.stderr


def test_systemd_ready_only_when_live_and_stopping_on_sigterm(tmp_path, mountpoint) -> None:
    address = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(20)
    env = zarrfs_env(tmp_path)
    env["NOTIFY_SOCKET"] = address
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            zarrfs_cmd("mount", "fake://tree", str(mountpoint), "--systemd"),
            stdout=out, stderr=out, env=env, cwd=REPO,
        )  # fmt: skip
    try:
        ready = sock.recv(4096).decode()
        assert ready.startswith("READY=1")
        assert runtime.mount_info(str(mountpoint)) is not None  # live when READY arrived
        assert (mountpoint / "hello.txt").read_bytes() == HELLO
        proc.send_signal(signal.SIGTERM)
        assert sock.recv(4096).decode() == "STOPPING=1"
        assert proc.wait(timeout=20) == 0
        sock.settimeout(0.2)
        with pytest.raises(TimeoutError):
            sock.recv(4096)  # exactly one STOPPING=1
        assert runtime.mount_info(str(mountpoint)) is None
    finally:
        sock.close()
        force_unmount(mountpoint)
        stop_process(proc)


def test_foreground_logs_are_journald_prefixed_when_stderr_is_the_journal(tmp_path) -> None:
    log = tmp_path / "stderr"
    code = "\n".join(
        [
            "import logging",
            "from zarrfs.fuse.runtime import setup_logging",
            "setup_logging('info')",
            "logging.getLogger('zarrfs.x').warning('careful')",
            "logging.getLogger('zarrfs.x').info('hello')",
            "logging.getLogger('zarrfs.x').debug('hidden')",
        ]
    )
    with open(log, "wb") as err:
        st = os.fstat(err.fileno())
        env = zarrfs_env(tmp_path)
        env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        subprocess.run([sys.executable, "-c", code], stderr=err, env=env, check=True)
        env.pop("JOURNAL_STREAM")
        subprocess.run([sys.executable, "-c", code], stderr=err, env=env, check=True)
    lines = log.read_text().splitlines()
    assert lines[:2] == ["<4>zarrfs.x: careful", "<6>zarrfs.x: hello"]
    assert lines[2].endswith("WARNING zarrfs.x: careful") and not lines[2].startswith("<")
    assert len(lines) == 4


def test_helper_commands_dispatch_to_zarrfs_tools(monkeypatch, capsys) -> None:
    seen: list[list[str]] = []
    tool = types.ModuleType("zarrfs.tools.info")
    tool.main = lambda argv: seen.append(argv) or 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "zarrfs.tools.info", tool)
    assert cli.main(["info", "some/store", "--json"]) == 3
    assert seen == [["some/store", "--json"]]

    assert cli._tool("nosuchtool", []) == 1
    assert "'nosuchtool' command is not available" in capsys.readouterr().err


def test_daemon_is_found_by_proc_scan_without_its_pid_file(
    tmp_path, mountpoint, monkeypatch
) -> None:
    env = zarrfs_env(tmp_path)
    log = tmp_path / "fg.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            zarrfs_cmd("mount", "fake://tree", str(mountpoint), "-f"),
            stdout=out, stderr=out, env=env, cwd=REPO,
        )  # fmt: skip
    try:
        wait_for_mount(mountpoint, proc, log)
        monkeypatch.setenv("ZARRFS_RUNTIME_DIR", str(tmp_path / "run"))
        assert runtime.find_daemon(str(mountpoint)) == proc.pid  # from the pid file
        runtime.pid_file(str(mountpoint)).unlink()
        assert runtime.find_daemon(str(mountpoint)) == proc.pid  # from /proc
        assert zarrfs(tmp_path, "umount", str(mountpoint)).returncode == 0
        assert proc.wait(timeout=10) == 0
    finally:
        force_unmount(mountpoint)
        stop_process(proc)


def test_read_only_daemon_started_with_a_relative_mountpoint_unmounts(
    tmp_path, mountpoint, monkeypatch
) -> None:
    """``zarrfs mount -f store mnt -o ro`` run in the mountpoint's parent: its command line
    names the mountpoint relative to that directory, which ``zarrfs umount MNT`` resolves; and
    a read-only mount is never asked to flush (it refuses the write and holds nothing)."""
    from zarrfs.fuse import daemon

    env = zarrfs_env(tmp_path)
    log = tmp_path / "ro.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            zarrfs_cmd("mount", "fake://tree", mountpoint.name, "-f", "-o", "ro"),
            stdout=out, stderr=out, env=env, cwd=mountpoint.parent,
        )  # fmt: skip
    try:
        wait_for_mount(mountpoint, proc, log)
        monkeypatch.setenv("ZARRFS_RUNTIME_DIR", str(tmp_path / "run"))
        runtime.pid_file(str(mountpoint)).unlink()
        assert runtime.find_daemon(str(mountpoint)) == proc.pid  # from /proc, resolved
        assert daemon._flush_through_control_file(str(mountpoint)) is None
        assert zarrfs(tmp_path, "umount", str(mountpoint)).returncode == 0
        assert proc.wait(timeout=10) == 0
    finally:
        force_unmount(mountpoint)
        stop_process(proc)


def test_auto_unmount_cleans_up_after_a_killed_daemon(tmp_path, mountpoint) -> None:
    result = zarrfs(tmp_path, "mount", "fake://tree", str(mountpoint), "-o", "auto_unmount")
    assert result.returncode == 0, result.stderr
    os.kill(daemon_pid(tmp_path, mountpoint), signal.SIGKILL)
    deadline = time.monotonic() + 30  # fusermount3's watchdog may queue behind other unmounts
    while runtime.mount_info(str(mountpoint)) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runtime.mount_info(str(mountpoint)) is None  # fusermount3 unmounted it for us
