"""Codec chain: validation of the codec order and per-chunk-shape preparation.

Spec: Zarr v3 core, "Codecs" — a chain is ``array->array* , array->bytes , bytes->bytes*``.

``CodecChain`` is the validated list of codecs of an array (or of a shard's inner chunks).
``CodecChain.prepare(spec)`` resolves, once per chunk shape, the spec seen by every codec and
the size bound of every stage, and returns a ``PreparedChain`` that encodes and decodes chunks
of that shape. Prepared chains are cached on the chain (chunk shapes of one array are few: the
regular shape and, for some callers, edge shapes).

Decoding never trusts the stored bytes: each bytes->bytes codec gets the bound of what its
output may be, the array->bytes codec must produce exactly the spec's shape, and any exception
a codec library raises becomes ``CorruptDataError``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from zarrfs.core.codecs.base import (
    ArrayArrayCodec,
    ArrayBytesCodec,
    BytesBytesCodec,
    ChunkSpec,
    Codec,
    parse_codec,
)
from zarrfs.core.errors import CorruptDataError, MetadataError, ZarrFSError


class CodecChain:
    """A validated codec chain: ``array_array`` codecs, one ``array_bytes``, ``bytes_bytes``."""

    def __init__(self, codecs: Sequence[Codec]) -> None:
        aa: list[ArrayArrayCodec] = []
        ab: ArrayBytesCodec | None = None
        bb: list[BytesBytesCodec] = []
        for codec in codecs:
            if isinstance(codec, ArrayArrayCodec):
                if ab is not None:
                    raise MetadataError(
                        f"codec {codec.name!r} (array->array) must come before "
                        "the array->bytes codec"
                    )
                aa.append(codec)
            elif isinstance(codec, ArrayBytesCodec):
                if ab is not None:
                    raise MetadataError(
                        f"codec chain has two array->bytes codecs ({ab.name!r}, {codec.name!r})"
                    )
                ab = codec
            elif isinstance(codec, BytesBytesCodec):
                if ab is None:
                    raise MetadataError(
                        f"codec {codec.name!r} (bytes->bytes) must come after "
                        "the array->bytes codec"
                    )
                bb.append(codec)
            else:  # pragma: no cover - registry only holds the three kinds
                raise MetadataError(f"codec {codec!r} is of no known kind")
        if ab is None:
            raise MetadataError("codec chain has no array->bytes codec (e.g. 'bytes')")
        self.array_array: tuple[ArrayArrayCodec, ...] = tuple(aa)
        self.array_bytes: ArrayBytesCodec = ab
        self.bytes_bytes: tuple[BytesBytesCodec, ...] = tuple(bb)
        self._prepared: dict[ChunkSpec, PreparedChain] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_json(cls, docs: Iterable[Any]) -> CodecChain:
        """Build from the metadata ``codecs`` list (names or objects; unknown
        ``must_understand: false`` entries are dropped)."""
        if isinstance(docs, (str, bytes)) or not isinstance(docs, Iterable):
            raise MetadataError("'codecs' must be a list")
        codecs = [c for c in (parse_codec(d) for d in docs) if c is not None]
        return cls(codecs)

    @property
    def codecs(self) -> tuple[Codec, ...]:
        return (*self.array_array, self.array_bytes, *self.bytes_bytes)

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.codecs]

    def prepare(self, spec: ChunkSpec) -> PreparedChain:
        """The chain prepared for chunks described by ``spec`` (validated, cached)."""
        prepared = self._prepared.get(spec)
        if prepared is None:
            prepared = PreparedChain(self, spec)
            with self._lock:
                if len(self._prepared) > 64:
                    self._prepared.clear()
                self._prepared[spec] = prepared
        return prepared

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CodecChain) and self.codecs == other.codecs

    def __hash__(self) -> int:
        return hash(self.codecs)

    def __repr__(self) -> str:
        return f"CodecChain({list(self.codecs)!r})"


class PreparedChain:
    """A codec chain bound to one chunk spec: ``encode``/``decode`` whole chunks."""

    def __init__(self, chain: CodecChain, spec: ChunkSpec) -> None:
        self.chain = chain
        self.spec = spec
        specs = [spec]
        for aa in chain.array_array:
            aa.validate(specs[-1])
            specs.append(aa.resolve_spec(specs[-1]))
        #: spec seen by array_array[i] is aa_specs[i]; the array->bytes codec sees ``ab_spec``
        self.aa_specs: tuple[ChunkSpec, ...] = tuple(specs[:-1])
        self.ab_spec: ChunkSpec = specs[-1]
        chain.array_bytes.validate(self.ab_spec)
        bound = chain.array_bytes.max_encoded_size(self.ab_spec)
        bounds = []
        for bb in chain.bytes_bytes:
            bb.validate(self.ab_spec)
            bounds.append(bound)
            bound = bb.max_encoded_size(bound)
        #: bytes_bytes[i].decode may produce at most bb_bounds[i] bytes
        self.bb_bounds: tuple[int, ...] = tuple(bounds)
        #: upper bound of an encoded chunk of this spec
        self.max_encoded_size: int = bound
        # what ``encode`` holds besides the chunk: each stage's output while the next stage
        # makes its own (a stage's input and output coexist, earlier ones are freed)
        stages = [s.nbytes for s in specs[1:]] + [*bounds, bound]
        #: upper bound of the memory ``encode`` allocates at once (intermediates and result)
        self.encode_memory: int = max(
            [stages[0]] + [a + b for a, b in zip(stages, stages[1:], strict=False)]
        )

    @functools.cached_property
    def cannot_encode(self) -> str | None:
        """Why chunks of this spec cannot be encoded (writes are then refused before anything
        is made dirty), or None; computed at the first write, once."""
        for codec, spec in (
            *zip(self.chain.array_array, self.aa_specs),
            (self.chain.array_bytes, self.ab_spec),
            *((bb, self.ab_spec) for bb in self.chain.bytes_bytes),
        ):
            why = codec.cannot_encode(spec)
            if why is not None:
                return why
        return None

    def check_encoded_size(self, nbytes: int) -> None:
        """Refuse a stored object larger than any valid chunk of this spec can take."""
        if nbytes > self.max_encoded_size:
            raise CorruptDataError(
                f"stored object is {nbytes} bytes, more than the {self.max_encoded_size} "
                "any valid chunk of this array can take"
            )

    def decode(self, data: bytes | memoryview) -> np.ndarray[Any, Any]:
        """Stored bytes -> C-contiguous array of ``spec.shape``/``spec.dtype`` (may be a
        read-only view of ``data``)."""
        try:
            self.check_encoded_size(len(data))
            buf: bytes | memoryview = data
            for bb, bound in zip(reversed(self.chain.bytes_bytes), reversed(self.bb_bounds)):
                buf = bb.decode(buf, bound)
            arr = self.chain.array_bytes.decode(buf, self.ab_spec)
            if arr.shape != self.ab_spec.shape or arr.dtype != self.ab_spec.dtype:
                raise CorruptDataError(
                    f"decoded chunk has shape {arr.shape} {arr.dtype}, "
                    f"expected {self.ab_spec.shape} {self.ab_spec.dtype}"
                )
            for aa, aspec in zip(reversed(self.chain.array_array), reversed(self.aa_specs)):
                arr = aa.decode(arr, aspec)
        except ZarrFSError:
            raise
        except (MemoryError, RecursionError):
            raise CorruptDataError("decoding exhausted resources") from None
        except Exception as exc:  # codec libraries raise anything on corrupt input
            raise CorruptDataError(f"decode failed: {type(exc).__name__}: {exc}") from exc
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (np.ascontiguousarray makes 0-d arrays 1-d)
        return arr

    def encode(self, arr: np.ndarray[Any, Any]) -> bytes | None:
        """Array of ``spec.shape`` -> stored bytes (None: nothing to store)."""
        data = self.encode_buffer(arr)
        return None if data is None else bytes(data)

    def encode_buffer(self, arr: np.ndarray[Any, Any]) -> bytes | memoryview | None:
        """``encode``, possibly as a view of ``arr``'s memory (a chain of ``bytes`` alone in
        the stored byte order: storing it then copies nothing), valid while ``arr`` is
        neither changed nor freed, or of a block a codec encoded into (``encode_buffer`` of
        a bytes -> bytes codec: blosc), valid while the view is held."""
        if arr.shape != self.spec.shape:
            raise ValueError(f"chunk shape {arr.shape} does not match {self.spec.shape}")
        for aa, aspec in zip(self.chain.array_array, self.aa_specs):
            arr = aa.encode(arr, aspec)
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        data = self.chain.array_bytes.encode_buffer(arr, self.ab_spec)
        if data is None:
            return None
        for bb in self.chain.bytes_bytes:
            data = bb.encode_buffer(data)
        return data
