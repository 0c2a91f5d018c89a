"""Zarr v3 data types and their fill values (spec: v3 ``data-types.rst``, core "Data types").

A :class:`DataType` pairs the zarr name with the in-memory numpy dtype (always *native* byte
order; the ``bytes`` codec decides the stored order). Supported:

- core types: ``bool``, ``int8`` .. ``uint64``, ``float16/32/64``, ``complex64/128``;
- raw types ``r<N>`` (``N`` a positive multiple of 8), held as numpy ``V<N/8>``;
- the fixed-size extension types zarr-python writes: ``numpy.datetime64`` and
  ``numpy.timedelta64`` (``unit``, ``scale_factor``), ``raw_bytes``, ``null_terminated_bytes``
  and ``fixed_length_utf32`` (``length_bytes``).

Fill values (``fill_value`` member) are parsed into 0-d arrays of ``DataType.dtype`` bit for bit:
floats given as ``"0x..."`` keep their NaN payload, float16 included; ``"NaN"`` is the canonical
quiet NaN (sign 0, mantissa MSB set, all other mantissa bits 0). ``fill_value_to_json`` is the
inverse and round-trips exactly: canonical NaN -> ``"NaN"``, any other NaN -> hex string,
infinities -> ``"Infinity"``/``"-Infinity"``, finite floats -> JSON numbers (``float``, as
zarr-python writes them, so integral values appear as ``1.0``).

Non-finite Python floats are never accepted as fill values: JSON has no such numbers and the
spec's spelling is the strings above. Invalid input raises ``MetadataError`` naming the problem;
an unknown or variable-length data type raises ``UnsupportedError``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zarrfs.core.errors import MetadataError, UnsupportedError, VariableLengthElements
from zarrfs.core.extensions import parse_extension

_INT_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_FLOAT_NAMES = ("float16", "float32", "float64")
_COMPLEX_NAMES = ("complex64", "complex128")
_CORE_NAMES = ("bool", *_INT_NAMES, *_FLOAT_NAMES, *_COMPLEX_NAMES)
_RAW_NAME = re.compile(r"r([0-9]+)")
_HEX_FLOAT = re.compile(r"0x([0-9a-fA-F]+)")
_TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "μs", "ns", "ps", "fs", "as")
_VARIABLE_LENGTH = ("string", "variable_length_bytes", "bytes")
#: largest element size accepted for raw and fixed-length types (bytes)
MAX_ITEMSIZE = 2**24
_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass(frozen=True)
class DataType:
    """A zarr data type: ``name`` (as in metadata) and the native-order numpy ``dtype``.

    ``configuration`` holds the extension configuration for extension types (None otherwise);
    ``name`` and ``dtype`` alone identify the type (they are what compares equal).
    """

    name: str
    dtype: np.dtype[Any]
    configuration: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def kind(self) -> str:
        """``bool``, ``int``, ``float``, ``complex``, ``raw``, ``datetime``, ``bytes``, ``str``."""
        return _kind(self)

    def to_json(self) -> str | dict[str, Any]:
        """The ``data_type`` metadata member for this type."""
        if self.configuration is None:
            return self.name
        return {"name": self.name, "configuration": dict(self.configuration)}

    def default_fill_value(self) -> np.ndarray[Any, Any]:
        """All-zero bits (``false``, ``0``, ``0.0``, empty bytes), as zarr-python defaults."""
        return np.zeros((), dtype=self.dtype)

    def parse_fill_value(self, value: Any) -> np.ndarray[Any, Any]:
        """The 0-d array of ``dtype`` encoded by the JSON ``value`` (bit-exact)."""
        out = _PARSERS[self.kind](self, value)
        if out.dtype != self.dtype or out.shape != ():
            raise MetadataError(f"fill_value {value!r} does not give one {self.name} element")
        return out

    def fill_value_to_json(self, fill: np.ndarray[Any, Any] | np.generic) -> Any:
        """The JSON encoding of ``fill`` (a 0-d array or scalar of ``dtype``)."""
        arr = np.asarray(fill)
        if arr.shape != ():
            raise ValueError(f"fill value must be 0-d, got shape {arr.shape}")
        if arr.dtype != self.dtype:
            if arr.dtype.newbyteorder("=") != self.dtype.newbyteorder("="):
                raise ValueError(f"fill value of dtype {arr.dtype} for data type {self.name}")
            arr = arr.astype(self.dtype)
        return _WRITERS[self.kind](self, arr)

    def __str__(self) -> str:
        return self.name


def _kind(dt: DataType) -> str:
    k = dt.dtype.kind
    return {
        "b": "bool",
        "i": "int",
        "u": "int",
        "f": "float",
        "c": "complex",
        "M": "datetime",
        "m": "datetime",
        "S": "bytes",
        "U": "str",
    }.get(k, "raw_bytes" if dt.name == "raw_bytes" else "raw")


# --------------------------------------------------------------------------- data type names

#: data types defined in other modules (``extension_dtypes``): name -> factory(configuration)
_EXTENSIONS: dict[str, Callable[[Mapping[str, Any] | None], DataType]] = {}


def register_data_type(name: str, factory: Callable[[Mapping[str, Any] | None], DataType]) -> None:
    """Make ``parse_data_type`` build data type ``name`` with ``factory(configuration)``."""
    _EXTENSIONS[name] = factory


def parse_data_type(doc: Any) -> DataType:
    """The ``data_type`` member: a name string or an extension object.

    ``must_understand: false`` is not permitted for data types (core spec, Extensions), so an
    unknown type is refused whatever that flag says.
    """
    ext = parse_extension(doc, "data_type")
    return _data_type(ext.name, ext.configuration)


def _data_type(name: str, conf: Mapping[str, Any] | None) -> DataType:
    if name in _CORE_NAMES:
        _no_configuration(name, conf)
        return DataType(name, np.dtype("?" if name == "bool" else name))
    raw = _RAW_NAME.fullmatch(name)
    if raw:
        _no_configuration(name, conf)
        bits = int(raw.group(1))
        if bits == 0 or bits % 8 or raw.group(1).startswith("0"):
            raise MetadataError(
                f"data_type {name!r}: raw types need a bit count that is a positive multiple of 8"
            )
        return DataType(name, np.dtype(f"V{_itemsize(name, bits // 8)}"))
    if name in ("numpy.datetime64", "numpy.timedelta64"):
        unit, scale = _time_configuration(name, conf)
        code = "M8" if name == "numpy.datetime64" else "m8"
        dtype = np.dtype(f"{code}[{scale}{unit}]")
        return DataType(name, dtype, {"unit": unit, "scale_factor": scale})
    if name in ("raw_bytes", "null_terminated_bytes", "fixed_length_utf32"):
        length = _length_configuration(name, conf)
        if name == "fixed_length_utf32":
            if length % 4:
                raise MetadataError(f"data_type {name!r}: 'length_bytes' must be a multiple of 4")
            dtype = np.dtype(f"U{length // 4}")
        else:
            dtype = np.dtype(f"{'V' if name == 'raw_bytes' else 'S'}{length}")
        return DataType(name, dtype, {"length_bytes": length})
    factory = _EXTENSIONS.get(name)
    if factory is not None:
        return factory(conf)
    if name in _VARIABLE_LENGTH:
        raise VariableLengthElements(
            f"data type {name!r} has variable-length elements: not supported"
        )
    raise UnsupportedError(f"unknown data type {name!r}")


def _no_configuration(name: str, conf: Mapping[str, Any] | None) -> None:
    if conf:
        raise MetadataError(f"data_type {name!r} takes no configuration, got {dict(conf)!r}")


def _itemsize(name: str, n: Any) -> int:
    if type(n) is not int or not 1 <= n <= MAX_ITEMSIZE:
        raise MetadataError(
            f"data_type {name!r}: element size must be an integer from 1 to {MAX_ITEMSIZE} bytes, "
            f"got {n!r}"
        )
    return n


def _exact_keys(name: str, conf: Mapping[str, Any] | None, keys: set[str]) -> Mapping[str, Any]:
    if conf is None or set(conf) != keys:
        raise MetadataError(
            f"data_type {name!r}: configuration must have exactly the keys {sorted(keys)}, "
            f"got {None if conf is None else sorted(conf)}"
        )
    return conf


def _time_configuration(name: str, conf: Mapping[str, Any] | None) -> tuple[str, int]:
    conf = _exact_keys(name, conf, {"unit", "scale_factor"})
    unit, scale = conf["unit"], conf["scale_factor"]
    if unit not in _TIME_UNITS:
        raise MetadataError(f"data_type {name!r}: unknown unit {unit!r}")
    if type(scale) is not int or not 1 <= scale < 2**31:
        raise MetadataError(f"data_type {name!r}: 'scale_factor' must be an integer in [1, 2^31)")
    return unit, scale


def _length_configuration(name: str, conf: Mapping[str, Any] | None) -> int:
    conf = _exact_keys(name, conf, {"length_bytes"})
    return _itemsize(name, conf["length_bytes"])


# --------------------------------------------------------------------------- fill value parsing


def _fail(dt: DataType, value: Any, why: str) -> MetadataError:
    return MetadataError(f"fill_value {value!r} is invalid for data type {dt.name}: {why}")


def _json_int(dt: DataType, value: Any, lo: int, hi: int) -> int:
    """A JSON integer (an integral float such as ``1.0`` is tolerated) within ``[lo, hi]``."""
    if isinstance(value, float) and not isinstance(value, bool) and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise _fail(dt, value, "expected an integer")
    if not lo <= value <= hi:
        raise _fail(dt, value, f"out of range [{lo}, {hi}]")
    return value


def _parse_bool(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    if type(value) is not bool:
        raise _fail(dt, value, "expected true or false")
    return np.array(value, dtype=dt.dtype)


def _parse_int(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    info = np.iinfo(dt.dtype)
    return np.array(_json_int(dt, value, int(info.min), int(info.max)), dtype=dt.dtype)


def _float_bits(dtype: np.dtype[Any], value: Any, fail: Callable[[str], MetadataError]) -> int:
    """The bit pattern of one float component given as a JSON number, ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"`` or ``"0x..."`` (bits, so NaN payloads never pass through
    float arithmetic)."""
    size = dtype.itemsize
    if isinstance(value, str):
        if value == "NaN":
            return _canonical_nan_bits(size)
        if value in ("Infinity", "-Infinity"):
            value = np.inf if value == "Infinity" else -np.inf
            return int(np.array(value, dtype=dtype).view(_UNSIGNED[size]))
        match = _HEX_FLOAT.fullmatch(value)
        if match is None:
            raise fail('expected a number, "NaN", "Infinity", "-Infinity" or a "0x..." hex string')
        if len(match.group(1)) != 2 * size:
            raise fail(f"a hex float of {size} bytes needs exactly {2 * size} hex digits")
        return int(match.group(1), 16)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail("expected a number or a string")
    if isinstance(value, float) and value != value:
        raise fail('NaN must be written as the string "NaN" or a hex string')
    try:
        as_float = float(value)
    except OverflowError:
        raise fail("number out of range of float64") from None
    if as_float in (np.inf, -np.inf):
        raise fail('infinities must be written as the strings "Infinity" / "-Infinity"')
    with np.errstate(over="ignore"):
        return int(np.array(as_float, dtype=dtype).view(_UNSIGNED[size]))


def _layout(size: int) -> tuple[int, int]:
    """(exponent mask, mantissa mask) of the IEEE 754 binary format of ``size`` bytes."""
    mantissa = {2: 10, 4: 23, 8: 52}[size]
    exponent_bits = size * 8 - 1 - mantissa
    return ((1 << exponent_bits) - 1) << mantissa, (1 << mantissa) - 1


def _canonical_nan_bits(size: int) -> int:
    """Sign 0, exponent all ones, mantissa MSB 1 and all other mantissa bits 0."""
    exponent_mask, mantissa_mask = _layout(size)
    return exponent_mask | ((mantissa_mask + 1) >> 1)


def _parse_float(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    bits = _float_bits(dt.dtype, value, lambda why: _fail(dt, value, why))
    return np.array(bits, dtype=_UNSIGNED[dt.itemsize]).view(dt.dtype)


def _parse_complex(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise _fail(dt, value, "expected a list of two components [real, imaginary]")
    part = np.dtype(f"f{dt.itemsize // 2}")
    bits = []
    for comp, label in zip(value, ("real part", "imaginary part"), strict=True):

        def fail(why: str, label: str = label) -> MetadataError:
            return _fail(dt, value, f"{label}: {why}")

        bits.append(_float_bits(part, comp, fail))
    return np.array(bits, dtype=_UNSIGNED[part.itemsize]).view(dt.dtype).reshape(())


def _parse_raw(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    if not isinstance(value, (list, tuple)):
        raise _fail(dt, value, f"expected a list of {dt.itemsize} byte values")
    if len(value) != dt.itemsize:
        raise _fail(dt, value, f"expected {dt.itemsize} byte values, got {len(value)}")
    for byte in value:
        if type(byte) is not int or not 0 <= byte <= 255:
            raise _fail(dt, value, f"byte value {byte!r} is not an integer in [0, 255]")
    return np.frombuffer(bytes(value), dtype=dt.dtype).reshape(()).copy()


def b64_bytes(value: Any, fail: Callable[[str], MetadataError]) -> bytes:
    """The bytes of a base64 fill value; ``fail(why)`` makes the error of a bad one."""
    if not isinstance(value, str):
        raise fail("expected a base64 string")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise fail("not valid base64") from None


def _b64(dt: DataType, value: Any) -> bytes:
    return b64_bytes(value, lambda why: _fail(dt, value, why))


def _parse_raw_bytes(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    data = _b64(dt, value)
    if len(data) != dt.itemsize:
        raise _fail(dt, value, f"decodes to {len(data)} bytes, expected {dt.itemsize}")
    return np.frombuffer(data, dtype=dt.dtype).reshape(()).copy()


def _parse_bytes(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    data = _b64(dt, value)
    if len(data) > dt.itemsize:
        raise _fail(dt, value, f"decodes to {len(data)} bytes, more than {dt.itemsize}")
    return np.array(data, dtype=dt.dtype)


def _parse_str(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    if not isinstance(value, str):
        raise _fail(dt, value, "expected a string")
    chars = dt.itemsize // 4
    if len(value) > chars or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise _fail(dt, value, f"expected at most {chars} characters without surrogates")
    return np.array(value, dtype=dt.dtype)


def _parse_datetime(dt: DataType, value: Any) -> np.ndarray[Any, Any]:
    if value == "NaT":
        return np.array(np.iinfo(np.int64).min, dtype=np.int64).view(dt.dtype)
    number = _json_int(dt, value, -(2**63), 2**63 - 1)
    return np.array(number, dtype=np.int64).view(dt.dtype)


_PARSERS: dict[str, Callable[[DataType, Any], np.ndarray[Any, Any]]] = {
    "bool": _parse_bool,
    "int": _parse_int,
    "float": _parse_float,
    "complex": _parse_complex,
    "raw": _parse_raw,
    "raw_bytes": _parse_raw_bytes,
    "bytes": _parse_bytes,
    "str": _parse_str,
    "datetime": _parse_datetime,
}


# --------------------------------------------------------------------------- fill value writing


def _float_to_json(arr: np.ndarray[Any, Any]) -> float | str:
    size = arr.dtype.itemsize
    bits = int(arr.view(_UNSIGNED[size]))
    exponent_mask, mantissa_mask = _layout(size)
    if bits & exponent_mask == exponent_mask:  # all exponent bits set: NaN or infinity
        if bits & mantissa_mask:
            return "NaN" if bits == _canonical_nan_bits(size) else f"0x{bits:0{2 * size}x}"
        return "-Infinity" if bits >> (8 * size - 1) else "Infinity"
    return float(arr)


def _complex_to_json(dt: DataType, arr: np.ndarray[Any, Any]) -> list[float | str]:
    parts = arr.reshape(1).view(np.dtype(f"f{dt.itemsize // 2}"))
    return [_float_to_json(parts[0:1].reshape(())), _float_to_json(parts[1:2].reshape(()))]


_WRITERS: dict[str, Callable[[DataType, np.ndarray[Any, Any]], Any]] = {
    "bool": lambda dt, a: bool(a),
    "int": lambda dt, a: int(a),
    "float": lambda dt, a: _float_to_json(a),
    "complex": _complex_to_json,
    "raw": lambda dt, a: list(a.tobytes()),
    "raw_bytes": lambda dt, a: base64.b64encode(a.tobytes()).decode("ascii"),
    "bytes": lambda dt, a: base64.b64encode(a.item()).decode("ascii"),
    "str": lambda dt, a: str(a.item()),
    "datetime": lambda dt, a: int(a.view(np.int64)),
}
