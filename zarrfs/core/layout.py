"""Raw-view geometry: flat C-order byte ranges <-> chunk slices.

The raw view of an array is its elements in C order, ``itemsize`` bytes each. A flat element
range ``[start, stop)`` is split into at most ``2*ndim - 1`` boxes, each contiguous in C order:
a box fixes a prefix of indices, spans a range along one axis and covers every later axis
whole. Each box is then cut along the chunk grid into ``Piece``s, one per chunk it touches;
a piece says where its elements sit in the chunk and in the flat output.

Invariants (checked by hypothesis tests against numpy):
- the boxes of a range tile it exactly, in order, without overlap;
- the pieces of a box tile the box; piece ``out`` slices index the box reshaped to its shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import prod
from typing import NamedTuple

from zarrfs.core.grid import RegularGrid


class Box(NamedTuple):
    """Elements ``[starts, stops)`` of the array; they occupy flat positions
    ``[flat_start, flat_start + size)``."""

    starts: tuple[int, ...]
    stops: tuple[int, ...]
    flat_start: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in zip(self.starts, self.stops))

    @property
    def size(self) -> int:
        return prod(self.shape)


class Piece(NamedTuple):
    """The part of chunk ``coords`` inside a box: ``chunk[chunk_sel]`` is ``box[box_sel]``."""

    coords: tuple[int, ...]
    chunk_sel: tuple[slice, ...]
    box_sel: tuple[slice, ...]


def flat_to_boxes(shape: tuple[int, ...], start: int, stop: int) -> list[Box]:
    """Split the flat C-order element range ``[start, stop)`` of ``shape`` into boxes."""
    total = prod(shape)
    start, stop = max(0, start), min(stop, total)
    if start >= stop:
        return []
    ndim = len(shape)
    if ndim == 0:
        return [Box((), (), 0)]
    strides = [1] * ndim
    for k in range(ndim - 1, 0, -1):
        strides[k - 1] = strides[k] * shape[k]
    boxes: list[Box] = []
    cur = start
    while cur < stop:
        idx = []
        rem = cur
        for s in strides:
            idx.append(rem // s)
            rem %= s
        for k in range(ndim):
            step = strides[k]
            if cur % step:
                continue
            n = min(shape[k] - idx[k], (stop - cur) // step)
            if n <= 0:
                continue
            starts = (*idx[:k], idx[k], *([0] * (ndim - k - 1)))
            stops = (*(i + 1 for i in idx[:k]), idx[k] + n, *shape[k + 1 :])
            boxes.append(Box(tuple(starts), tuple(stops), cur))
            cur += n * step
            break
    return boxes


def box_pieces(grid: RegularGrid, box: Box) -> Iterator[Piece]:
    """The chunks a box touches, with the slices that map between chunk and box."""
    # built axis by axis: (coords, chunk slices, box slices) prefixes times the axis' parts
    combos: list[tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...]]] = [((), (), ())]
    for a, b, c in zip(box.starts, box.stops, grid.chunk_shape):
        if b <= a:
            return iter(())
        parts = []
        for i in range(a // c, (b - 1) // c + 1):
            lo, hi = max(a, i * c), min(b, (i + 1) * c)
            parts.append(((i,), (slice(lo - i * c, hi - i * c),), (slice(lo - a, hi - a),)))
        combos = [
            (coords + i, chunk_sel + cs, box_sel + bs)
            for coords, chunk_sel, box_sel in combos
            for i, cs, bs in parts
        ]
    return map(Piece._make, combos)


def element_range(offset: int, size: int, itemsize: int) -> tuple[int, int, int]:
    """Byte range -> (first element, end element, byte skip inside the first element)."""
    first = offset // itemsize
    end = -(-(offset + size) // itemsize)
    return first, end, offset - first * itemsize
