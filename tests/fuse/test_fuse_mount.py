"""Real mounts (subprocess daemon, /dev/fuse) of the fake tree, used with ordinary tools."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import shutil
import signal
import stat
import subprocess
import threading
import time

import numpy as np
import pytest
from fuse_fake_tree import BAD_END, BAD_KEY, BAD_START, HELLO, MANY, PATTERN, SIZE, render

from zarrfs.fuse.runtime import mount_info

pytestmark = pytest.mark.timeout(60)


def pread(path, offset: int, size: int, flags: int = 0) -> bytes:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def test_reads_at_odd_offsets_match_the_content(mount) -> None:
    m = mount()
    assert subprocess.run(["cat", m / "data.bin"], capture_output=True).stdout == PATTERN
    dd = subprocess.run(
        ["dd", f"if={m / 'data.bin'}", "bs=1000", "skip=3", "count=7", "status=none"],
        capture_output=True,
    )
    assert dd.stdout == PATTERN[3000:10000]
    for offset, size in [(1, 1), (4095, 3), (131071, 200_001), (SIZE - 5, 100), (SIZE, 10)]:
        expected = PATTERN[offset : offset + size]
        assert pread(m / "data.bin", offset, size) == expected
        assert pread(m / "data.bin", offset, size, os.O_DIRECT) == expected
    assert (m / "hello.txt").read_bytes() == HELLO
    assert (m / "sub" / "deep" / "leaf.txt").read_bytes() == b"leaf\n"


def test_mount_table_shows_store_url_and_fuse_zarrfs(mount) -> None:
    m = mount()
    fstype, source, _ = mount_info(str(m.mountpoint))
    assert (fstype, source) == ("fuse.zarrfs", "fake://tree")
    findmnt = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", str(m.mountpoint)], capture_output=True, text=True
    )
    assert findmnt.stdout.strip() == "fuse.zarrfs"


def _connection_setting(mountpoint, name: str) -> int:
    """A setting of the FUSE connection serving ``mountpoint``, from the fusectl file system
    (mounted in a private mount namespace where the system has not mounted it)."""
    minor = os.minor(mount_info(str(mountpoint))[2])
    path = f"/sys/fs/fuse/connections/{minor}/{name}"
    if os.path.exists(path):
        with open(path) as f:
            return int(f.read())
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("fusectl is not mounted and cannot be mounted here")
    script = f"mount -t fusectl none /sys/fs/fuse/connections && cat {path}"
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount fusectl: {proc.stderr.strip()}")
    return int(proc.stdout)


def test_the_kernel_keeps_more_read_ahead_requests_in_flight(mount) -> None:
    # with the kernel's 12 (congested at 9) it dropped the asynchronous part of read-ahead
    # windows while the daemon decoded, and asked for those pages late (zarrfs.fuse.operations)
    import pyfuse3

    from zarrfs.fuse.operations import MAX_BACKGROUND

    if not getattr(pyfuse3, "MAX_BACKGROUND", False):
        pytest.skip("pyfuse3 without scripts/pyfuse3-max-background.patch")
    m = mount()
    assert _connection_setting(m.mountpoint, "max_background") == MAX_BACKGROUND > 12
    assert _connection_setting(m.mountpoint, "congestion_threshold") == MAX_BACKGROUND * 3 // 4


def test_corrupt_range_gives_eio_only_there_and_is_logged_once(mount) -> None:
    m = mount()
    m.expect_log(BAD_KEY)
    path = m / "corrupt.bin"
    for _ in range(5):
        with pytest.raises(OSError) as info:
            pread(path, BAD_START + 10, 100, os.O_DIRECT)
        assert info.value.errno == errno.EIO
    assert pread(path, BAD_START - 100, 100, os.O_DIRECT) == PATTERN[BAD_START - 100 : BAD_START]
    assert pread(path, BAD_END, 1000, os.O_DIRECT) == PATTERN[BAD_END : BAD_END + 1000]
    assert (m / "hello.txt").read_bytes() == HELLO
    assert m.log_text().count(BAD_KEY) == 1


def test_slow_read_times_out_while_other_files_answer(mount) -> None:
    m = mount("timeout=1")
    m.expect_log("slow|did not finish")
    outcome: dict[str, object] = {}

    def slow_read() -> None:
        started = time.monotonic()
        try:
            pread(m / "slow.bin", 0, 100, os.O_DIRECT)
            outcome["result"] = "data"
        except OSError as exc:
            outcome["result"] = exc.errno
        outcome["seconds"] = time.monotonic() - started

    reader = threading.Thread(target=slow_read)
    reader.start()
    time.sleep(0.2)
    assert reader.is_alive()  # the slow read is in flight ...
    assert pread(m / "hello.txt", 0, 100, os.O_DIRECT) == HELLO  # ... and others still answer
    assert sorted(os.listdir(m / "sub")) == ["deep"]
    reader.join(timeout=15)
    assert outcome["result"] == errno.EIO
    assert outcome["seconds"] < 10  # the 1 s deadline, not the node's 20 s sleep
    assert pread(m / "data.bin", 7, 9) == PATTERN[7:16]


def test_node_exception_is_eio_and_the_mount_lives_on(mount) -> None:
    m = mount()
    m.expect_log("unexpected ZeroDivisionError")
    with pytest.raises(OSError) as info:
        pread(m / "boom.bin", 0, 10, os.O_DIRECT)
    assert info.value.errno == errno.EIO
    assert pread(m / "boom.bin", 4096, 10, os.O_DIRECT) == PATTERN[4096:4106]
    with pytest.raises(OSError):
        pread(m / "boom.bin", 0, 10, os.O_DIRECT)
    assert m.proc.poll() is None
    assert (m / "hello.txt").read_bytes() == HELLO
    assert m.log_text().count("Traceback") == 1  # logged once per raising site


def test_listing_ten_thousand_entries(mount) -> None:
    m = mount()
    find = subprocess.run(f"find {m / 'big'} | wc -l", shell=True, capture_output=True, text=True)
    assert int(find.stdout) == MANY + 1
    names = os.listdir(m / "big")
    assert names == [f"f{i:05d}" for i in range(MANY)]
    with os.scandir(m / "big") as entries:
        inodes = {e.name: e.inode() for e in entries}
    assert len(set(inodes.values())) == MANY
    assert os.stat(m / "big" / "f01234").st_ino == inodes["f01234"]  # stable per path
    assert (m / "big" / "f09999").read_bytes() == b"f09999\n"


def test_xattrs(mount) -> None:
    m = mount()
    dump = subprocess.run(
        ["getfattr", "-d", "-m", "-", str(m / "data.bin")], capture_output=True, text=True
    )
    assert 'user.zarr.shape="[1048576]"' in dump.stdout
    assert 'user.zarr.dtype="uint8"' in dump.stdout
    assert sorted(os.listxattr(m / "data.bin")) == ["user.zarr.dtype", "user.zarr.shape"]
    assert os.getxattr(m / "data.bin", "user.zarr.shape") == b"[1048576]"
    with pytest.raises(OSError) as info:
        os.getxattr(m / "data.bin", "user.nope")
    assert info.value.errno == errno.ENODATA
    for other in ("security.selinux", "system.posix_acl_access", "trusted.x"):
        with pytest.raises(OSError) as info:  # a namespace the mount does not support
            os.getxattr(m / "data.bin", other)
        assert info.value.errno == errno.ENOTSUP
    with pytest.raises(OSError) as info:
        os.setxattr(m / "data.bin", "user.zarr.shape", b"[1]")
    assert info.value.errno == errno.ENOTSUP
    assert os.listxattr(m / "hello.txt") == []


def test_sizes_blocks_and_block_size(mount) -> None:
    m = mount()
    st = os.stat(m / "data.bin")
    assert (st.st_size, st.st_blocks, st.st_blksize) == (SIZE, 2, 128 * 1024)  # 1000 stored
    hello = os.stat(m / "hello.txt")
    assert (hello.st_size, hello.st_blocks) == (len(HELLO), 1)
    assert hello.st_mtime_ns == 1_700_000_000_123_456_789
    du = subprocess.run(["du", "-B1", str(m / "data.bin")], capture_output=True, text=True)
    assert int(du.stdout.split()[0]) == 1024
    vfs = os.statvfs(m.mountpoint)
    assert vfs.f_namemax == 255 and vfs.f_bavail > 0


def test_read_only_mount_refuses_writes_with_erofs(mount) -> None:
    m = mount("ro")
    for target, flags in [
        ("new.bin", os.O_WRONLY | os.O_CREAT),
        ("data.bin", os.O_WRONLY),
        ("scratch/x", os.O_WRONLY | os.O_CREAT),
    ]:
        with pytest.raises(OSError) as info:
            os.open(m / target, flags)
        assert info.value.errno == errno.EROFS
    assert stat.S_IMODE(os.stat(m / "data.bin").st_mode) == 0o444
    assert stat.S_IMODE(os.stat(m / "scratch").st_mode) == 0o555
    assert pread(m / "data.bin", 5, 5) == PATTERN[5:10]


def test_read_only_nodes_in_a_writable_mount_give_erofs(mount) -> None:
    m = mount()
    with pytest.raises(OSError) as info:
        os.open(m / "new.bin", os.O_WRONLY | os.O_CREAT)  # the root refuses children
    assert info.value.errno == errno.EROFS
    with pytest.raises(OSError) as info:
        os.mkdir(m / "sub" / "newdir")
    assert info.value.errno == errno.EROFS


def test_uid_gid_umask_options(mount) -> None:
    m = mount("uid=1234,gid=4321,umask=027")
    st = os.stat(m / "data.bin")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 4321, 0o640)
    assert stat.S_IMODE(os.stat(m / "scratch").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(m / "hello.txt").st_mode) == 0o440


def test_writes_read_back_and_truncate_rules(mount) -> None:
    m = mount()
    m.expect_log("fixed size")
    fd = os.open(m / "data.bin", os.O_RDWR)
    try:
        assert os.pwrite(fd, b"xyz" * 1000, 12345) == 3000
        os.fsync(fd)
    finally:
        os.close(fd)
    expected = PATTERN[:12345] + b"xyz" * 1000 + PATTERN[15345:]
    assert pread(m / "data.bin", 0, SIZE, os.O_DIRECT) == expected
    assert (m / "data.bin").read_bytes() == expected
    # O_TRUNC keeps size and content (the view overwrites in place)
    fd = os.open(m / "data.bin", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"AB")
    os.close(fd)
    assert os.stat(m / "data.bin").st_size == SIZE
    assert pread(m / "data.bin", 0, 4, os.O_DIRECT) == b"AB" + PATTERN[2:4]
    os.truncate(m / "data.bin", SIZE)  # same size: accepted
    with pytest.raises(OSError) as info:
        os.truncate(m / "data.bin", 10)
    assert info.value.errno == errno.EINVAL


def _resident_pages(mapped: mmap.mmap, first: int, count: int) -> int:
    """How many of pages ``[first, first+count)`` of a file mapping are in the page cache."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = mmap.PAGESIZE
    vec = (ctypes.c_ubyte * count)()
    base = np.frombuffer(mapped, dtype=np.uint8).ctypes.data
    assert libc.mincore(base + first * page, count * page, vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec)


