"""Never invent data: a chunk that fails to load is EIO, never the fill value, and a partial
write over it fails with EIO and leaves the stored object byte-identical (SECURITY.md §1).

Each case injects one kind of load failure into one chunk of a real mount (``faulty_daemon``):
an I/O error from the store, an unexpected exception from a store library, a store timeout, a
store that never answers (past ``-o timeout=``), a checksum mismatch, a truncated object, a
decode error, a codec that raises or returns garbage. Then, through the mount:

1. any read touching the chunk fails with EIO (neighbouring chunks read correctly);
2. a partial ``pwrite`` into the chunk, then ``fsync`` and ``close``: the first of them that
   fails fails with EIO, and at least one fails;
3. with the fault removed and every dirty byte flushed, the stored object is byte-identical
   and reads back as the original values (no half-applied write, no cached fill).
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reliability_helpers import (
    FAULTY_DAEMON,
    FaultPlan,
    errno_of,
    faulty_url,
    pread,
    write_array,
    write_group,
)

pytestmark = pytest.mark.timeout(180)

N, CHUNK = 1000, 100
CB = CHUNK * 4  # bytes per chunk of the float32 arrays
TIMEOUT = 3  # -o timeout= of the shared mount (the "hang" case waits for it)

ARRAYS = {
    "crc": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
    "gz": [{"name": "bytes", "configuration": {"endian": "little"}},
           {"name": "gzip", "configuration": {"level": 1}}],
    "fx": [{"name": "bytes", "configuration": {"endian": "little"}},
           {"name": "x_faulty", "configuration": {"tag": "fx"}}],
}  # fmt: skip


def values(name: str) -> np.ndarray[Any, Any]:
    return np.arange(N, dtype="<f4") * (1 + list(ARRAYS).index(name)) + 0.5


def get_rule(key: str, **rule: Any) -> dict[str, Any]:
    return {"op": "get", "key": f"^{key}$", **rule}


# (case id, array, chunk, rule)
CASES = [
    ("store-io-error", "crc", 1, get_rule("crc/c/1", action="raise", error="StoreError")),
    ("os-error", "crc", 2, get_rule("crc/c/2", action="raise", error="OSError")),
    ("library-bug", "crc", 3, get_rule("crc/c/3", action="raise", error="RuntimeError")),
    ("store-timeout", "crc", 4, get_rule("crc/c/4", action="raise", error="StoreTimeout")),
    # hangs past the 3 s deadline; answers StoreTimeout after 4 s (so close() waits only ~1 s)
    ("never-answers", "crc", 5, get_rule("crc/c/5", action="hang", seconds=TIMEOUT + 1)),
    ("checksum-mismatch", "crc", 6, get_rule("crc/c/6", action="garbage", value="flip")),
    ("truncated-object", "crc", 7, get_rule("crc/c/7", action="garbage", value="truncate")),
    ("empty-object", "crc", 8, get_rule("crc/c/8", action="garbage", value="empty")),
    ("decode-error", "gz", 1, get_rule("gz/c/1", action="garbage", value="random")),
    ("gzip-crc-mismatch", "gz", 2, get_rule("gz/c/2", action="garbage", value="flip")),
    ("store-returns-str", "gz", 3, get_rule("gz/c/3", action="garbage", value="str")),
    ("codec-raises", "fx", 1,
     {"op": "decode", "key": "^fx$", "action": "raise", "error": "ValueError"}),
    ("codec-returns-short", "fx", 2,
     {"op": "decode", "key": "^fx$", "action": "garbage", "value": "truncate"}),
    ("codec-returns-object", "fx", 3,
     {"op": "decode", "key": "^fx$", "action": "garbage", "value": "object"}),
]  # fmt: skip


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory, module_mounter: Any) -> Any:
    base = tmp_path_factory.mktemp("noinvent")
    store = base / "store"
    write_group(store)
    for name, codecs in ARRAYS.items():
        write_array(store, name, values(name), (CHUNK,), codecs)
    plan = FaultPlan(base)
    m = module_mounter(
        faulty_url(store), f"timeout={TIMEOUT}", "writeback=0", name="noinvent",
        env=plan.env, cmd_prefix=FAULTY_DAEMON,
    )  # fmt: skip
    try:
        yield store, m, plan
    finally:
        plan.clear()


def partial_write_errno(path: Path, offset: int, data: bytes) -> tuple[int, str]:
    """(errno of the first failing step, its name); (0, "") if pwrite, fsync and close all
    succeed."""
    fd = os.open(path, os.O_RDWR)
    failed: tuple[int, str] = (0, "")
    try:
        for step, call in (("pwrite", lambda: os.pwrite(fd, data, offset)),
                           ("fsync", lambda: os.fsync(fd))):  # fmt: skip
            try:
                call()
            except OSError as exc:
                failed = (exc.errno or -1, step)
                break
    finally:
        try:
            os.close(fd)
        except OSError as exc:
            if not failed[0]:
                failed = (exc.errno or -1, "close")
    return failed


def drop_caches(mnt: Path) -> None:
    (mnt / ".zarrfs" / "drop_caches").write_text("1")


def flush_everything(mnt: Path) -> int:
    """``echo 1 > /.zarrfs/flush``; the errno it fails with (0 on success)."""
    return errno_of(lambda: (mnt / ".zarrfs" / "flush").write_text("1"))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_failed_chunk_is_eio_and_write_changes_nothing(mounted: Any, case: Any) -> None:
    store, m, plan = mounted
    _, name, chunk, rule = case
    raw = m.path / name / "data.raw"
    want = values(name).tobytes()
    key_file = store / name / "c" / str(chunk)
    before = key_file.read_bytes()
    start = chunk * CB
    plan.reset_log()
    plan.write([rule])
    drop_caches(m.path)  # earlier cases read this chunk as a neighbour
    try:
        # 1. reads touching the chunk: EIO; the neighbours read exactly
        probes = ((start, CB), (start + 4, 8), (start - 4, 8), (start + CB - 1, 2))
        for off, n in probes[:1] if rule["action"] == "hang" else probes:
            assert errno_of(lambda o=off, k=n: pread(raw, o, k)) == errno.EIO, (off, n)
        if rule["op"] == "get":  # a codec fault hits every chunk of its array
            assert pread(raw, start - CB, CB) == want[start - CB : start]
            assert pread(raw, start + CB, CB) == want[start + CB : start + 2 * CB]
        # 2. a partial write into the chunk fails with EIO
        code, step = partial_write_errno(raw, start + 40, b"\x7f" * 12)
        assert code == errno.EIO, f"partial write over a failed chunk: {step} gave {code}"
        assert plan.fired(), "the injected fault never fired"
    finally:
        plan.clear()
    time.sleep(0.2)  # a request abandoned at its deadline sees the fault gone and fails
    # 3. nothing changed: after a full flush the object is byte-identical and reads back
    assert flush_everything(m.path) == 0
    assert key_file.read_bytes() == before
    assert pread(raw, start, CB) == want[start : start + CB]
    assert m.proc.poll() is None


def shard_doc() -> list[dict[str, Any]]:
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [8, 8],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "crc32c"},
                ],
                "index_location": "end",
            },
        }
    ]


@pytest.mark.parametrize("damage", ["index-bytes", "index-truncated"])
def test_corrupt_shard_index(tmp_path: Path, faulty_mount: Any, damage: str) -> None:
    """A shard whose index is garbled: reads of its bytes are EIO; a write of whole inner
    chunks (nothing to load) cannot rebuild the shard, so fsync/close fail with EIO and the
    shard stays byte-identical; the other shard of the same rows is written normally."""
    store = tmp_path / "store"
    full = np.arange(64 * 64, dtype="<u2").reshape(64, 64)
    write_group(store)
    write_array(store, "sh", full, (32, 32), shard_doc())
    shard = store / "sh" / "c" / "1" / "0"
    data = bytearray(shard.read_bytes())
    if damage == "index-bytes":
        data[-20:-10] = b"\xee" * 10
    else:
        data = data[:-9] + data[-4:]  # the index loses 5 bytes
    shard.write_bytes(bytes(data))
    before = shard.read_bytes()
    m = faulty_mount(store, "writeback=0")
    raw = m.path / "sh" / "data.raw"
    row = 64 * 2
    assert errno_of(lambda: pread(raw, 40 * row, 2)) == errno.EIO
    assert pread(raw, 0, row) == full[0].tobytes()
    # partial inner chunk in the damaged shard: the write itself fails
    code, step = partial_write_errno(raw, 33 * row + 6, b"\x01\x02")
    assert code == errno.EIO, (step, code)
    # rows 32..39: whole inner chunks of shards (1,0) (damaged) and (1,1) (fine)
    new = np.full((8, 64), 7, dtype="<u2")
    code, step = partial_write_errno(raw, 32 * row, new.tobytes())
    assert (code, step) in ((errno.EIO, "fsync"), (errno.EIO, "close")), (step, code)
    assert flush_everything(m.path) == errno.EIO  # still cannot rebuild the damaged shard
    assert shard.read_bytes() == before
    assert pread(raw, 32 * row + 64, 64) == new[0, 32:].tobytes()  # the healthy shard took it
    assert m.proc.poll() is None


def test_drop_caches_keeps_unflushed_writes(tmp_path: Path, faulty_mount: Any) -> None:
    """``echo 1 > /.zarrfs/drop_caches`` while writes are not yet flushed: the next fsync/close
    still stores them (dropping caches never drops data)."""
    store = tmp_path / "store"
    write_group(store)
    write_array(store, "crc", values("crc"), (CHUNK,), ARRAYS["crc"])
    m = faulty_mount(store, "writeback=0")
    raw = m.path / "crc" / "data.raw"
    new = np.full(CHUNK, 42.0, dtype="<f4").tobytes()
    fd = os.open(raw, os.O_RDWR)
    try:
        os.pwrite(fd, new, 2 * CB)  # a whole chunk: buffered, not yet stored
        drop_caches(m.path)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert pread(raw, 2 * CB, CB) == new
    m.unmount()
    from zarrfs.core.hierarchy import open_array
    from zarrfs.core.stores.local import LocalStore

    assert open_array(LocalStore(store), "crc").read(2 * CB, CB) == new
