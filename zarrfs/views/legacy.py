"""Sidecar headers that let legacy tools open ``data.raw`` directly, and ImageJ's raw-import
parameters.

- ``data.hdr``: ENVI header (ENVI "Header files" keywords; read by GDAL's ENVI driver, which
  opens ``data.raw`` and finds ``data.hdr`` by replacing the extension).
- ``data.mhd``: MetaImage header (ITK / MetaIO keywords; ``ElementDataFile = data.raw``).
- ``data.nhdr``: NRRD detached header (NRRD0004, teem "NRRD format" spec; ``data file: data.raw``).
- :func:`imagej_params`: the values to type into ImageJ's "File > Import > Raw" dialog
  (published in ``info.json``).

Invariants:
- Every header describes ``data.raw`` exactly as the mount serves it: C order, the mount's byte
  order (``-o byte_order=``; ``native`` is resolved to the machine's order), no leading header
  bytes, the whole array. Axis lists in MetaImage and NRRD run fastest axis first (the reverse
  of the Zarr shape).
- A function returns ``None`` when its format cannot describe the array exactly (rank, data
  type, an empty or 0-d array, sizes beyond the format's 32-bit fields). It never returns an
  approximate description: a view that cannot describe an array is absent, never wrong.
- ``bool`` is described as unsigned 8-bit (Zarr stores one byte per element, 0 or 1).
- Optional names (ENVI band names, NRRD labels) come from the array's ``dimension_names`` and
  are left out when a name is not printable ASCII or contains the format's delimiters.
- Headers are plain ASCII text ending in a newline; they depend only on (dtype, shape, byte
  order, dimension names), so equal arrays give byte-identical headers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from zarrfs.core.array import ZarrArray

#: the header views, in the order they are listed
HEADER_VIEWS = ("data.hdr", "data.mhd", "data.nhdr")
#: the data file every header points at (a sibling in the array directory)
DATA_FILE = "data.raw"

#: largest value of a 32-bit signed size field (ENVI samples/lines/bands, MetaIO DimSize,
#: ImageJ width/height/number of images)
_INT32_MAX = 2**31 - 1
#: ENVI band names are written only up to this many bands (keeps the header small)
_MAX_BAND_NAMES = 1024
#: most dimensions a NRRD header may have (teem's NRRD_DIM_MAX)
_NRRD_DIM_MAX = 16
#: most dimensions MetaIO reads (its fixed-size per-axis arrays)
_MHD_DIM_MAX = 10

_ENVI_TYPES: dict[str, int] = {
    "u1": 1, "i2": 2, "i4": 3, "f4": 4, "f8": 5, "c8": 6, "c16": 9,
    "u2": 12, "u4": 13, "i8": 14, "u8": 15,
}  # fmt: skip
_MET_TYPES: dict[str, str] = {
    "u1": "MET_UCHAR", "i1": "MET_CHAR", "u2": "MET_USHORT", "i2": "MET_SHORT",
    "u4": "MET_UINT", "i4": "MET_INT", "u8": "MET_ULONG_LONG", "i8": "MET_LONG_LONG",
    "f4": "MET_FLOAT", "f8": "MET_DOUBLE",
}  # fmt: skip
_NRRD_TYPES: dict[str, str] = {
    "u1": "uint8", "i1": "int8", "u2": "uint16", "i2": "int16", "u4": "uint32", "i4": "int32",
    "u8": "uint64", "i8": "int64", "f4": "float", "f8": "double",
}  # fmt: skip
_IMAGEJ_TYPES: dict[str, str] = {
    "u1": "8-bit", "i2": "16-bit Signed", "u2": "16-bit Unsigned", "i4": "32-bit Signed",
    "u4": "32-bit Unsigned", "f4": "32-bit Real", "f8": "64-bit Real",
}  # fmt: skip


# ----------------------------------------------------------------------------- helpers


def resolve_byte_order(byte_order: str) -> str:
    """``little`` | ``big`` | ``native`` -> ``little`` or ``big``."""
    if byte_order == "native":
        return sys.byteorder
    if byte_order not in ("little", "big"):
        raise ValueError(f"byte order must be little, big or native, not {byte_order!r}")
    return byte_order


def type_code(dtype: np.dtype[Any]) -> str | None:
    """A byte-order-free key for numeric types (``u1``, ``i4``, ``f8``, ``c16``; ``bool`` is
    ``u1``), or None for every other type."""
    if dtype.kind == "b" and dtype.itemsize == 1:
        return "u1"
    if dtype.kind in "uifc" and dtype.fields is None and not dtype.shape:
        return f"{dtype.kind}{dtype.itemsize}"
    return None


def _describable_shape(shape: Sequence[int]) -> bool:
    return len(shape) > 0 and all(n > 0 for n in shape)


def _clean_name(name: str | None, forbidden: str) -> str | None:
    """``name`` if it is printable ASCII without any of ``forbidden``, else None."""
    if name is None or not name.isascii() or not name.isprintable():
        return None
    if any(c in forbidden for c in name):
        return None
    return name


def _text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("ascii")


# ----------------------------------------------------------------------------- ENVI


def envi_header(
    dtype: np.dtype[Any],
    shape: Sequence[int],
    byte_order: str,
    dimension_names: Sequence[str | None] | None = None,
) -> bytes | None:
    """ENVI header for a 2-D (one band) or 3-D (band sequential, bands = axis 0) array.

    Types: the ENVI data type codes 1 (uint8, bool), 2, 3, 4, 5, 6, 9, 12, 13, 14, 15. ENVI has
    no signed 8-bit or 16-bit float code, so those arrays get no header. Band names are
    ``"<axis-0 name> <index>"`` when axis 0 of a 3-D array is named.
    """
    code = type_code(dtype)
    if code not in _ENVI_TYPES or len(shape) not in (2, 3) or not _describable_shape(shape):
        return None
    if max(shape) > _INT32_MAX:
        return None
    bands, lines, samples = (1, *shape) if len(shape) == 2 else tuple(shape)
    out = [
        "ENVI",
        "description = {zarrfs array view}",
        f"samples = {samples}",
        f"lines = {lines}",
        f"bands = {bands}",
        "header offset = 0",
        "file type = ENVI Standard",
        f"data type = {_ENVI_TYPES[code]}",
        "interleave = bsq",
        f"byte order = {0 if resolve_byte_order(byte_order) == 'little' else 1}",
    ]
    if len(shape) == 3 and dimension_names and bands <= _MAX_BAND_NAMES:
        axis = _clean_name(dimension_names[0], "{},;=")
        if axis and axis.strip() == axis:
            out.append("band names = {" + ", ".join(f"{axis} {i}" for i in range(bands)) + "}")
    return _text(out)


# ----------------------------------------------------------------------------- MetaImage


def metaimage_header(
    dtype: np.dtype[Any], shape: Sequence[int], byte_order: str, data_file: str = DATA_FILE
) -> bytes | None:
    """MetaImage header for a 1-D .. 10-D array of an integer or float type.

    complex64/complex128 are described as two-channel float/double images (real, imaginary):
    the element is exactly two interleaved floats, which ITK reads as a 2-component vector.
    """
    code = type_code(dtype)
    channels = 1
    if code in ("c8", "c16"):
        code, channels = f"f{int(code[1:]) // 2}", 2
    if code not in _MET_TYPES or not _describable_shape(shape) or len(shape) > _MHD_DIM_MAX:
        return None
    if max(shape) > _INT32_MAX:
        return None
    msb = "True" if resolve_byte_order(byte_order) == "big" else "False"
    out = [
        "ObjectType = Image",
        f"NDims = {len(shape)}",
        "BinaryData = True",
        f"BinaryDataByteOrderMSB = {msb}",
        f"ElementByteOrderMSB = {msb}",
        "CompressedData = False",
        "HeaderSize = 0",
        "DimSize = " + " ".join(str(n) for n in reversed(shape)),
    ]
    if channels > 1:
        out.append(f"ElementNumberOfChannels = {channels}")
    out += [f"ElementType = {_MET_TYPES[code]}", f"ElementDataFile = {data_file}"]
    return _text(out)


# ----------------------------------------------------------------------------- NRRD


def nrrd_header(
    dtype: np.dtype[Any],
    shape: Sequence[int],
    byte_order: str,
    dimension_names: Sequence[str | None] | None = None,
    data_file: str = DATA_FILE,
) -> bytes | None:
    """NRRD0004 detached header for a 1-D .. 16-D array.

    Integer and float types map to the NRRD types of the same size; complex types add a fastest
    axis of size 2 whose kind is ``complex`` (the NRRD way to describe interleaved real and
    imaginary parts). ``labels`` (fastest axis first) are written when the array has dimension
    names. Raw types (``r<N>``) get no header: NRRD's ``block`` type would describe them, but
    teem cannot byte-swap or copy blocks and pynrrd cannot read them.
    """
    code = type_code(dtype)
    complex_axis = code in ("c8", "c16")
    if complex_axis:
        code = f"f{dtype.itemsize // 2}"
    if code not in _NRRD_TYPES or not _describable_shape(shape):
        return None
    sizes = [int(n) for n in reversed(shape)]
    labels = None if dimension_names is None else list(reversed(list(dimension_names)))
    if complex_axis:
        sizes.insert(0, 2)
        if labels is not None:
            labels.insert(0, None)
    if len(sizes) > _NRRD_DIM_MAX:
        return None
    out = [
        "NRRD0004",
        "# detached header written by zarrfs; format: http://teem.sourceforge.net/nrrd/format.html",
        f"type: {_NRRD_TYPES[code]}",
        f"dimension: {len(sizes)}",
        "sizes: " + " ".join(map(str, sizes)),
    ]
    if complex_axis:
        out.append("kinds: complex" + " domain" * len(shape))
    if labels is not None and any(n is not None for n in labels):
        cleaned = [_clean_name(n or "", '"\\') for n in labels]
        if all(c is not None for c in cleaned):
            out.append("labels: " + " ".join(f'"{c}"' for c in cleaned))
    if int(code[1:]) > 1:
        out.append(f"endian: {resolve_byte_order(byte_order)}")
    out += ["encoding: raw", f"data file: {data_file}"]
    return _text(out)


# ----------------------------------------------------------------------------- ImageJ


def imagej_params(
    dtype: np.dtype[Any], shape: Sequence[int], byte_order: str
) -> dict[str, Any] | None:
    """The "File > Import > Raw" settings that open ``data.raw`` in ImageJ: a 2-D array is one
    image, a 3-D array a stack along axis 0. None for other ranks and for types ImageJ cannot
    import (int8, 64-bit integers, float16, complex, non-numeric)."""
    code = type_code(dtype)
    if code not in _IMAGEJ_TYPES or len(shape) not in (2, 3) or not _describable_shape(shape):
        return None
    height, width = shape[-2], shape[-1]
    images = shape[0] if len(shape) == 3 else 1
    if max(width, height, images) > _INT32_MAX or width * height > _INT32_MAX:
        return None
    return {
        "image_type": _IMAGEJ_TYPES[code],
        "width": int(width),
        "height": int(height),
        "offset": 0,
        "number_of_images": int(images),
        "gap_between_images": 0,
        "white_is_zero": False,
        "little_endian": resolve_byte_order(byte_order) == "little",
    }


# ----------------------------------------------------------------------------- array views


def array_header(name: str, arr: ZarrArray, byte_order: str) -> bytes | None:
    """The content of header view ``name`` for ``arr``, or None when it cannot describe it."""
    names = arr.metadata.dimension_names
    if name == "data.hdr":
        return envi_header(arr.dtype, arr.shape, byte_order, names)
    if name == "data.mhd":
        return metaimage_header(arr.dtype, arr.shape, byte_order)
    if name == "data.nhdr":
        return nrrd_header(arr.dtype, arr.shape, byte_order, names)
    raise ValueError(f"not a header view: {name!r}")


def present_headers(
    arr: ZarrArray,
    byte_order: str,
    enabled: Callable[[str], bool],
    header: Callable[[str, ZarrArray, str], bytes | None] = array_header,
) -> list[str]:
    """The header views shown for ``arr``: enabled, pointing at an enabled ``data.raw``, and
    able to describe the array (``header``: ``array_header`` or a memo of it)."""
    if not enabled(DATA_FILE):
        return []
    return [n for n in HEADER_VIEWS if enabled(n) and header(n, arr, byte_order) is not None]
