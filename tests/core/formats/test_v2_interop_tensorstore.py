"""Zarr v2 arrays written by tensorstore's ``zarr`` driver read byte-identical through
``ZarrArray``, and arrays written by ``ZarrArray`` read back identically by tensorstore.

tensorstore's v2 driver offers the compressors blosc, zlib, gzip, bz2 and zstd (no filters),
C and F order, both separators, numeric and record types (a record array is opened one field at
a time; tensorstore's Python API hands byte strings over as zero-size numpy items, so ``|S<n>``
is covered by the zarr-python tests only). tensorstore's own read of what it wrote is the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from formats_helpers import as_native, engine, ordered, read_all, sample

from zarrfs.core.hierarchy import Hierarchy, open_array
from zarrfs.core.stores.local import LocalStore

pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class Case:
    id: str
    dtype: Any
    shape: list[int] = field(default_factory=lambda: [7, 9])
    chunks: list[int] = field(default_factory=lambda: [3, 4])
    metadata: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("default-blosc", "<i4"),
    Case(
        "blosc-zstd-bitshuffle",
        "<u2",
        metadata={"compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2}},
    ),
    Case(
        "zlib-F-slash",
        ">f8",
        [5, 6, 7],
        [2, 4, 3],
        {
            "compressor": {"id": "zlib", "level": 3},
            "order": "F",
            "dimension_separator": "/",
            "fill_value": "NaN",
        },
    ),
    Case("gzip", "<i8", metadata={"compressor": {"id": "gzip", "level": 5}, "fill_value": -1}),
    Case("bz2", "<f4", metadata={"compressor": {"id": "bz2", "level": 9}}),
    Case("zstd-F", ">u4", metadata={"compressor": {"id": "zstd", "level": 3}, "order": "F"}),
    Case("none", "<c8", metadata={"compressor": None, "fill_value": [1.0, "NaN"]}),
    Case("bool", "|b1", metadata={"fill_value": True}),
    Case("f2-inf", "<f2", metadata={"fill_value": "Infinity"}),
    Case("i1", "|i1", metadata={"fill_value": 5}),
    Case(
        "record",
        [["x", "<f4"], ["y", ">i2", [2]], ["z", "|u1"]],
        metadata={"compressor": {"id": "zlib", "level": 1}},
    ),
]
IDS = [c.id for c in CASES]
BY_ID = {c.id: c for c in CASES}


def _spec(root: Path, case: Case, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(root)}}
    spec.update(extra)
    return spec


def _create(root: Path, case: Case) -> None:
    meta = {"shape": case.shape, "chunks": case.chunks, "dtype": case.dtype, **case.metadata}
    field = {"field": case.dtype[0][0]} if isinstance(case.dtype, list) else {}
    ts.open(_spec(root, case, metadata=meta, create=True, **field)).result()


def _fields(case: Case) -> list[str | None]:
    return [f[0] for f in case.dtype] if isinstance(case.dtype, list) else [None]


def _open(root: Path, case: Case, name: str | None) -> ts.TensorStore:
    return ts.open(_spec(root, case, **({"field": name} if name else {}))).result()


def _ts_read(root: Path, case: Case, dtype: np.dtype) -> np.ndarray:
    out = np.empty(tuple(case.shape), dtype=dtype)
    for name in _fields(case):
        got = _open(root, case, name).read().result()
        if name is None:
            out[...] = got
        else:
            out[name] = got
    return out


def _ts_write(root: Path, case: Case, data: np.ndarray, region: tuple[slice, ...]) -> None:
    for name in _fields(case):
        part = data if name is None else data[name]
        _open(root, case, name)[region] = part[region]


def _stored_dtype(root: Path) -> np.dtype:
    arr = open_array(LocalStore(root, read_only=True), "", engine())
    return arr.metadata.data_type.stored  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("case_id", IDS)
def test_read_matches_tensorstore(case_id: str, tmp_path: Path) -> None:
    case = BY_ID[case_id]
    _create(tmp_path, case)
    dtype = _stored_dtype(tmp_path)
    data = sample(dtype, tuple(case.shape), IDS.index(case_id))
    _ts_write(tmp_path, case, data, tuple(slice(0, (n * 2) // 3) for n in case.shape))
    model = _ts_read(tmp_path, case, dtype)
    arr = open_array(LocalStore(tmp_path, read_only=True), "", engine())
    for order in ("little", "big"):
        assert read_all(arr, order) == ordered(model, order), order


@pytest.mark.parametrize("case_id", IDS)
def test_written_by_zarrfs_reads_back_in_tensorstore(case_id: str, tmp_path: Path) -> None:
    case = BY_ID[case_id]
    _create(tmp_path, case)
    dtype = _stored_dtype(tmp_path)
    data = sample(dtype, tuple(case.shape), 100 + IDS.index(case_id))
    arr = Hierarchy(LocalStore(tmp_path), engine()).array("")
    arr.write(0, ordered(as_native(data), "little"), "little")
    arr.flush()
    got = _ts_read(tmp_path, case, dtype)
    assert ordered(got, "big") == ordered(data, "big")
    # a partial write keeps the rest of each chunk
    patch = sample(dtype, (1,), 7)
    arr.write(arr.itemsize * 10, ordered(as_native(patch), "little"), "little")
    arr.flush()
    data.reshape(-1)[10] = patch[0]
    assert ordered(_ts_read(tmp_path, case, dtype), "big") == ordered(data, "big")
