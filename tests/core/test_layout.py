"""Byte-range <-> chunk geometry checked against numpy with hypothesis."""

from math import prod

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.core.grid import RegularGrid
from zarrfs.core.layout import box_pieces, element_range, flat_to_boxes


@st.composite
def shapes_and_ranges(draw):
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    total = prod(shape)
    start = draw(st.integers(0, total + 2))
    stop = draw(st.integers(0, total + 3))
    return shape, chunks, start, stop


@settings(max_examples=400, deadline=None)
@given(shapes_and_ranges())
def test_boxes_tile_the_range(args):
    shape, _, start, stop = args
    a = np.arange(prod(shape)).reshape(shape)
    boxes = flat_to_boxes(shape, start, stop)
    assert len(boxes) <= max(1, 2 * len(shape) - 1)
    flat = []
    pos = max(0, start)
    for b in boxes:
        assert b.flat_start == pos
        sel = tuple(slice(x, y) for x, y in zip(b.starts, b.stops))
        flat.extend(a[sel].ravel().tolist())
        pos += b.size
    assert flat == a.ravel()[max(0, start) : max(0, min(stop, a.size))].tolist()


@settings(max_examples=400, deadline=None)
@given(shapes_and_ranges())
def test_pieces_reassemble_the_range_from_chunks(args):
    shape, chunks, start, stop = args
    a = np.arange(prod(shape)).reshape(shape)
    grid = RegularGrid(shape, chunks)

    def chunk(coords):  # full-size chunk, padded with -1 past the edge
        out = np.full(chunks, -1)
        origin = grid.chunk_origin(coords)
        ext = grid.chunk_extent(coords)
        out[tuple(slice(0, e) for e in ext)] = a[
            tuple(slice(o, o + e) for o, e in zip(origin, ext))
        ]
        return out

    n = max(0, min(stop, a.size) - max(0, start))
    out = np.full(n, -2)
    for b in flat_to_boxes(shape, start, stop):
        view = out[b.flat_start - max(0, start) :][: b.size].reshape(b.shape)
        for p in box_pieces(grid, b):
            assert grid.contains(p.coords)
            view[p.box_sel] = chunk(p.coords)[p.chunk_sel]
    assert out.tolist() == a.ravel()[max(0, start) : max(0, start) + n].tolist()


def test_grid_edges_and_degenerate_shapes():
    g = RegularGrid((10, 0, 3), (4, 2, 5))
    assert g.grid_shape == (3, 0, 1)
    assert g.nchunks == 0
    assert RegularGrid((), ()).grid_shape == ()
    assert RegularGrid((), ()).nchunks == 1
    assert RegularGrid((10,), (4,)).chunk_extent((2,)) == (2,)
    assert RegularGrid((3,), (100,)).grid_shape == (1,)


def test_element_range_rounds_outward():
    assert element_range(5, 10, 4) == (1, 4, 1)
    assert element_range(8, 4, 4) == (2, 3, 0)
