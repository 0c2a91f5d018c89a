"""``zarrfs info STORE [--json]``: the hierarchy of a store as a tree, with array details.

Spec: Zarr v3 core "Hierarchy" and "Array metadata" (what is shown); sizes follow the stored
representation ("Storage keys").

For every node: its path, kind (group or array) and format (``NodeFormat.name``: ``v3``, and
the other formats as they are registered). For every array: shape, data type, chunk shape (the
inner chunk shape when sharded) and shard shape, the codec chain in a compact form
(``sharding_indexed[inner (32,128,128): bytes, blosc(lz4,5,shuffle)] ; crc32c index``), fill
value, dimension names, the number of stored chunks, the decoded size, the stored size and the
compression ratio. Nodes skipped because their metadata is invalid are listed with the reason.

Invariants:
- the store is opened read-only and no chunk is read or decoded: sizes come from listing the
  array's prefix (one ``size`` request per key); on a store that cannot list they are unknown;
- ``--json`` prints the same facts as the text form, as one JSON document with a flat ``nodes``
  list in tree order (``path`` is ``/`` or ``/a/b``) and a ``problems`` object;
- the stored size is the array's footprint: every key under its prefix except its metadata
  documents; ``stored_chunks`` counts only keys that are chunks of the current grid.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from math import prod
from typing import Any

from zarrfs.core.codecs.base import Codec
from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.codecs.sharding import ShardingCodec
from zarrfs.core.errors import ZarrFSError
from zarrfs.core.hierarchy import Node
from zarrfs.core.implicit import IMPLICIT_FORMAT_NAME
from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.core.stores.base import Store
from zarrfs.core.stores.registry import open_store
from zarrfs.core.vlen import VlenArray, open_vlen
from zarrfs.tools import Entry, format_shape, human_size, open_hierarchy, plural, run_tool, walk

#: metadata document names never counted as stored chunk bytes
_METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs"})


# ----------------------------------------------------------------------------- codecs


def _cfg(codec: Codec) -> Mapping[str, Any]:
    return codec.configuration() or {}


def _blosc(c: Mapping[str, Any]) -> str:
    return f"blosc({c.get('cname')},{c.get('clevel')},{c.get('shuffle')})"


def _bytes(c: Mapping[str, Any]) -> str:
    return "bytes(big)" if c.get("endian") == "big" else "bytes"


def _zstd(c: Mapping[str, Any]) -> str:
    return f"zstd({c.get('level')}{',checksum' if c.get('checksum') else ''})"


def _transpose(c: Mapping[str, Any]) -> str:
    return "transpose(" + ",".join(str(i) for i in c.get("order", ())) + ")"


#: codec name -> compact form of its configuration's key parameters
_COMPACT: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "blosc": _blosc,
    "bytes": _bytes,
    "crc32c": lambda c: "crc32c",
    "gzip": lambda c: f"gzip({c.get('level')})",
    "transpose": _transpose,
    "zstd": _zstd,
}


def _generic(name: str, conf: Mapping[str, Any]) -> str:
    """``name(v1,v2)`` from the scalar configuration values of a codec without a compact form."""
    values = [str(v) for v in conf.values() if isinstance(v, (str, int, float, bool))]
    return f"{name}({','.join(values)})" if values else name


def compact_codec(codec: Codec) -> str:
    """One codec in compact form: ``blosc(lz4,5,shuffle)``, ``gzip(3)``, ``transpose(1,0)``,
    ``sharding_indexed[inner (32,32): bytes]``."""
    if isinstance(codec, ShardingCodec):
        inner = codec_summary(codec.codecs)
        return f"sharding_indexed[inner {format_shape(codec.chunk_shape)}: {inner}]"
    render = _COMPACT.get(codec.name)
    return render(_cfg(codec)) if render else _generic(codec.name, _cfg(codec))


def _index_note(codec: ShardingCodec) -> str:
    protected = any(c.name == "crc32c" for c in codec.index_codecs.codecs)
    note = "crc32c index" if protected else "index without checksum"
    return note + (" at start" if codec.index_location == "start" else "")


def codec_summary(chain: CodecChain) -> str:
    """The chain in compact form; each sharding codec adds a note on how its index is stored:
    ``sharding_indexed[inner (32,128,128): bytes, blosc(lz4,5,shuffle)] ; crc32c index``."""
    text = ", ".join(compact_codec(c) for c in chain.codecs)
    notes = [_index_note(c) for c in chain.codecs if isinstance(c, ShardingCodec)]
    return "".join([text, *(f" ; {n}" for n in notes)])


# ----------------------------------------------------------------------------- arrays


def stored_footprint(
    store: Store, node: Node, meta: ArrayMetadata
) -> tuple[int | None, int | None]:
    """(stored bytes, stored chunks of the grid) of an array; (None, None) if unknown."""
    if not store.listable:
        return None, None
    prefix = meta.chunk_store_prefix(node.path)
    skip = _METADATA_NAMES | set(node.format.metadata_keys(meta))
    grid = meta.grid_shape
    total = chunks = 0
    try:
        for key in store.list_prefix(prefix):
            rest = key[len(prefix) :]
            if rest in skip:
                continue
            total += store.size(key) or 0
            coords = meta.chunk_key_encoding.decode(rest, meta.ndim)
            if coords is not None and all(c < n for c, n in zip(coords, grid, strict=True)):
                chunks += 1
    except ZarrFSError:
        return None, None
    return total, chunks


def array_facts(store: Store, node: Node, meta: ArrayMetadata) -> dict[str, Any]:
    """What ``info`` shows about one array, JSON-ready."""
    codec = meta.codecs.array_bytes
    sharded = isinstance(codec, ShardingCodec)
    inner = codec.chunk_shape if isinstance(codec, ShardingCodec) else meta.chunk_shape
    stored, chunks = stored_footprint(store, node, meta)
    decoded = meta.nbytes
    ratio = round(decoded / stored, 3) if stored else None
    return {
        "shape": list(meta.shape),
        "data_type": meta.data_type.name,
        "chunk_shape": list(inner),
        "shard_shape": list(meta.chunk_shape) if sharded else None,
        "grid_shape": list(meta.grid_shape),
        "codecs": codec_summary(meta.codecs),
        "codecs_json": meta.codecs.to_json(),
        "fill_value": meta.data_type.fill_value_to_json(meta.fill_value),
        "dimension_names": None if meta.dimension_names is None else list(meta.dimension_names),
        "grid_chunks": prod(meta.grid_shape),
        "stored_chunks": chunks,
        "decoded_bytes": decoded,
        "stored_bytes": stored,
        "compression_ratio": ratio,
    }


def entry_facts(store: Store, entry: Entry) -> dict[str, Any]:
    out: dict[str, Any] = {"path": "/" + entry.path, "name": entry.name}
    vlen = _vlen(store, entry.path) if entry.problem is not None else None
    if vlen is not None:  # shown by the mount as data.txt / data.json
        out.update(kind="array", format=f"v{vlen.zarr_format}", variable_length=True)
        out.update(vlen.summary(), decoded_bytes=0, stored_bytes=None)
    elif entry.problem is not None:
        out.update(kind="invalid", problem=entry.problem)
    elif entry.node is None or entry.node.format.name == IMPLICIT_FORMAT_NAME:
        out.update(kind="group", format=None, implicit=True)
    else:
        meta = entry.node.metadata
        out.update(kind=meta.node_type, format=entry.node.format.name)
        if isinstance(meta, ArrayMetadata):
            out.update(array_facts(store, entry.node, meta))
    return out


def _vlen(store: Store, path: str) -> VlenArray | None:
    """The variable-length array at ``path``, if the node is one zarrfs reads as text."""
    try:
        return open_vlen(store, path)
    except ZarrFSError:
        return None


def collect(store: Store) -> tuple[list[Entry], dict[str, Any]]:
    """The tree entries of ``store`` and the ``--json`` document describing them."""
    hierarchy = open_hierarchy(store)
    try:
        entries = list(walk(hierarchy))
        nodes = [entry_facts(store, e) for e in entries]
    finally:
        hierarchy.engine.close()
    arrays = [n for n in nodes if n["kind"] == "array"]
    stored = [n["stored_bytes"] for n in arrays]
    doc = {
        "store": store.url,
        "nodes": nodes,
        "problems": {n["path"]: n["problem"] for n in nodes if n["kind"] == "invalid"},
        "summary": {
            "groups": sum(1 for n in nodes if n["kind"] == "group"),
            "arrays": len(arrays),
            "invalid": sum(1 for n in nodes if n["kind"] == "invalid"),
            "decoded_bytes": sum(n["decoded_bytes"] for n in arrays),
            "stored_bytes": None if None in stored else sum(stored),
        },
    }
    return entries, doc


# ----------------------------------------------------------------------------- text


def _fill_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _names_text(names: list[str | None] | None) -> str:
    return "-" if names is None else ", ".join("-" if d is None else d for d in names)


def _array_lines(n: Mapping[str, Any]) -> list[tuple[str, str]]:
    lines = [("shape", format_shape(n["shape"])), ("data type", n["data_type"])]
    if n["shard_shape"] is not None:
        lines.append(("shard shape", format_shape(n["shard_shape"])))
        lines.append(("inner chunk shape", format_shape(n["chunk_shape"])))
    else:
        lines.append(("chunk shape", format_shape(n["chunk_shape"])))
    names = n["dimension_names"]
    stored = n["stored_chunks"]
    ratio = n["compression_ratio"]
    size = f"{human_size(n['decoded_bytes'])} decoded, {human_size(n['stored_bytes'])} stored"
    if ratio is not None:
        size += f", ratio {ratio:.2f}"
    lines += [
        ("codecs", n["codecs"]),
        ("fill value", _fill_text(n["fill_value"])),
        ("dimension names", _names_text(names)),
        ("chunks", f"{'unknown' if stored is None else stored} of {n['grid_chunks']} stored"),
        ("size", size),
    ]
    return lines


def render_text(doc: Mapping[str, Any], entries: list[Entry]) -> str:
    """The tree drawn from ``entries`` (depth, last child) and the facts in ``doc["nodes"]``."""
    out = [f"store {doc['store']}"]
    cont: list[str] = []  # continuation prefix per depth
    for n, entry in zip(doc["nodes"], entries, strict=True):
        depth, last = entry.depth, entry.last
        del cont[max(0, depth - 1) :]
        branch = "" if depth == 0 else "".join(cont) + ("└── " if last else "├── ")
        if depth:
            cont.append("    " if last else "│   ")
        label = "/" if depth == 0 else n["name"]
        if n["kind"] == "invalid":
            out.append(f"{branch}{label}  [skipped: {n['problem']}]")
            continue
        kind = n["kind"] + (f" {n['format']}" if n.get("format") else " (implicit)")
        out.append(f"{branch}{label}  {kind}")
        if n.get("variable_length"):
            pad = "".join(cont) + "    "
            out[-1] += f" (variable-length {n['element']}: data.txt, data.json)"
            out.append(f"{pad}{'shape':<18} {format_shape(n['shape'])}")
            out.append(f"{pad}{'chunk shape':<18} {format_shape(n['chunk_shape'])}")
            out.append(f"{pad}{'codecs':<18} {', '.join(map(str, n['codecs']))}")
        elif n["kind"] == "array":
            pad = "".join(cont) + "    "
            for key, value in _array_lines(n):
                out.append(f"{pad}{key:<18} {value}")
    s = doc["summary"]
    out.append(
        f"{plural(s['groups'], 'group')}, {plural(s['arrays'], 'array')}, {s['invalid']} skipped; "
        f"{human_size(s['decoded_bytes'])} decoded, {human_size(s['stored_bytes'])} stored"
    )
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zarrfs info",
        description="Show the groups and arrays of a Zarr store: shapes, data types, chunking, "
        "codecs, fill values and sizes.",
    )
    parser.add_argument(
        "store", metavar="STORE", help="path or URL of the store (file://, zip, ...)"
    )
    parser.add_argument("--json", action="store_true", help="print the same facts as JSON")
    return parser


def _run(args: argparse.Namespace) -> int:
    with open_store(args.store, read_only=True) as store:
        entries, doc = collect(store)
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(doc, entries))
    return 0


def main(argv: list[str]) -> int:
    """``zarrfs info STORE [--json]``; returns the exit status."""
    return run_tool(build_parser(), argv, _run)
