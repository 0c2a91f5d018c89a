"""Command-line tools: ``zarrfs info``, ``zarrfs check`` and ``zarrfs stats``.

Each tool module exposes ``main(argv: list[str]) -> int``; ``argv`` holds the arguments after
the subcommand name. This package holds what they share:

- :func:`run_tool` parses the arguments and runs the tool body so that the user never sees a
  traceback for an expected failure: a ``ZarrFSError`` becomes one ``zarrfs <name>: error: ...``
  line on stderr and exit status 1, a usage error exits 2 (argparse prints the usage), Ctrl-C
  exits 130 and a closed stdout pipe (``zarrfs info STORE | head``) exits quietly;
- :func:`walk` visits the nodes of a store depth-first, in name order, including the nodes
  skipped because their metadata is invalid (``Hierarchy.problems``), so both tools see the
  same tree;
- :func:`human_size`, :func:`format_shape` and :func:`plural` for readable output.

The tools open stores read-only and never import zarr-python, pyfuse3 or trio.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from zarrfs.core.array import Engine
from zarrfs.core.errors import MetadataError, NodeNotFound, ZarrFSError
from zarrfs.core.hierarchy import Hierarchy, Node
from zarrfs.core.stores.base import Store

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_size(nbytes: int | None) -> str:
    """``512 B``, ``1.5 KiB``, ``512.0 MiB`` (binary units); ``unknown`` for None."""
    if nbytes is None:
        return "unknown"
    if nbytes < 1024:
        return f"{nbytes} B"
    value = nbytes / 1024
    index = 0
    while value >= 1024 and index < len(_UNITS) - 1:
        value /= 1024
        index += 1
    return f"{value:.1f} {_UNITS[index]}"


def format_shape(shape: tuple[int, ...] | list[int]) -> str:
    """``(32,128,128)``; a 1-d shape is ``(10,)`` and a 0-d one ``()``."""
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ",".join(str(n) for n in shape) + ")"


def plural(n: int, noun: str) -> str:
    """``1 array``, ``2 arrays``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def default_jobs() -> int:
    """The number of CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# ----------------------------------------------------------------------------- running


@contextlib.contextmanager
def _quiet_core_warnings() -> Iterator[None]:
    """The tools report skipped nodes themselves; keep the core's one-line log about them
    (written by logging's last-resort handler when nothing is configured) off stderr."""
    logger = logging.getLogger("zarrfs.core.hierarchy")
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


def run_tool(
    parser: argparse.ArgumentParser,
    argv: list[str],
    body: Callable[[argparse.Namespace], int],
) -> int:
    """Parse ``argv`` and run ``body``; map expected failures to one line and an exit status."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage (or --help)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        with _quiet_core_warnings():
            return body(args)
    except ZarrFSError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (``| head``): stop quietly, and keep Python's exit-time flush
        # of stdout from reporting the same broken pipe
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1


# ----------------------------------------------------------------------------- the tree


@dataclass(frozen=True)
class Entry:
    """One place in the tree: a valid node, an implicit root, or a node skipped as invalid."""

    path: str
    depth: int
    #: the node; None for an implicit root (no metadata) or a skipped node
    node: Node | None
    #: why the node was skipped (invalid or unsupported metadata); None if it is usable
    problem: str | None = None
    #: True for the last child of its parent (for drawing the tree)
    last: bool = True

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1] if self.path else "/"


def open_hierarchy(store: Store, threads: int = 4) -> Hierarchy:
    """A hierarchy for a one-shot tool run: no prefetch, small caches (close its engine)."""
    engine = Engine(cache_size=16 << 20, threads=threads, prefetch_bytes=0, read_only=True)
    return Hierarchy(store, engine)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def walk(hierarchy: Hierarchy) -> Iterator[Entry]:
    """Every node of the store depth-first (root first, children by name), skipped ones included.

    Raises ``NodeNotFound`` when the store holds no Zarr node at all.
    """
    store = hierarchy.store
    root: Node | None = None
    problem: str | None = None
    try:
        root = hierarchy.node("")
    except NodeNotFound:
        if not store.listable:
            raise NodeNotFound(
                f"no Zarr node at the root of {store.url} (and the store cannot be listed)"
            ) from None
    except MetadataError as exc:
        problem = str(exc)
    first: list[Entry] = []
    if root is None or not root.is_array:
        first = _child_entries(hierarchy, "", 1)
    if root is None and problem is None and not first:
        raise NodeNotFound(f"no Zarr node found in {store.url}")
    yield Entry("", 0, root, problem)
    # depth-first with an explicit stack, so deep trees cannot exhaust the recursion limit
    stack: list[Entry] = list(reversed(first))
    while stack:
        entry = stack.pop()
        yield entry
        if entry.node is not None and not entry.node.is_array:
            stack.extend(reversed(_child_entries(hierarchy, entry.path, entry.depth + 1)))


def _child_entries(hierarchy: Hierarchy, path: str, depth: int) -> list[Entry]:
    children = {n.path: n for n in hierarchy.children(path)}
    problems = {p: r for p, r in dict(hierarchy.problems).items() if p and _parent(p) == path}
    problems = {p: r for p, r in problems.items() if p not in children}
    paths = sorted([*children, *problems], key=lambda p: p.rsplit("/", 1)[-1])
    return [
        Entry(p, depth, children.get(p), problems.get(p), last=i == len(paths) - 1)
        for i, p in enumerate(paths)
    ]