def test_write_only_opens_bypass_the_page_cache_and_readers_see_their_writes(mount) -> None:
    """A write through an ``O_WRONLY`` descriptor (``dd of=``, ``cp``, ``>``) goes straight to
    the daemon, leaving no page-cache pages behind (``direct_io``); one through ``O_RDWR``
    goes through the page cache, as before. A reader sees both at once."""
    m = mount()
    page = mmap.PAGESIZE
    span = 64 * page
    rfd = os.open(m / "data.bin", os.O_RDONLY)
    mapped = mmap.mmap(rfd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ)  # reads keep the cache
    try:
        rw = os.open(m / "data.bin", os.O_RDWR)
        try:
            assert os.pwrite(rw, b"r" * span, 0) == span
            assert _resident_pages(mapped, 0, 64) == 64  # the cached write's pages stay
        finally:
            os.close(rw)
        assert os.pread(rfd, span, 0) == b"r" * span
        assert os.pread(rfd, span, 2 * span) == PATTERN[2 * span : 3 * span]  # now cached
        wo = os.open(m / "data.bin", os.O_WRONLY)
        try:
            assert os.pwrite(wo, b"w" * span, 2 * span) == span
            assert _resident_pages(mapped, 128, 64) == 0  # dropped, not refilled
            assert os.pread(rfd, span, 2 * span) == b"w" * span  # before the close
        finally:
            os.close(wo)
        assert mapped[2 * span : 2 * span + 4] == b"wwww"
    finally:
        mapped.close()
        os.close(rfd)
    expected = b"r" * span + PATTERN[span : 2 * span] + b"w" * span + PATTERN[3 * span :]
    assert pread(m / "data.bin", 0, SIZE, os.O_DIRECT) == expected


