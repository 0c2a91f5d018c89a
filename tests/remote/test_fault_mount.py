"""A real S3 mount through the fault-injection proxy: transient server faults (5xx, throttling,
resets, truncated bodies, timeouts) still give exactly the right bytes; a chunk whose requests
fail for good gives EIO for its bytes within the store deadline, the rest of the array stays
readable, and no read ever returns fill values or wrong bytes in place of a failed chunk.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remote.datasets import LAYOUT, build_store
from remote.faultproxy import Fault, FaultProxy
from remote.motoserver import CREDENTIALS, MotoProcess, upload_tree

STORE_TIMEOUT = 4.0


@pytest.fixture
def setup(
    moto_server: MotoProcess, bucket: str, tmp_path: Path
) -> Iterator[tuple[str, FaultProxy, dict[str, Any]]]:
    arrays = build_store(tmp_path / "local.zarr")
    upload_tree(moto_server.client(), bucket, "store.zarr", tmp_path / "local.zarr")
    with FaultProxy(moto_server.endpoint) as proxy:
        yield f"s3://{bucket}/store.zarr", proxy, arrays


def mount(mounter: Any, url: str, proxy: FaultProxy) -> Any:
    options = (f"endpoint={proxy.url}", f"store_timeout={STORE_TIMEOUT}", "ro")
    return mounter(url, *options, env=dict(CREDENTIALS))


def raw(mnt: Path, path: str) -> np.ndarray[Any, Any]:
    shape, _, _, dtype = LAYOUT[path]
    data = (mnt / path / "data.raw").read_bytes()
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def test_transient_faults_give_the_right_bytes(
    mounter: Any, setup: tuple[str, FaultProxy, dict[str, Any]]
) -> None:
    url, proxy, arrays = setup
    m = mount(mounter, url, proxy)
    faults = [
        Fault.error(503, method="GET", path="/temp/c/", times=4),
        Fault.error(429, method="GET", path="/temp/c/", times=2),
        Fault.reset(method="GET", path="/temp/c/", times=2),
        Fault.truncate(method="GET", path="/temp/c/", times=2),
        Fault.hang(3.0, method="GET", path="/temp/c/3/", times=1),
        Fault.error(500, method="GET", path="/sharded/c/", times=3),
        Fault.truncate(method="GET", path="/sharded/c/", times=2),
    ]
    proxy.add(*faults)
    for path, data in arrays.items():
        assert np.array_equal(raw(m.path, path), data), path
    assert [f.times for f in faults] == [0] * len(faults)  # every fault was met


def test_permanent_failure_is_eio_for_that_chunk_only(
    mounter: Any, setup: tuple[str, FaultProxy, dict[str, Any]]
) -> None:
    url, proxy, arrays = setup
    m = mount(mounter, url, proxy)
    proxy.add(Fault.error(503, method="GET", path="/temp/c/1/1", times=None))
    path = m.path / "temp" / "data.raw"
    row = 60 * 4
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)  # exact reads: no readahead around them
    try:
        # rows 0..31 lie in chunk row 0: readable
        top = np.frombuffer(os.pread(fd, 32 * row, 0), "<f4").reshape(32, 60)
        assert np.array_equal(top, arrays["temp"][:32])
        # row 40, columns 16..31 lie in chunk (1, 1): EIO, within the deadline
        started = time.monotonic()
        with pytest.raises(OSError) as info:
            os.pread(fd, 16 * 4, 40 * row + 16 * 4)
        assert info.value.errno == errno.EIO
        assert time.monotonic() - started < STORE_TIMEOUT + 3.0
        # the same row outside that chunk is fine
        left = np.frombuffer(os.pread(fd, 16 * 4, 40 * row), "<f4")
        assert np.array_equal(left, arrays["temp"][40, :16])
    finally:
        os.close(fd)
    with pytest.raises(OSError) as whole:
        path.read_bytes()
    assert whole.value.errno == errno.EIO
    assert "temp/c/1/1" in m.log()


def test_a_hanging_server_gives_eio_within_the_deadline(
    mounter: Any, setup: tuple[str, FaultProxy, dict[str, Any]]
) -> None:
    url, proxy, arrays = setup
    m = mount(mounter, url, proxy)
    proxy.add(Fault.hang(60.0, method="GET", path="/sharded/c/1/0", times=None))
    fd = os.open(m.path / "sharded" / "data.raw", os.O_RDONLY | os.O_DIRECT)
    try:
        started = time.monotonic()
        with pytest.raises(OSError) as info:
            os.pread(fd, 64 * 2, 40 * 64 * 2)  # row 40 lies in shard (1, 0)
        assert info.value.errno == errno.EIO
        assert time.monotonic() - started < STORE_TIMEOUT + 3.0
        head = np.frombuffer(os.pread(fd, 64 * 2, 0), "<i2")
        assert np.array_equal(head, arrays["sharded"][0])
    finally:
        os.close(fd)
