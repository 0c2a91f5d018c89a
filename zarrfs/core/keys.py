"""Chunk key encodings: chunk grid coords <-> store keys (relative to the array's prefix).

Spec: v3 ``chunk-key-encoding-default.rst`` and ``chunk-key-encoding-v2.rst``.

- ``default``: ``"c"`` followed by ``<separator><index>`` per dimension (``"c/1/23/45"``); the
  0-d chunk is ``"c"``. Separator ``"/"`` unless configured ``"."``.
- ``v2``: the indices joined by the separator (``"1.23.45"``); the 0-d chunk is ``"0"``.
  Separator ``"."`` unless configured ``"/"``.

Invariants: ``decode(encode(c)) == c`` for every coords tuple of non-negative ints, and
``decode`` accepts only canonical keys (ASCII decimal, no sign, no leading zeros), so a key
decodes to coords only if ``encode`` would produce exactly that key. ``must_understand: false``
is not permitted for chunk key encodings (core spec, Extensions): unknown names are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zarrfs.core.errors import MetadataError, UnsupportedError
from zarrfs.core.extensions import parse_extension

_DEFAULT_SEPARATOR = {"default": "/", "v2": "."}


@dataclass(frozen=True)
class ChunkKeyEncoding:
    """A chunk key encoding: ``name`` (``"default"`` or ``"v2"``) and its ``separator``."""

    name: str
    separator: str

    def __post_init__(self) -> None:
        if self.name not in _DEFAULT_SEPARATOR:
            raise UnsupportedError(f"unknown chunk key encoding {self.name!r}")
        if self.separator not in ("/", "."):
            raise MetadataError(
                f"chunk key encoding {self.name!r}: separator must be '/' or '.', "
                f"got {self.separator!r}"
            )

    def encode(self, coords: tuple[int, ...]) -> str:
        """The key of the chunk at grid index ``coords``."""
        parts = [str(int(i)) for i in coords]
        if self.name == "default":
            return self.separator.join(["c", *parts])
        return self.separator.join(parts) if parts else "0"

    def directory(self, ndim: int) -> str:
        """The folder every chunk key of an ``ndim``-d array lies in (``"c/"`` for the
        ``default`` encoding with ``"/"``), or ``""`` when the keys share none."""
        return "c/" if self.name == "default" and self.separator == "/" and ndim else ""

    def decode(self, key: str, ndim: int | None = None) -> tuple[int, ...] | None:
        """The coords encoded by ``key``, or None if it is not a chunk key of this encoding
        (or, when ``ndim`` is given, not one of that many dimensions).

        The v2 key ``"0"`` is the chunk ``(0,)`` unless ``ndim == 0``.
        """
        if self.name == "default":
            if key == "c":
                parts: list[str] = []
            elif key.startswith("c" + self.separator):
                parts = key[2:].split(self.separator)
            else:
                return None
        elif ndim == 0:
            return () if key == "0" else None
        else:
            parts = key.split(self.separator)
        if ndim is not None and len(parts) != ndim:
            return None
        coords = []
        for part in parts:
            if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
                return None
            coords.append(int(part))
        return tuple(coords)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"separator": self.separator}}


def parse_chunk_key_encoding(doc: Any) -> ChunkKeyEncoding:
    """The ``chunk_key_encoding`` member: ``"default"``/``"v2"`` or an extension object."""
    ext = parse_extension(doc, "chunk_key_encoding")
    name, conf = ext.name, ext.configuration
    if name not in _DEFAULT_SEPARATOR:
        raise UnsupportedError(f"unknown chunk key encoding {name!r}")
    conf = conf or {}
    extra = set(conf) - {"separator"}
    if extra:
        raise MetadataError(
            f"chunk_key_encoding {name!r}: unknown configuration keys {sorted(extra)}"
        )
    separator = conf.get("separator", _DEFAULT_SEPARATOR[name])
    if not isinstance(separator, str):
        raise MetadataError(f"chunk_key_encoding {name!r}: separator must be '/' or '.'")
    return ChunkKeyEncoding(name, separator)
