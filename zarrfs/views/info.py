"""``info.json``: a derived, human-readable summary of one array, and the ``user.zarr.*`` xattrs."""

from __future__ import annotations

import functools
import json
from typing import Any

from zarrfs.core.array import ZarrArray
from zarrfs.views.headers import view_dtype
from zarrfs.views.legacy import imagej_params


def _shard_info(arr: ZarrArray) -> dict[str, Any]:
    from zarrfs.core.codecs.sharding import ShardingCodec

    codec = arr.metadata.codecs.array_bytes
    if isinstance(codec, ShardingCodec):
        return {
            "shard_shape": list(arr.metadata.chunk_shape),
            "chunk_shape": list(codec.chunk_shape),
        }
    return {"shard_shape": None, "chunk_shape": list(arr.metadata.chunk_shape)}


def array_info(arr: ZarrArray, byte_order: str, views: list[str]) -> dict[str, Any]:
    meta = arr.metadata
    dtype = view_dtype(arr.dtype, byte_order)
    info: dict[str, Any] = {
        "path": "/" + arr.path,
        "zarr_format": meta.zarr_format,
        "shape": list(meta.shape),
        "data_type": meta.data_type.name,
        "numpy_dtype": dtype.str,
        "itemsize": arr.itemsize,
        "byte_order": byte_order,
        "order": "C",
        **_shard_info(arr),
        "grid_shape": list(arr.grid.grid_shape),
        "chunk_file_shape": list(meta.chunk_shape),
        "codecs": meta.codecs.to_json(),
        "fill_value": meta.data_type.fill_value_to_json(meta.fill_value),
        "dimension_names": None if meta.dimension_names is None else list(meta.dimension_names),
        "decoded_bytes": arr.nbytes,
        "stored_bytes": arr.stored_bytes(),
        "views": views,
        # "File > Import > Raw" settings for data.raw (null when ImageJ cannot open it)
        "imagej": imagej_params(arr.dtype, arr.shape, byte_order) if numpy_describes(arr) else None,
    }
    encoding = getattr(meta.data_type, "encoding", None)
    if encoding:  # an extension type held in a carrier dtype: how to read its bits
        info["element_encoding"] = encoding
    return info


def numpy_describes(arr: ZarrArray) -> bool:
    """False for extension types whose elements numpy has no type for (``bfloat16``,
    ``float8_*``, ``int4``...): only ``data.raw`` then, never a header that would call the
    bits integers."""
    return bool(getattr(arr.metadata.data_type, "numpy_views", True))


def render_json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, allow_nan=True) + "\n").encode()


def json_size(value: Any) -> int:
    """``len(render_json(value))`` without the indented rendering, which only Python's own
    encoder does (~10x slower than the C encoder): the compact C encoding with the same
    separators has the same tokens, and the indentation adds, for every non-empty container at
    depth ``d`` (the outermost is 1) with ``n`` members, ``n`` newlines each followed by ``2d``
    spaces and one newline followed by ``2(d - 1)`` spaces before its closing bracket. The
    output is ASCII (``ensure_ascii``), so characters are bytes."""
    compact = json.dumps(value, separators=(",", ": "), allow_nan=True)
    return len(compact) + _indentation(value, 1) + 1


#: the members of ``array_info`` that differ between arrays with one metadata document
VARYING = ("path", "stored_bytes", "views")


def _member_size(value: Any) -> int:
    """What a member value adds to ``json_size`` of a dict at depth 1 holding it (its compact
    encoding and its own indentation): the rest of a member's bytes (key, separators, the
    dict's indentation per member) depend only on its key."""
    compact = json.dumps(value, separators=(",", ": "), allow_nan=True)
    return len(compact) + _indentation(value, 2)


def info_base_size(info: dict[str, Any]) -> int:
    """``json_size(info)`` without the ``VARYING`` members' values: the same for every array
    with the same metadata and byte order (``info_size`` adds them back)."""
    return json_size(info) - sum(_member_size(info[k]) for k in VARYING)


def info_size(base: int, path: str, stored_bytes: int | None, views: list[str]) -> int:
    """``json_size`` of ``array_info`` of an array at ``path`` whose other members give
    ``base`` (``info_base_size``)."""
    return base + _path_size("/" + path) + _member_size(stored_bytes) + _views_size(tuple(views))


#: characters a JSON string holds as themselves (``ensure_ascii``): printable ASCII but the
#: quote and the backslash
_PLAIN = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


def _path_size(path: str) -> int:
    """``_member_size(path)``; a path of plain characters is its length and two quotes."""
    if _PLAIN.issuperset(path):
        return len(path) + 2
    return _member_size(path)


@functools.lru_cache(maxsize=256)
def _views_size(views: tuple[str, ...]) -> int:
    """``_member_size(list(views))``, once per distinct list (arrays alike share one)."""
    return _member_size(list(views))


def _indentation(value: Any, depth: int) -> int:
    if isinstance(value, dict):
        members: Any = value.values()
    elif isinstance(value, list | tuple):
        members = value
    else:
        return 0
    if not value:
        return 0
    extra = len(value) * (1 + 2 * depth) + 1 + 2 * (depth - 1)
    for member in members:
        extra += _indentation(member, depth + 1)
    return extra


def array_xattrs(arr: ZarrArray, byte_order: str) -> dict[str, bytes]:
    meta = arr.metadata
    fill = json.dumps(meta.data_type.fill_value_to_json(meta.fill_value))
    return {
        "user.zarr.shape": json.dumps(list(meta.shape)).encode(),
        "user.zarr.dtype": meta.data_type.name.encode(),
        "user.zarr.chunks": json.dumps(list(meta.chunk_shape)).encode(),
        "user.zarr.fill_value": fill.encode(),
        "user.zarr.byte_order": byte_order.encode(),
    }
