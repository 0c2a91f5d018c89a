"""Arrays written by zarr-python and tensorstore read byte-identical through zarrfs' core.

For every corpus case (writer x shape x codec chain x data type) the whole decoded array, in
both byte orders, and seeded random byte ranges at odd offsets must equal the numpy model that
the writer itself reads back (fill value in never-written chunks, shards and inner chunks).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from zarrfs.core.array import Engine
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore

from .corpus import CASES, Case, Corpus, assert_same_bytes, hash_seed, ordered_bytes

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def store(corpus: Corpus) -> LocalStore:
    return LocalStore(corpus.root, read_only=True)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(threads=2)
    yield engine
    engine.close()


def byte_ranges(nbytes: int, itemsize: int, seed: int, count: int = 10) -> list[tuple[int, int]]:
    """Seeded (offset, size) pairs: odd offsets, element-crossing sizes, the ends, empty reads."""
    if nbytes == 0:
        return [(0, 0)]
    rng = np.random.default_rng(seed)
    ranges = [(0, 1), (nbytes - 1, 1), (nbytes // 2, 0), (1, nbytes - 1)]
    for _ in range(count):
        offset = int(rng.integers(0, nbytes)) | 1 if nbytes > 1 else 0
        offset = min(offset, nbytes - 1)
        size = int(rng.integers(1, min(nbytes - offset, itemsize * 97) + 1))
        ranges.append((offset, size))
    return ranges


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_read_matches_writer(case: Case, corpus: Corpus, store: LocalStore, engine: Engine) -> None:
    expected = corpus.arrays[case.id].expected
    arr = open_array(store, case.path, engine=engine)

    assert tuple(arr.shape) == expected.shape
    assert np.dtype(arr.dtype) == expected.dtype
    assert arr.nbytes == expected.nbytes

    itemsize = expected.dtype.itemsize
    want = {order: ordered_bytes(expected, order) for order in ("little", "big")}
    for order in ("little", "big"):
        assert_same_bytes(
            arr.read(0, arr.nbytes, order), want[order], itemsize, f"whole array, {order} endian"
        )
    for i, (offset, size) in enumerate(byte_ranges(arr.nbytes, itemsize, hash_seed(case.id))):
        order = ("little", "big")[i % 2]
        assert_same_bytes(
            arr.read(offset, size, order),
            want[order][offset : offset + size],
            itemsize,
            f"read({offset}, {size}, {order!r})",
        )
