"""Blocking node calls, grouped per request; every function here runs in a worker thread.

``operations`` sends each through ``Offload`` and gets back plain nodes and ``Stat`` values;
nothing here touches the inode table, file handles or pyfuse3 (DESIGN §5: the views are called
from worker threads only, through the one offload function).

Invariants:
- a lookup miss refreshes the directory once (close-to-open: a node created by another store
  client appears without waiting for a cache to expire), then reports ``NodeNotFound``;
- listing a directory refreshes it first (``opendir`` revalidation);
- while preparing a listing, a child that fails (``ZarrFSError``) is skipped so one broken array
  does not hide its siblings; looking it up directly reports its error. So is a child whose
  lookup or ``stat`` fails with any other error (a fault of zarrfs, logged with its trace):
  one view that cannot be rendered must not make the whole directory unreadable.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from zarrfs.core.engine import one_by_one_until_slow
from zarrfs.core.errors import NodeNotFound, ZarrFSError
from zarrfs.fuse.inodes import Path
from zarrfs.views.base import MAX_FILE_SIZE, Stat, VDir, VFile, VHandle, VNode

log = logging.getLogger(__name__)


def lookup_child(parent: VDir, name: str) -> tuple[VNode, Stat]:
    node = parent.lookup(name)
    if node is None:
        parent.refresh()  # a miss may be a node created by another store client
        node = parent.lookup(name)
    if node is None:
        raise NodeNotFound(name)
    return node, node.stat()


def list_dir(node: VDir, read_since: float | None = None) -> Sequence[str]:
    """The listing snapshot; a lazy sequence (``chunks/`` of a huge grid) is kept lazy, never
    turned into a list, so listing costs memory independent of the number of entries.
    ``read_since``: see ``VDir.refresh``."""
    node.refresh(read_since)
    names = node.names()
    if isinstance(names, Sequence) and not isinstance(names, list | str):
        return names
    return list(names)


#: threads that look up and stat the children of one listing batch concurrently
LISTING_THREADS = 8
_listing_pool = ThreadPoolExecutor(LISTING_THREADS, thread_name_prefix="zarrfs-list")


def _prepare_one(node: VDir, index: int, name: str) -> tuple[int, str, VNode, Stat] | None:
    try:
        child = node.lookup(name)
        if child is None:
            return None
        st = child.stat()
        if st.size > MAX_FILE_SIZE:  # (no file can say so: EFBIG when looked up itself)
            log.warning("listing skips %r: %d bytes, more than a file can have", name, st.size)
            return None
    except ZarrFSError as exc:  # one broken child must not hide its siblings
        log.debug("listing skips %r: %s", name, exc)
        return None
    except Exception:  # nor a fault of zarrfs in one child (logged as one, with its trace;
        # the child itself still answers EIO when it is used)
        log.exception("listing skips %r after an unexpected error", name)
        return None
    try:
        child.warm()
    except ZarrFSError as exc:  # reported when the child itself is used
        log.debug("warming %r: %s", name, exc)
    except Exception:
        log.exception("warming %r: unexpected error", name)
    return index, name, child, st


def prepare_children(
    node: VDir, names: Sequence[str], start: int, stop: int
) -> list[tuple[int, str, VNode, Stat]]:
    """Look up and stat ``names[start:stop]``, in listing order.

    The children of a directory that ``lists_from_metadata`` are prepared in this thread. Those
    of other directories are prepared concurrently once one of them is slow: each may need its
    own metadata document and a listing of its chunks, and a reader walking a tree (``find``,
    ``ls -lR``) asks for one directory at a time, so reading them one after the other from a
    store with latency would leave it idle between requests (an object store answers many at
    once)."""
    indexes = range(start, stop)
    if not indexes:
        return []
    if node.lists_from_metadata:  # no child waits on the store: threads would only add
        # hand-offs (and contention for the interpreter) to work that is all computation
        return [r for r in (_prepare_one(node, i, names[i]) for i in indexes) if r is not None]

    # one after the other while each is quick (a local disk, the page cache: threads would
    # only contend for the interpreter); the rest concurrently once the store shows latency
    # (an object store, a network file system)
    def concurrently(
        rest: Sequence[Callable[[], tuple[int, str, VNode, Stat] | None]],
    ) -> list[tuple[int, str, VNode, Stat] | None]:
        return [f.result() for f in [_listing_pool.submit(call) for call in rest]]

    calls = [functools.partial(_prepare_one, node, i, names[i]) for i in indexes]
    return [r for r in one_by_one_until_slow(calls, concurrently) if r is not None]


#: a child directory that ``lists_from_metadata`` and has at most this many entries is listed
#: and prepared along with its parent (``prepare_listing``)
PRELIST_MAX_ENTRIES = 64
#: how many levels below the listed directory are listed ahead
PRELIST_DEPTH = 2


@dataclass(eq=False)
class Prelisted:
    """The listing of a directory below a listed one, ready before anyone opens it."""

    below: tuple[str, ...]  # path relative to the listed directory
    node: VDir
    names: Sequence[str]
    prepared: list[tuple[int, str, VNode, Stat]]


def prepare_listing(
    node: VDir, names: Sequence[str], start: int, stop: int, listed_at: float | None = None
) -> tuple[list[tuple[int, str, VNode, Stat]], list[Prelisted]]:
    """``prepare_children``, plus the listings of the prepared child directories whose content
    comes from metadata already read (an array's views and its ``chunks/``).

    A reader walking a tree (``find``, ``ls -lR``, ``du``) opens every directory it is shown;
    each of those directories would otherwise cost two worker-thread round trips (open, read),
    more than listing it takes. Listing them here lets ``opendir``/``readdir`` answer them in
    the event loop.

    ``listed_at`` is when the listing of ``node`` that gave ``names`` started: the metadata of
    a child read since then (by that listing or by this call) is not revalidated again before
    its own listing is prepared (close-to-open as of that listing, not a second check a few
    milliseconds later); a child read earlier is."""
    since = time.monotonic() if listed_at is None else listed_at
    prepared = prepare_children(node, names, start, stop)
    return prepared, _prelist(prepared, PRELIST_DEPTH, since)


def _prelist(
    prepared: list[tuple[int, str, VNode, Stat]], depth: int, since: float
) -> list[Prelisted]:
    """Listings of the prepared child directories; a child whose metadata was read at or
    after ``since`` (by this request's ``prepare_children``) is not revalidated again."""
    out: list[Prelisted] = []
    for _, name, child, _ in prepared:
        if not (isinstance(child, VDir) and child.lists_from_metadata):
            continue
        try:
            names = list_dir(child, since)
            if len(names) > PRELIST_MAX_ENTRIES:
                continue
            below = prepare_children(child, names, 0, len(names))
        except ZarrFSError as exc:  # reported when the directory itself is opened
            log.debug("listing ahead %r: %s", name, exc)
            continue
        out.append(Prelisted((name,), child, names, below))
        if depth > 1:
            for deeper in _prelist(below, depth - 1, since):
                deeper.below = (name, *deeper.below)
                out.append(deeper)
    return out


def open_file(node: VFile, write: bool, truncate: bool) -> tuple[VHandle, object]:
    handle = node.open(write=write, truncate=truncate)
    return handle, node.cache_token()


def create_file(
    parent: VDir, name: str, write: bool, truncate: bool
) -> tuple[VFile, VHandle, object, Stat]:
    node = parent.create(name)
    handle, token = open_file(node, write, truncate)
    return node, handle, token, node.stat()


def resolve_below(parent: VDir, name: str, below: list[Path]) -> list[VNode | None]:
    """The nodes now at ``parent/name/<each relative path>`` (None where nothing is)."""
    found: dict[Path, VNode | None] = {(): parent.lookup(name)}
    for rel in sorted(below, key=len):
        if rel not in found:
            above = found.get(rel[:-1])
            found[rel] = above.lookup(rel[-1]) if isinstance(above, VDir) else None
    return [found[rel] for rel in below]


def make_dir(parent: VDir, name: str) -> tuple[VDir, Stat]:
    node = parent.mkdir(name)
    return node, node.stat()
