"""Headers that let other programs read ``data.raw``: the ``.npy`` header (NumPy format 1.0,
2.0 when the header needs more than 64 KiB, 3.0 for non-Latin-1 field names).

The ``.npy`` view is the header followed by exactly the bytes of ``data.raw`` in the mount's
byte order, so ``numpy.load(path, mmap_mode='r')`` maps the data part directly.
"""

from __future__ import annotations

import functools
import io
from typing import Any, Literal

import numpy as np
from numpy.lib import format as npformat

_ORDER_CHAR: dict[str, Literal["<", ">", "="]] = {"little": "<", "big": ">", "native": "="}


@functools.lru_cache(maxsize=1024)
def npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """The complete ``.npy`` header (magic, version, padded dict) for a C-order array; kept
    for the last 1024 (dtype, shape) pairs (every ``stat`` of ``data.npy`` needs its length)."""
    d = {
        "descr": npformat.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": tuple(int(s) for s in shape),
    }
    buf = io.BytesIO()
    try:
        npformat.write_array_header_1_0(buf, d)
    except ValueError:
        buf = io.BytesIO()
        npformat.write_array_header_2_0(buf, d)
    return buf.getvalue()


def view_dtype(dtype: np.dtype[Any], byte_order: str) -> np.dtype[Any]:
    """``dtype`` in the byte order a mount serves (little, big or native)."""
    return dtype.newbyteorder(_ORDER_CHAR[byte_order])
