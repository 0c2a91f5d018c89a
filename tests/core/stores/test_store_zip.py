"""ZipStore: the store contract (every compression method) plus hostile archives."""

from __future__ import annotations

import gc
import logging
import os
import struct
import threading
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest
from test_store_contract import BLOB, ReadOnlyStoreContract

from zarrfs.core.errors import CorruptDataError, StoreError
from zarrfs.core.stores.base import ByteRange, Store, SuffixRange
from zarrfs.core.stores.zipstore import ZipStore


def build_zip(path: Path, contents: dict[str, bytes], compression: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for key, value in contents.items():
            archive.writestr(key, value)
    return path


class ZipContract(ReadOnlyStoreContract):
    compression = zipfile.ZIP_STORED

    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        return ZipStore(build_zip(tmp_path / "store.zip", contents, self.compression))


class TestZipStoreStored(ZipContract):
    compression = zipfile.ZIP_STORED


class TestZipStoreDeflated(ZipContract):
    compression = zipfile.ZIP_DEFLATED


class TestZipStoreBzip2(ZipContract):
    compression = zipfile.ZIP_BZIP2


class TestZipStoreLzma(ZipContract):
    compression = zipfile.ZIP_LZMA


class TestZipStoreWithDirectoryEntries(ZipContract):
    """zip -r style archives also hold an entry per directory; those are not keys."""

    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        path = tmp_path / "store.zip"
        with zipfile.ZipFile(path, "w") as archive:
            dirs = {k.rsplit("/", i)[0] + "/" for k in contents for i in range(1, k.count("/") + 1)}
            for d in sorted(dirs):
                archive.writestr(zipfile.ZipInfo(d), b"")
            for key, value in contents.items():
                archive.writestr(key, value)
        return ZipStore(path)


# -- byte surgery helpers --------------------------------------------------------------------

_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"


def patch_sizes(
    data: bytearray, name: bytes, *, file_size: int | None = None, compress_size: int | None = None
) -> None:
    """Rewrite the sizes of member ``name`` in both its local header and its central entry."""
    patched = 0
    for magic, csize_at, usize_at, name_len_at, header_len in (
        (_LOCAL, 18, 22, 26, 30),
        (_CENTRAL, 20, 24, 28, 46),
    ):
        pos = data.find(magic)
        while pos >= 0:
            (name_len,) = struct.unpack_from("<H", data, pos + name_len_at)
            if bytes(data[pos + header_len : pos + header_len + name_len]) == name:
                if compress_size is not None:
                    struct.pack_into("<I", data, pos + csize_at, compress_size)
                if file_size is not None:
                    struct.pack_into("<I", data, pos + usize_at, file_size)
                patched += 1
            pos = data.find(magic, pos + 1)
    assert patched == 2, "member headers not found"


def rename_member(data: bytearray, old: bytes, new: bytes) -> None:
    """Replace a member name of the same length in both headers."""
    assert len(old) == len(new)
    assert data.count(old) == 2
    data[:] = data.replace(old, new)


# -- range reads of stored members -----------------------------------------------------------


def test_stored_range_reads_only_the_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = os.urandom(1 << 20)
    store = ZipStore(build_zip(tmp_path / "s.zip", {"big": big}, zipfile.ZIP_STORED))
    requested: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, off: int) -> bytes:
        requested.append(n)
        return real_pread(fd, n, off)

    monkeypatch.setattr(os, "pread", counting_pread)
    assert store.get("big", ByteRange(500_000, 100)) == big[500_000:500_100]
    assert store.get("big", SuffixRange(10)) == big[-10:]
    # 2 x (30-byte local header + 3-byte name) + the 110 bytes asked for
    assert sum(requested) == 2 * 33 + 110


def test_compressed_range_decodes_only_up_to_the_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = bytes(range(256)) * (8 << 12)  # 8 MiB, compresses well
    store = ZipStore(build_zip(tmp_path / "d.zip", {"big": big}, zipfile.ZIP_DEFLATED))
    tracemalloc.start()
    try:
        assert store.get("big", ByteRange(1000, 10)) == big[1000:1010]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # far below the 8 MiB member


# -- integrity ------------------------------------------------------------------------------


