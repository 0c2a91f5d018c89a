"""Small generators of Zarr v1 and v3-draft stores written from the spec text alone.

- ``write_v1`` follows v1.rst: a ``meta`` JSON object (``zarr_format`` 1, ``shape``, ``chunks``,
  ``dtype``, ``compression``, ``compression_opts``, ``fill_value``, ``order``), an ``attrs``
  object, and each chunk's raw bytes (the chunk in ``order``, in the stored type) passed through
  the primary compressor with no header added, under its grid indices joined by ``.``.
- ``entry_point``/``write_array`` follow drafts/core-protocol-v3.0-2020.rst: the entry point
  ``zarr.json`` (``zarr_format``, ``metadata_encoding``, ``metadata_key_suffix``,
  ``extensions``), array documents at ``meta/root/<path>.array<suffix>`` (``shape``,
  ``data_type``, ``chunk_grid`` with ``separator``, ``chunk_memory_layout``, ``compressor`` with a
  codec URI, ``fill_value``, ``extensions``, ``attributes``) and chunks at
  ``data/root/<path>/c<i><sep><j>``; ``style=2019`` writes documents the 2019 way
  (``zarr_format`` inside, ``chunk_codecs`` with inline configuration).

Chunk bytes come from the standard library's zlib/gzip/bz2/lzma (blosc through numcodecs), so
the stores do not depend on zarrfs.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
import zlib
from collections.abc import Callable
from itertools import product
from typing import Any

import numcodecs
import numpy as np

from zarrfs.core.stores.memory import MemoryStore

COMPRESSION: dict[str, tuple[Any, Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    "none": (None, lambda b: b, lambda b: b),
    "zlib": (1, lambda b: zlib.compress(b, 1), zlib.decompress),
    "bz2": (9, lambda b: bz2.compress(b, 9), bz2.decompress),
    "lzma": (None, lambda b: lzma.compress(b), lzma.decompress),
    "blosc": (
        {"cname": "lz4", "clevel": 5, "shuffle": 1},
        lambda b: bytes(numcodecs.Blosc("lz4", 5, 1).encode(b)),
        lambda b: bytes(numcodecs.Blosc().decode(b)),
    ),
}


def write_v1(
    store: MemoryStore,
    data: np.ndarray,
    chunks: tuple[int, ...],
    *,
    compression: str = "zlib",
    order: str = "C",
    fill_value: Any = 0,
    attrs: dict[str, Any] | None = None,
    skip: set[tuple[int, ...]] = frozenset(),  # type: ignore[assignment]
) -> None:
    """Write ``data`` (in its stored dtype) as a v1 array, leaving the chunks in ``skip`` out."""
    opts, compress, _ = COMPRESSION[compression]
    meta = {
        "zarr_format": 1,
        "shape": list(data.shape),
        "chunks": list(chunks),
        "dtype": data.dtype.str,
        "compression": compression,
        "compression_opts": opts,
        "fill_value": fill_value,
        "order": order,
    }
    store.set("meta", json.dumps(meta, indent=4, sort_keys=True).encode())  # NaN as a literal
    store.set("attrs", json.dumps(attrs or {}).encode())
    grid = [math.ceil(s / c) for s, c in zip(data.shape, chunks, strict=True)]
    for coords in product(*(range(n) for n in grid)):
        if coords in skip:
            continue
        chunk = np.full(chunks, np.nan if fill_value is None else fill_value, dtype=data.dtype)
        sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, chunks, strict=True))
        part = data[sel]
        chunk[tuple(slice(0, n) for n in part.shape)] = part
        raw = chunk.tobytes(order=order)
        store.set(".".join(map(str, coords)), compress(raw))


PROTOCOL = "https://purl.org/zarr/spec/protocol/core/3.0"
GZIP_URI = "https://purl.org/zarr/spec/codec/gzip/1.0"


def entry_point(store: MemoryStore, suffix: str = ".json", **extra: Any) -> None:
    doc = {
        "zarr_format": PROTOCOL,
        "metadata_encoding": PROTOCOL,
        "metadata_key_suffix": suffix,
        "extensions": [],
        **extra,
    }
    store.set("zarr.json", json.dumps(doc).encode())


def meta_key(path: str, kind: str, suffix: str = ".json") -> str:
    return f"meta/root{'/' + path if path else ''}.{kind}{suffix}"


def write_array(
    store: MemoryStore,
    path: str,
    data: np.ndarray,
    chunks: tuple[int, ...],
    *,
    data_type: Any,
    layout: str = "C",
    separator: str = "/",
    fill_value: Any = None,
    fill: Any = 0,
    compress: tuple[str, Callable[[bytes], bytes]] | None = ("gzip", gzip.compress),
    suffix: str = ".json",
    attributes: dict[str, Any] | None = None,
    skip: frozenset[tuple[int, ...]] = frozenset(),
    style: int = 2020,
) -> None:
    doc: dict[str, Any] = {
        "shape": list(data.shape),
        "data_type": data_type,
        "chunk_grid": {"type": "regular", "chunk_shape": list(chunks), "separator": separator},
        "chunk_memory_layout": layout,
        "fill_value": fill_value,
        "extensions": [],
        "attributes": attributes or {},
    }
    if style == 2019:
        doc["zarr_format"] = PROTOCOL
        doc["chunk_codecs"] = [] if compress is None else [{"codec": GZIP_URI, "level": 1}]
    elif compress is not None:
        doc["compressor"] = {"codec": GZIP_URI, "configuration": {"level": 1}}
    store.set(meta_key(path, "array", suffix), json.dumps(doc).encode())
    prefix = f"data/root/{path}/" if path else "data/root/"
    grid = [math.ceil(s / c) for s, c in zip(data.shape, chunks, strict=True)]
    for coords in product(*(range(n) for n in grid)):
        if coords in skip:
            continue
        chunk = np.full(chunks, fill, dtype=data.dtype)
        sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, chunks, strict=True))
        part = data[sel]
        chunk[tuple(slice(0, n) for n in part.shape)] = part
        raw = chunk.tobytes(order=layout)
        key = "c" + separator.join(map(str, coords))
        store.set(prefix + key, compress[1](raw) if compress else raw)
