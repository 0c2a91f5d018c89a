"""A corrupt chunk gives EIO for its bytes only; the mount keeps serving everything else."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import zarr

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def damaged_store(tmp_path):
    root = tmp_path / "s.zarr"
    g = zarr.open_group(str(root), mode="w")
    # 1-D: chunk i covers bytes [i*400, (i+1)*400) of data.raw
    a = g.create_array(
        "line",
        shape=(1000,),
        chunks=(100,),
        dtype="<f4",
        compressors=[zarr.codecs.GzipCodec(), zarr.codecs.Crc32cCodec()],
    )
    a[:] = np.arange(1000, dtype="f4")
    s = g.create_array("sharded", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="<u2")
    s[:] = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    g.create_array("other", shape=(10,), chunks=(5,), dtype="i8")[:] = np.arange(10)
    # flip bytes in the middle of chunk 3 of "line" (crc32c catches it)
    key = root / "line" / "c" / "3"
    data = bytearray(key.read_bytes())
    data[len(data) // 2] ^= 0xFF
    key.write_bytes(bytes(data))
    # garble the index of shard (1, 0) of "sharded"
    skey = root / "sharded" / "c" / "1" / "0"
    sdata = bytearray(skey.read_bytes())
    sdata[-20:-10] = b"\xff" * 10
    skey.write_bytes(bytes(sdata))
    return root


def _pread(path, offset, size):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def test_eio_only_for_the_corrupt_chunk(damaged_store, mounter):
    m = mounter(damaged_store, "ro")
    raw = m.path / "line" / "data.raw"
    want = np.arange(1000, dtype="<f4").tobytes()
    # bytes of chunks 0-2 and 4-9 read fine, with exact values
    assert _pread(raw, 0, 1200) == want[:1200]
    assert _pread(raw, 1600, 2400) == want[1600:]
    # any read touching chunk 3 fails with EIO, never fill values
    for off, n in ((1200, 400), (1500, 4), (1100, 200), (1599, 1)):
        with pytest.raises(OSError) as err:
            _pread(raw, off, n)
        assert err.value.errno == errno.EIO, (off, n)
    with pytest.raises(OSError) as err:
        (m.path / "line" / "chunks" / "3").read_bytes()
    assert err.value.errno == errno.EIO
    assert (m.path / "line" / "chunks" / "4").read_bytes() == want[1600:2000]
    # the corrupt shard index: EIO for its shard, the other shards fine
    sraw = m.path / "sharded" / "data.raw"
    full = np.arange(64 * 64, dtype="<u2").reshape(64, 64)
    assert _pread(sraw, 0, 64 * 2) == full[0].tobytes()
    with pytest.raises(OSError) as err:
        (m.path / "sharded" / "chunks" / "1.0").read_bytes()
    assert err.value.errno == errno.EIO
    assert (m.path / "sharded" / "chunks" / "1.1").read_bytes() == full[32:, 32:].tobytes()
    # the daemon is alive and serves other arrays; the log names the damaged keys
    assert (m.path / "other" / "data.raw").read_bytes() == np.arange(10, dtype="<i8").tobytes()
    assert m.proc.poll() is None
    log = m.log()
    assert "line/c/3" in log
    assert "sharded/c/1/0" in log
    loud = [ln for ln in log.splitlines() if "line/c/3" in ln and " DEBUG " not in ln]
    assert len(loud) == 1, loud  # logged once per key, not once per request
