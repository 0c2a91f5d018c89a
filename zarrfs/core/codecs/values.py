"""The ``scale_offset`` and ``cast_value`` codecs (array -> array): codecs that compute with the
element values, as zarr-python writes them from 3.2 on (together they store floats as scaled
integers, the Zarr v3 successor of ``numcodecs.fixedscaleoffset``).

Spec: zarr-extensions ``codecs/scale_offset`` and ``codecs/cast_value``; where the spec is
silent, zarr-python 3.4's reading of it: a ``scale_offset`` without configuration (or without a
field) is offset 0, scale 1; ``cast_value`` takes a ``scalar_map`` (``{"encode": [[from, to],
...], "decode": [...]}``: exact values mapped before the cast, such as ``NaN`` to a sentinel).
Names: ``scale_offset``, ``cast_value``.
Example: ``[{"name": "scale_offset", "configuration": {"offset": 10, "scale": 100}},
{"name": "cast_value", "configuration": {"data_type": "uint16", "out_of_range": "clamp"}},
"bytes"]``

``scale_offset``: encode ``out = (in - offset) * scale``, decode ``out = in / scale + offset``,
both in the arithmetic of the array's data type (a float32 array stays float32, so the result
is bit for bit zarr-python's); ``offset`` and ``scale`` are fill-value JSON of that type. For
integers nothing wraps: a result outside the type, or a stored value that ``scale`` does not
divide exactly, is an error (``CorruptDataError`` on read, ``InvalidWriteError`` on write).

``cast_value``: the values converted to ``data_type`` (rounding, out-of-range handling and the
scalar map as configured) by ``cast-value-rs``, the zarr-developers' implementation of the
codec that zarr-python itself calls, so what zarrfs reads and writes is zarr-python's to the
bit. Decoding casts back to the array's type with the ``decode`` map.

Invariants:
- Both take the core integer and float types only (``int8`` .. ``uint64``, ``float16/32/64``):
  the extension types zarrfs holds as raw bits in a carrier dtype (``bfloat16``, ``float8_*``,
  ``int4`` ...) are refused by the array's metadata (``metadata/v3.py``), since the carrier's
  integers are not the values; ``cast_value``'s ``data_type`` is checked here.
- Every configuration error is a ``MetadataError`` naming the field; ``resolve_spec`` also
  encodes the fill value, so an unrepresentable fill value refuses the array when it is opened.
- ``decode`` raises rather than produce a value the stored one does not give; ``encode`` raises
  ``InvalidWriteError`` naming the problem, and the units it could not store stay dirty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, cast

import numpy as np

from zarrfs.core.codecs._config import refuse_unknown_keys
from zarrfs.core.codecs.base import ArrayArrayCodec, ChunkSpec, register_codec
from zarrfs.core.dtypes import DataType, parse_data_type
from zarrfs.core.errors import InvalidWriteError, MetadataError, UnsupportedError

#: the data types both codecs compute with (zarr name = numpy name)
VALUE_TYPES = frozenset(
    ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    + ("float16", "float32", "float64")
)
ROUNDING = ("nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away")
OUT_OF_RANGE = ("clamp", "wrap")


def value_type(codec: str, dtype: np.dtype[Any]) -> DataType:
    """The zarr data type of ``dtype`` if the codec can compute with it, else ``MetadataError``."""
    name = dtype.newbyteorder("=").name
    if dtype.kind not in "iuf" or name not in VALUE_TYPES:
        raise MetadataError(f"codec {codec!r} takes integer and float data types, not {dtype}")
    return parse_data_type(name)


def _scalar(codec: str, what: str, dt: DataType, value: Any) -> np.generic:
    """A fill-value JSON ``value`` of data type ``dt`` as a numpy scalar of it."""
    try:
        return cast(np.generic, dt.parse_fill_value(value)[()])
    except MetadataError as exc:
        raise MetadataError(f"codec {codec!r}: {what} {value!r}: {exc}") from None


# --------------------------------------------------------------------------- scale_offset


class ScaleOffsetCodec(ArrayArrayCodec):
    """``out = (in - offset) * scale``; the data type and shape are unchanged."""

    name = "scale_offset"
    computes_with_values: ClassVar[bool] = True

    def __init__(self, offset: Any = 0, scale: Any = 1) -> None:
        for what, value in (("offset", offset), ("scale", scale)):
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise MetadataError(
                    f"codec 'scale_offset': {what!r} must be a number or a string, got {value!r}"
                )
        self.offset = offset
        self.scale = scale
        #: (offset, scale) parsed for each data type met (chunks of one array share one)
        self._parsed: dict[np.dtype[Any], tuple[np.generic, np.generic]] = {}

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> ScaleOffsetCodec:
        refuse_unknown_keys(cls.name, configuration, ("offset", "scale"))
        return cls(configuration.get("offset", 0), configuration.get("scale", 1))

    def configuration(self) -> dict[str, Any]:
        return {"offset": self.offset, "scale": self.scale}

    def _params(self, dtype: np.dtype[Any]) -> tuple[np.generic, np.generic]:
        params = self._parsed.get(dtype)
        if params is None:
            dt = value_type(self.name, dtype)
            offset = _scalar(self.name, "offset", dt, self.offset)
            scale = _scalar(self.name, "scale", dt, self.scale)
            if scale == 0:
                raise MetadataError("codec 'scale_offset': 'scale' must not be zero")
            params = self._parsed[dtype] = (offset, scale)
        return params

    def validate(self, spec: ChunkSpec) -> None:
        self._params(spec.dtype)

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        try:
            fill = self.encode(spec.fill_value.reshape(()), spec)
        except InvalidWriteError as exc:
            raise MetadataError(f"codec 'scale_offset': the fill value: {exc}") from None
        return ChunkSpec(spec.shape, spec.dtype, fill.reshape(()))

    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        offset, scale = self._params(arr.dtype)
        if arr.dtype.kind == "f":
            with np.errstate(all="ignore"):
                return np.asarray((arr - offset) * scale, dtype=arr.dtype)
        out = _exact_int(arr, lambda x: (x - int(offset)) * int(scale))
        if out is None:
            raise InvalidWriteError(
                f"codec 'scale_offset': (value - {offset}) * {scale} does not fit {arr.dtype}"
            )
        return out

    def decode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        offset, scale = self._params(arr.dtype)
        if arr.dtype.kind == "f":
            with np.errstate(all="ignore"):
                return np.asarray(arr / scale + offset, dtype=arr.dtype)
        if np.any(arr % scale):
            raise ValueError(f"scale_offset: a stored value is not a multiple of scale {scale}")
        out = _exact_int(arr, lambda x: x // int(scale) + int(offset))
        if out is None:
            raise ValueError(f"scale_offset: value / {scale} + {offset} does not fit {arr.dtype}")
        return out


def _exact_int(arr: np.ndarray[Any, Any], op: Any) -> np.ndarray[Any, Any] | None:
    """``op`` applied to integer ``arr`` without wrapping: the result in ``arr.dtype``, or None
    when a value does not fit it. Computed in int64 where every value and result fits there
    (checked on the extremes), else with Python integers."""
    info = np.iinfo(arr.dtype)
    if arr.size == 0:
        return arr.copy()
    lo, hi = int(arr.min()), int(arr.max())
    ends = [op(lo), op(hi)]  # op is affine: its extremes are at the input's extremes
    if min(ends) < info.min or max(ends) > info.max:
        return None
    i64 = np.iinfo(np.int64)
    if i64.min <= min(lo, *ends) and max(hi, *ends) <= i64.max:
        try:
            return np.asarray(op(arr.astype(np.int64)), dtype=arr.dtype)
        except OverflowError:  # an offset or scale beyond int64 (uint64 arrays)
            pass
    return np.asarray(op(arr.astype(object)), dtype=arr.dtype)


# --------------------------------------------------------------------------- cast_value


class CastValueCodec(ArrayArrayCodec):
    """Values converted to ``data_type`` (and back when decoding) by ``cast-value-rs``."""

    name = "cast_value"
    computes_with_values: ClassVar[bool] = True

    def __init__(
        self,
        data_type: Any,
        rounding: str = "nearest-even",
        out_of_range: str | None = None,
        scalar_map: Mapping[str, Any] | None = None,
    ) -> None:
        self.data_type_json = data_type
        target = parse_data_type(data_type)
        if target.name not in VALUE_TYPES or target.dtype.name != target.name:
            raise UnsupportedError(
                f"codec 'cast_value': data_type {target.name!r} is not supported (zarrfs casts "
                f"to and from {', '.join(sorted(VALUE_TYPES))})"
            )
        self.target = target
        if rounding not in ROUNDING:
            raise MetadataError(f"codec 'cast_value': 'rounding' must be one of {ROUNDING}")
        if out_of_range is not None and out_of_range not in OUT_OF_RANGE:
            raise MetadataError(f"codec 'cast_value': 'out_of_range' must be one of {OUT_OF_RANGE}")
        if out_of_range == "wrap" and target.dtype.kind == "f":
            raise MetadataError("codec 'cast_value': 'wrap' needs an integer data_type")
        self.rounding = rounding
        self.out_of_range = out_of_range
        if scalar_map is not None:
            if not isinstance(scalar_map, Mapping) or set(scalar_map) - {"encode", "decode"}:
                raise MetadataError(
                    "codec 'cast_value': 'scalar_map' must be {'encode': [...], 'decode': [...]}"
                )
            for direction, pairs in scalar_map.items():
                if not isinstance(pairs, list) or any(
                    not isinstance(p, list) or len(p) != 2 for p in pairs
                ):
                    raise MetadataError(
                        f"codec 'cast_value': scalar_map {direction!r} must be a list of pairs"
                    )
        self.scalar_map = scalar_map
        #: cast-value-rs' cast; an array this engine cannot cast is refused when opened
        self._cast_array = _cast_array()
        #: the (encode, decode) scalar map entries for each array data type met
        self._entries: dict[np.dtype[Any], tuple[Any, Any]] = {}

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> CastValueCodec:
        refuse_unknown_keys(
            cls.name, configuration, ("data_type", "rounding", "out_of_range", "scalar_map")
        )
        if "data_type" not in configuration:
            raise MetadataError("codec 'cast_value': configuration field 'data_type' is required")
        return cls(
            configuration["data_type"],
            configuration.get("rounding", "nearest-even"),
            configuration.get("out_of_range"),
            configuration.get("scalar_map"),
        )

    def configuration(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"data_type": self.data_type_json}
        if self.rounding != "nearest-even":
            conf["rounding"] = self.rounding
        if self.out_of_range is not None:
            conf["out_of_range"] = self.out_of_range
        if self.scalar_map is not None:
            conf["scalar_map"] = self.scalar_map
        return conf

    def _maps(self, dtype: np.dtype[Any]) -> tuple[Any, Any]:
        """The encode and decode maps' pairs, for an array of ``dtype``, as the Python numbers
        ``cast-value-rs`` compares (None where a map is absent)."""
        maps = self._entries.get(dtype)
        if maps is None:
            source = value_type(self.name, dtype)
            maps = self._entries[dtype] = (
                self._pairs("encode", source, self.target),
                self._pairs("decode", self.target, source),
            )
        return maps

    def _pairs(self, direction: str, source: DataType, target: DataType) -> list[Any] | None:
        pairs = (self.scalar_map or {}).get(direction)
        if pairs is None:
            return None
        out = []
        for key, value in pairs:
            k = _scalar(self.name, f"scalar_map {direction} key", source, key)
            v = _scalar(self.name, f"scalar_map {direction} value", target, value)
            out.append((k.item(), v.item()))
        return out

    def validate(self, spec: ChunkSpec) -> None:
        self._maps(spec.dtype)

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        try:
            fill = self.encode(spec.fill_value.reshape(1), spec)
        except InvalidWriteError as exc:
            raise MetadataError(f"codec 'cast_value': the fill value: {exc}") from None
        return ChunkSpec(spec.shape, self.target.dtype, fill.reshape(()))

    def _cast(self, arr: np.ndarray[Any, Any], to: np.dtype[Any], entries: Any) -> Any:
        return self._cast_array(
            np.ascontiguousarray(arr),
            target_dtype=to,
            rounding_mode=cast(Any, self.rounding),
            out_of_range_mode=cast(Any, self.out_of_range),
            scalar_map_entries=entries,
        )

    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        try:
            out = self._cast(arr, self.target.dtype, self._maps(arr.dtype)[0])
        except (ValueError, OverflowError, TypeError) as exc:
            raise InvalidWriteError(f"codec 'cast_value': {exc}") from None
        return np.asarray(out, dtype=self.target.dtype).reshape(arr.shape)

    def decode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        out = self._cast(arr, spec.dtype, self._maps(spec.dtype)[1])
        return np.asarray(out, dtype=spec.dtype).reshape(spec.shape)


def _cast_array() -> Any:
    """``cast_value_rs.cast_array``, imported on the first ``cast_value`` array; without the
    package (a zarrfs installed without its dependencies) such arrays are refused by name."""
    try:
        from cast_value_rs import cast_array
    except ImportError:
        raise UnsupportedError(
            "codec 'cast_value' needs the cast-value-rs package (pip install cast-value-rs)"
        ) from None
    return cast_array


register_codec(ScaleOffsetCodec)
register_codec(CastValueCodec)
