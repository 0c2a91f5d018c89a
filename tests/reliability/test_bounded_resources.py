"""Bounded resources (SECURITY.md §2): hostile stored objects and metadata cost the daemon at
most about one chunk plus the configured cache (plus, for metadata, one document of at most
``MAX_DOCUMENT_BYTES``), and give EIO or a refused node.

Each hostile object is touched through a real mount; after each, the daemon's peak resident
memory (``VmHWM`` from ``/proc/<pid>/status``) is compared with its peak after a warm-up.
Without the bounds every case here costs hundreds of MiB to GiBs.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
from bombs import MIB, deflate_bomb, gzip_bomb, write_zip, zstd_bomb
from reliability_helpers import errno_of, pread, proc_status, write_array, write_group

from zarrfs.core.hierarchy import MAX_DOCUMENT_BYTES

pytestmark = pytest.mark.timeout(180)

CHUNK = MIB  # uint8 chunks of 1 MiB
SHAPE = 8 * MIB
CACHE = 8 * MIB
#: interpreter noise: thread stacks touched, log formatting, numpy temporaries
SLACK = 40 * MIB
DATA_BOUND = CHUNK + CACHE + SLACK
#: a refused document is read up to the limit (+1 byte); decompressing stores (zip) hold the
#: decoded parts and their join for a moment: twice the limit
META_BOUND = DATA_BOUND + 2 * MAX_DOCUMENT_BYTES

BYTES = [{"name": "bytes", "configuration": {"endian": "little"}}]


def codecs(name: str, **conf: Any) -> list[dict[str, Any]]:
    return [*BYTES, {"name": name, "configuration": conf}]


def array_doc(shape: list[int], chunks: list[int], codec_docs: list[Any]) -> str:
    return json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": codec_docs, "attributes": {},
    })  # fmt: skip


def sparse(path: Path, size: int, tail: bytes = b"") -> None:
    """A file of ``size`` bytes (a hole) followed by ``tail``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(size)
        f.write(tail)


def make_store(root: Path) -> None:
    data = np.arange(SHAPE, dtype=np.uint64).astype(np.uint8)
    write_group(root)
    write_array(root, "ok", data, (CHUNK,), codecs("gzip", level=1))
    # decompression bombs inside valid-looking chunks
    write_array(root, "gz", data, (CHUNK,), codecs("gzip", level=1))
    (root / "gz/c/0").write_bytes(gzip_bomb(512))
    write_array(root, "zs", data, (CHUNK,), codecs("zstd", level=1, checksum=False))
    (root / "zs/c/0").write_bytes(zstd_bomb(512))  # no content size: bounded decode
    (root / "zs/c/1").write_bytes(zstd_bomb(512, stated=100))  # lies: says 100 bytes
    (root / "zs/c/2").write_bytes(zstd_bomb(512, stated=1 << 40))  # claims 1 TiB
    blosc = codecs("blosc", cname="lz4", clevel=5, shuffle="noshuffle", typesize=1, blocksize=0)
    write_array(root, "bl", data, (CHUNK,), blosc)
    valid = bytearray(numcodecs.Blosc(cname="lz4", clevel=5, shuffle=0).encode(bytes(CHUNK)))
    forged = bytearray(valid)
    forged[4:8] = (1 << 31).to_bytes(4, "little")  # nbytes: 2 GiB
    (root / "bl/c/0").write_bytes(bytes(forged))
    forged = bytearray(valid)
    forged[8:12] = (1 << 30).to_bytes(4, "little")  # blocksize: 1 GiB
    (root / "bl/c/1").write_bytes(bytes(forged))
    # a chunk object far larger than any valid chunk (a sparse 2 GiB file)
    write_array(root, "big", data, (CHUNK,), BYTES)
    sparse(root / "big/c/0", 2 << 30)
    # a shard whose index claims a 1 GiB inner chunk (sparse shard file)
    shard = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [64 << 10], "codecs": BYTES, "index_codecs": BYTES,
        "index_location": "end"}}]  # fmt: skip
    write_array(root, "sh", data, (CHUNK,), shard)
    index = np.full((16, 2), 2**64 - 1, dtype="<u8")
    index[0] = (0, 1 << 30)
    sparse(root / "sh/c/0", 1 << 30, index.tobytes())
    # metadata only: refused nodes or lazily handled geometry
    for name, doc in {
        "bigidx": array_doc([1 << 20, 1 << 20], [1 << 20, 1 << 20], [
            {"name": "sharding_indexed", "configuration": {
                "chunk_shape": [1, 1], "codecs": BYTES, "index_codecs": BYTES}}]),
        "hugeshape": array_doc([2**62, 2**62], [1, 1], BYTES),
        "many": array_doc([2**40], [1], BYTES),
    }.items():  # fmt: skip
        (root / name).mkdir()
        (root / name / "zarr.json").write_text(doc)
    sparse(root / "hugemeta/zarr.json", 1 << 30)
    deep = '{"zarr_format": 3, "node_type": "group", "attributes": {"a": '
    (root / "deepmeta").mkdir()
    (root / "deepmeta/zarr.json").write_text(deep + "[" * 200_000 + "]" * 200_000 + "}}")


