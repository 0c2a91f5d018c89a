"""What a numcodecs filter may be configured with, checked when the array is opened.

numcodecs builds a filter from almost any configuration and fails only when it is used: an
``astype`` filter to ``|V3`` encodes chunks it then decodes to other numbers, a ``delta`` of
datetimes over floats encodes chunks nothing decodes, ``packbits`` of bytes that are not
booleans decodes to another size. Where a v2 array's ``filters`` or a v3 array's
``numcodecs.*`` filters hand a configuration to numcodecs, zarrfs checks it here first, so such
an array is refused when it is opened (``MetadataError``, with the reason) instead of storing
chunks no one can read or serving invented numbers.

Invariants:
- ``filter_output(codec, incoming)`` is the element type the filter outputs for elements of
  ``incoming``. It raises ``MetadataError`` unless the filter's declared types are types it
  computes with (numbers; labels for ``categorize``), ``packbits`` is given booleans,
  ``bitround`` floats, and eight zeros of its output type decode to eight elements of its
  input type (a trial once per array: parsed metadata is kept).
- Only what breaks decoding is refused: a configuration numcodecs can decode with but not
  encode with (a ``bitround`` ``keepbits`` past the mantissa, a ``zlib`` level of 99) leaves
  the array readable, and its writes are refused (EINVAL, with the reason) before anything is
  made dirty: ``encode_trial``, run at the array's first write.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numcodecs.abc import Codec as NumCodec

from zarrfs.core.errors import MetadataError

#: kinds of the numbers filters compute with (bool, signed, unsigned, float, complex)
NUMBERS = "biufc"
#: per filter id: (attribute of its input type, attribute of its output type, input kinds,
#: output kinds); ``None`` output attribute: the output type is the input type
_TYPED: dict[str, tuple[str, str | None, str, str]] = {
    "delta": ("dtype", "astype", "iuf", "iuf"),
    "fixedscaleoffset": ("dtype", "astype", "iuf", "iuf"),
    "quantize": ("dtype", "astype", "f", "f"),
    "astype": ("decode_dtype", "encode_dtype", NUMBERS, NUMBERS),
    "categorize": ("dtype", "astype", "US", "iu"),
}
_TRIAL = 8


def _declared(codec: NumCodec, attr: str) -> np.dtype[Any] | None:
    value = getattr(codec, attr, None)
    if value is None:
        return None
    try:
        return np.dtype(value)
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"filter {codec.codec_id!r}: {attr} {value!r}: {exc}") from None


def _kinds(codec: NumCodec, attr: str, dtype: np.dtype[Any], kinds: str) -> None:
    if dtype.kind not in kinds or dtype.hasobject or dtype.fields is not None:
        raise MetadataError(
            f"filter {codec.codec_id!r}: {attr} {dtype.str} is not a type it computes with"
        )


def filter_output(codec: NumCodec, incoming: np.dtype[Any]) -> np.dtype[Any]:
    """The element type ``codec`` outputs for ``incoming`` elements (``MetadataError`` where
    what it stores could not be decoded back to them; see the module)."""
    cid = codec.codec_id
    out = incoming
    if cid in _TYPED:
        src_attr, dst_attr, src_kinds, dst_kinds = _TYPED[cid]
        src = _declared(codec, src_attr)
        if src is None:
            raise MetadataError(f"filter {cid!r}: configuration field {src_attr!r} is required")
        _kinds(codec, src_attr, src, src_kinds)
        dst = _declared(codec, dst_attr) if dst_attr else None
        if dst is not None:
            _kinds(codec, str(dst_attr), dst, dst_kinds)
        trial_type, out = src, dst or src
    elif cid == "packbits":  # (its decode needs its own header byte: no trial)
        if incoming.kind != "b":
            raise MetadataError(f"filter 'packbits' takes booleans, not {incoming.str}")
        return np.dtype("u1")
    elif cid == "bitround":
        if incoming.kind != "f" or incoming.itemsize not in (2, 4, 8):
            raise MetadataError(f"filter 'bitround' takes floats, not {incoming.str}")
        trial_type = incoming.newbyteorder("=")
    else:  # shuffle: bytes of any type (its element size is a size rule of the chunk)
        return out
    sample = np.zeros(_TRIAL, dtype=out.newbyteorder("="))
    try:
        decoded = np.asarray(codec.decode(sample))
    except Exception as exc:  # numcodecs raises anything for a configuration it cannot use
        raise MetadataError(f"filter {cid!r}: cannot decode: {type(exc).__name__}: {exc}") from None
    if decoded.nbytes != _TRIAL * trial_type.itemsize:
        raise MetadataError(
            f"filter {cid!r}: {_TRIAL} elements of {out.str} decode to {decoded.nbytes} bytes, "
            f"not {_TRIAL} elements of {trial_type.str}"
        )
    return out


def encode_trial(codec: NumCodec, sample: Any, what: str) -> str | None:
    """Why ``codec`` cannot encode ``sample`` (its configuration: a ``zlib`` level of 99, a
    ``bitround`` ``keepbits`` past the mantissa), or None. Such an array stays readable; its
    writes are refused (``Codec.cannot_encode``)."""
    try:
        codec.encode(sample)
    except Exception as exc:  # numcodecs raises anything for a configuration it cannot use
        return f"{what} {codec.codec_id!r} cannot encode: {type(exc).__name__}: {exc}"
    return None
