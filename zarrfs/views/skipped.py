"""Nodes zarrfs cannot show, and implicit groups: nothing a user has vanishes silently.

DESIGN §2: "A node zarrfs cannot show keeps its directory, its metadata documents and an
``info.json`` saying why". A skipped node (invalid or unsupported metadata: an unknown codec,
data type or extension) is listed in its parent like any node, as a directory holding:

- the metadata documents stored at its path (``zarr.json``, ``.zarray``, ``.zgroup``,
  ``.zattrs``, ``meta``, ``attrs``), byte-exact and read-only;
- ``info.json``: ``{"path", "shown": false, "reason", ...}`` plus what is known of the array
  (shape, data type) when the metadata says it;
- ``ERROR.txt``: the reason, one line, for a person at a terminal.

Implicit groups (a folder with nodes below and no metadata) are ordinary group directories
with an ``info.json`` saying ``"implicit": true``; ``implicit_info`` renders it.

Invariants: these directories never hold data views and refuse every write (EROFS); their
content is read from the store on each open, so fixing the metadata (or upgrading zarrfs) shows
the node properly after the attribute timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zarrfs.core.errors import UnsupportedError, VariableLengthElements, ZarrFSError
from zarrfs.core.hierarchy import join
from zarrfs.core.vlen import open_vlen
from zarrfs.views.arrays import GeneratedFile
from zarrfs.views.base import Stat, VDir, VNode
from zarrfs.views.info import render_json
from zarrfs.views.text import VlenArrayDir

if TYPE_CHECKING:
    from zarrfs.views.tree import MountContext

#: documents a skipped node may have, in any format
DOCUMENT_NAMES = ("zarr.json", ".zarray", ".zgroup", ".zattrs", "meta", "attrs")


def unshown_node_dir(ctx: MountContext, path: str, exc: ZarrFSError) -> VDir:
    """The directory of a node the engine cannot open (``exc`` says why): the text views of a
    variable-length array, else a ``SkippedNodeDir`` saying why. Only an array the engine
    found to have variable-length elements has its document read again."""
    h = ctx.hierarchy
    reason, summary = h.problems.get(path, str(exc)), h.opaque.get(path)
    if not isinstance(exc, VariableLengthElements):
        return SkippedNodeDir(ctx, path, reason, summary)
    try:
        arr = open_vlen(ctx.hierarchy.documents, path)
    except UnsupportedError as exc:  # a variable-length array zarrfs cannot decode
        return SkippedNodeDir(ctx, path, f"{reason}; as variable-length array: {exc}", summary)
    except ZarrFSError:  # not one at all (the reason above already says what is wrong)
        return SkippedNodeDir(ctx, path, reason, summary)
    if arr is None:
        return SkippedNodeDir(ctx, path, reason, summary)
    return VlenArrayDir(ctx, path, arr)


def implicit_info(path: str) -> bytes:
    """``info.json`` of an implicit group."""
    return render_json(
        {
            "path": "/" + path,
            "node_type": "group",
            "implicit": True,
            "note": "this folder has no Zarr metadata document; it is shown as a group because "
            "Zarr nodes lie below it (an implicit group, as zarr-python 2 and zipped folders "
            "leave them). Its attributes are empty and cannot be edited.",
        }
    )


class SkippedNodeDir(VDir):
    """A node whose metadata zarrfs cannot use: its documents, ``info.json``, ``ERROR.txt``."""

    def __init__(
        self, ctx: MountContext, path: str, reason: str, summary: dict[str, Any] | None = None
    ) -> None:
        self.ctx = ctx
        self.path = path
        self.reason = reason
        self.summary = summary or {}

    def stat(self) -> Stat:
        return Stat(is_dir=True)

    def _stored(self) -> list[str]:
        store = self.ctx.hierarchy.store
        limit = self.ctx.hierarchy.documents.limit
        try:
            # a document too large to read (a hostile one) is not offered: reading it would
            # only be refused
            return [
                k
                for k in DOCUMENT_NAMES
                if (size := store.size(join(self.path, k))) is not None and size <= limit
            ]
        except ZarrFSError:  # a failing store still leaves the explanation readable
            return []

    def names(self) -> list[str]:
        return sorted(["ERROR.txt", "info.json", *self._stored()])

    def info(self) -> bytes:
        doc = {
            "path": "/" + self.path,
            "shown": False,
            "reason": self.reason,
            **{k: v for k, v in self.summary.items() if k != "reason"},
            "views": [],
            "note": "zarrfs cannot show this node's data; its metadata documents are here "
            "unchanged. See 'reason'.",
        }
        return render_json(doc)

    def lookup(self, name: str) -> VNode | None:
        if name == "info.json":
            return GeneratedFile(self.info)
        if name == "ERROR.txt":
            text = f"/{self.path}: not shown: {self.reason}\n"
            return GeneratedFile(lambda: text.encode())
        if name in DOCUMENT_NAMES and name in self._stored():
            key = join(self.path, name)
            return GeneratedFile(lambda: self.ctx.hierarchy.documents.get(key) or b"")
        return None
