"""Implicit groups: folders with no metadata document that hold Zarr nodes further down.

Spec: Zarr v3 core "Implicit groups" (removed from the final v3 spec, still written by
zarr-python 2, OME-Zarr plate writers and ``zip -r x.zarr.zip x.zarr``, whose single top-level
folder has no metadata); the 2019-2020 v3 drafts, which have their own implicit groups
(``formats.DRAFT_FORMAT``). zarr-python opens the arrays below such a folder by their full path.

Invariants:
- ``implies_nodes`` only lists (never reads a document): a prefix implies nodes when a key named
  like a metadata document (``MARKER_NAMES``) lies at most ``MAX_DEPTH`` levels below it, found
  within ``MAX_PREFIXES`` listed prefixes, so a folder full of unrelated data costs a bounded
  number of list requests.
- ``implicit_group()`` is a group with no attributes and no document: the node is shown as a
  directory, marked implicit, and its metadata cannot be edited (there is no document to edit).
"""

from __future__ import annotations

from zarrfs.core.errors import StoreError
from zarrfs.core.metadata.model import GroupMetadata
from zarrfs.core.stores.base import Store

#: key names that mark a node of some Zarr format (v3, v2, v1)
MARKER_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", "meta"})
#: how far below a prefix a node is looked for
MAX_DEPTH = 4
#: most prefixes listed while looking
MAX_PREFIXES = 64

IMPLICIT_FORMAT_NAME = "implicit"


def implies_nodes(store: Store, path: str) -> bool:
    """True when ``path`` (no metadata of its own) has a Zarr node below it. Listable stores
    only; a listing failure counts as "no"."""
    if not store.listable:
        return False
    level = [f"{path}/" if path else ""]
    listed = 0
    for depth in range(MAX_DEPTH + 1):
        below: list[str] = []
        for prefix in level:
            if listed >= MAX_PREFIXES:
                return False
            listed += 1
            try:
                keys, subs = store.list_dir(prefix)
            except StoreError:
                return False
            if depth and MARKER_NAMES.intersection(keys):
                return True
            below.extend(f"{prefix}{s}/" for s in subs)
        if not below:
            return False
        level = below
    return False


def implicit_group() -> GroupMetadata:
    """The metadata of an implicit group: no attributes, no stored document."""
    return GroupMetadata(3, {}, {"zarr_format": 3, "node_type": "group", "implicit": True})