def test_flush_error_is_returned_by_close_and_fsync(mount) -> None:
    m = mount()
    m.expect_log("injected flush failure")
    fd = os.open(m / "flushfail.bin", os.O_WRONLY)
    os.write(fd, b"data")
    with pytest.raises(OSError) as info:
        os.fsync(fd)
    assert info.value.errno == errno.EIO
    with pytest.raises(OSError) as info:
        os.close(fd)
    assert info.value.errno == errno.EIO
    fd = os.open(m / "flushfail.bin", os.O_RDONLY)  # read-only handles have nothing to flush
    os.close(fd)


def test_chmod_chown_touch(mount) -> None:
    m = mount()
    os.chmod(m / "data.bin", 0o644)  # no change: accepted
    os.chown(m / "data.bin", os.getuid(), os.getgid())
    subprocess.run(["touch", str(m / "data.bin")], check=True)
    with pytest.raises(OSError) as info:
        os.chmod(m / "data.bin", 0o600)
    assert info.value.errno == errno.EPERM
    with pytest.raises(OSError) as info:
        os.chown(m / "data.bin", 4242, -1)
    assert info.value.errno == errno.EPERM


def test_create_rename_unlink_in_a_writable_directory(mount) -> None:
    m = mount()
    scratch = m / "scratch"
    (scratch / "a.txt").write_bytes(b"first")
    (scratch / "b.tmp").write_bytes(b"second version")
    ino_b = os.stat(scratch / "b.tmp").st_ino
    os.rename(scratch / "b.tmp", scratch / "a.txt")  # editor-style replace
    assert (scratch / "a.txt").read_bytes() == b"second version"
    assert os.stat(scratch / "a.txt").st_ino == ino_b
    assert sorted(os.listdir(scratch)) == ["a.txt"]
    os.mkdir(scratch / "d")
    (scratch / "d" / "inner").write_bytes(b"x")
    os.rename(scratch / "d", scratch / "e")
    assert (scratch / "e" / "inner").read_bytes() == b"x"
    os.unlink(scratch / "e" / "inner")
    os.rmdir(scratch / "e")
    os.unlink(scratch / "a.txt")
    assert os.listdir(scratch) == []
    assert not (scratch / "a.txt").exists()


