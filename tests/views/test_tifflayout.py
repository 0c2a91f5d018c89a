"""The TIFF skeleton of a plane geometry, set into the stand-in rendered for another plane,
is byte for byte what tifffile renders for that geometry itself (``views/tifflayout.py``)."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.views import tifflayout
from zarrfs.views.tifflayout import _Kind, _rendered, _skeleton

_DTYPES = ("u1", "i1", "u2", "i2", "u4", "i4", "f4", "u8", "i8", "f8")
_SIDES = st.one_of(
    st.integers(1, 300),
    st.sampled_from([65535, 65536, 65537, 1 << 20, (1 << 32) - 1, 1 << 32]),
)


def _outcome(fn: Any, *args: Any) -> Any:
    """The skeleton, or the type of what was raised (tifffile's refusal must be the same
    either way). Compared: every byte a served file takes from it. Not compared: where its own
    geometry fields are, and the pointer fields that ``render_layout`` and ``TiffLayout.ifd``
    always overwrite with the file's own positions (the stand-in's point past its one or two
    planes, so they differ with the plane size)."""
    try:
        sk = fn(*args)
    except Exception as exc:
        return type(exc)
    size = struct.calcsize(sk.fmt)
    head, template = bytearray(sk.head), bytearray(sk.template)
    if sk.template:  # several pages: the first IFD's link is set to the trailer
        head[sk.next0 : sk.next0 + size] = bytes(size)
    for at in [a for a, _ in sk.self_ptrs + sk.strip_ptrs] + [sk.next_ptr] * bool(sk.template):
        template[at : at + size] = bytes(size)
    return dataclasses.replace(sk, head=bytes(head), template=bytes(template), geometry=())


_KINDS = st.builds(
    lambda code, multi, desc_len, resolution, big, order: _Kind(
        np.dtype(code).newbyteorder(order), multi, desc_len, resolution, big, order
    ),
    st.sampled_from(_DTYPES),
    st.booleans(),
    st.integers(0, 600),
    st.sampled_from([None, (1.5, 2.0), (300.0, 300.0)]),
    st.booleans(),
    st.sampled_from(["<", ">"]),
)


@settings(max_examples=150, deadline=None)
@given(kind=_KINDS, y=_SIDES, x=_SIDES)
def test_a_set_geometry_equals_tifffile_rendering_it(kind: _Kind, y: int, x: int) -> None:
    args = (kind, y, x)
    _skeleton.cache_clear()
    _rendered.cache_clear()  # the direct rendering must not come from the stand-in's entry
    direct = _outcome(_rendered.__wrapped__, *args)
    assert _outcome(_skeleton, *args) == direct


def test_distinct_planes_share_one_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    _skeleton.cache_clear()
    _rendered.cache_clear()
    calls: list[tuple[int, int]] = []
    real = tifflayout._standin

    def counting(kind: _Kind, y: int, x: int) -> Any:
        calls.append((y, x))
        return real(kind, y, x)

    monkeypatch.setattr(tifflayout, "_standin", counting)
    kind = _Kind(np.dtype("<f4"), True, 100, None, False, "<")
    for y, x in ((10, 20), (11, 20), (512, 480), (3, 70000)):
        _skeleton(kind, y, x)
    assert calls == [tifflayout._CANONICAL_PLANE]  # one stand-in for four plane sizes
