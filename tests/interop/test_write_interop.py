"""What zarrfs' core writes reads back identically in zarr-python and tensorstore.

Each case creates an array with ``create_array`` (the corpus' v3 document for a shape, codec
chain and data type) or opens a copy of an array zarr-python wrote, then writes through
``ZarrArray.write`` in unaligned byte pieces: split elements, overlapping buffered writes, a
big-endian piece, the edge chunk, and fill-value pieces that turn one whole chunk (or shard)
and, in sharded arrays, one inner chunk back into the fill value. After ``flush`` every oracle
that can read the array must return the numpy model byte for byte, a chunk equal to the fill
value must be absent from the store (an empty entry in its shard's index), and every other
chunk present.
"""

from __future__ import annotations

import itertools
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from zarrfs.core.array import Engine, ZarrArray
from zarrfs.core.hierarchy import create_array, open_array
from zarrfs.core.stores.local import LocalStore

from .corpus import (
    CASES,
    SHAPES,
    Case,
    Chain,
    Corpus,
    ShapeCase,
    assert_same_bytes,
    document,
    fill_scalar,
    hash_seed,
    numpy_dtype,
    ordered_bytes,
    random_data,
    read_with,
    readers,
)

pytestmark = [
    pytest.mark.timeout(600),
    # zarr-python's notes on reading raw_bytes and nested shards, not problems of the arrays
    pytest.mark.filterwarnings("ignore:The data type .* does not have a Zarr V3 specification"),
    pytest.mark.filterwarnings("ignore:Combining a `sharding_indexed` codec disables"),
]

CREATE_CASES = [(sc, ch, dt) for sc in SHAPES for ch in sc.chains for dt in sc.dtypes]


def _overwritten(case: Case) -> bool:
    """zarr-python arrays to overwrite: every non-3-D one, and about three data types per chain."""
    if case.writer != "zarr-python":
        return False
    sc = case.shape_case
    if sc.name != "3d":
        return True
    return (sc.chains.index(case.chain) + sc.dtypes.index(case.dtype)) % 5 == 0


OVERWRITE_CASES = [case for case in CASES if _overwritten(case)]


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(threads=2)
    yield engine
    engine.close()


class Model:
    """The numpy model of an array under byte-range writes in either byte order."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array.copy()

    def write(self, offset: int, data: bytes, byte_order: str) -> None:
        dt = self.array.dtype.newbyteorder("<" if byte_order == "little" else ">")
        buf = bytearray(ordered_bytes(self.array, byte_order))
        buf[offset : offset + len(data)] = data
        flat = np.frombuffer(bytes(buf), dtype=dt).astype(self.array.dtype)
        self.array = flat.reshape(self.array.shape)


def _runs(shape: tuple[int, ...], box: tuple[slice, ...]) -> list[tuple[int, int]]:
    """The box's elements as (first flat index, count) runs of the C-order array."""
    flat = np.arange(math.prod(shape)).reshape(shape)[box].ravel()
    runs: list[tuple[int, int]] = []
    for index in flat.tolist():
        if runs and runs[-1][0] + runs[-1][1] == index:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((index, 1))
    return runs


def _sharding(doc: dict[str, Any]) -> tuple[list[int] | None, dict[str, Any] | None]:
    """The transpose order before the (outer) sharding codec, and its configuration."""
    order = None
    for codec in doc["codecs"]:
        if codec["name"] == "transpose":
            order = codec["configuration"]["order"]
        elif codec["name"] == "sharding_indexed":
            return order, codec["configuration"]
        else:
            return None, None
    return None, None