def hwm(pid: int) -> int:
    return proc_status(pid)["VmHWM"]


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory, module_mounter: Any) -> Any:
    base = tmp_path_factory.mktemp("bounded")
    make_store(base / "store")
    m = module_mounter(base / "store", f"cache_size={CACHE}", "timeout=20", name="bounded")
    # warm up: imports, codec libraries, worker threads, a full cache (no listing of the root:
    # that would read the hostile documents before the baseline)
    assert len((m.path / "ok" / "data.raw").read_bytes()) == SHAPE
    return m, hwm(m.pid)


def _read(path: Path) -> Any:
    return lambda: pread(path, 0, 4096)


DATA_CASES = {
    "gzip-bomb": ("gz/data.raw", errno.EIO),
    "zstd-bomb-no-size": ("zs/data.raw", errno.EIO),
    "zstd-lying-size": ("zs/chunks/1", errno.EIO),
    "zstd-claims-1TiB": ("zs/chunks/2", errno.EIO),
    "blosc-forged-nbytes": ("bl/data.raw", errno.EIO),
    "blosc-forged-blocksize": ("bl/chunks/1", errno.EIO),
    "oversized-chunk-object": ("big/data.raw", errno.EIO),
    "shard-entry-claims-1GiB": ("sh/data.raw", errno.EIO),
}


@pytest.mark.parametrize("case", list(DATA_CASES))
def test_hostile_chunks(mounted: Any, case: str) -> None:
    m, base = mounted
    path, expected = DATA_CASES[case]
    assert errno_of(_read(m.path / path)) == expected
    grew = hwm(m.pid) - base
    assert grew <= DATA_BOUND, f"{case}: peak memory grew by {grew / MIB:.0f} MiB"
    assert m.proc.poll() is None


META_CASES = {
    "shard-index-of-16TiB": "bigidx",
    "shape-2**62-squared": "hugeshape",
    "1GiB-metadata-document": "hugemeta",
    "deeply-nested-metadata": "deepmeta",
}


@pytest.mark.parametrize("case", list(META_CASES))
def test_hostile_metadata_is_a_refused_node(mounted: Any, case: str) -> None:
    m, base = mounted
    name = META_CASES[case]
    assert errno_of(lambda: os.stat(m.path / name / "data.raw")) == errno.ENOENT
    # nothing vanishes: the node keeps its directory, with the reason and no data views
    assert name in os.listdir(m.path)
    assert "info.json" in os.listdir(m.path / name)
    assert f"/{name}: not shown" in (m.path / name / "ERROR.txt").read_text()
    stats = json.loads((m.path / ".zarrfs" / "stats.json").read_text())
    assert name in stats["skipped_nodes"], stats["skipped_nodes"]
    grew = hwm(m.pid) - base
    assert grew <= META_BOUND, f"{case}: peak memory grew by {grew / MIB:.0f} MiB"


