"""Zarr v2 arrays written by zarr-python 3.1.6 (``zarr_format=2``) read byte-identical through
``ZarrArray``, and arrays written by ``ZarrArray`` read back identically by zarr-python.

The cases cover every compressor (blosc with each shuffle, zlib, gzip, zstd, lz4, bz2, lzma,
none), every fixed-size filter (delta, shuffle, fixedscaleoffset, quantize, packbits,
categorize, astype, bitround, and a chain), C and F order, both dimension separators, the data
types (explicit byte orders, bytes, unicode, datetimes, records, raw void), and fill values
null / NaN / Infinity / base64 / complex / strings. zarr-python's own read of what it wrote is
the model, so missing chunks must read as whatever zarr-python reads for them.
"""

from __future__ import annotations

import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from formats_helpers import as_native, engine, ordered, read_all, sample

from zarrfs.core.hierarchy import Hierarchy, open_array
from zarrfs.core.stores.local import LocalStore

pytestmark = pytest.mark.timeout(300)

RECORD = np.dtype([("x", "<f4"), ("y", ">i2"), ("z", "|u1")])


@dataclass(frozen=True)
class Case:
    id: str
    dtype: Any
    shape: tuple[int, ...] = (7, 9)
    chunks: tuple[int, ...] = (3, 4)
    options: dict[str, Any] = field(default_factory=dict)
    #: a different data generator (filters that need data of a kind)
    data: Any = None


def _labels(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice(np.array(["", "a", "bb", "ccc"], dtype="<U5"), size=shape)


def _finite(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=shape) * 100).astype("<f8")


def _small_ints(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1000, 1000, size=shape).astype("<i8")


CASES = [
    # compressors
    *(
        Case(f"compressor-{name}", "<i4", options={"compressors": codec, "fill_value": 7})
        for name, codec in [
            ("blosc-lz4-shuffle", numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE)),
            ("blosc-zstd-bitshuffle", numcodecs.Blosc("zstd", 3, numcodecs.Blosc.BITSHUFFLE)),
            ("blosc-zlib-noshuffle", numcodecs.Blosc("zlib", 1, numcodecs.Blosc.NOSHUFFLE)),
            ("blosc-auto", numcodecs.Blosc("blosclz", 9, numcodecs.Blosc.AUTOSHUFFLE)),
            ("zlib", numcodecs.Zlib(3)),
            ("gzip", numcodecs.GZip(6)),
            ("zstd", numcodecs.Zstd(5)),
            ("zstd-checksum", numcodecs.Zstd(1, checksum=True)),
            ("lz4", numcodecs.LZ4(1)),
            ("bz2", numcodecs.BZ2(9)),
            ("lzma", numcodecs.LZMA(preset=1)),
            ("none", None),
        ]
    ),
    # filters
    Case("filter-delta", "<i4", options={"filters": [numcodecs.Delta("<i4")]}),
    Case(
        "filter-delta-astype",
        "<i8",
        options={"filters": [numcodecs.Delta("<i8", astype="<i4")], "compressors": None},
        data=_small_ints,
    ),
    Case("filter-shuffle", "<f8", options={"filters": [numcodecs.Shuffle(8)]}),
    Case(
        "filter-fixedscaleoffset",
        "<f8",
        options={"filters": [numcodecs.FixedScaleOffset(1.5, 10, "<f8", "<i4")]},
        data=_finite,
    ),
    Case("filter-quantize", "<f8", options={"filters": [numcodecs.Quantize(2, "<f8")]}),
    Case("filter-quantize-f4", "<f8", options={"filters": [numcodecs.Quantize(1, "<f8", "<f4")]}),
    Case("filter-packbits", "|b1", options={"filters": [numcodecs.PackBits()]}),
    Case(
        "filter-categorize",
        "<U5",
        options={
            "filters": [numcodecs.Categorize(["a", "bb", "ccc"], "<U5")],
            "fill_value": "",
        },
        data=_labels,
    ),
    Case("filter-astype", "<f8", options={"filters": [numcodecs.AsType("<f4", "<f8")]}),
    Case("filter-bitround", "<f4", options={"filters": [numcodecs.BitRound(6)]}),
    Case(
        "filter-chain",
        ">i4",
        options={
            "filters": [numcodecs.Delta(">i4"), numcodecs.Shuffle(4)],
            "compressors": numcodecs.Zlib(1),
        },
    ),
    # order and separators
    Case(
        "order-F-3d", "<u2", (5, 6, 7), (2, 4, 3), {"order": "F", "compressors": numcodecs.Zlib(1)}
    ),
    Case("order-F-be-slash", ">f8", options={"order": "F", "chunk_key_encoding": "/"}),
    Case("order-F-filters", "<i4", options={"order": "F", "filters": [numcodecs.Delta("<i4")]}),
    Case("separator-slash", "<i2", (5, 6, 7), (2, 4, 3), {"chunk_key_encoding": "/"}),
    # data types and fill values
    Case("dtype-bool-fill-true", "|b1", options={"fill_value": True}),
    Case("dtype-i1", "|i1", options={"fill_value": -3}),
    Case("dtype-u4-be", ">u4", options={"fill_value": 42}),
    Case("dtype-u8", "<u8", options={"fill_value": None}),
    Case("dtype-f2-fill-inf", "<f2", options={"fill_value": np.inf}),
    Case("dtype-f4-be-fill-nan", ">f4", options={"fill_value": np.nan}),
    Case("dtype-f8-fill-null", "<f8", options={"fill_value": None}),
    Case("dtype-c8", "<c8", options={"fill_value": complex(1, -2)}),
    Case("dtype-c16-be-fill-nan", ">c16", options={"fill_value": complex(1, np.nan)}),
    Case("dtype-S5-fill-base64", "|S5", options={"fill_value": b"ab"}),
    Case("dtype-U3-le", "<U3", options={"fill_value": "é"}),
    Case("dtype-U3-be", ">U3", options={"fill_value": "ab"}),
    Case("dtype-datetime-fill-null", "<M8[ns]", options={"fill_value": None}),
    Case("dtype-timedelta", "<m8[s]", options={"fill_value": 5}),
    Case("dtype-record", RECORD, options={"fill_value": bytes(range(7))}),
    Case("dtype-void", "|V4", options={"fill_value": b"abcd"}),
    Case("shape-0d", "<f8", (), (), {"fill_value": np.nan}),
    Case("shape-empty", "<i2", (0, 5), (2, 2)),
]

