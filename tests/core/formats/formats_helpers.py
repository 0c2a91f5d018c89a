"""Shared helpers for the format tests: sample data per numpy type, expected ``data.raw``
bytes, a store that cannot list, and a peak-memory probe for decompression bombs."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from math import prod
from typing import Any

import numpy as np

from zarrfs.core.array import Engine, ZarrArray
from zarrfs.core.stores.base import RangeRequest, Store

_CHARS = list("aé漢😀 z")


def sample(dtype: np.dtype[Any], shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    """Deterministic data of ``dtype`` (stored byte order kept) covering the type's range."""
    rng = np.random.default_rng(seed)
    n = prod(shape)
    kind = dtype.kind
    if dtype.fields is not None or kind == "V" or kind in "iu":
        raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
        return raw.view(dtype).reshape(shape)
    if kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    if kind == "f":
        out = (rng.normal(size=n) * 100).astype(dtype)
        out[::7] = np.nan
        return out.reshape(shape)
    if kind == "c":
        out = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dtype)
        return out.reshape(shape)
    if kind in "mM":
        return rng.integers(-(10**12), 10**12, size=n).astype(dtype).reshape(shape)
    if kind == "S":
        size = dtype.itemsize
        words = [
            bytes(rng.integers(97, 123, size=int(rng.integers(0, size + 1)))) for _ in range(n)
        ]
        return np.array(words, dtype=dtype).reshape(shape)
    if kind == "U":
        size = dtype.itemsize // 4
        words = ["".join(rng.choice(_CHARS, size=int(rng.integers(0, size + 1)))) for _ in range(n)]
        return np.array(words, dtype=dtype).reshape(shape)
    raise ValueError(f"no sample data for {dtype}")


def ordered(arr: np.ndarray[Any, Any], order: str) -> bytes:
    """C-order bytes of ``arr`` in ``order`` ("little"/"big"), field by field for records."""
    char = {"little": "<", "big": ">"}[order]
    arr = np.asarray(arr)
    return np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder(char))).tobytes()


def read_all(arr: ZarrArray, order: str = "little") -> bytes:
    return arr.read(0, arr.nbytes, order)


def as_native(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return arr.astype(arr.dtype.newbyteorder("="))


class NonListable(Store):
    """A read-only view of a store that cannot list (like an HTTP store)."""

    listable = False

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = f"nonlistable+{inner.url}"

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        return self.inner.get(key, byte_range)


@contextmanager
def python_peak_memory() -> Iterator[Callable[[], int]]:
    """The peak of Python-heap allocations (bytes objects, numpy buffers) in the block."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def engine() -> Engine:
    return Engine(cache_size=8 << 20, threads=2, prefetch_bytes=0)
