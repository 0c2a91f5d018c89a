"""Validation helpers for codec ``configuration`` objects (Zarr v3 core, "Codecs").

Every helper raises ``MetadataError`` naming the codec and the field at fault. JSON booleans are
never accepted where an integer is expected (Python's ``bool`` is an ``int``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from zarrfs.core.errors import MetadataError

_MISSING = object()


def refuse_unknown_keys(
    codec: str, configuration: Mapping[str, Any], known: Collection[str]
) -> None:
    extra = set(configuration) - set(known)
    if extra:
        raise MetadataError(f"codec {codec!r}: unknown configuration keys {sorted(extra)}")


def int_field(
    codec: str,
    configuration: Mapping[str, Any],
    field: str,
    *,
    low: int | None = None,
    high: int | None = None,
    default: int | None = None,
) -> int:
    """An integer field in ``[low, high]``; ``default`` (if given) when the field is absent."""
    value = configuration.get(field, _MISSING)
    if value is _MISSING:
        if default is None:
            raise MetadataError(f"codec {codec!r}: configuration field {field!r} is required")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise MetadataError(f"codec {codec!r}: {field!r} must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "" if low is None else f"{low}"
        hi = "" if high is None else f"{high}"
        raise MetadataError(f"codec {codec!r}: {field!r} must be in [{lo}, {hi}], got {value}")
    return value


def choice_field(
    codec: str,
    configuration: Mapping[str, Any],
    field: str,
    choices: Collection[str],
) -> str:
    """A required string field with one of ``choices``."""
    value = configuration.get(field, _MISSING)
    if value is _MISSING:
        raise MetadataError(f"codec {codec!r}: configuration field {field!r} is required")
    if not isinstance(value, str) or value not in choices:
        raise MetadataError(
            f"codec {codec!r}: {field!r} must be one of {sorted(choices)}, got {value!r}"
        )
    return value


def bool_field(codec: str, configuration: Mapping[str, Any], field: str, *, default: bool) -> bool:
    value = configuration.get(field, default)
    if not isinstance(value, bool):
        raise MetadataError(f"codec {codec!r}: {field!r} must be a boolean, got {value!r}")
    return value
