"""Shared helpers for the codec tests: data types, chunk specs, sample chunks, chains."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.codecs.chain import CodecChain

# zarr v3 data type name -> in-memory numpy dtype (native order; raw types are V<n>)
DTYPES: dict[str, np.dtype[Any]] = {
    "bool": np.dtype("bool"),
    "int8": np.dtype("int8"),
    "int16": np.dtype("int16"),
    "int32": np.dtype("int32"),
    "int64": np.dtype("int64"),
    "uint8": np.dtype("uint8"),
    "uint16": np.dtype("uint16"),
    "uint32": np.dtype("uint32"),
    "uint64": np.dtype("uint64"),
    "float16": np.dtype("float16"),
    "float32": np.dtype("float32"),
    "float64": np.dtype("float64"),
    "complex64": np.dtype("complex64"),
    "complex128": np.dtype("complex128"),
    "r8": np.dtype("V1"),
    "r24": np.dtype("V3"),
}

SHAPES: list[tuple[int, ...]] = [(), (0,), (7,), (3, 5), (2, 0, 3), (2, 3, 4)]

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
BYTES_BE = {"name": "bytes", "configuration": {"endian": "big"}}


def spec(shape: tuple[int, ...], dtype: np.dtype[Any] | str = "float32") -> ChunkSpec:
    dt = np.dtype(dtype)
    return ChunkSpec(tuple(shape), dt, np.zeros((), dtype=dt))


def sample(shape: tuple[int, ...], dtype: np.dtype[Any] | str, seed: int = 0) -> np.ndarray:
    """A chunk of random bits (random 0/1 for bool), so NaN payloads and every byte value occur."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    )


def chain(*docs: Any) -> CodecChain:
    return CodecChain.from_json(list(docs))


@contextmanager
def python_peak_memory() -> Iterator[Callable[[], int]]:
    """Measure the peak of Python-heap allocations (bytes objects, ctypes buffers, numpy)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def assert_decodes_into_reused_blocks(
    monkeypatch: Any, decode: Callable[[bytes], Any], first: bytes, second: bytes, payload: bytes
) -> None:
    """``decode(first)`` is ``payload`` in a view of a pool block (``core/buffers.py``), and
    ``decode(second)`` takes that block again once the first result is freed."""
    from zarrfs.core import buffers

    # room for idle blocks, whatever pool bound and idle blocks other tests left
    monkeypatch.setattr(buffers.pool, "limit", buffers.DEFAULT_LIMIT)
    buffers.pool.trim()
    out = decode(first)
    assert isinstance(out, memoryview) and bytes(out) == payload
    reused = buffers.pool.reused
    del out
    assert bytes(decode(second)) == payload
    assert buffers.pool.reused == reused + 1  # the first result's block, taken again