def test_flipped_byte_fails_crc_on_whole_read(tmp_path: Path) -> None:
    path = build_zip(tmp_path / "s.zip", {"k": BLOB}, zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    data[data.find(BLOB) + 5000] ^= 0xFF
    path.write_bytes(data)
    store = ZipStore(path)
    with pytest.raises(CorruptDataError, match="CRC"):
        store.get("k")
    assert store.get("k", ByteRange(0, 100)) == BLOB[:100]  # ranges cannot be checked


@pytest.mark.parametrize("compression", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2])
@pytest.mark.parametrize("declared", [5000, 20000, 0])
def test_lying_size_header_compressed(tmp_path: Path, compression: int, declared: int) -> None:
    path = build_zip(tmp_path / "s.zip", {"k": BLOB, "ok": b"fine"}, compression)
    data = bytearray(path.read_bytes())
    patch_sizes(data, b"k", file_size=declared)
    path.write_bytes(data)
    store = ZipStore(path)
    assert store.size("k") == declared
    with pytest.raises(CorruptDataError, match="k: decompressed data is (longer|shorter)"):
        store.get("k")
    assert store.get("ok") == b"fine"


def test_lying_size_header_stored(tmp_path: Path) -> None:
    path = build_zip(tmp_path / "s.zip", {"k": BLOB, "ok": b"fine"}, zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    patch_sizes(data, b"k", file_size=100)  # sizes now disagree
    path.write_bytes(data)
    with pytest.raises(CorruptDataError, match="sizes disagree"):
        ZipStore(path).get("k", ByteRange(0, 10))

    data = bytearray(path.read_bytes())
    patch_sizes(data, b"k", file_size=1 << 30, compress_size=1 << 30)  # past the archive's end
    path.write_bytes(data)
    with pytest.raises(CorruptDataError, match="past the end"):
        ZipStore(path).get("k", ByteRange(0, 10))


def write_bomb(path: Path, name: str, decoded: int) -> None:
    """A deflate member of ``decoded`` zero bytes, written without holding it in memory."""
    block = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open(name, "w") as member:
            for _ in range(decoded // len(block)):
                member.write(block)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bomb") / "bomb.zip"
    write_bomb(path, "bomb", 256 << 20)
    assert path.stat().st_size < 1 << 20
    return path


def peak_memory(call: object) -> int:
    tracemalloc.start()
    try:
        call()  # type: ignore[operator]
    except (StoreError, CorruptDataError):
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def test_bomb_beyond_the_limit_is_refused_without_allocating(bomb: Path) -> None:
    store = ZipStore(bomb, max_member_size=16 << 20)
    with pytest.raises(StoreError, match="limit"):
        store.get("bomb")
    assert peak_memory(lambda: store.get("bomb")) < 1 << 20
    # a small range needs only a little decoding, so it is served
    assert store.get("bomb", ByteRange(1000, 10)) == bytes(10)


def test_bomb_with_a_small_declared_size_stops_at_the_declared_size(
    bomb: Path, tmp_path: Path
) -> None:
    data = bytearray(bomb.read_bytes())
    patch_sizes(data, b"bomb", file_size=1000)
    path = tmp_path / "liar.zip"
    path.write_bytes(data)
    store = ZipStore(path)
    with pytest.raises(CorruptDataError, match="longer than the declared 1000"):
        store.get("bomb")
    assert peak_memory(lambda: store.get("bomb")) < 4 << 20


def test_truncated_compressed_stream(tmp_path: Path) -> None:
    path = build_zip(tmp_path / "s.zip", {"k": os.urandom(5000)}, zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    compressed_len = struct.unpack_from("<I", data, data.find(_LOCAL) + 18)[0]
    patch_sizes(data, b"k", compress_size=compressed_len // 2)
    path.write_bytes(data)
    with pytest.raises(CorruptDataError, match="k: decompressed data is shorter"):
        ZipStore(path).get("k")


def test_local_header_must_match_central_directory(tmp_path: Path) -> None:
    path = build_zip(tmp_path / "s.zip", {"k1": b"one", "k2": b"two"}, zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    # the first member's local header starts the file and its name follows the header's 30
    # fixed bytes (searching for b"k1" could hit its DOS time or CRC, 06:11:22 is b"k1")
    local = zipfile.sizeFileHeader
    assert data[local : local + 2] == b"k1"
    data[local : local + 2] = b"zz"
    path.write_bytes(data)
    with pytest.raises(CorruptDataError, match="different member"):
        ZipStore(path).get("k1")


# -- hostile names -----------------------------------------------------------------------------


def test_unsafe_member_names_are_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("zarr.json", b"{}")
        archive.writestr("../evil", b"evil1")
        archive.writestr("a/../../evil", b"evil2")
        archive.writestr("/abs/evil", b"evil3")
        archive.writestr("a//evil", b"evil4")
        archive.writestr("./evil", b"evil5")
        archive.writestr("NULXevil", b"evil6")
        archive.writestr("BSLXevil", b"evil7")
    data = bytearray(path.read_bytes())
    rename_member(data, b"NULXevil", b"NUL\x00evil")
    rename_member(data, b"BSLXevil", b"BSL\\evil")
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="zarrfs.core.stores.zipstore"):
        store = ZipStore(path)
        assert list(store.list_prefix("")) == ["zarr.json"]
        assert store.list_dir("") == (["zarr.json"], [])
        for key in ("evil", "abs/evil", "a/evil", "NUL", "BSL", "NULXevil"):
            assert store.get(key) is None
        served = [store.get(k) for k in store.list_prefix("")]
    assert not any(value and value.startswith(b"evil") for value in served)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # logged once, when the archive is opened
    message = warnings[0].getMessage()
    assert "7 member(s)" in message and "../evil" in message


def test_duplicate_member_last_wins(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "dup.zip"
    with pytest.warns(UserWarning), zipfile.ZipFile(path, "w") as archive:
        archive.writestr("k", b"first")
        archive.writestr("k", b"second")
    with caplog.at_level(logging.WARNING, logger="zarrfs.core.stores.zipstore"):
        store = ZipStore(path)
    assert store.get("k") == b"second"
    assert "duplicate" in caplog.text


# -- opening ---------------------------------------------------------------------------------


def test_not_a_zip(tmp_path: Path) -> None:
    (tmp_path / "x.zip").write_bytes(b"not a zip at all" * 10)
    with pytest.raises(CorruptDataError, match="not a readable zip"):
        ZipStore(tmp_path / "x.zip")


def test_missing_archive(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open"):
        ZipStore(tmp_path / "none.zip")


def test_closed_store_refuses_reads(tmp_path: Path) -> None:
    store = ZipStore(build_zip(tmp_path / "s.zip", {"k": b"v"}, zipfile.ZIP_STORED))
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("k")
    store.close()  # idempotent


def test_prepended_data_is_tolerated(tmp_path: Path) -> None:
    inner = build_zip(tmp_path / "s.zip", {"k": BLOB}, zipfile.ZIP_DEFLATED).read_bytes()
    (tmp_path / "sfx.zip").write_bytes(b"#!/bin/sh\nexit 0\n" + inner)
    assert ZipStore(tmp_path / "sfx.zip").get("k") == BLOB


def test_unsupported_compression_method(tmp_path: Path) -> None:
    path = build_zip(tmp_path / "s.zip", {"k": b"v" * 100}, zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    for magic, at in ((_LOCAL, 8), (_CENTRAL, 10)):
        struct.pack_into("<H", data, data.find(magic) + at, 9)  # deflate64
    path.write_bytes(data)
    with pytest.raises(StoreError, match="compression method 9"):
        ZipStore(path).get("k")


def read_concurrently(store: ZipStore, contents: dict[str, bytes]) -> list[str]:
    errors: list[str] = []

    def read(offset: int) -> None:
        for i in range(200):
            key = f"k/{(i + offset) % len(contents)}"
            if store.get(key) != contents[key]:
                errors.append(key)
            if store.get(key, ByteRange(10, 5)) != contents[key][10:15]:
                errors.append(key + " range")

    threads = [threading.Thread(target=read, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_concurrent_readers(tmp_path: Path, compression: int) -> None:
    contents = {f"k/{i}": os.urandom(1000 + i) for i in range(40)}
    store = ZipStore(build_zip(tmp_path / "c.zip", contents, compression))
    assert read_concurrently(store, contents) == []


def test_crc_of_deflate_checked(tmp_path: Path) -> None:
    path = build_zip(tmp_path / "s.zip", {"k": BLOB}, zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    good_crc = zlib.crc32(BLOB)
    for magic, at in ((_LOCAL, 14), (_CENTRAL, 16)):
        pos = data.find(magic) + at
        assert struct.unpack_from("<I", data, pos)[0] == good_crc
        struct.pack_into("<I", data, pos, good_crc ^ 1)
    path.write_bytes(data)
    with pytest.raises(CorruptDataError, match="CRC"):
        ZipStore(path).get("k")


def test_descriptor_released_on_close_and_on_collection(tmp_path: Path) -> None:
    path = build_zip(tmp_path / "s.zip", {"k": b"v"}, zipfile.ZIP_STORED)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        ZipStore(path).get("k")
    gc.collect()
    store = ZipStore(path)
    store.close()
    store.close()
    assert len(os.listdir("/proc/self/fd")) == before
