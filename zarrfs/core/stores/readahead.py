"""Reading the metadata below listed directories ahead, in a helper process (directory stores).

A tree walk through the mount (``find``, ``ls -lR``, ``du``) lists every directory, and listing
an array reads its metadata document and the sizes of its chunk files. With a cold page cache
each of those is a disk read the daemon waits for, one after the other. A thread of the daemon
cannot read ahead meanwhile: preparing the views is Python work that holds the interpreter
lock, so such a thread waits for the lock about as long as the reads it would save (measured:
a reading thread finished with the walk, not before it). A helper process reads ahead instead:
when a directory is listed, the hierarchy sends the prefixes of its children
(``ListingReadAhead.send``), and the helper walks below each one (``DEPTH`` levels, at most
``MAX_ENTRIES`` entries per prefix), reading the metadata documents (``DOCUMENTS``, up to
``MAX_DOCUMENT`` bytes) and ``lstat``-ing every other entry, so the daemon then finds them in
the kernel's page and inode caches.

Invariants:
- best effort: nothing the daemon serves depends on the helper. A request the pipe cannot take
  at once is dropped (the daemon never waits for the helper); a helper that cannot start or
  died is not started again (logged once).
- Bounded: at most ``PREFIXES_PER_LISTING`` prefixes per listing, each walked at most
  ``STALE_SECONDS`` after it was sent (what a plain ``ls`` of a large store starts ends by
  then; a walk keeps sending fresh prefixes).
- The helper only reads. It never follows a symbolic link (``O_NOFOLLOW``, ``d_type``), never
  leaves the store root (a prefix is walked one real directory at a time from the root, and
  ``.``, ``..`` and empty components are refused), and skips a prefix walked in the last
  ``FRESH_SECONDS`` (itself or an ancestor).
- It exits when its standard input closes: at the store's ``close``, or when the daemon dies
  (the kernel closes the pipe), so it never outlives the daemon.

This module uses the standard library only: the helper runs this file as a script
(``python -I -S readahead.py ROOT``), without importing zarrfs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: documents read ahead (the other entries are only ``lstat``-ed)
DOCUMENTS = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
#: bytes of a document read ahead
MAX_DOCUMENT = 64 << 10
#: directory levels walked below a prefix (a group's arrays, their content and ``c/``)
DEPTH = 3
#: entries visited below one prefix
MAX_ENTRIES = 20_000
#: a prefix walked this recently (itself or an ancestor) is not walked again
FRESH_SECONDS = 60.0
#: a prefix sent longer ago than this is skipped: a listing (``ls`` of a large store) starts
#: at most this much reading ahead, a walk keeps sending fresh prefixes
STALE_SECONDS = 20.0
#: prefixes sent per listing (the first ones: a walk visits them first)
PREFIXES_PER_LISTING = 1000
#: prefixes sent in one write: whole lines, at most the pipe's atomic write size
_PIPE_ATOMIC = 4096

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


# ----------------------------------------------------------------------------- the helper


def _components(prefix: str) -> list[str] | None:
    parts = prefix.strip("/").split("/")
    if any(p in ("", ".", "..") or "\0" in p for p in parts):
        return None
    return parts


def walk(root_fd: int, prefix: str, touched: list[str] | None = None) -> None:
    """Read ahead below ``prefix`` (relative to ``root_fd``). ``touched`` (tests) collects the
    relative paths read or ``lstat``-ed."""
    parts = _components(prefix)
    if parts is None:
        return
    fd = root_fd
    try:
        for part in parts:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = child
    except OSError:  # gone, not a directory, or a link: nothing to read ahead
        if fd != root_fd:
            os.close(fd)
        return
    try:
        _below(fd, "/".join(parts), DEPTH, [MAX_ENTRIES], touched)
    finally:
        os.close(fd)


def _below(fd: int, at: str, depth: int, budget: list[int], touched: list[str] | None) -> None:
    try:  # in name order: the order a walk of the mount lists them
        entries = sorted(os.scandir(fd), key=lambda e: e.name)
    except OSError:
        return
    subdirs = []
    for entry in entries:
        if budget[0] <= 0:
            return
        budget[0] -= 1
        path = f"{at}/{entry.name}"
        try:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
                continue
            if entry.name in DOCUMENTS and entry.is_file(follow_symlinks=False):
                doc = os.open(entry.name, _FILE_FLAGS, dir_fd=fd)
                try:
                    os.read(doc, MAX_DOCUMENT)
                finally:
                    os.close(doc)
            else:
                entry.stat(follow_symlinks=False)
        except OSError:  # removed or replaced meanwhile
            continue
        if touched is not None:
            touched.append(path)
    if depth <= 1:
        return
    for name in subdirs:
        if budget[0] <= 0:
            return
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue
        try:
            _below(child, f"{at}/{name}", depth - 1, budget, touched)
        finally:
            os.close(child)


def _lines(stream: Any) -> Iterator[str]:
    """Prefixes as the daemon wrote them: names that are not UTF-8 arrive as their bytes."""
    for raw in stream:
        yield raw.decode("utf-8", "surrogateescape")


def serve(root: str, lines: Sequence[str] | None = None) -> None:
    """The helper: walk every prefix read from standard input (or ``lines``) until it ends.
    A line is ``<time.monotonic() when sent> <prefix>``; one older than ``STALE_SECONDS`` is
    skipped."""
    root_fd = os.open(root, _DIR_FLAGS)
    walked: dict[str, float] = {}
    source = lines if lines is not None else _lines(sys.stdin.buffer)
    for line in source:
        sent, _, prefix = line.rstrip("\n").partition(" ")
        prefix = prefix.strip("/")
        now = time.monotonic()
        try:
            if now - float(sent) > STALE_SECONDS:  # nobody walks there any more
                continue
        except ValueError:
            continue
        parts = prefix.split("/")
        if any(now - walked.get("/".join(parts[:i]), -FRESH_SECONDS) < FRESH_SECONDS
               for i in range(1, len(parts) + 1)):  # fmt: skip
            continue
        walk(root_fd, prefix)
        walked[prefix] = time.monotonic()
        if len(walked) > 100_000:
            walked.clear()
    os.close(root_fd)


# ----------------------------------------------------------------------------- the daemon side


class ListingReadAhead:
    """The daemon's end: starts the helper on first use and sends it prefixes."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = False

    def send(self, prefixes: Sequence[str]) -> None:
        """Ask the helper to read ahead below ``prefixes`` (keys relative to the root).
        Never blocks: what the pipe cannot take now is dropped."""
        sent = f"{time.monotonic():.3f} "
        encoded = (
            (sent + p.strip("/") + "\n").encode("utf-8", "surrogateescape")
            for p in prefixes[:PREFIXES_PER_LISTING]
            if p and "\n" not in p
        )
        lines = [line for line in encoded if len(line) <= _PIPE_ATOMIC]
        if not lines:
            return
        chunks = [b""]  # whole lines of at most _PIPE_ATOMIC bytes: each written whole or not
        for line in lines:
            if chunks[-1] and len(chunks[-1]) + len(line) > _PIPE_ATOMIC:
                chunks.append(b"")
            chunks[-1] += line
        with self._lock:
            fd = self._pipe()
            if fd is None:
                return
            for chunk in chunks:
                try:
                    os.write(fd, chunk)
                except BlockingIOError:  # the helper is behind: drop the rest
                    return
                except OSError as exc:
                    self._give_up(f"the listing read-ahead helper stopped: {exc}")
                    return

    def _pipe(self) -> int | None:
        if self._failed:
            return None
        if self._proc is None:
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", __file__, self.root],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            except OSError as exc:
                self._give_up(f"cannot start the listing read-ahead helper: {exc}")
                return None
            assert self._proc.stdin is not None
            os.set_blocking(self._proc.stdin.fileno(), False)
        assert self._proc.stdin is not None
        return self._proc.stdin.fileno()

    def _give_up(self, why: str) -> None:
        self._failed = True
        log.info("%s; listings are not read ahead", why)
        self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:  # a write it could not take is lost with it
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """Stop the helper (it exits at the end of its input)."""
        with self._lock:
            self._stop()


if __name__ == "__main__":
    try:
        serve(sys.argv[1])
    except (KeyboardInterrupt, BrokenPipeError):
        pass
