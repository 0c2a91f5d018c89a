"""Imports every built-in codec module so each registers itself (see ``base.register_codec``).

Loaded once, lazily, by ``base.codec_class`` (never at package import, so ``sharding``, which
needs ``chain``, can import the codec base freely).
"""

from __future__ import annotations

from zarrfs.core.codecs import (  # noqa: F401
    blosc,
    bytes,
    crc32c,
    gzip,
    numcodecs_v3,
    sharding,
    transpose,
    zstd,
)

BUILTIN_CODECS = ("blosc", "bytes", "crc32c", "gzip", "sharding_indexed", "transpose", "zstd")
