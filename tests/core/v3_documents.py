"""Hand-built Zarr v3 array documents for the core tests of data types and codecs."""

from __future__ import annotations

import json
from typing import Any

from zarrfs.core.stores.memory import MemoryStore


def store_array(
    store: MemoryStore,
    data_type: Any,
    fill: Any,
    codecs: list[Any],
    shape: tuple[int, ...] = (4,),
    chunks: tuple[int, ...] = (3,),
) -> MemoryStore:
    """Store the ``zarr.json`` of array ``a`` with these members in ``store``; returns it."""
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": fill,
        "codecs": codecs,
    }
    store.set("a/zarr.json", json.dumps(doc).encode())
    return store
