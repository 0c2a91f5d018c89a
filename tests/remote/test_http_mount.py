"""Real mounts of an HTTP store: a zarr-python store with consolidated metadata served by a
static server on 127.0.0.1 (with and without Range support). HTTP cannot list, so the tree
comes from the consolidated metadata in the root ``zarr.json``; data matches numpy; shard
indexes are read with suffix ranges; the mount is read-only.
"""

from __future__ import annotations

import errno
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remote.datasets import LAYOUT, build_store
from remote.httpserver import StaticServer


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("site")
    with warnings.catch_warnings():  # zarr-python: consolidated metadata is not in the v3 spec
        warnings.simplefilter("ignore")
        arrays = build_store(root / "store.zarr", consolidated=True)
    document = json.loads((root / "store.zarr" / "zarr.json").read_text())
    assert set(document["consolidated_metadata"]["metadata"]) == {
        "sharded", "sub", "sub/x", "temp"
    }  # fmt: skip
    return root, arrays


@pytest.fixture(params=[True, False], ids=["ranges", "no-ranges"])
def server(request: pytest.FixtureRequest, site: tuple[Path, Any]) -> Iterator[StaticServer]:
    with StaticServer(site[0], ranges=request.param) as srv:
        yield srv


def raw(mnt: Path, path: str) -> np.ndarray[Any, Any]:
    shape, _, _, dtype = LAYOUT[path]
    data = (mnt / path / "data.raw").read_bytes()
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def test_consolidated_store_mounts_over_http(
    mounter: Any, server: StaticServer, site: tuple[Path, dict[str, Any]]
) -> None:
    _, arrays = site
    m = mounter(f"{server.url}/store.zarr")
    assert {"sharded", "sub", "temp"} <= set(os.listdir(m.path))
    assert "x" in os.listdir(m.path / "sub")
    assert "data.raw" in os.listdir(m.path / "sub" / "x")
    for path, data in arrays.items():
        assert np.array_equal(raw(m.path, path), data), path
    assert not [r for r in server.requests if r.method not in ("GET", "HEAD")]


def test_shard_indexes_use_suffix_ranges(mounter: Any, site: tuple[Path, dict[str, Any]]) -> None:
    _, arrays = site
    with StaticServer(site[0]) as srv:
        m = mounter(f"{srv.url}/store.zarr", "ro")
        with open(m.path / "sharded" / "data.raw", "rb") as f:
            f.seek((5 * 64 + 2) * 2)
            assert np.array_equal(np.frombuffer(f.read(8), "<i2"), arrays["sharded"][5, 2:6])
        shard_reads = [r for r in srv.requests if "/sharded/c/" in r.path]
        assert any(r.range is not None and r.range.startswith("bytes=-") for r in shard_reads)
        assert all(r.range is not None for r in shard_reads if r.method == "GET")


def test_http_mount_is_read_only(mounter: Any, site: tuple[Path, dict[str, Any]]) -> None:
    with StaticServer(site[0]) as srv:
        m = mounter(f"{srv.url}/store.zarr")
        with pytest.raises(OSError) as info:
            with open(m.path / "temp" / "data.raw", "r+b") as f:
                f.write(b"\0\0\0\0")
        assert info.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
        assert not [r for r in srv.requests if r.method not in ("GET", "HEAD")]
