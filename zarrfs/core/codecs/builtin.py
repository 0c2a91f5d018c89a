"""Imports every built-in codec module so each registers itself (see ``base.register_codec``).

Loaded once, lazily, by ``base.codec_class``. Modules that other parts of the tree provide are
imported only if present, so this module always imports cleanly.
"""

from __future__ import annotations

import importlib

from zarrfs.core.codecs import bytes as _bytes  # noqa: F401

_OPTIONAL = (
    "zarrfs.core.codecs.transpose",
    "zarrfs.core.codecs.gzip",
    "zarrfs.core.codecs.blosc",
    "zarrfs.core.codecs.zstd",
    "zarrfs.core.codecs.crc32c",
    "zarrfs.core.codecs.sharding",
)


def _import_if_present(module: str) -> None:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # a dependency of the module is missing: a real error
            raise


for _module in _OPTIONAL:
    _import_if_present(_module)
