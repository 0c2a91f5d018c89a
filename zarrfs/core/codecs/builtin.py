"""Imports every built-in codec module so each registers itself (see ``base.register_codec``).

Imported by the package's ``__init__``, so the registry is complete before any codec is looked
up by name; the codec modules import ``base`` and ``chain``, never this module.
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
    values,
    zstd,
)
