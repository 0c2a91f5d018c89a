"""Sharded arrays interoperate with zarr-python 3.1.6 and tensorstore, both directions.

Each case writes a ``zarr.json`` with a given codec chain into a temporary directory. Direction
"from": the library writes the array, and every shard file on disk is decoded with zarrfs' codec
chain and compared with numpy. Direction "to": zarrfs encodes every shard and writes the files,
and the library reads the array back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shard_helpers import BYTES_LE, CRC, chain, spec

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

GZIP = {"name": "gzip", "configuration": {"level": 5}}
ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
BLOSC = {
    "name": "blosc",
    "configuration": {
        "cname": "lz4",
        "clevel": 5,
        "shuffle": "shuffle",
        "typesize": 4,
        "blocksize": 0,
    },
}
BYTES_BE = {"name": "bytes", "configuration": {"endian": "big"}}


def shard_codec(
    chunk_shape: list[int],
    codecs: list[Any],
    location: str = "end",
    index_codecs: list[Any] | None = None,
) -> dict[str, Any]:
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": chunk_shape,
            "codecs": codecs,
            "index_codecs": index_codecs if index_codecs is not None else [BYTES_LE, CRC],
            "index_location": location,
        },
    }


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    shard_shape: tuple[int, ...]
    data_type: str  # zarr v3 name
    dtype: str  # numpy
    fill: Any
    codecs: list[Any]

    def metadata(self) -> dict[str, Any]:
        return {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": list(self.shard_shape)},
            },
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": self.fill,
            "codecs": self.codecs,
            "attributes": {},
        }

    def data(self) -> np.ndarray:
        rng = np.random.default_rng(sum(self.shape))
        arr = rng.integers(0, 200, size=self.shape).astype(self.dtype)
        # an area equal to the fill value, so some inner chunks (and a shard) are not stored
        arr[tuple(slice(0, s) for s in self.shard_shape)] = self.fill
        arr[
            (slice(self.shard_shape[0], self.shard_shape[0] + 2),)
            + (slice(None),) * (len(self.shape) - 1)
        ] = self.fill
        return arr

    def grid(self) -> list[tuple[int, ...]]:
        return list(
            product(*(range(-(-s // c)) for s, c in zip(self.shape, self.shard_shape, strict=True)))
        )


CASES = {
    "end-crc": Case((10, 12), (4, 6), "float32", "<f4", 0, [shard_codec([2, 3], [BYTES_LE])]),
    "start-gzip": Case(
        (10, 12), (4, 6), "float32", "<f4", -1, [shard_codec([2, 3], [BYTES_LE, GZIP], "start")]
    ),
    "transpose-zstd-crc": Case(
        (9, 8),
        (6, 4),
        "uint16",
        "<u2",
        7,
        [
            shard_codec(
                [3, 2],
                [{"name": "transpose", "configuration": {"order": [1, 0]}}, BYTES_BE, ZSTD, CRC],
                "start",
            )
        ],
    ),
    "blosc": Case((7, 16), (7, 8), "int32", "<i4", 0, [shard_codec([7, 2], [BYTES_LE, BLOSC])]),
    "index-without-crc": Case(
        (6, 6), (6, 6), "int16", "<i2", 3, [shard_codec([3, 2], [BYTES_LE], "start", [BYTES_LE])]
    ),
    "nested": Case(
        (16, 8),
        (8, 8),
        "float64",
        "<f8",
        0,
        [shard_codec([4, 4], [shard_codec([2, 2], [BYTES_LE, GZIP], "start")])],
    ),
    "transpose-then-shard": Case(
        (8, 12),
        (4, 6),
        "float32",
        "<f4",
        0,
        [
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            shard_codec([2, 2], [BYTES_LE, CRC]),
        ],
    ),
    "3d-start": Case(
        (4, 6, 8),
        (4, 6, 4),
        "uint8",
        "|u1",
        0,
        [shard_codec([2, 3, 2], [{"name": "bytes"}, GZIP], "start")],
    ),
}


def shard_path(root: Path, coords: tuple[int, ...]) -> Path:
    return root.joinpath("c", *map(str, coords))


def padded(case: Case, data: np.ndarray, coords: tuple[int, ...]) -> np.ndarray:
    """The full shard at ``coords``: the array's values, fill value past the array's edge."""
    out = np.full(case.shard_shape, case.fill, dtype=case.dtype)
    region = tuple(
        slice(c * n, min((c + 1) * n, s))
        for c, n, s in zip(coords, case.shard_shape, case.shape, strict=True)
    )
    out[tuple(slice(0, r.stop - r.start) for r in region)] = data[region]
    return out


def lib_write(lib: str, root: Path, data: np.ndarray) -> None:
    if lib == "zarr":
        zarr.open_array(str(root), mode="r+")[...] = data
    else:
        ts_open(root)[...].write(data).result()


def lib_read(lib: str, root: Path) -> np.ndarray:
    if lib == "zarr":
        return np.asarray(zarr.open_array(str(root), mode="r")[...])
    return np.asarray(ts_open(root).read().result())


def ts_open(root: Path) -> Any:
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root)}}).result()


@pytest.mark.parametrize("lib", ["zarr", "tensorstore"])
@pytest.mark.parametrize("name", list(CASES))
def test_decode_shards_written_by(tmp_path: Path, lib: str, name: str) -> None:
    case = CASES[name]
    (tmp_path / "zarr.json").write_text(json.dumps(case.metadata()))
    data = case.data()
    lib_write(lib, tmp_path, data)
    prepared = chain(*case.codecs).prepare(spec(case.shard_shape, case.dtype, case.fill))
    stored = 0
    for coords in case.grid():
        path = shard_path(tmp_path, coords)
        expected = padded(case, data, coords)
        if not path.exists():
            assert (expected == case.fill).all(), f"{lib} left out a non-empty shard {coords}"
            continue
        stored += 1
        np.testing.assert_array_equal(prepared.decode(path.read_bytes()), expected)
    assert stored == len(case.grid()) - 1  # the all-fill first shard is not stored


@pytest.mark.parametrize("lib", ["zarr", "tensorstore"])
@pytest.mark.parametrize("name", list(CASES))
def test_shards_encoded_by_zarrfs_read_by(tmp_path: Path, lib: str, name: str) -> None:
    case = CASES[name]
    (tmp_path / "zarr.json").write_text(json.dumps(case.metadata()))
    data = case.data()
    prepared = chain(*case.codecs).prepare(spec(case.shard_shape, case.dtype, case.fill))
    written = 0
    for coords in case.grid():
        encoded = prepared.encode(padded(case, data, coords))
        if encoded is None:
            continue
        path = shard_path(tmp_path, coords)
        os.makedirs(path.parent, exist_ok=True)
        path.write_bytes(encoded)
        written += 1
    assert written == len(case.grid()) - 1
    np.testing.assert_array_equal(lib_read(lib, tmp_path), data)
