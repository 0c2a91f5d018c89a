"""Direct-I/O writes of new files (``zarrfs.core.stores.directio``): exact bytes whatever the
pieces look like, large objects past the page cache, buffered where direct I/O is refused."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import random

import numpy as np
import pytest

from zarrfs.core.stores import directio
from zarrfs.core.stores.local import LocalStore


def _supports_direct(path) -> bool:
    probe = path / "probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError:
        return False
    try:
        return directio.direct_capable(fd)
    finally:
        os.close(fd)
        probe.unlink()


@pytest.fixture
def writes(monkeypatch):
    """Every ``os.write`` the module makes, as (length, O_DIRECT on)."""
    seen: list[tuple[int, bool]] = []
    real = os.write

    def write(fd, data):
        n = real(fd, data)
        seen.append((n, bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)))
        return n

    monkeypatch.setattr(directio.os, "write", write)
    return seen


def _write(path, pieces) -> bytes:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        directio.write_pieces(fd, pieces)
    finally:
        os.close(fd)
    return path.read_bytes()


def _split(data: bytes, rng: random.Random, largest: int) -> list[bytes]:
    pieces, at = [], 0
    while at < len(data):
        n = rng.randint(0, largest)
        pieces.append(data[at : at + n])
        at += n
    return pieces


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 70_000, (1 << 20) - 1, 1 << 20, 5 << 20 | 123])
@pytest.mark.parametrize("largest", [1, 5000, 300_000, 3 << 20])
def test_the_file_holds_exactly_the_pieces(tmp_path, size, largest):
    rng = random.Random(size * 7 + largest)
    if largest == 1 and size > 70_000:
        largest = 4096  # bytes one by one: correct but slow
    data = rng.randbytes(size)
    assert _write(tmp_path / "f", _split(data, rng, largest)) == data


def test_a_large_object_goes_past_the_page_cache_but_its_last_partial_block(tmp_path, writes):
    if not _supports_direct(tmp_path):
        pytest.skip("the file system refuses O_DIRECT")
    data = np.random.default_rng(1).integers(0, 255, (4 << 20) + 100, np.uint8).tobytes()
    assert _write(tmp_path / "f", [data[:12345], data[12345:]]) == data
    direct = sum(n for n, on in writes if on)
    buffered = sum(n for n, on in writes if not on)
    assert (direct, buffered) == (4 << 20, 100)


def test_an_aligned_piece_is_written_from_the_callers_buffer(tmp_path, writes, monkeypatch):
    if not _supports_direct(tmp_path):
        pytest.skip("the file system refuses O_DIRECT")
    buf = mmap.mmap(-1, 2 << 20)  # page-aligned
    buf.write(bytes(range(256)) * (8 << 10))
    monkeypatch.setattr(directio, "_take_buffer", lambda: pytest.fail("bounced"))
    assert _write(tmp_path / "f", [memoryview(buf)]) == bytes(buf)
    assert writes == [(2 << 20, True)]


def test_a_small_object_is_written_through_the_page_cache(tmp_path, writes):
    data = os.urandom(directio.DIRECT_MIN - 1)
    pieces = _split(data, random.Random(2), 9000)
    # a stream (size unknown until its end): gathered, then written in one go
    assert _write(tmp_path / "f", iter(pieces)) == data
    assert writes == [(len(data), False)]
    # a size known up front: each piece as it comes, without copying it first
    writes.clear()
    assert _write(tmp_path / "g", pieces) == data
    assert writes == [(len(p), False) for p in pieces if p]


def test_without_direct_io_pieces_are_not_copied(tmp_path, writes, monkeypatch):
    monkeypatch.setattr(directio, "direct_capable", lambda fd: False)
    monkeypatch.setattr(directio, "_take_buffer", lambda: pytest.fail("bounced"))
    data = os.urandom(3 << 20)
    pieces = _split(data, random.Random(4), 700_000)
    assert _write(tmp_path / "f", iter(pieces)) == data
    assert writes == [(len(p), False) for p in pieces if p]


def test_a_file_system_refusing_direct_io_gets_buffered_writes(tmp_path, writes, monkeypatch):
    real = fcntl.fcntl

    def refuse(fd, cmd, arg=0):
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "no direct I/O here")
        return real(fd, cmd, arg)

    monkeypatch.setattr(directio.fcntl, "fcntl", refuse)
    data = os.urandom(3 << 20)
    assert _write(tmp_path / "f", [data]) == data
    assert writes and not any(on for _, on in writes)


def test_a_refused_direct_write_continues_buffered_from_the_same_offset(tmp_path, monkeypatch):
    if not _supports_direct(tmp_path):
        pytest.skip("the file system refuses O_DIRECT")
    real = os.write
    direct_writes = [0]

    def write(fd, data):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            direct_writes[0] += 1
            if direct_writes[0] == 2:  # the second direct write is refused: nothing written
                raise OSError(errno.EINVAL, "refused")
        return real(fd, data)

    monkeypatch.setattr(directio.os, "write", write)
    data = os.urandom((3 << 20) + 5)
    assert _write(tmp_path / "f", _split(data, random.Random(3), 700_000)) == data
    assert direct_writes[0] == 2  # none after the refusal


def test_other_write_errors_are_raised(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "full")

    monkeypatch.setattr(directio.os, "write", full)
    with pytest.raises(OSError) as info:
        _write(tmp_path / "f", [os.urandom(2 << 20)])
    assert info.value.errno == errno.ENOSPC


def test_only_local_disk_file_systems_get_direct_io(tmp_path, writes, monkeypatch):
    if not _supports_direct(tmp_path):
        pytest.skip("the file system refuses O_DIRECT")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert directio.direct_capable(fd)
        monkeypatch.setattr(directio, "_direct_devices", {os.fstat(fd).st_dev: False})
    finally:
        os.close(fd)
    data = os.urandom(3 << 20)  # as on a network file system: through the page cache
    assert _write(tmp_path / "f", [data]) == data
    assert writes and not any(on for _, on in writes)
    with open("/proc/self/mountinfo") as info:
        memory = [line.split()[4] for line in info if " - tmpfs " in line]
    if memory:
        fd = os.open(memory[0], os.O_RDONLY)
        try:
            assert not directio.direct_capable(fd)
        finally:
            os.close(fd)


def test_bounce_buffers_are_reused_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(directio, "_pool", [])
    # one byte past a page boundary: never aligned, so the bytes go through a bounce buffer
    # (a piece that happens to start on a page is written straight from the caller's memory)
    source = mmap.mmap(-1, (3 << 20) + 1)
    for n in range(3):
        source[:] = os.urandom(len(source))
        piece = memoryview(source)[1:]
        assert _write(tmp_path / f"f{n}", [piece]) == bytes(piece)
        piece.release()
    assert len(directio._pool) == 1  # one writer at a time: one buffer, reused
    for _ in range(directio.POOL_KEEP + 3):
        directio._give_buffer(mmap.mmap(-1, directio.BOUNCE))
    assert len(directio._pool) == directio.POOL_KEEP


def test_the_store_writes_large_objects_with_direct_io(tmp_path, writes):
    if not _supports_direct(tmp_path):
        pytest.skip("the file system refuses O_DIRECT")
    store = LocalStore(tmp_path)
    data = os.urandom(2 << 20)
    group = store.group()
    group.set("c/0", data)
    store.set("c/1", data[:-1])
    group.commit()
    assert store.get("c/0") == data and store.get("c/1") == data[:-1]
    assert sum(n for n, on in writes if on) == (2 << 20) + (2 << 20) - 4096


def test_an_object_of_known_size_is_allocated_at_once(tmp_path, monkeypatch):
    if not _supports_direct(tmp_path):
        pytest.skip("the file system refuses O_DIRECT")
    calls = []
    real = os.posix_fallocate

    def allocate(fd, offset, size):
        calls.append((offset, size))
        real(fd, offset, size)

    monkeypatch.setattr(directio.os, "posix_fallocate", allocate)
    data = os.urandom((2 << 20) + 7)
    assert _write(tmp_path / "a", (data[:100], data[100:])) == data  # sizes known up front
    assert calls == [(0, len(data))]
    assert _write(tmp_path / "b", iter([data])) == data  # a stream: written as it comes
    assert _write(tmp_path / "c", (data[:1000],)) == data[:1000]  # small: page cache
    assert calls == [(0, len(data))]