def test_chunks_larger_than_the_cache(tmp_path: Path, mounter: Any) -> None:
    """A valid chunk that decodes to more than the cache holds and more than the 64 MiB every
    unit may have (128 MiB against 8 MiB) is never decoded: reading the compressed one fails
    with ENOMEM (the log names the cache size that would do), and the plain one is read
    straight from its file; memory stays bounded by the cache, not the chunk. (A daemon of its
    own: the peak is measured from this warm-up.)"""
    data = np.arange(SHAPE, dtype=np.uint64).astype(np.uint8)
    root = tmp_path / "store"
    write_group(root)
    write_array(root, "ok", data, (CHUNK,), codecs("gzip", level=1))
    write_array(root, "hugegz", data, (16 * SHAPE,), codecs("gzip", level=1))
    write_array(root, "hugeraw", data, (16 * SHAPE,), BYTES)
    m = mounter(root, f"cache_size={CACHE}", "timeout=20")
    assert (m.path / "ok" / "data.raw").read_bytes() == data.tobytes()  # warm-up
    base = hwm(m.pid)
    assert errno_of(_read(m.path / "hugegz" / "data.raw")) == errno.ENOMEM
    assert pread(m.path / "hugeraw" / "data.raw", 12345, 4096) == data[12345:16441].tobytes()
    assert (m.path / "hugeraw" / "data.raw").read_bytes() == data.tobytes()
    with pytest.raises(OSError) as exc:
        with open(m.path / "hugeraw" / "data.raw", "r+b") as f:
            f.write(b"x")
    assert exc.value.errno == errno.ENOMEM
    grew = hwm(m.pid) - base
    assert grew <= DATA_BOUND, f"peak memory grew by {grew / MIB:.0f} MiB"
    assert m.proc.poll() is None


def test_two_to_the_forty_chunks(mounted: Any) -> None:
    """A 1 TiB array of 1-byte chunks: stat, reads and a listing of ``chunks/`` (2**40
    entries, read partially) answer at once with bounded memory."""
    m, base = mounted
    raw = m.path / "many" / "data.raw"
    assert os.stat(raw).st_size == 2**40
    assert pread(raw, 2**40 - 4096, 4096) == bytes(4096)
    with os.scandir(m.path / "many" / "chunks") as entries:
        names = [e.name for _, e in zip(range(3000), entries, strict=False)]
    assert names[:3] == ["0", "1", "2"] and len(names) == 3000
    grew = hwm(m.pid) - base  # the peak since the warm-up: metadata cases may have run first
    assert grew <= META_BOUND, f"peak memory grew by {grew / MIB:.0f} MiB"


def test_zip_bombs_and_lying_members(tmp_path: Path, mounter: Any) -> None:
    bomb, crc = deflate_bomb(512)
    small, small_crc = deflate_bomb(1)
    group = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'
    meta = array_doc([SHAPE], [CHUNK], BYTES).encode()
    stored = [(n, 0, d, __import__("zlib").crc32(d), len(d))
              for n, d in (("zarr.json", group), ("z/zarr.json", meta))]  # fmt: skip
    archive = tmp_path / "hostile.zip"
    write_zip(archive, [
        *stored,
        ("z/c/0", 8, bomb, crc, 512 * MIB),  # honest member of 512 MiB (chunk is 1 MiB)
        ("z/c/1", 8, bomb, crc, CHUNK),  # claims 1 MiB, inflates to 512 MiB
        ("z/c/2", 8, small, small_crc, 1 << 31),  # claims 2 GiB, holds 1 MiB
        ("m/zarr.json", 8, bomb, crc, 512 * MIB),  # a 512 MiB metadata document
    ])  # fmt: skip
    m = mounter(archive, f"cache_size={CACHE}")
    (m.path / ".zarrfs" / "stats.json").read_bytes()
    base = hwm(m.pid)
    raw = m.path / "z" / "data.raw"
    for chunk in range(3):
        assert errno_of(lambda c=chunk: pread(raw, c * CHUNK, 4096)) == errno.EIO, chunk
    assert pread(raw, 3 * CHUNK, 4096) == bytes(4096)  # missing chunk: fill value
    assert errno_of(lambda: os.stat(m.path / "m" / "zarr.json")) == errno.ENOENT
    grew = hwm(m.pid) - base
    assert grew <= META_BOUND, f"peak memory grew by {grew / MIB:.0f} MiB"
    assert m.proc.poll() is None


def test_a_view_larger_than_any_file_leaves_its_directory_listable(
    tmp_path: Path, mounter: Any
) -> None:
    """Two arrays of 2**62 bytes each (metadata only): their group's ``group.nc`` would be
    larger than a file can be (2**63 - 1 bytes). It is left out of the listing (logged) and
    answers EFBIG; the root stays listable, and each array's ``data.raw`` is there."""
    root = tmp_path / "store"
    write_group(root)
    for name in ("a", "b"):
        (root / name).mkdir()
        (root / name / "zarr.json").write_text(array_doc([2**62], [1 << 20], BYTES))
    m = mounter(root, "ro")
    names = os.listdir(m.path)
    assert {"a", "b"} <= set(names) and "group.nc" not in names
    assert errno_of(lambda: os.stat(m.path / "group.nc")) == errno.EFBIG
    assert os.stat(m.path / "a" / "data.raw").st_size == 2**62
