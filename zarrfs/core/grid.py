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

    @property
    def grid_shape(self) -> tuple[int, ...]:
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