IDS = [c.id for c in CASES]
BY_ID = {c.id: c for c in CASES}


def _data(case: Case, seed: int) -> np.ndarray:
    if case.data is not None:
        return case.data(case.shape, seed)
    return sample(np.dtype(case.dtype), case.shape, seed)


def _create(root: Path, case: Case) -> zarr.Array:
    opts = dict(case.options)
    sep = opts.pop("chunk_key_encoding", None)
    if sep is not None:
        opts["chunk_key_encoding"] = {"name": "v2", "separator": sep}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.create_array(
            str(root),
            shape=case.shape,
            chunks=case.chunks,
            dtype=case.dtype,
            zarr_format=2,
            overwrite=True,
            **opts,
        )


def _region(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A region leaving the last chunks of every axis unwritten (they read as fill)."""
    return tuple(slice(0, (n * 2) // 3) for n in shape)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("v2-zarr-python")
    models = {}
    for i, case in enumerate(CASES):
        arr = _create(root / case.id, case)
        data = _data(case, i)
        if case.shape:
            region = _region(case.shape)
            arr[region] = data[region]
        else:
            arr[...] = data
        models[case.id] = arr[...]
    return root, models


@pytest.mark.parametrize("case_id", IDS)
def test_read_matches_zarr_python(case_id: str, corpus: tuple[Path, dict[str, np.ndarray]]) -> None:
    root, models = corpus
    model = models[case_id]
    arr = open_array(LocalStore(root, read_only=True), case_id, engine())
    assert arr.shape == model.shape
    assert arr.dtype == model.dtype.newbyteorder("=")
    for order in ("little", "big"):
        assert read_all(arr, order) == ordered(model, order), order
    if arr.nbytes > 3:
        offset, size = 3, arr.nbytes // 2
        assert arr.read(offset, size, "big") == ordered(model, "big")[offset : offset + size]


@pytest.mark.parametrize("case_id", IDS)
def test_written_by_zarrfs_reads_back_in_zarr_python(case_id: str, tmp_path: Path) -> None:
    """zarrfs and zarr-python write the same data into the same metadata: zarr-python reads
    the same values from both, the same chunks are stored (chunks equal to the fill value are
    deleted by both), and the stored bytes are identical."""
    case = BY_ID[case_id]
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    twin = _create(theirs, case)
    shutil.copytree(theirs, ours)
    data = _data(case, 1000 + IDS.index(case_id))
    fill = twin.fill_value if twin.fill_value is not None else np.zeros((), twin.dtype)[()]
    if case.shape and all(case.shape):
        data[tuple(slice(0, c) for c in case.chunks)] = fill  # a whole chunk of fill values
    twin[...] = data

    store = LocalStore(ours)
    arr = Hierarchy(store, engine()).array("")
    arr.write(0, ordered(as_native(data), "big"), "big")
    arr.flush()

    got = zarr.open_array(str(ours), mode="r")[...]
    want = twin[...]
    assert ordered(got, "little") == ordered(want, "little")
    chunk_files = {p.relative_to(theirs).as_posix() for p in theirs.rglob("*") if p.is_file()}
    ours_files = {p.relative_to(ours).as_posix() for p in ours.rglob("*") if p.is_file()}
    assert ours_files == chunk_files
    for name in sorted(chunk_files - {".zarray", ".zattrs"}):
        mine, twins = (ours / name).read_bytes(), (theirs / name).read_bytes()
        if case_id == "compressor-gzip":  # a gzip header carries its write time (RFC 1952 MTIME)
            mine, twins = mine[:4] + mine[8:], twins[:4] + twins[8:]
        assert mine == twins, name


def test_resize_through_zarrfs_is_seen_by_zarr_python(tmp_path: Path) -> None:
    case = BY_ID["compressor-zlib"]
    arr_z = _create(tmp_path, case)
    arr_z[...] = np.arange(63, dtype="<i4").reshape(7, 9)
    arr = Hierarchy(LocalStore(tmp_path), engine()).array("")
    arr.resize((4, 9))
    arr.resize((8, 9))
    reread = zarr.open_array(str(tmp_path), mode="r")
    assert reread.shape == (8, 9)
    want = np.full((8, 9), 7, dtype="<i4")
    want[:4] = np.arange(36).reshape(4, 9)
    np.testing.assert_array_equal(reread[...], want)
