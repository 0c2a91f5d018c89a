"""The core's exception tree.

Every failure the engine reports is one of these; the FUSE layer maps them to errno in one
table (``zarrfs.fuse.errors``). Messages name the key or metadata field at fault.

    ZarrFSError
    ├── NodeNotFound        no such group/array/key            -> ENOENT
    ├── MetadataError       invalid metadata document          -> EINVAL (node skipped on mount)
    │   └── UnsupportedError  valid but not understood (unknown codec, data type, extension)
    │       └── VariableLengthElements  no fixed element size: shown as text, not as raw bytes
    ├── CorruptDataError    chunk/shard fails checksum, decode, size or index validation -> EIO
    ├── StoreError          the store failed (I/O, network)                            -> EIO
    │   ├── StoreTimeout    a request exceeded its deadline                            -> EIO
    │   └── ConflictError   a conditional write lost against another writer            -> EIO
    ├── ReadOnlyError       write to a read-only store or mount                        -> EROFS
    ├── NotPermittedError   an operation views never allow (deleting a view file)      -> EPERM
    └── InvalidWriteError   a write or resize the array cannot represent               -> EINVAL
"""

from __future__ import annotations


class ZarrFSError(Exception):
    """Base of every error the zarrfs core raises."""


class NodeNotFound(ZarrFSError):
    """No group, array or key at that path."""


class MetadataError(ZarrFSError):
    """A metadata document is invalid (bad JSON, missing or wrong field, bad value)."""


class UnsupportedError(MetadataError):
    """Valid metadata that this engine does not understand (unknown codec, data type, ...)."""


class VariableLengthElements(UnsupportedError):
    """A valid array whose elements have no fixed size (strings, bytes, objects): it has no
    raw views; the text views (``data.txt``, ``data.json``) show it."""


class CorruptDataError(ZarrFSError):
    """Stored bytes failed to decode: checksum mismatch, bad size, bad index, codec error.

    ``key`` names the stored object when known.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


class StoreError(ZarrFSError):
    """The store failed to answer (I/O error, network error, permission)."""


class StoreTimeout(StoreError):
    """A store request did not finish within its deadline."""


class ConflictError(StoreError):
    """A conditional write found the object changed by another writer."""


class ReadOnlyError(ZarrFSError):
    """The store, mount or node is read-only."""


class NotPermittedError(ZarrFSError):
    """An operation the mounted tree never allows, such as deleting a view file."""


class MemoryLimitError(ZarrFSError):
    """Serving the request would need more memory than the mount may use: a chunk that decodes
    to more than ``cache_size`` allows (``ArrayState.check_unit_size``)."""


class InvalidWriteError(ZarrFSError):
    """A write, truncate or metadata change the array cannot represent."""