def _fill_boxes(doc: dict[str, Any], shape: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """Regions to set back to the fill value: the first chunk (a whole shard when sharded) and,
    for sharded arrays, the first inner chunk of the shard after it."""
    chunks = doc["chunk_grid"]["configuration"]["chunk_shape"]
    boxes = [tuple(slice(0, min(c, n)) for c, n in zip(chunks, shape, strict=True))]
    order, config = _sharding(doc)
    if config is not None and len(shape) >= 1:
        axis = 1 if len(shape) > 1 else 0
        origin = [0] * len(shape)
        origin[axis] = chunks[axis]
        inner = config["chunk_shape"]
        extent = [0] * len(shape)
        for j, size in enumerate(inner):  # codec-space axis j is array axis order[j]
            extent[order[j] if order else j] = size
        boxes.append(
            tuple(slice(o, min(o + e, n)) for o, e, n in zip(origin, extent, shape, strict=True))
        )
    return boxes


def write_plan(
    arr: ZarrArray, model: Model, doc: dict[str, Any], dtype: str, fill: np.ndarray, seed: int
) -> None:
    """Write pieces through ``arr`` and the model alike, flushing twice."""
    shape, s, n = model.array.shape, model.array.dtype.itemsize, model.array.size
    new = {o: ordered_bytes(random_data(dtype, shape, seed), o) for o in ("little", "big")}
    new2 = ordered_bytes(random_data(dtype, shape, seed + 1), "little")

    def put(offset: int, data: bytes, byte_order: str = "little") -> None:
        arr.write(offset, data, byte_order)
        model.write(offset, data, byte_order)

    if n == 0:
        put(0, b"")
    elif n < 30:
        put(1, new["little"][1:s])
        put(0, new["little"][:1])
    else:
        a, b, c = 7 * s + 1, n // 3 * s + 3, n * 36 // 100 * s
        put(a, new["little"][a:b])
        put(b, new["little"][b:c])  # completes the element split at b
        put(a + 5 * s, new2[a + 5 * s : a + 25 * s + 1])  # overwrites buffered bytes
        d, e = n * 45 // 100 * s + 2, n * 60 // 100 * s - 1
        put(d, new["big"][d:e], "big")
    arr.flush()
    _check_zarrfs(arr, model, "after the first flush")

    nbytes = n * s
    if n >= 30:
        put(nbytes - 23 * s - 1, new["little"][nbytes - 23 * s - 1 :])  # the edge chunks
    if n:
        fill_bytes = ordered_bytes(fill.reshape(1), "little")
        for box in _fill_boxes(doc, shape):
            for first, count in _runs(shape, box):
                put(first * s, fill_bytes * count)
    arr.flush()


def _check_zarrfs(arr: ZarrArray, model: Model, when: str) -> None:
    fresh = open_array(arr.store, arr.path, engine=arr.engine)
    for order in ("little", "big"):
        assert_same_bytes(
            fresh.read(0, fresh.nbytes, order),
            ordered_bytes(model.array, order),
            model.array.dtype.itemsize,
            f"zarrfs re-read {when}, {order} endian",
        )


def _stored_keys(array_dir: Path) -> set[str]:
    return {
        p.relative_to(array_dir).as_posix()
        for p in array_dir.rglob("*")
        if p.is_file() and p.name != "zarr.json"
    }


def _is_fill(block: np.ndarray, fill: np.ndarray) -> bool:
    return block.tobytes() == np.full(block.shape, fill, dtype=block.dtype).tobytes()


def check_store(
    array_dir: Path, doc: dict[str, Any], expected: np.ndarray, fill: np.ndarray
) -> None:
    """Chunks equal to the fill value are absent (or empty in the shard index); others present."""
    shape = expected.shape
    chunks = doc["chunk_grid"]["configuration"]["chunk_shape"]
    order, config = _sharding(doc)
    grid = [math.ceil(n / c) for n, c in zip(shape, chunks, strict=True)]
    want: set[str] = set()
    for coords in itertools.product(*(range(g) for g in grid)):
        region = tuple(
            slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(coords, chunks, shape, strict=True)
        )
        key = "/".join(["c", *map(str, coords)])
        if _is_fill(expected[region], fill):
            continue
        want.add(key)
        if config is not None:
            shard = np.full(chunks, fill, dtype=expected.dtype)
            shard[tuple(slice(0, r.stop - r.start) for r in region)] = expected[region]
            _check_shard_index(
                array_dir / key, key, shard.transpose(order) if order else shard, config, fill
            )
    assert _stored_keys(array_dir) == want


def _check_shard_index(
    path: Path, key: str, shard: np.ndarray, config: dict[str, Any], fill: np.ndarray
) -> None:
    inner = config["chunk_shape"]
    per_shard = [s // i for s, i in zip(shard.shape, inner, strict=True)]
    count = math.prod(per_shard)
    size = 16 * count + 4 * any(c["name"] == "crc32c" for c in config["index_codecs"])
    data = path.read_bytes()
    index = data[:size] if config["index_location"] == "start" else data[len(data) - size :]
    entries = np.frombuffer(index[: 16 * count], dtype="<u8").reshape(count, 2)
    for n, coords in enumerate(itertools.product(*(range(p) for p in per_shard))):
        block = shard[tuple(slice(c * i, (c + 1) * i) for c, i in zip(coords, inner, strict=True))]
        empty = bool((entries[n] == np.uint64(2**64 - 1)).all())
        assert empty == _is_fill(block, fill), f"{key}: inner chunk {coords} empty={empty}"
        if not empty:
            assert int(entries[n][0]) + int(entries[n][1]) <= len(data), f"{key}: entry {coords}"


def check_oracles(array_dir: Path, chain: Chain, dtype: str, expected: np.ndarray) -> None:
    for oracle in readers(chain, dtype):
        got = read_with(oracle, array_dir)
        assert got.dtype == expected.dtype and got.shape == expected.shape, oracle
        assert_same_bytes(
            got.tobytes(), expected.tobytes(), expected.dtype.itemsize, f"{oracle} read-back"
        )


def _run(
    arr: ZarrArray,
    array_dir: Path,
    doc: dict[str, Any],
    start: np.ndarray,
    chain: Chain,
    dtype: str,
    seed: int,
) -> None:
    fill = fill_scalar(chain.fill, dtype)
    model = Model(start)
    write_plan(arr, model, doc, dtype, fill, seed)
    _check_zarrfs(arr, model, "after the last flush")
    if model.array.size:  # the plan set the first chunk (or shard) back to the fill value
        first = "/".join(["c"] + ["0"] * model.array.ndim)
        assert not (array_dir / first).exists(), f"{first} equals the fill value but is stored"
    check_store(array_dir, doc, model.array, fill)
    check_oracles(array_dir, chain, dtype, model.array)


@pytest.mark.parametrize(
    ("shape_case", "chain", "dtype"),
    CREATE_CASES,
    ids=[f"create-{sc.name}-{ch.name}-{dt}" for sc, ch, dt in CREATE_CASES],
)
def test_created_array_reads_back_in_oracles(
    shape_case: ShapeCase, chain: Chain, dtype: str, tmp_path: Path, engine: Engine
) -> None:
    doc = document((shape_case, chain, dtype))
    arr = create_array(LocalStore(tmp_path), "a", doc, engine=engine)
    assert arr.shape == shape_case.shape and arr.dtype == numpy_dtype(dtype)
    start = np.full(shape_case.shape, fill_scalar(chain.fill, dtype), dtype=numpy_dtype(dtype))
    _run(arr, tmp_path / "a", doc, start, chain, dtype, hash_seed(f"create-{doc['attributes']}"))
    _check_metadata(tmp_path / "a", doc, readers(chain, dtype))


def _check_metadata(array_dir: Path, doc: dict[str, Any], oracles: tuple[str, ...]) -> None:
    """The oracles see the created document's dimension names and attributes."""
    names = doc.get("dimension_names")
    if "zarr-python" in oracles:
        import zarr

        z = zarr.open_array(store=str(array_dir), mode="r")
        got: Any = z.metadata.to_dict().get("dimension_names")
        assert (list(got) if got is not None else None) == names
        assert dict(z.attrs) == doc["attributes"]
    if "tensorstore" in oracles:
        import tensorstore as ts

        t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{array_dir}/"}})
        domain = t.result().domain
        assert list(domain.labels) == (names or [""] * len(doc["shape"]))


@pytest.mark.parametrize("case", OVERWRITE_CASES, ids=lambda c: f"overwrite-{c.id}")
def test_overwritten_zarr_python_array_reads_back(
    case: Case, corpus: Corpus, tmp_path: Path, engine: Engine
) -> None:
    shutil.copytree(corpus.root / case.path, tmp_path / "a")
    arr = open_array(LocalStore(tmp_path), "a", engine=engine)
    start = corpus.arrays[case.id].expected
    _run(arr, tmp_path / "a", document(case), start, case.chain, case.dtype, hash_seed(case.id))
