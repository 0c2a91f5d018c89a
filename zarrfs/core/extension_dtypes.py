"""Fixed-size extension data types of the zarr-extensions registry that tensorstore and
zarr-python write, shown as their raw element bytes.

Spec: zarr-extensions ``data-types/`` (``bfloat16``, ``float8_*``, ``float4_e2m1fn``,
``float6_*``, ``int2``/``int4``/``uint2``/``uint4``, ``complex_float16``-style, ``struct``, and
the legacy ``structured``); the bytes codec's per-type encodings; tensorstore 0.1.86's zarr3
driver (one byte per element for the 1-byte, 2-, 4- and 6-bit types, the value in the low bits),
zarr-python 3.1.6's ``structured`` type (fields as ``[name, data_type]`` pairs; ``bytes`` without
``endian`` stores the fields little-endian; the fill value is the element's bytes in base64) and
zarr-python 3.2+'s ``struct`` (fields as ``{"name", "data_type"}`` objects; the fill value an
object of the fields' own fill values).

Every type here is a ``RawEncodedType``: the in-memory numpy dtype is a *carrier* of the same
size and byte-order behaviour (``uint16`` for ``bfloat16``, a two-field record of ``uint16``
for ``complex_float16``, ``uint8`` for ``float8_e4m3fn`` and ``int4``), so the bytes codec swaps
bytes where the type needs it and ``data.raw`` serves exactly the stored element bits in the
mount's byte order. ``encoding`` says, in ``info.json``, how to interpret them; ``numpy_views``
is False where numpy has no such type (no ``data.npy`` or header views that would mislabel
the bits as integers).

Fill values: float types take a JSON number, ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` or a
``"0x..."`` hex bit pattern (converted bit-exactly through ``ml_dtypes``); complex types a pair
of those; the small integer types an integer in range.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from zarrfs.core.dtypes import MAX_ITEMSIZE, DataType, parse_data_type, register_data_type
from zarrfs.core.errors import MetadataError

_HEX = re.compile(r"0x([0-9a-fA-F]+)")
_CARRIERS: dict[int, np.dtype[Any]] = {1: np.dtype("u1"), 2: np.dtype("u2")}

#: the 1- and 2-byte float types ml_dtypes implements (zarr name = ml_dtypes name)
FLOAT_NAMES = (
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
)
#: small integers: name -> (bits, signed)
INT_NAMES = {"int2": (2, True), "int4": (4, True), "uint2": (2, False), "uint4": (4, False)}


@dataclass(frozen=True)
class RawEncodedType(DataType):
    """An extension type held in a carrier dtype; ``encoding`` tells how to read the bits."""

    encoding: str = field(default="", compare=False)
    numpy_views: bool = field(default=False, compare=False)
    parse: Callable[[Any], np.ndarray[Any, Any]] | None = field(default=None, compare=False)
    write: Callable[[np.ndarray[Any, Any]], Any] | None = field(default=None, compare=False)

    def to_json(self) -> str | dict[str, Any]:
        if self.configuration is None:
            return self.name
        return {"name": self.name, "configuration": dict(self.configuration)}

    def parse_fill_value(self, value: Any) -> np.ndarray[Any, Any]:
        assert self.parse is not None
        out = self.parse(value)
        return np.asarray(out, dtype=self.dtype).reshape(())

    def fill_value_to_json(self, fill: np.ndarray[Any, Any] | np.generic) -> Any:
        assert self.write is not None
        return self.write(np.asarray(fill, dtype=self.dtype).reshape(()))


def _fail(name: str, value: Any, why: str) -> MetadataError:
    return MetadataError(f"fill_value {value!r} is invalid for data type {name}: {why}")


# --------------------------------------------------------------------------- floats


def _float_bits(name: str, ml: np.dtype[Any], value: Any) -> int:
    size = ml.itemsize
    if isinstance(value, str):
        special = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}
        if value in special:
            return int(np.array(special[value]).astype(ml).view(_CARRIERS[size]))
        m = _HEX.fullmatch(value)
        if m is None or len(m.group(1)) != 2 * size:
            raise _fail(name, value, f'expected a number, "NaN", "Infinity" or 0x + {2 * size} hex')
        return int(m.group(1), 16)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, value, "expected a number or a string")
    with np.errstate(over="ignore", invalid="ignore"):
        return int(np.array(float(value)).astype(ml).view(_CARRIERS[size]))


def _float_json(ml: np.dtype[Any], bits: int) -> float | str:
    size = ml.itemsize
    value = np.array(bits, dtype=_CARRIERS[size]).view(ml)
    as_float = float(value.astype(np.float64))
    if as_float != as_float:
        canonical = int(np.array(np.nan).astype(ml).view(_CARRIERS[size]))
        return "NaN" if bits == canonical else f"0x{bits:0{2 * size}x}"
    if as_float in (np.inf, -np.inf):
        return "Infinity" if as_float > 0 else "-Infinity"
    return as_float


def _float_type(name: str) -> RawEncodedType:
    ml = _ml(name)
    carrier = _CARRIERS[ml.itemsize]
    return RawEncodedType(
        name,
        carrier,
        encoding=f"{name} (ml_dtypes.{name}): each element is {ml.itemsize} byte(s) holding "
        f"the {name} bit pattern"
        + (" in the stated byte order" if ml.itemsize > 1 else "")
        + f"; numpy (little-endian mount): np.fromfile(path, '{_order(carrier)}')"
        f".view(ml_dtypes.{name})",
        parse=lambda v: np.array(_float_bits(name, ml, v), dtype=carrier),
        write=lambda a: _float_json(ml, int(a)),
    )


def _complex_type(name: str) -> RawEncodedType:
    part = name.removeprefix("complex_")
    if part in ("float32", "float64"):  # numpy has these: full numpy views
        core = "complex64" if part == "float32" else "complex128"
        base = DataType(core, np.dtype(core))
        return RawEncodedType(
            name,
            base.dtype,
            encoding=f"{name}: numpy {base.dtype.name} (real, imaginary {part} pairs)",
            numpy_views=True,
            parse=base.parse_fill_value,
            write=base.fill_value_to_json,
        )
    ml = _ml(part)
    word = _CARRIERS[ml.itemsize]
    carrier = np.dtype([("real", word), ("imag", word)])

    def parse(value: Any) -> np.ndarray[Any, Any]:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise _fail(name, value, "expected [real, imaginary]")
        bits = [_float_bits(name, ml, v) for v in value]
        return np.array(tuple(bits), dtype=carrier)

    return RawEncodedType(
        name,
        carrier,
        encoding=f"{name}: each element is a real then an imaginary {part} component, "
        f"{ml.itemsize} byte(s) each"
        + (" in the stated byte order" if ml.itemsize > 1 else "")
        + f"; numpy (little-endian mount): np.fromfile(path, '{_order(word)}').view({part}) "
        "gives real, imaginary, real, ...",
        parse=parse,
        write=lambda a: [_float_json(ml, int(a["real"])), _float_json(ml, int(a["imag"]))],
    )


def _order(dtype: np.dtype[Any]) -> str:
    """How to name the carrier to numpy: ``u1``, or ``<u2`` for a little-endian mount."""
    return "u1" if dtype.itemsize == 1 else f"<u{dtype.itemsize}"


def _ml(name: str) -> np.dtype[Any]:
    """The numpy dtype of a float type: ml_dtypes' own, or numpy's for ``float16``."""
    return np.dtype(getattr(ml_dtypes, name, None) or name)


# --------------------------------------------------------------------------- small integers


def _int_type(name: str) -> RawEncodedType:
    bits, signed = INT_NAMES[name]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    mask = (1 << bits) - 1

    def parse(value: Any) -> np.ndarray[Any, Any]:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if type(value) is not int or not lo <= value <= hi:
            raise _fail(name, value, f"expected an integer in [{lo}, {hi}]")
        return np.array(value & mask, dtype=np.uint8)

    def write(arr: np.ndarray[Any, Any]) -> int:
        v = int(arr) & mask
        return v - (1 << bits) if signed and v > hi else v

    how = "two's complement" if signed else "unsigned"
    return RawEncodedType(
        name,
        np.dtype("u1"),
        encoding=f"{name}: one byte per element, the value in its low {bits} bits ({how}, "
        f"range [{lo}, {hi}]); numpy: np.fromfile(path, 'u1').view(ml_dtypes.{name})",
        parse=parse,
        write=write,
    )


# --------------------------------------------------------------------------- records


def _record_fields(name: str, conf: Mapping[str, Any] | None) -> list[tuple[str, DataType]]:
    """The fields of a ``structured`` or ``struct`` type, in order, each with its data type.

    ``structured`` fields are ``[name, data_type]`` pairs; ``struct`` fields are
    ``{"name": ..., "data_type": ...}`` objects, and the pair form is read too (the struct
    spec asks readers to take the legacy form, as zarr-python does)."""
    fields = None if conf is None else conf.get("fields")
    if not isinstance(fields, list) or not fields or set(conf or {}) != {"fields"}:
        raise MetadataError(f"data_type {name!r}: configuration must be {{'fields': [...]}}")
    out: list[tuple[str, DataType]] = []
    seen: set[str] = set()  # (a set: a document of many fields is checked in linear time)
    for entry in fields:
        if name == "struct" and isinstance(entry, dict):
            if set(entry) != {"name", "data_type"} or not isinstance(entry["name"], str):
                raise MetadataError(
                    f"data_type 'struct': a field must be {{'name': ..., 'data_type': ...}}, "
                    f"got {entry!r}"
                )
            field_name, field_type = entry["name"], entry["data_type"]
        elif isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str):
            field_name, field_type = entry
        else:
            raise MetadataError(f"data_type {name!r}: a field must be [name, type], got {entry!r}")
        if not field_name or field_name in seen:
            raise MetadataError(f"data_type {name!r}: empty or duplicate field {field_name!r}")
        seen.add(field_name)
        out.append((field_name, parse_data_type(field_type)))
    return out


def _record_type(name: str, conf: Mapping[str, Any] | None) -> RawEncodedType:
    """``structured`` (zarr-python 3.1) and ``struct`` (zarr-extensions, zarr-python 3.2 on):
    each element is its fields packed in order, no padding; nested records are fields too.

    Fill values: ``structured`` takes the element's bytes in base64, little-endian field by
    field; ``struct`` takes an object with every field's own fill value (nested objects for
    nested records), or the same base64 form, which zarr-python also reads."""
    fields = _record_fields(name, conf)
    parts = [(n, dt.dtype) for n, dt in fields]
    # bounded like every other element, and before numpy sizes it (numpy wraps a record's
    # size past 2**31 bytes around without an error)
    size = sum(dt.itemsize for _, dt in parts)
    if size > MAX_ITEMSIZE:
        raise MetadataError(
            f"data_type {name!r}: an element of {size} bytes is larger than {MAX_ITEMSIZE}"
        )
    dtype = np.dtype(parts)
    little = dtype.newbyteorder("<")

    def parse_b64(value: Any) -> np.ndarray[Any, Any]:
        if not isinstance(value, str):
            raise _fail(name, value, "expected the element's bytes in base64")
        try:
            raw = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise _fail(name, value, "not valid base64") from None
        if len(raw) != dtype.itemsize:
            raise _fail(name, value, f"{len(raw)} bytes, expected {dtype.itemsize}")
        return np.frombuffer(raw, dtype=little).astype(dtype).reshape(())

    def parse_object(value: Any) -> np.ndarray[Any, Any]:
        if not isinstance(value, dict):
            return parse_b64(value)
        names = [n for n, _ in fields]
        if set(value) != set(names):
            raise _fail(name, value, f"expected a value for each field of {names}")
        out = np.zeros((), dtype=dtype)
        for n, dt in fields:
            out[n] = dt.parse_fill_value(value[n])
        return out

    def write_b64(arr: np.ndarray[Any, Any]) -> str:
        return base64.b64encode(arr.astype(little).tobytes()).decode("ascii")

    def write_object(arr: np.ndarray[Any, Any]) -> dict[str, Any]:
        return {n: dt.fill_value_to_json(arr[n]) for n, dt in fields}

    return RawEncodedType(
        name,
        dtype,
        dict(conf or {}),
        encoding=f"{name}: each element is its fields packed in order, no padding ("
        + ", ".join(f"{n}: {d.str}" for n, d in parts)
        + "), multi-byte fields in the stated byte order",
        numpy_views=True,
        parse=parse_object if name == "struct" else parse_b64,
        write=write_object if name == "struct" else write_b64,
    )


def _register() -> None:
    for name in FLOAT_NAMES:
        register_data_type(name, functools.partial(_no_conf, name, make=_float_type))
    for part in (*FLOAT_NAMES, "float16", "float32", "float64"):
        name = f"complex_{part}"
        register_data_type(name, functools.partial(_no_conf, name, make=_complex_type))
    for name in INT_NAMES:
        register_data_type(name, functools.partial(_no_conf, name, make=_int_type))
    register_data_type("structured", functools.partial(_record_type, "structured"))
    register_data_type("struct", functools.partial(_record_type, "struct"))


def _no_conf(
    name: str, conf: Mapping[str, Any] | None, *, make: Callable[[str], RawEncodedType]
) -> RawEncodedType:
    if conf:
        raise MetadataError(f"data_type {name!r} takes no configuration, got {dict(conf)!r}")
    return make(name)


_register()
