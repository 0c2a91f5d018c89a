"""``zarrfs check STORE [--jobs N] [--quiet]``: decode every stored chunk and report damage.

Spec: Zarr v3 core "Chunk encoding" and "Storage keys"; ``sharding_indexed`` "Binary shard
format" (every index entry must lie inside the shard); ``crc32c`` codec (checksums are verified
by decoding through the chain).

What is checked, per array:
- the stored chunks are found by listing the array's prefix when the store can list; keys there
  that are neither the array's metadata nor a chunk of its current grid are *stray keys*
  (warnings: they do not make the store unreadable). A store that cannot list is checked by
  asking for every chunk key of the grid (missing chunks are fine: they read as fill value);
- a chunk is decoded through the whole codec chain, which verifies every ``crc32c`` in it and
  the decoded size; a shard of a plain ``sharding_indexed`` chain is read once, its index is
  validated against the shard's size and every inner chunk present is decoded one at a time
  (so one report names every damaged inner chunk of that shard); other chains holding a
  sharding codec decode the whole shard through the chain;
- nodes whose metadata is invalid or unsupported are reported as errors (they cannot be read);
  variable-length arrays (``zarrfs.core.vlen``) are checked chunk by chunk like the others;
- on a directory store, temporary files a crashed writer left (``stores/leftovers``) are
  reported as warnings with their size, never removed (a writable mount removes them).

Invariants:
- the exit status is 1 when any object is damaged or unreadable or any node is invalid, 0
  otherwise (stray keys alone keep 0); every damaged object is reported once, by its store key;
- memory is bounded: at most ``jobs`` chunks (or shards, plus one decoded inner chunk each) are
  held at a time; no decoded data is cached; at most ``2 * jobs`` checks are queued;
- the progress bar goes to stderr only when stderr is a terminal and the run lasts more than
  ``PROGRESS_DELAY`` seconds; findings go to stdout as they are found.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zarrfs.core.codecs.sharding import ShardingCodec
from zarrfs.core.errors import CorruptDataError, StoreError, ZarrFSError
from zarrfs.core.grid import RegularGrid
from zarrfs.core.hierarchy import Node
from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.core.sharding import format as shard_format
from zarrfs.core.stores import leftovers
from zarrfs.core.stores.base import Store
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.localgroup import TEMP_PREFIX
from zarrfs.core.stores.registry import open_store
from zarrfs.core.vlen import VlenArray, open_vlen
from zarrfs.tools import default_jobs, human_size, open_hierarchy, plural, run_tool, walk
from zarrfs.tools.progress import Progress

Coords = tuple[int, ...]

#: metadata document names inside an array's prefix that are never stray
_METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs"})
#: damaged inner chunks named in one shard's report before the rest are only counted
_MAX_INNER_REASONS = 3
#: why a leftover temporary file is reported
_LEFTOVER = (
    "left by a zarrfs process that ended before storing it (not a key; the next writable "
    "mount of the store removes it)"
)
#: seconds a run must last before the progress bar appears (short runs stay silent)
PROGRESS_DELAY = 1.0


@dataclass(frozen=True)
class Finding:
    """One problem: ``kind`` is ``damaged`` (bad bytes), ``unreadable`` (the store failed),
    ``invalid`` (node metadata), or a warning: ``stray`` (a key that is no chunk of the
    grid) or ``leftover`` (a temporary file a crashed writer left: ``stores/leftovers``)."""

    kind: str
    key: str
    reason: str

    @property
    def is_error(self) -> bool:
        return self.kind not in ("stray", "leftover")

    def __str__(self) -> str:
        if not self.is_error:
            what = "stray key" if self.kind == "stray" else "leftover temporary file"
            return f"warning: {what} {self.key}: {self.reason}"
        return f"{self.kind}: {self.key}: {self.reason}"


@dataclass
class Outcome:
    """What checking one stored object found."""

    stored: bool = False
    nbytes: int = 0
    inner_chunks: int = 0
    finding: Finding | None = None


@dataclass
class CheckReport:
    arrays: int = 0
    #: chunk keys looked at (listed keys, or grid keys on a store that cannot list)
    chunks_total: int = 0
    #: of those, objects that were stored and read
    chunks_stored: int = 0
    inner_chunks: int = 0
    bytes_read: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    @property
    def stray(self) -> list[Finding]:
        return [f for f in self.findings if not f.is_error]

    @property
    def ok(self) -> bool:
        return not self.errors


# ----------------------------------------------------------------------------- one array


class ArrayChecker:
    """Decodes the stored objects of one array; holds only metadata and prepared chains."""

    def __init__(self, path: str, metadata: ArrayMetadata) -> None:
        self.path = path
        self.metadata = metadata
        self.grid = RegularGrid(metadata.shape, metadata.chunk_shape)
        self.spec = metadata.chunk_spec()
        chain = metadata.codecs
        codec = chain.array_bytes
        self.sharding: ShardingCodec | None = None
        if isinstance(codec, ShardingCodec) and not chain.array_array and not chain.bytes_bytes:
            self.sharding = codec
            self.chunks_per_shard = codec.chunks_per_shard(self.spec.shape)
            self.inner = codec.inner_chain(self.spec)
            self.max_size = codec.max_encoded_size(self.spec)
        else:
            self.prepared = chain.prepare(self.spec)

    def key(self, coords: Coords) -> str:
        return self.metadata.chunk_store_key(self.path, coords)

    def classify(self, key: str) -> Coords | None:
        """The grid coords of a listed key, or None if it is no chunk of the current grid."""
        rel = key[len(self.metadata.chunk_store_prefix(self.path)) :]
        coords = self.metadata.chunk_key_encoding.decode(rel, self.metadata.ndim)
        if coords is None or not self.grid.contains(coords):
            return None
        return coords

    def check(self, store: Store, key: str) -> Outcome:
        """Read and decode the object at ``key``; never raises for bad data or a failing store."""
        try:
            data = store.get(key)
        except StoreError as exc:
            return Outcome(finding=Finding("unreadable", key, _reason(exc, key)))
        if data is None:
            return Outcome()
        out = Outcome(stored=True, nbytes=len(data))
        try:
            if self.sharding is None:
                self.prepared.decode(data)
            else:
                out.inner_chunks = self._check_shard(self.sharding, data, key, out)
        except CorruptDataError as exc:
            out.finding = Finding("damaged", key, _reason(exc, key))
        return out

    def _check_shard(self, codec: ShardingCodec, data: bytes, key: str, out: Outcome) -> int:
        if len(data) > self.max_size:
            raise CorruptDataError(
                f"shard is {len(data)} bytes, more than the {self.max_size} any valid shard "
                "of this array can take"
            )
        try:
            index = shard_format.split_shard(
                data, codec.index_codecs, self.chunks_per_shard, codec.index_location
            )
        except CorruptDataError as exc:
            text = str(exc)
            raise CorruptDataError(text if "index" in text else f"shard index: {text}") from exc
        view = memoryview(data)
        bad: list[str] = []
        decoded = 0
        for coords, offset, nbytes in index.present():
            try:
                codec.decode_inner(view[offset : offset + nbytes], self.spec, coords, self.inner)
                decoded += 1
            except CorruptDataError as exc:
                bad.append(_reason(exc, key))
        if bad:
            more = len(bad) - _MAX_INNER_REASONS
            reason = "; ".join(bad[:_MAX_INNER_REASONS])
            if more > 0:
                reason += f" (and {more} more damaged inner chunks)"
            out.finding = Finding("damaged", key, reason)
        return decoded


def _reason(exc: ZarrFSError, key: str) -> str:
    """The error message without a leading ``key: `` (the report names the key already)."""
    text = str(exc)
    return text[len(key) + 2 :] if text.startswith(f"{key}: ") else text


@dataclass(frozen=True)
class Task:
    """Check the object at ``key`` of ``store`` with ``checker``."""

    checker: ArrayChecker
    store: Store
    key: str

    def run(self) -> Outcome:
        return self.checker.check(self.store, self.key)


def plan(
    store: Store, node: Node, checker: ArrayChecker
) -> tuple[Iterable[Task], int, list[Finding]]:
    """(tasks, number of tasks, stray-key findings) for one array.

    Only the chunk keys are kept until the run (tasks are made as they are consumed), so a
    listed array of a million chunks costs its key strings, not a million task objects."""
    if not store.listable:
        tasks = (Task(checker, store, checker.key(c)) for c in checker.grid.all_chunks())
        return tasks, checker.grid.nchunks, []
    prefix = checker.metadata.chunk_store_prefix(node.path)
    skip = _METADATA_NAMES | set(node.format.metadata_keys(node.metadata))
    keys: list[str] = []
    stray: list[Finding] = []
    for key in sorted(store.list_prefix(prefix)):
        if key[len(prefix) :] in skip:
            continue
        if checker.classify(key) is None:
            grid = "x".join(str(n) for n in checker.grid.grid_shape) or "1"
            stray.append(
                Finding("stray", key, f"not a chunk key of array /{node.path} (grid {grid})")
            )
        else:
            keys.append(key)
    return (Task(checker, store, key) for key in keys), len(keys), stray


# ----------------------------------------------------------------------------- the run


def check_store(
    store: Store,
    jobs: int = 1,
    *,
    on_finding: Callable[[Finding], None] | None = None,
    progress: Callable[[int], Progress] | None = None,
) -> CheckReport:
    """Check every array of ``store``; ``on_finding`` is called (in this thread) per finding."""
    report = CheckReport()

    def found(finding: Finding) -> None:
        report.findings.append(finding)
        if on_finding is not None:
            on_finding(finding)

    hierarchy = open_hierarchy(store, threads=min(jobs, 8))
    try:
        plans: list[Iterable[Task]] = []
        total = 0
        for entry in walk(hierarchy):
            if entry.problem is not None:
                vlen = _vlen(store, entry.path)
                if vlen is None:
                    found(Finding("invalid", "/" + entry.path, entry.problem))
                else:
                    report.arrays += 1
                    _check_vlen(store, vlen, report, found)
                continue
            node = entry.node
            if node is None or not isinstance(node.metadata, ArrayMetadata):
                continue
            try:
                checker = ArrayChecker(node.path, node.metadata)
            except ZarrFSError as exc:
                found(Finding("invalid", "/" + node.path, str(exc)))
                continue
            report.arrays += 1
            tasks, count, stray = plan(store, node, checker)
            for finding in stray:
                found(finding)
            plans.append(tasks)
            total += count
    finally:
        hierarchy.engine.close()
    if isinstance(store, LocalStore):  # reported, never removed here (a writable mount does)
        for key, size in leftovers.find(store.root, TEMP_PREFIX):
            found(Finding("leftover", key, f"{human_size(size)}, {_LEFTOVER}"))
    report.chunks_total += total
    bar = progress(total) if progress is not None else None
    for outcome in _run_tasks((t for tasks in plans for t in tasks), jobs):
        if outcome.stored:
            report.chunks_stored += 1
            report.bytes_read += outcome.nbytes
            report.inner_chunks += outcome.inner_chunks
        if outcome.finding is not None:
            if bar is not None:
                bar.clear()
            found(outcome.finding)
        if bar is not None:
            bar.update(1, outcome.nbytes)
    if bar is not None:
        bar.clear()
    return report


def _vlen(store: Store, path: str) -> VlenArray | None:
    try:
        return open_vlen(store, path)
    except ZarrFSError:
        return None


def _check_vlen(
    store: Store, arr: VlenArray, report: CheckReport, found: Callable[[Finding], None]
) -> None:
    """Decode every stored chunk of a variable-length array, one at a time."""
    for coords in np.ndindex(*arr.grid_shape):
        key = arr.chunk_key(tuple(coords))
        report.chunks_total += 1
        try:
            size = store.size(key)
            if size is None:
                continue
            arr.read_chunk(store, tuple(coords))
        except CorruptDataError as exc:
            found(Finding("damaged", "/" + key, str(exc).removeprefix(f"{key}: ")))
        except ZarrFSError as exc:
            found(Finding("unreadable", "/" + key, str(exc)))
        else:
            report.chunks_stored += 1
            report.bytes_read += size


def _run_tasks(tasks: Iterator[Task], jobs: int) -> Iterator[Outcome]:
    """Outcomes of ``tasks`` run on ``jobs`` threads, at most ``2 * jobs`` queued at a time."""
    if jobs <= 1:
        for task in tasks:
            yield task.run()
        return
    pool = ThreadPoolExecutor(jobs, thread_name_prefix="zarrfs-check")
    pending: set[Future[Outcome]] = set()
    try:
        for task in tasks:
            if len(pending) >= 2 * jobs:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
            pending.add(pool.submit(task.run))
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield fut.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ----------------------------------------------------------------------------- main


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zarrfs check",
        description="Decode every stored chunk of every array, verify checksums and shard "
        "indexes, and report damaged objects (exit status 1 when any is found).",
    )
    parser.add_argument(
        "store", metavar="STORE", help="path or URL of the store (file://, zip, ...)"
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=default_jobs(),
        metavar="N",
        help="chunks checked in parallel (default: the number of CPUs)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print only problems: no progress, no summary"
    )
    return parser


def _summary(report: CheckReport) -> str:
    inner = f" ({report.inner_chunks} inner chunks)" if report.inner_chunks else ""
    head = (
        f"checked {plural(report.arrays, 'array')}: "
        f"{plural(report.chunks_stored, 'stored chunk')}{inner}, "
        f"{human_size(report.bytes_read)} read"
    )
    counts: dict[str, int] = {}
    for f in report.findings:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    parts = [f"{n} {kind}" for kind, n in sorted(counts.items())]
    return "; ".join([head, *parts, "OK" if report.ok else "FAILED"])


def _run(args: argparse.Namespace) -> int:
    stdout, stderr = sys.stdout, sys.stderr
    bar: list[Progress] = []

    def on_finding(finding: Finding) -> None:
        stdout.write(f"{finding}\n")
        stdout.flush()

    def make_bar(total: int) -> Progress:
        enabled = not args.quiet and _isatty(stderr)
        bar.append(Progress(stderr, total, enabled=enabled, delay=PROGRESS_DELAY))
        return bar[0]

    with open_store(args.store, read_only=True) as store:
        try:
            report = check_store(store, args.jobs, on_finding=on_finding, progress=make_bar)
        finally:
            for b in bar:
                b.clear()
    if not args.quiet:
        stdout.write(_summary(report) + "\n")
    return 0 if report.ok else 1


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def main(argv: list[str]) -> int:
    """``zarrfs check STORE [--jobs N] [--quiet]``; 0 when clean, 1 on damage or error."""
    return run_tool(build_parser(), argv, _run)
