"""Variable-length arrays as text: ``data.txt``, ``data.json`` and ``info.json``, read-only.

DESIGN §2 (``<array>/data.txt, data.json``). The array directory of a ``string`` /
``variable_length_bytes`` (v3) or object (v2) array holds its stored metadata documents and:

- ``data.txt``: one element per line, in C order (last index fastest), UTF-8. Escaping, so that
  every element is exactly one line and the text maps back to the values: ``\\`` -> ``\\\\``,
  newline -> ``\\n``, carriage return -> ``\\r``, tab -> ``\\t``, any other control character
  (and, for byte strings, any byte outside printable ASCII) -> ``\\xHH`` (``\\uHHHH`` for
  non-ASCII control characters in strings); other characters are written as they are. In
  object arrays (``json2``, ``msgpack2``, ``vlen-array``) every element is compact JSON on its
  line (strings included, so ``"1"`` and ``1`` differ), escaped the same way.
- ``data.json``: the whole array as nested JSON lists of the array's shape (a 0-d array is its
  element); strings as JSON strings, byte strings as base64 strings, other elements as JSON.
- ``info.json``: shape, chunk shape, data type, codecs, fill value and the escaping rule.

Memory is bounded by one row of chunks (the chunks sharing an axis-0 chunk index): the text is
generated unit by unit, a unit being that row. ``stat`` needs the size, so the first open (or
``stat``) renders every unit once and keeps only their lengths; reads then render only the
unit holding the requested range. Writes are refused (EROFS) with a log line: elements of
variable length cannot be rewritten in place.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrfs.core.errors import ReadOnlyError
from zarrfs.core.hierarchy import join
from zarrfs.core.vlen import VlenArray, dumps, element_json
from zarrfs.views.arrays import GeneratedFile
from zarrfs.views.base import Stat, VDir, VFile, VHandle, VNode
from zarrfs.views.info import render_json

if TYPE_CHECKING:
    from zarrfs.views.tree import MountContext

log = logging.getLogger(__name__)

ESCAPING = (
    "one element per line, C order; in string and bytes arrays: backslash -> \\\\, "
    "newline -> \\n, carriage return -> \\r, tab -> \\t, other control characters -> \\xHH "
    "(\\uHHHH above U+00FF), bytes outside printable ASCII -> \\xHH; in object arrays "
    "(json2, msgpack2, vlen-array) every element is compact JSON, escaped the same way"
)
_SIMPLE = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_DOCUMENTS = ("zarr.json", ".zarray", ".zattrs")


def escape_str(text: str) -> str:
    out = []
    for ch in text:
        if ch in _SIMPLE:
            out.append(_SIMPLE[ch])
        elif ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029":
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def escape_bytes(data: bytes) -> str:
    out = []
    for b in data:
        ch = chr(b)
        if ch in _SIMPLE:
            out.append(_SIMPLE[ch])
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def text_line(value: Any, element: str = "str") -> str:
    """One element's line (without the newline); ``element`` is the array's element kind:
    in ``object``/``array`` arrays every element is JSON, strings included."""
    if isinstance(value, str) and element == "str":
        return escape_str(value)
    if isinstance(value, bytes) and element == "bytes":
        return escape_bytes(value)
    return escape_str(dumps(element_json(value)))


def _txt_unit(slab: np.ndarray[Any, Any], start: int, arr: VlenArray) -> bytes:
    return "".join(text_line(v, arr.element) + "\n" for v in slab.reshape(-1)).encode("utf-8")


def _json_unit(slab: np.ndarray[Any, Any], start: int, arr: VlenArray) -> bytes:
    """The JSON text of the elements ``start ..`` of the array (flat C order), with the list
    brackets that open before and close after each of them."""
    shape = arr.shape
    if not shape:
        return (dumps(element_json(slab.reshape(-1)[0])) + "\n").encode("utf-8")
    parts = []
    total = int(np.prod(shape))
    for k, value in enumerate(slab.reshape(-1), start):
        index = np.unravel_index(k, shape)
        opening = 0
        for axis in range(len(shape) - 1, -1, -1):
            if index[axis] != 0:
                break
            opening += 1
        closing = 0
        for axis in range(len(shape) - 1, -1, -1):
            if index[axis] != shape[axis] - 1:
                break
            closing += 1
        parts.append(("" if k == 0 or opening == len(shape) else ", ") + "[" * opening)
        parts.append(dumps(element_json(value)))
        parts.append("]" * closing + ("\n" if k == total - 1 else ""))
    return "".join(parts).encode("utf-8")


class TextView:
    """The rendered text of one array: unit lengths known, unit text rendered on demand."""

    def __init__(self, ctx: MountContext, arr: VlenArray, render: Callable[..., bytes]) -> None:
        self.ctx = ctx
        self.arr = arr
        self.render = render
        self._lock = threading.Lock()
        self._ends: list[int] | None = None
        self._last: tuple[int, bytes] | None = None

    def _units(self) -> Iterator[bytes]:
        store = self.ctx.hierarchy.store
        shape = self.arr.shape
        if shape and 0 in shape:
            if self.render is _json_unit:
                yield (dumps(np.empty(shape).tolist()) + "\n").encode()
            return
        start = 0
        for slab in self.arr.iter_chunk_rows(store):
            yield self.render(slab, start, self.arr)
            start += slab.size

    def ends(self) -> list[int]:
        with self._lock:
            if self._ends is None:
                ends, total = [], 0
                for unit in self._units():
                    total += len(unit)
                    ends.append(total)
                self._ends = ends
            return self._ends

    def invalidate(self) -> None:
        """Forget the unit lengths (close-to-open: chunks may have changed in the store)."""
        with self._lock:
            self._ends = None
            self._last = None

    @property
    def size(self) -> int:
        ends = self.ends()
        return ends[-1] if ends else 0

    def read(self, offset: int, size: int) -> bytes:
        ends = self.ends()
        out = []
        i = bisect.bisect_right(ends, offset)
        while size > 0 and i < len(ends):
            unit = self._unit(i)
            begin = ends[i] - len(unit)
            piece = unit[offset - begin : offset - begin + size]
            out.append(piece)
            offset += len(piece)
            size -= len(piece)
            i += 1
        return b"".join(out)

    def _unit(self, i: int) -> bytes:
        with self._lock:
            if self._last is not None and self._last[0] == i:
                return self._last[1]
        for k, unit in enumerate(self._units()):
            if k == i:
                with self._lock:
                    self._last = (i, unit)
                return unit
        return b""


class TextHandle(VHandle):
    def __init__(self, view: TextView) -> None:
        self.view = view

    def read(self, offset: int, size: int) -> bytes:
        return self.view.read(offset, size)


class TextFile(VFile):
    direct_io = True

    def __init__(self, ctx: MountContext, path: str, name: str, view: TextView) -> None:
        self.ctx = ctx
        self.path = path
        self.name = name
        self.view = view

    def stat(self) -> Stat:
        return Stat(is_dir=False, size=self.view.size)

    def open(self, write: bool, truncate: bool) -> VHandle:
        if write:
            reason = (
                f"/{self.path}/{self.name}: variable-length elements cannot be rewritten in "
                "place; write the array with zarr-python"
            )
            log.warning("write refused: %s", reason)
            raise ReadOnlyError(reason)
        self.view.invalidate()
        return TextHandle(self.view)

    def truncate(self, size: int) -> None:
        self.open(True, True)


class VlenArrayDir(VDir):
    """An array of variable-length elements: metadata documents, ``info.json``, text views."""

    def __init__(self, ctx: MountContext, path: str, arr: VlenArray) -> None:
        self.ctx = ctx
        self.path = path
        self.arr = arr
        key = ("vlen", path, dumps(arr.summary()))
        self.txt = ctx.memo(key + ("txt",), lambda: TextView(ctx, arr, _txt_unit))
        self.json = ctx.memo(key + ("json",), lambda: TextView(ctx, arr, _json_unit))

    def stat(self) -> Stat:
        return Stat(is_dir=True)

    def _stored(self) -> list[str]:
        store = self.ctx.hierarchy.store
        return [k for k in _DOCUMENTS if store.exists(join(self.path, k))]

    def names(self) -> list[str]:
        return sorted(["data.json", "data.txt", "info.json", *self._stored()])

    def info(self) -> bytes:
        doc = {
            "path": "/" + self.path,
            **self.arr.summary(),
            "variable_length": True,
            "views": ["data.txt", "data.json"],
            "data.txt": ESCAPING,
            "data.json": "nested lists of the array's shape; byte strings as base64 strings",
            "writable": False,
            "note": "elements have no fixed size, so there is no data.raw; the text views are "
            "generated chunk row by chunk row and are read-only",
        }
        return render_json(doc)

    def lookup(self, name: str) -> VNode | None:
        if name == "data.txt":
            return TextFile(self.ctx, self.path, name, self.txt)
        if name == "data.json":
            return TextFile(self.ctx, self.path, name, self.json)
        if name == "info.json":
            return GeneratedFile(self.info)
        if name in _DOCUMENTS and name in self._stored():
            key = join(self.path, name)
            return GeneratedFile(lambda: self.ctx.hierarchy.documents.get(key) or b"")
        return None
