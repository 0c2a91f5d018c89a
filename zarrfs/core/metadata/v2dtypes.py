"""NumPy-style data types and fill values of Zarr v2 (also used by v1 and the v3 drafts).

Spec: v2.rst "Data type encoding" and "Fill value encoding"; v1.rst "Data type encoding"; the
v3 drafts' core types (``bool``, ``i1``, ``<f8``, ``r16``...) map onto the same numpy types.

A stored type is a numpy type *with* its byte order (``>i4``). zarrfs keeps arrays in memory in
native byte order, so :class:`NumpyDataType` pairs:

- ``dtype``: the in-memory type, ``stored.newbyteorder("=")`` (every field of a structured type
  included); ``data.raw`` shows it converted to the mount's byte order, field by field;
- ``stored``: the type the chunk bytes use, which the v2 pipeline converts to and from.

Accepted: ``b1``, ``i1..i8``, ``u1..u8``, ``f2/f4/f8``, ``c8/c16``, ``M8``/``m8`` with a unit,
``S<n>``, ``U<n>``, ``V<n>`` and structured types (lists of ``[name, type]`` or
``[name, type, shape]``, nested). The byte order character is required (``<``, ``>``, or ``|``
where it does not apply). Object types (``|O``) have variable-length elements: they raise
:class:`VariableLengthError`, an ``UnsupportedError`` the caller turns into a listed but
unreadable array.

Fill values follow zarr-python: ``null`` (chunks that are missing read as zeros, NaT for
datetimes), numbers,
``"NaN"``/``"Infinity"``/``"-Infinity"`` for floats, ``[re, im]`` for complex, base64 for
``S`` and ``V`` (the bytes in the stored byte order), the string itself for ``U``, the integer
count (or ``"NaT"``) for datetimes. Problems raise ``MetadataError`` naming the value.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zarrfs.core.dtypes import MAX_ITEMSIZE, DataType, b64_bytes
from zarrfs.core.errors import MetadataError, UnsupportedError, VariableLengthElements

_SIMPLE = re.compile(r"([<>|])([biufcmMSUV])([0-9]+)(?:\[([0-9]*)([A-Za-zμ]+)\])?")
_SIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}
_TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "μs", "ns", "ps", "fs", "as")
#: deepest nesting of structured types accepted
MAX_STRUCT_DEPTH = 16


class VariableLengthError(VariableLengthElements):
    """The array's elements have variable length (numpy object type): it cannot be shown as a
    raw file. ``dtype`` is the stored ``dtype`` member."""

    def __init__(self, message: str, dtype: Any = None) -> None:
        super().__init__(message)
        self.dtype = dtype


@dataclass(frozen=True)
class NumpyDataType(DataType):
    """A numpy-style data type: ``name`` is its metadata spelling (structured types as compact
    JSON), ``dtype`` the native in-memory type, ``stored`` the type with its stored byte order."""

    stored: np.dtype[Any] = field(default=np.dtype("u1"), compare=False)

    def to_json(self) -> Any:  # type: ignore[override]
        return dtype_to_json(self.stored)

    def default_fill_value(self) -> np.ndarray[Any, Any]:
        return np.zeros((), dtype=self.dtype)

    def parse_fill_value(self, value: Any) -> np.ndarray[Any, Any]:
        return parse_fill_value(self, value)

    def fill_value_to_json(self, fill: np.ndarray[Any, Any] | np.generic) -> Any:
        return fill_value_to_json(self, np.asarray(fill))


# --------------------------------------------------------------------------- types


def parse_dtype(value: Any) -> NumpyDataType:
    """The ``dtype`` member (a type string or a structured list) as a :class:`NumpyDataType`."""
    stored = _stored_dtype(value, 0)
    if stored.itemsize < 1 or stored.itemsize > MAX_ITEMSIZE:
        raise MetadataError(
            f"dtype {value!r}: element size {stored.itemsize} is outside 1..{MAX_ITEMSIZE} bytes"
        )
    name = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return NumpyDataType(name, stored.newbyteorder("="), None, stored)


def dtype_to_json(stored: np.dtype[Any]) -> Any:
    """The ``dtype`` member for a stored numpy type (structured types as nested lists)."""
    if stored.fields is None:
        return stored.str
    out: list[Any] = []
    for name in stored.names or ():
        sub = stored.fields[name][0]
        if sub.subdtype is not None:
            base, shape = sub.subdtype
            out.append([name, dtype_to_json(base), list(shape)])
        else:
            out.append([name, dtype_to_json(sub)])
    return out


def _stored_dtype(value: Any, depth: int) -> np.dtype[Any]:
    if isinstance(value, str):
        return _simple_dtype(value)
    if isinstance(value, list):
        if depth >= MAX_STRUCT_DEPTH:
            raise MetadataError(f"structured dtype nested deeper than {MAX_STRUCT_DEPTH} levels")
        return _structured_dtype(value, depth)
    raise MetadataError(f"dtype must be a string or a list of fields, got {value!r}")


def _simple_dtype(text: str) -> np.dtype[Any]:
    if text in ("|O", "<O", ">O", "O") or text.startswith(("|O", "<O", ">O")):
        raise VariableLengthError(f"dtype {text!r} (Python objects) has variable-length elements")
    match = _SIMPLE.fullmatch(text)
    if match is None:
        raise UnsupportedError(
            f"dtype {text!r} is not a supported numpy type string "
            "(byte order '<', '>' or '|', a kind character and a size, e.g. '<f8', '|S12')"
        )
    order, kind, size_text, count, unit = match.groups()
    size = int(size_text)
    if kind in _SIZES and size not in _SIZES[kind]:
        raise UnsupportedError(f"dtype {text!r}: no {size}-byte type of kind {kind!r}")
    if kind in "mM":
        if size != 8 or unit is None:
            raise MetadataError(f"dtype {text!r}: datetime types need 8 bytes and a [unit]")
        if unit not in _TIME_UNITS or (count and (count.startswith("0") or int(count) >= 2**31)):
            raise MetadataError(f"dtype {text!r}: invalid time unit")
    elif unit is not None:
        raise MetadataError(f"dtype {text!r}: only datetime types take a [unit]")
    if kind in "SUV" and (size < 1 or size > MAX_ITEMSIZE // (4 if kind == "U" else 1)):
        raise MetadataError(f"dtype {text!r}: length must be 1..{MAX_ITEMSIZE} bytes")
    multibyte = kind in "iufcmMU" and (size > 1 or kind == "U")
    if multibyte and order == "|":
        raise MetadataError(f"dtype {text!r}: a {size}-byte type needs the byte order '<' or '>'")
    try:
        dtype = np.dtype(text if multibyte else "|" + text[1:])
    except TypeError as exc:
        raise MetadataError(f"dtype {text!r}: {exc}") from None
    return dtype


def _structured_dtype(fields: list[Any], depth: int) -> np.dtype[Any]:
    if not fields:
        raise MetadataError("structured dtype must have at least one field")
    spec: list[tuple[Any, ...]] = []
    names: set[str] = set()
    for entry in fields:
        if not isinstance(entry, list) or len(entry) not in (2, 3):
            raise MetadataError(f"structured dtype field must be [name, type(, shape)]: {entry!r}")
        name = entry[0]
        if not isinstance(name, str) or name in names:
            raise MetadataError(f"structured dtype field name {name!r} is not a unique string")
        names.add(name)
        sub = _stored_dtype(entry[1], depth + 1)
        if len(entry) == 3:
            shape = entry[2]
            if not isinstance(shape, list) or any(
                type(n) is not int or not 1 <= n <= MAX_ITEMSIZE for n in shape
            ):
                raise MetadataError(f"structured dtype field {name!r}: bad shape {shape!r}")
            if math.prod(shape) * sub.itemsize > MAX_ITEMSIZE:
                raise MetadataError(f"structured dtype field {name!r} is too large")
            spec.append((name, sub, tuple(shape)))
        else:
            spec.append((name, sub))
    # the whole record bounded too, before numpy sizes it: numpy wraps a record's size past
    # 2**31 bytes around without an error (256 fields of 16 MiB and one of 8 bytes: 8)
    size = sum(part[1].itemsize * math.prod(part[2] if len(part) == 3 else ()) for part in spec)
    if size > MAX_ITEMSIZE:
        raise MetadataError(f"structured dtype: an element of {size} bytes is too large")
    try:
        return np.dtype(spec)
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"structured dtype {fields!r}: {exc}") from None


# --------------------------------------------------------------------------- fill values


def _fail(dt: NumpyDataType, value: Any, why: str) -> MetadataError:
    return MetadataError(f"fill_value {value!r} is invalid for dtype {dt.name}: {why}")


def _float(dt: NumpyDataType, value: Any, part: np.dtype[Any]) -> Any:
    if isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf}
        special["-Infinity"] = -math.inf
        if value in special:
            return special[value]
        if re.fullmatch(r"0x[0-9a-fA-F]+", value) and len(value) == 2 + 2 * part.itemsize:
            bits = np.array(int(value, 16), dtype=f"u{part.itemsize}")
            return bits.view(part)[()]
        raise _fail(dt, value, 'expected a number, "NaN", "Infinity" or "-Infinity"')
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(dt, value, "expected a number")
    return value


def _b64(dt: NumpyDataType, value: Any) -> bytes:
    return b64_bytes(value, lambda why: _fail(dt, value, why))


def parse_fill_value(dt: NumpyDataType, value: Any) -> np.ndarray[Any, Any]:
    """The 0-d in-memory fill value for JSON ``value``. ``None`` gives what zarr-python reads
    for missing chunks then: zeros, and NaT for datetimes."""
    kind = dt.stored.kind
    if value is None:
        if kind in "mM":
            return np.array(np.iinfo(np.int64).min, dtype=np.int64).view(dt.dtype)
        return dt.default_fill_value()
    if kind == "b":
        if type(value) is bool or (type(value) is int and value in (0, 1)):
            return np.array(bool(value), dtype=dt.dtype)
        raise _fail(dt, value, "expected true or false")
    if kind in "iu":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        info = np.iinfo(dt.dtype)
        if type(value) is not int or not info.min <= value <= info.max:
            raise _fail(dt, value, f"expected an integer in [{info.min}, {info.max}]")
        return np.array(value, dtype=dt.dtype)
    if kind == "f":
        with np.errstate(over="ignore"):
            return np.array(_float(dt, value, dt.dtype), dtype=dt.dtype)
    if kind == "c":
        if not isinstance(value, list) or len(value) != 2:
            raise _fail(dt, value, "expected [real, imaginary]")
        part = np.dtype(f"f{dt.itemsize // 2}")
        re_, im_ = (_float(dt, v, part) for v in value)
        out = np.zeros((), dtype=dt.dtype)
        with np.errstate(over="ignore"):
            out.real, out.imag = re_, im_
        return out
    if kind in "mM":
        if value == "NaT":
            return np.array(np.iinfo(np.int64).min, dtype=np.int64).view(dt.dtype)
        if type(value) is not int or not -(2**63) <= value < 2**63:
            raise _fail(dt, value, 'expected an integer or "NaT"')
        return np.array(value, dtype=np.int64).view(dt.dtype)
    if kind == "S":
        data = _b64(dt, value)
        if len(data) > dt.itemsize:
            raise _fail(dt, value, f"decodes to {len(data)} bytes, more than {dt.itemsize}")
        return np.array(data, dtype=dt.dtype)
    if kind == "U":
        if not isinstance(value, str) or len(value) > dt.itemsize // 4:
            raise _fail(dt, value, f"expected a string of at most {dt.itemsize // 4} characters")
        return np.array(value, dtype=dt.dtype)
    data = _b64(dt, value)  # "V": raw or structured, bytes in the stored layout
    if len(data) != dt.itemsize:
        raise _fail(dt, value, f"decodes to {len(data)} bytes, expected {dt.itemsize}")
    return np.frombuffer(data, dtype=dt.stored).astype(dt.dtype).reshape(())


def _float_json(v: float) -> float | str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return float(v)


def fill_value_to_json(dt: NumpyDataType, fill: np.ndarray[Any, Any]) -> Any:
    """The v2 JSON encoding of a 0-d fill value of ``dt``."""
    arr = np.asarray(fill).astype(dt.dtype).reshape(())
    kind = dt.stored.kind
    if kind == "b":
        return bool(arr)
    if kind in "iu":
        return int(arr)
    if kind == "f":
        return _float_json(float(arr))
    if kind == "c":
        return [_float_json(float(arr.real)), _float_json(float(arr.imag))]
    if kind in "mM":
        return int(arr.view(np.int64))
    if kind == "S":
        return base64.b64encode(arr.item()).decode("ascii")
    if kind == "U":
        return str(arr.item())
    return base64.b64encode(arr.astype(dt.stored).tobytes()).decode("ascii")
