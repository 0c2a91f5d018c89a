"""Parked inner chunks on a real mount: ``dd`` over ``data.raw`` of a sharded array whose
shards span its whole depth, with a cache far smaller than one shard, stores each shard once
(``stats.json``'s ``bytes_stored`` is the size of the shards, not a multiple of it), and what
it stored reads back identically with ``cmp``, zarr-python and tensorstore, with no
temporary file left."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import numpy as np
import pytest
import tensorstore as ts
import zarr
from zarr.codecs import BloscCodec

pytestmark = pytest.mark.timeout(300)

# 4 shards (32, 256, 256) of 8 MiB spanning the depth, inner chunks (2, 64, 64) of 32 KiB:
# a layer of inner chunks (2 MiB) fits in the dirty limit, a row of shards (32 MiB) does not
SHAPE, SHARDS, CHUNKS = (32, 512, 512), (32, 256, 256), (2, 64, 64)


def test_dd_over_a_sharded_array_stores_each_shard_once(tmp_path, mounter):
    path = tmp_path / "s.zarr"
    z = zarr.create_array(str(path), shape=SHAPE, shards=SHARDS, chunks=CHUNKS, dtype="<f4",
                          compressors=BloscCodec(cname="lz4", clevel=1))  # fmt: skip
    rng = np.random.default_rng(1)
    z[...] = rng.random(SHAPE, dtype="f4")
    new = np.round(rng.random(SHAPE, dtype="f4"), 2)  # (compresses a little)
    src = tmp_path / "new.raw"
    new.tofile(src)
    m = mounter(path, "cache_size=8M")  # dirty limit 6 MiB: under one shard
    raw = m.path / "data.raw"
    subprocess.run(["dd", f"if={src}", f"of={raw}", "bs=1M", "conv=notrunc,fsync", "status=none"],
                   check=True)  # fmt: skip
    stored = json.loads((m.path / ".zarrfs" / "stats.json").read_text())["arrays"][""]
    shards = sum(f.stat().st_size for f in (path / "c").rglob("*") if f.is_file())
    assert shards < new.nbytes  # (it was compressed)
    assert stored["bytes_stored"] <= shards * 1.02  # each shard once (a little unused space)
    subprocess.run(["cmp", str(src), str(raw)], check=True)
    assert zarr.open_array(str(path), mode="r")[...].tobytes() == new.tobytes()
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path) + "/"}}
    assert np.asarray(ts.open(spec, open=True).result().read().result()).tobytes() == new.tobytes()
    assert [f for _, _, fs in os.walk(path) for f in fs if f.startswith(".zarrfs-tmp-")] == []


def test_parked_chunks_are_stored_when_the_daemon_is_stopped(tmp_path, mounter):
    path = tmp_path / "s.zarr"
    z = zarr.create_array(str(path), shape=SHAPE, shards=SHARDS, chunks=CHUNKS, dtype="<f4",
                          compressors=BloscCodec(cname="lz4", clevel=1))  # fmt: skip
    z[...] = 1
    new = np.round(np.random.default_rng(3).random(SHAPE, dtype="f4"), 2)
    m = mounter(path, "cache_size=8M", "writeback=3600")  # no write-back timer meanwhile
    f = open(m.path / "data.raw", "r+b")  # noqa: SIM115 (open across the stop: no close)
    try:
        f.write(new.tobytes())
        f.flush()  # (Python's buffer only: no fsync, no close)
        stats = json.loads((m.path / ".zarrfs" / "stats.json").read_text())
        temps = [f for _, _, fs in os.walk(path) for f in fs if f.startswith(".zarrfs-tmp-")]
        assert len(temps) == 4  # the complete inner chunks are in the shards' new files...
        assert len(stats["dirty_arrays"]) == 1  # ...and are unstored data
        assert (zarr.open_array(str(path), mode="r")[...] == 1).any()  # not all stored yet
        m.proc.send_signal(signal.SIGTERM)  # stored before the daemon exits
        assert m.proc.wait(timeout=60) == 0
    finally:
        try:
            f.close()
        except OSError:
            pass
    assert zarr.open_array(str(path), mode="r")[...].tobytes() == new.tobytes()
    assert [f for _, _, fs in os.walk(path) for f in fs if f.startswith(".zarrfs-tmp-")] == []
