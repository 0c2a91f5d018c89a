"""Real mounts of an S3 store (moto on loopback): zarr-python writes a store, boto3 uploads it,
zarrfs mounts ``s3://bucket/store.zarr -o endpoint=...``; reads are compared with numpy, writes
through the mount are read back with zarr-python over S3, a write-back that would overwrite an
external change fails with EIO and the change survives, and the disk cache fills.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from remote.datasets import LAYOUT, build_store, zarr_s3
from remote.faultproxy import FaultProxy
from remote.motoserver import CREDENTIALS, MotoProcess, upload_tree

PREFIX = "store.zarr"


@pytest.fixture
def dataset(
    moto_server: MotoProcess, bucket: str, tmp_path: Path
) -> tuple[str, dict[str, np.ndarray[Any, Any]]]:
    """A fresh bucket holding the zarr-python store at ``store.zarr``: (url, arrays)."""
    arrays = build_store(tmp_path / "local.zarr")
    upload_tree(moto_server.client(), bucket, PREFIX, tmp_path / "local.zarr")
    return f"s3://{bucket}/{PREFIX}", arrays


def mount_s3(
    mounter: Any, moto: MotoProcess, url: str, *options: str, endpoint: str = "", name: str = "mnt"
) -> Any:
    endpoint = endpoint or moto.endpoint
    return mounter(url, f"endpoint={endpoint}", *options, env=dict(CREDENTIALS), name=name)


def raw(mnt: Path, path: str) -> np.ndarray[Any, Any]:
    shape, _, _, dtype = LAYOUT[path]
    data = (mnt / path / "data.raw").read_bytes()
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def test_read_every_array_matches_numpy(
    mounter: Any, moto_server: MotoProcess, dataset: tuple[str, dict[str, Any]]
) -> None:
    url, arrays = dataset
    m = mount_s3(mounter, moto_server, url, "ro")
    assert sorted(os.listdir(m.path)) == [".zarrfs", "attributes.json", "group.nc", "sharded",
                                          "sub", "temp", "zarr.json"]  # fmt: skip
    for path, data in arrays.items():
        assert np.array_equal(raw(m.path, path), data), path
        assert np.array_equal(np.load(m.path / path / "data.npy", mmap_mode="r"), data), path
    # one chunk file, and a partial read in the middle of the sharded array
    chunk = (m.path / "temp" / "chunks" / "1.2").read_bytes()
    assert np.array_equal(np.frombuffer(chunk, "<f4").reshape(32, 16), arrays["temp"][32:64, 32:48])
    with open(m.path / "sharded" / "data.raw", "rb") as f:
        f.seek((40 * 64 + 3) * 2)
        got = np.frombuffer(f.read(10 * 2), "<i2")
    assert np.array_equal(got, arrays["sharded"][40, 3:13])


def test_writes_through_the_mount_read_back_with_zarr_python(
    mounter: Any,
    moto_server: MotoProcess,
    bucket: str,
    dataset: tuple[str, dict[str, Any]],
) -> None:
    url, arrays = dataset
    m = mount_s3(mounter, moto_server, url)
    temp = arrays["temp"].copy()
    temp[10:50, 5:40] = -1.5
    sharded = arrays["sharded"].copy()
    sharded[30:34, :] = 7  # crosses a shard boundary
    fd = os.open(m.path / "temp" / "data.raw", os.O_WRONLY)
    try:
        for row in range(10, 50):  # partial chunks on both axes
            os.pwrite(fd, temp[row, 5:40].astype("<f4").tobytes(), (row * 60 + 5) * 4)
    finally:
        os.close(fd)
    with open(m.path / "sharded" / "data.raw", "r+b") as f:
        f.seek(30 * 64 * 2)
        f.write(sharded[30:34].astype("<i2").tobytes())
    theirs = zarr.open_group(store=zarr_s3(moto_server, bucket, PREFIX), mode="r")
    assert np.array_equal(theirs["temp"][...], temp)
    assert np.array_equal(theirs["sharded"][...], sharded)
    assert np.array_equal(theirs["sub/x"][...], arrays["sub/x"])
    assert np.array_equal(raw(m.path, "temp"), temp)  # and the mount agrees


def test_write_back_never_overwrites_an_external_change(
    mounter: Any,
    moto_server: MotoProcess,
    bucket: str,
    dataset: tuple[str, dict[str, Any]],
) -> None:
    url, arrays = dataset
    m = mount_s3(mounter, moto_server, url)
    data = m.path / "temp" / "data.raw"
    with open(data, "rb") as f:  # the mount reads chunk (0, 0)
        assert np.array_equal(np.frombuffer(f.read(60 * 4), "<f4"), arrays["temp"][0])
    # another client rewrites that chunk behind the mount's back
    external = zarr.open_group(store=zarr_s3(moto_server, bucket, PREFIX, read_only=False))
    external["temp"][0:32, 0:16] = 99.0
    # the mount writes into the same chunk; the write-back must fail, not clobber
    fd = os.open(data, os.O_WRONLY)
    try:
        os.pwrite(fd, np.float32(-7).tobytes(), 4 * 61)
        with pytest.raises(OSError) as info:
            os.fsync(fd)
        assert info.value.errno == errno.EIO
    finally:
        try:
            os.close(fd)
        except OSError as exc:  # the same failed flush, reported again at close
            assert exc.errno == errno.EIO
    after = zarr.open_group(store=zarr_s3(moto_server, bucket, PREFIX), mode="r")["temp"][...]
    assert np.all(after[0:32, 0:16] == 99.0)
    assert np.array_equal(after[32:], arrays["temp"][32:])
    assert "changed in the store" in m.log()


def test_disk_cache_option_fills_and_revalidates_the_cache(
    mounter: Any, moto_server: MotoProcess, dataset: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, arrays = dataset
    cache = tmp_path / "cache"
    options = ("ro", f"disk_cache={cache}", "disk_cache_size=8M")
    with FaultProxy(moto_server.endpoint) as proxy:
        m = mount_s3(mounter, moto_server, url, *options, endpoint=proxy.url)
        assert np.array_equal(raw(m.path, "temp"), arrays["temp"])
        entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
        assert len(entries) >= 16  # the 4 x 4 chunks of temp (and metadata documents)
        assert m.unmount() == 0
        # a new mount revalidates the cached chunks: 304 answers, no chunk bodies sent again
        proxy.statuses.clear()
        m2 = mount_s3(mounter, moto_server, url, *options, endpoint=proxy.url, name="again")
        assert np.array_equal(raw(m2.path, "temp"), arrays["temp"])
        chunk_gets = [s for method, path, s in proxy.statuses
                      if method == "GET" and "/temp/c/" in path]  # fmt: skip
        assert chunk_gets == [304] * 16
