"""The ``transpose`` codec (array -> array): permutes the dimensions of a chunk.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/transpose/
(specs/v3/codecs/transpose.rst)
Name: ``transpose``
Example: ``{"name": "transpose", "configuration": {"order": [2, 0, 1]}}``; the 2019 draft's
``"order": "C"`` (identity) and ``"order": "F"`` (all axes reversed) are accepted too.

Invariants:
- ``order`` is a permutation of ``0 .. n-1`` (checked when parsed); ``validate`` checks that
  ``n`` is the number of dimensions of the chunks it receives.
- The encoded shape is ``B_shape[i] = A_shape[order[i]]`` (``resolve_spec``); ``decode``
  applies the inverse permutation. Both return C-contiguous arrays; the data type is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from zarrfs.core.codecs._config import refuse_unknown_keys
from zarrfs.core.codecs.base import ArrayArrayCodec, ChunkSpec, register_codec
from zarrfs.core.errors import MetadataError


class TransposeCodec(ArrayArrayCodec):
    """Dimension permutation: encoded dimension ``i`` is decoded dimension ``order[i]``."""

    name = "transpose"

    def __init__(self, order: Sequence[int] | str) -> None:
        #: the 2019 draft's "C" (identity) or "F" (reversed axes), resolved per chunk rank
        self.layout: str | None = order if order in ("C", "F") else None  # type: ignore[assignment]
        self.order: tuple[int, ...] = () if self.layout else _parse_order(order)
        self.inverse: tuple[int, ...] = tuple(int(i) for i in np.argsort(self.order))

    def _perm(self, ndim: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(order, inverse) for chunks of ``ndim`` dimensions."""
        if self.layout == "C":
            return tuple(range(ndim)), tuple(range(ndim))
        if self.layout == "F":
            rev = tuple(range(ndim - 1, -1, -1))
            return rev, rev
        return self.order, self.inverse

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> TransposeCodec:
        refuse_unknown_keys(cls.name, configuration, ("order",))
        if "order" not in configuration:
            raise MetadataError("codec 'transpose': configuration field 'order' is required")
        return cls(configuration["order"])

    def configuration(self) -> dict[str, Any]:
        return {"order": self.layout if self.layout else list(self.order)}

    def validate(self, spec: ChunkSpec) -> None:
        if self.layout is None and len(self.order) != len(spec.shape):
            raise MetadataError(
                f"codec 'transpose': 'order' {list(self.order)} has {len(self.order)} entries "
                f"but the chunks have {len(spec.shape)} dimensions"
            )

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        self.validate(spec)
        order, _ = self._perm(len(spec.shape))
        return spec.with_shape(tuple(spec.shape[axis] for axis in order))

    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        return _c_order(arr.transpose(self._perm(arr.ndim)[0]))

    def decode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        return _c_order(arr.transpose(self._perm(arr.ndim)[1]))


def _c_order(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    # np.ascontiguousarray would turn a 0-d array into shape (1,)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _parse_order(order: Any) -> tuple[int, ...]:
    if isinstance(order, (str, bytes)) or not isinstance(order, Sequence):
        raise MetadataError(f"codec 'transpose': 'order' must be a list of integers, got {order!r}")
    if any(isinstance(i, bool) or not isinstance(i, int) for i in order):
        raise MetadataError(f"codec 'transpose': 'order' must be a list of integers, got {order!r}")
    if sorted(order) != list(range(len(order))):
        raise MetadataError(
            f"codec 'transpose': 'order' must be a permutation of 0..{len(order) - 1}, "
            f"got {list(order)}"
        )
    return tuple(order)


register_codec(TransposeCodec)
