"""Helpers the compressor codecs share to keep decoding bounded (Zarr v3 core, "Codecs").

Invariants:
- ``check_claimed_size`` refuses, before anything is decompressed, a stored object whose header
  claims more decoded bytes than the caller allows.
- ``encoded_size_bound`` is a deliberately generous upper bound of what any conforming writer
  can produce from ``size`` bytes (headers, per-block overhead, incompressible data). It is only a
  sanity limit on stored objects: a too-tight bound would make valid chunks unreadable.
- ``decompress_streams`` decodes concatenated streams of a streaming decompressor and never
  asks one for more than the bytes still allowed + 1 (getting that byte proves the input too
  large), so its output never passes ``max_size`` + 1 bytes;
- ``zstd_decompress_into`` decompresses into a buffer of exactly ``capacity`` bytes with the
  zstd library's one-shot API, so it can never produce more; it is used only for frames whose
  header does not state their decoded size (the common case goes through numcodecs).
- ``decompress_into_block`` hands a library a reused block of exactly the size the stream
  states; it is only used with libraries that fail a stream decoding to any other size, so
  no byte of the block is left from its last use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable
from typing import Any

from zarrfs.core import buffers
from zarrfs.core.errors import CorruptDataError
from zarrfs.core.pages import prefault


def encoded_size_bound(size: int) -> int:
    """Generous upper bound of a compressed stream made from ``size`` input bytes."""
    return size + (size >> 3) + 1024


def check_claimed_size(codec: str, claimed: int, max_size: int) -> None:
    """Refuse a stream whose header claims more than ``max_size`` decoded bytes."""
    if claimed > max_size:
        raise CorruptDataError(
            f"{codec}: stream claims {claimed} decoded bytes, more than the {max_size} allowed"
        )


def decompress_streams(
    name: str,
    make: Callable[[], Any],
    errors: tuple[type[BaseException], ...],
    data: bytes | memoryview,
    max_size: int,
    check: Callable[[bytes | memoryview], None] | None = None,
    padding: bytes = b"",
) -> bytes:
    """Decode concatenated streams (each made by ``make()``) within ``max_size`` bytes.

    ``check`` is called on the input of each stream before it is decoded (a magic-byte test);
    ``padding`` bytes between streams are skipped."""
    parts: list[bytes] = []
    produced = 0
    pending: bytes | memoryview = data
    while True:
        if check is not None:
            check(pending)
        stream = make()
        try:
            # ask for one byte more than allowed: getting it proves the stream is too large
            out = stream.decompress(pending, max_size - produced + 1)
        except errors as exc:
            raise CorruptDataError(f"{name}: {exc}") from None
        produced += len(out)
        if produced > max_size:
            raise CorruptDataError(
                f"{name}: stream decodes to more than the {max_size} bytes allowed"
            )
        if not stream.eof:
            raise CorruptDataError(f"{name}: truncated stream")
        parts.append(out)
        pending = stream.unused_data.lstrip(padding) if padding else stream.unused_data
        if not pending:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def decompress_into_block(
    name: str, decompress: Callable[[Any, Any], Any], data: bytes | memoryview, size: int
) -> memoryview:
    """``decompress(data, dest)`` into a reused block of exactly ``size`` bytes
    (``core/buffers.py``) rather than fresh memory, whose first touch is slow where the host
    takes freed memory back; a fresh block's pages are faulted in with one call, not one at
    a time as the library writes them. A library error is ``CorruptDataError`` naming
    ``name``."""
    out = buffers.take(size)
    prefault(out.data)
    try:
        decompress(data, out)
    except (RuntimeError, ValueError) as exc:
        raise CorruptDataError(f"{name}: {exc}") from None
    return out.data


class _ZstdLibrary:
    """The zstd C library reached through ctypes: the system ``libzstd`` or, failing that, the
    symbols numcodecs' own zstd extension exports. ``None`` when neither can be loaded."""

    _lock = threading.Lock()
    _loaded = False
    _lib: ctypes.CDLL | None = None

    @classmethod
    def get(cls) -> ctypes.CDLL | None:
        with cls._lock:
            if not cls._loaded:
                cls._loaded = True
                cls._lib = cls._load()
            return cls._lib

    @staticmethod
    def _load() -> ctypes.CDLL | None:
        candidates: list[str] = []
        found = ctypes.util.find_library("zstd")
        if found:
            candidates.append(found)
        try:
            import numcodecs.zstd

            candidates.append(numcodecs.zstd.__file__ or "")
        except ImportError:  # pragma: no cover - numcodecs is a dependency
            pass
        for path in candidates:
            try:
                lib = ctypes.CDLL(path)
                decompress = lib.ZSTD_decompress
                is_error = lib.ZSTD_isError
                error_name = lib.ZSTD_getErrorName
            except (OSError, AttributeError):
                continue
            decompress.restype = ctypes.c_size_t
            decompress.argtypes = [
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_char_p,
                ctypes.c_size_t,
            ]
            is_error.restype = ctypes.c_uint
            is_error.argtypes = [ctypes.c_size_t]
            error_name.restype = ctypes.c_char_p
            error_name.argtypes = [ctypes.c_size_t]
            return lib
        return None


def zstd_decompress_into(data: bytes, capacity: int) -> bytes:
    """Decompress every frame of ``data`` into at most ``capacity`` bytes; more is corrupt."""
    lib = _ZstdLibrary.get()
    if lib is None:
        raise CorruptDataError(
            "zstd: frame does not state its decoded size and no zstd library is available "
            "to decode it within a bound"
        )
    dest = ctypes.create_string_buffer(max(capacity, 1))
    written = lib.ZSTD_decompress(dest, capacity, data, len(data))
    if lib.ZSTD_isError(written):
        reason = lib.ZSTD_getErrorName(written).decode("ascii", "replace")
        if "too small" in reason:
            raise CorruptDataError(
                f"zstd: stream decodes to more than the {capacity} bytes allowed"
            )
        raise CorruptDataError(f"zstd: {reason}")
    return ctypes.string_at(dest, written)
