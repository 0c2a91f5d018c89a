"""Extension points of Zarr v3 metadata: a short-hand name or a ``name`` object.

Spec: v3 core, "Extension points" (``data_type``, ``chunk_grid``, ``chunk_key_encoding``,
``codecs``, ``storage_transformers``): each is a string naming the extension, or an object with a
string ``name``, an optional ``configuration`` object and an optional boolean
``must_understand`` (default true).

Invariant: ``parse_extension`` accepts exactly those two shapes. Any other member, a name that is
not a string, a ``configuration`` that is not an object, a ``must_understand`` that is not a
boolean raise ``MetadataError`` naming the member (``what``) and the extension. What an unknown
name means (refused, or dropped when ``must_understand`` is false) is left to the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zarrfs.core.errors import MetadataError

_MEMBERS = frozenset({"name", "configuration", "must_understand"})


@dataclass(frozen=True)
class Extension:
    """One parsed extension object (``configuration`` is None when absent or null)."""

    name: str
    configuration: Mapping[str, Any] | None
    must_understand: bool


def parse_extension(value: Any, what: str, null_configuration: bool = True) -> Extension:
    """The extension ``value`` of metadata member ``what`` (a name or an extension object).

    ``"configuration": null`` reads as no configuration, or, with ``null_configuration`` false,
    is refused like any other non-object."""
    if isinstance(value, str):
        return Extension(value, None, True)
    if not isinstance(value, Mapping):
        raise MetadataError(
            f"{what} must be a name or an object (a string or an object, got {value!r})"
        )
    name = value.get("name")
    if not isinstance(name, str):
        raise MetadataError(f"{what} object needs a string 'name': {value!r}")
    extra = set(value) - _MEMBERS
    if extra:
        raise MetadataError(f"{what} {name!r}: unknown keys {sorted(extra)}")
    must = value.get("must_understand", True)
    if not isinstance(must, bool):
        raise MetadataError(f"{what} {name!r}: 'must_understand' must be a boolean")
    conf = value.get("configuration")
    null_ok = conf is None and (null_configuration or "configuration" not in value)
    if not null_ok and not isinstance(conf, Mapping):
        raise MetadataError(f"{what} {name!r}: 'configuration' must be an object")
    return Extension(name, conf, must)
