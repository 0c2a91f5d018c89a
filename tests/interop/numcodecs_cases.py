"""Arrays zarr-python 3 writes with numcodecs codecs: every ``numcodecs.*`` codec it accepts in
v3 (compressors, checksums, filters, the pcodec serializer) and the v2 compressors numcodecs
adds to the usual ones (checksums, pcodec).

``write(root, name)`` creates case ``name`` under ``root`` with zarr-python, writes part of the
data (so some chunks stay missing: fill value) and returns the zarr array; ``DATA[name]`` is
the full data written by write tests.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numcodecs
import numpy as np
import zarr
import zarr.codecs.numcodecs as zn

_rng = np.random.default_rng(1)
_F4 = (_rng.standard_normal((7, 9)) * 100).astype("f4")
_I4 = np.cumsum(_rng.integers(-5, 5, (7, 9)), axis=1).astype("i4")

#: name -> (zarr-python argument, codec factory, data)
V3_CASES: dict[str, tuple[str, Callable[[], Any], np.ndarray]] = {
    "blosc": ("compressors", lambda: zn.Blosc(cname="lz4", clevel=5, shuffle=1), _F4),
    "lz4": ("compressors", lambda: zn.LZ4(), _F4),
    "zstd": ("compressors", lambda: zn.Zstd(level=3), _F4),
    "zlib": ("compressors", lambda: zn.Zlib(level=1), _F4),
    "gzip": ("compressors", lambda: zn.GZip(level=1), _F4),
    "bz2": ("compressors", lambda: zn.BZ2(level=1), _F4),
    "lzma": ("compressors", lambda: zn.LZMA(), _F4),
    "shuffle": ("compressors", lambda: zn.Shuffle(), _F4),
    "crc32": ("compressors", lambda: zn.CRC32(), _F4),
    "crc32c": ("compressors", lambda: zn.CRC32C(), _F4),
    "adler32": ("compressors", lambda: zn.Adler32(), _F4),
    "fletcher32": ("compressors", lambda: zn.Fletcher32(), _F4),
    "jenkins_lookup3": ("compressors", lambda: zn.JenkinsLookup3(), _F4),
    "delta": ("filters", lambda: zn.Delta(dtype="i4"), _I4),
    "delta_astype": ("filters", lambda: zn.Delta(dtype="i4", astype="i2"), _I4),
    "fixedscaleoffset": (
        "filters",
        lambda: zn.FixedScaleOffset(offset=0, scale=10, dtype="f4", astype="i4"),
        _F4,
    ),
    "quantize": ("filters", lambda: zn.Quantize(digits=2, dtype="f4"), _F4),
    "bitround": ("filters", lambda: zn.BitRound(keepbits=5), _F4),
    "astype": (
        "filters",
        lambda: zn.AsType(encode_dtype="f4", decode_dtype="f8"),
        _F4.astype("f8"),
    ),
    "packbits": ("filters", lambda: zn.PackBits(), _F4 > 0),
    "pcodec": ("serializer", lambda: zn.PCodec(level=3), _F4),
    "pcodec_i4": ("serializer", lambda: zn.PCodec(level=8), _I4),
}

#: v2 compressors beyond the classic ones
V2_CASES: dict[str, Callable[[], Any]] = {
    "adler32": numcodecs.Adler32,
    "fletcher32": numcodecs.Fletcher32,
    "crc32": numcodecs.CRC32,
    "crc32c": numcodecs.CRC32C,
    "jenkins_lookup3": numcodecs.JenkinsLookup3,
    "pcodec": lambda: numcodecs.PCodec(level=4),
}

DATA: dict[str, np.ndarray] = {name: case[2] for name, case in V3_CASES.items()}


def write_v3(root: Any, name: str, data: np.ndarray | None = None) -> Any:
    kind, make, full = V3_CASES[name]
    data = full if data is None else data
    kw: dict[str, Any] = {kind: make() if kind == "serializer" else [make()]}
    if kind != "compressors":  # the codec alone (zarr-python adds zstd otherwise)
        kw["compressors"] = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = zarr.create_array(
            f"{root}/{name}", shape=data.shape, chunks=(3, 4), dtype=data.dtype, fill_value=0, **kw
        )
    a[:5, :7] = data[:5, :7]
    return a


def write_v2(root: Any, name: str, filtered: bool = False) -> Any:
    filters = [numcodecs.Delta(dtype="f4", astype="f8")] if filtered else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = zarr.create_array(
            f"{root}/{name}{'_f' if filtered else ''}",
            shape=_F4.shape,
            chunks=(3, 4),
            dtype="f4",
            zarr_format=2,
            compressors=V2_CASES[name](),
            filters=filters,
        )
    a[:5, :7] = _F4[:5, :7]
    return a