def test_committed_sizes_are_seen_right_after_close_and_rename(mount) -> None:
    m = mount()
    doc = m / "edit" / "doc.json"
    doc.write_bytes(b"abc")  # the view commits a re-rendered, longer document on close
    assert doc.read_bytes() == render(b"abc")
    assert os.stat(doc).st_size == len(render(b"abc"))
    subprocess.run(["sed", "-i", "s/ABC/a much longer replacement text/", str(doc)], check=True)
    assert doc.read_bytes() == render(b"a much longer replacement text\n--committed--")
    (m / "edit" / "new.tmp").write_bytes(b"xy")
    os.rename(m / "edit" / "new.tmp", doc)  # editor-style save into a node that re-renders
    assert doc.read_bytes() == render(b"xy")
    assert sorted(os.listdir(m / "edit")) == ["doc.json", "shadow.txt"]


def test_ftruncate_of_an_edited_copy(mount) -> None:
    m = mount()
    doc = m / "edit" / "doc.json"
    fd = os.open(doc, os.O_RDWR)
    try:
        os.ftruncate(fd, 0)  # truncates this open file's draft, not the fixed-size node
        assert os.fstat(fd).st_size == 0
        os.write(fd, b"xy")
    finally:
        os.close(fd)
    assert doc.read_bytes() == render(b"xy")
    with pytest.raises(OSError) as info:
        os.truncate(doc, 0)  # by path: the node itself, which refuses
    assert info.value.errno == errno.EINVAL
    m.expect_log("fixed size")


@pytest.mark.skipif(shutil.which("vim.tiny") is None, reason="vim.tiny is not installed")
def test_vim_edits_a_document_in_place(mount) -> None:
    m = mount()
    doc = m / "edit" / "doc.json"
    subprocess.run(
        ["vim.tiny", "-E", "-s", "-n", "-c", "%s/{}/edited/", "-c", "wq", str(doc)],
        check=True, stdin=subprocess.DEVNULL, timeout=30,
    )  # fmt: skip
    assert doc.read_bytes() == render(render(b"{}").replace(b"{}", b"edited"))
    assert sorted(os.listdir(m / "edit")) == ["doc.json", "shadow.txt"]


def test_a_commit_refreshes_the_sizes_of_sibling_views(mount) -> None:
    m = mount("attr_timeout=60")  # without invalidation the kernel would trust sizes for 60 s
    shadow = m / "edit" / "shadow.txt"
    before = os.stat(shadow).st_size
    assert before == len(render(b"{}"))
    (m / "edit" / "doc.json").write_bytes(b"a much longer document than before")
    after = render(b"a much longer document than before")
    assert os.stat(shadow).st_size == len(after)
    assert shadow.read_bytes() == after.lower()


def test_sigterm_unmounts_flushes_and_exits_zero(mount) -> None:
    m = mount()
    assert (m / "hello.txt").read_bytes() == HELLO
    m.proc.send_signal(signal.SIGTERM)
    assert m.proc.wait(timeout=20) == 0
    assert mount_info(str(m.mountpoint)) is None
    assert m.events.read_text().split() == ["flush_all", "close"]
    assert "SIGTERM received" in m.log_text()
