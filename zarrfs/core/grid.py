"""The regular chunk grid bound to an array shape (spec: v3 chunk-grid-regular.rst).

Chunk ``coords`` index the grid; chunk ``(i, j, ...)`` covers elements
``[i*c0, min((i+1)*c0, shape0)) x ...``. The grid has ``ceil(shape/chunk)`` chunks along each
axis (zero along a zero-length axis; one chunk for a 0-d array). Chunks may be larger than the
array: they are then clipped by the array bounds (edge chunks are stored at full chunk shape).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from math import prod


@dataclass(frozen=True)
class RegularGrid:
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.chunk_shape):
            raise ValueError(
                f"chunk shape {self.chunk_shape} does not match array rank {self.shape}"
            )
        if any(c <= 0 for c in self.chunk_shape) or any(s < 0 for s in self.shape):
            raise ValueError(f"invalid grid {self.shape} / {self.chunk_shape}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @cached_property
    def grid_shape(self) -> tuple[int, ...]:
        """Chunks along each axis (computed once: the grid is immutable)."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape))

    @property
    def nchunks(self) -> int:
        return prod(self.grid_shape)

    def chunk_origin(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(i * c for i, c in zip(coords, self.chunk_shape))

    def chunk_extent(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of the part of chunk ``coords`` that lies inside the array."""
        return tuple(
            max(0, min(c, s - i * c)) for i, c, s in zip(coords, self.chunk_shape, self.shape)
        )

    def contains(self, coords: tuple[int, ...]) -> bool:
        return len(coords) == self.ndim and all(0 <= i < n for i, n in zip(coords, self.grid_shape))

    def all_chunks(self) -> Iterator[tuple[int, ...]]:
        return itertools.product(*(range(n) for n in self.grid_shape))

    def chunks_in_box(
        self, starts: tuple[int, ...], stops: tuple[int, ...]
    ) -> Iterator[tuple[int, ...]]:
        """Coords of the chunks intersecting the element box ``[starts, stops)`` (C order)."""
        if any(b <= a for a, b in zip(starts, stops)):
            return iter(())
        return itertools.product(
            *(range(a // c, (b - 1) // c + 1) for a, b, c in zip(starts, stops, self.chunk_shape))
        )


def chunks_outside(old: RegularGrid, new: RegularGrid) -> int:
    """How many chunks of ``old`` lie outside ``new`` (same chunk shape)."""
    kept = prod(min(a, b) for a, b in zip(old.grid_shape, new.grid_shape))
    return old.nchunks - kept


def grid_difference(old: RegularGrid, new: RegularGrid) -> Iterator[tuple[int, ...]]:
    """The chunks of ``old`` outside ``new``, each once, without visiting the chunks both hold:
    for each axis ``k`` in turn, those past ``new``'s end on ``k`` and inside it on every axis
    before ``k``."""
    og, ng = old.grid_shape, new.grid_shape
    for k in range(old.ndim):
        if ng[k] >= og[k]:
            continue
        ranges = [
            range(min(o, n)) if j < k else range(n, o) if j == k else range(o)
            for j, (o, n) in enumerate(zip(og, ng))
        ]
        yield from itertools.product(*ranges)


def edge_chunks(grid: RegularGrid, axes: Iterator[int] | list[int]) -> Iterator[tuple[int, ...]]:
    """The chunks of ``grid`` that the array's end cuts along one of ``axes``, each once,
    without visiting the others."""
    gs = grid.grid_shape
    cut = [k for k in sorted(set(axes)) if gs[k] and grid.shape[k] % grid.chunk_shape[k]]
    for n, k in enumerate(cut):
        ranges = [range(g) for g in gs]
        for j in cut[:n]:
            ranges[j] = range(gs[j] - 1)
        ranges[k] = range(gs[k] - 1, gs[k])
        yield from itertools.product(*ranges)
