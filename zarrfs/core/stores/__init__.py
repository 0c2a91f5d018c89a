"""Stores: key/value access to a Zarr hierarchy, split by capability.

Spec: Zarr v3 core, "Stores"; v3 "File system store". The interface is in ``base``; concrete
stores live one per module and never import codecs. ``open_store(url)`` picks the store for a
URL or path through the scheme table in ``registry``.
"""

from zarrfs.core.stores.base import (
    ByteRange,
    RangeRequest,
    Store,
    SuffixRange,
    check_key,
    check_prefix,
    slice_range,
)
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.memory import MemoryStore
from zarrfs.core.stores.registry import open_store, register_scheme
from zarrfs.core.stores.zipstore import ZipStore

__all__ = [
    "ByteRange",
    "LocalStore",
    "MemoryStore",
    "RangeRequest",
    "Store",
    "SuffixRange",
    "ZipStore",
    "check_key",
    "check_prefix",
    "open_store",
    "register_scheme",
    "slice_range",
]
