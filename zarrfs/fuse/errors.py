"""The one table from exceptions to errno (DESIGN §4 "Errors have one table", §5 handler rule).

Invariants:
- ``fuse_error(exc)`` always returns a ``pyfuse3.FUSEError``; every handler funnels its failures
  through it, so the only exception that can leave a handler is ``FUSEError``.
- The errno for an exception is found by walking its class MRO against ``ERRNO_TABLE``: the most
  specific listed class wins (``StoreTimeout`` is a ``StoreError``; both are EIO today, but a
  future entry for the subclass would take precedence without reordering anything).
- An exception class absent from the table is a bug somewhere below us: it becomes EIO and is
  logged with its traceback, once per raising site (type + innermost frame), not once per request.
- ``CorruptDataError`` is logged once per stored key; store and validation failures are logged at
  most once per message per ``REPEAT_WINDOW_S``, so a damaged chunk read by ``cat`` 10,000 times
  produces one log line, not 10,000.

The table (errno per failure, documented for users in the project docs):

    NodeNotFound                          ENOENT   not logged
    MetadataError (incl. UnsupportedError) EINVAL  warning
    InvalidWriteError                     EINVAL   warning (says why the write was refused)
    MemoryLimitError                      ENOMEM   warning (a chunk larger than the cache)
    CorruptDataError                      EIO      error, once per key
    StoreError, StoreTimeout, ConflictError EIO    warning (ENOSPC, EDQUOT, EROFS or EACCES
                                                    when the store's file system said so)
    ReadOnlyError                         EROFS    not logged
    NotPermittedError                     EPERM    not logged (deleting a view file)
    PermissionError (builtin)             EACCES   not logged
    anything else                         EIO      error with traceback, once per site
"""

from __future__ import annotations

import errno
import logging
import time
import traceback

import pyfuse3

from zarrfs.core.errors import (
    CorruptDataError,
    InvalidWriteError,
    MemoryLimitError,
    MetadataError,
    NodeNotFound,
    NotPermittedError,
    ReadOnlyError,
    StoreError,
)

log = logging.getLogger(__name__)

#: exception class -> (errno, log level or None for "not logged")
ERRNO_TABLE: dict[type[BaseException], tuple[int, int | None]] = {
    NodeNotFound: (errno.ENOENT, None),
    MetadataError: (errno.EINVAL, logging.WARNING),
    InvalidWriteError: (errno.EINVAL, logging.WARNING),
    MemoryLimitError: (errno.ENOMEM, logging.WARNING),
    CorruptDataError: (errno.EIO, logging.ERROR),
    StoreError: (errno.EIO, logging.WARNING),
    ReadOnlyError: (errno.EROFS, None),
    NotPermittedError: (errno.EPERM, None),
    PermissionError: (errno.EACCES, None),
}

#: a repeated message (same text) is logged again only after this many seconds
REPEAT_WINDOW_S = 60.0
#: how many distinct keys/messages the de-duplication remembers before starting afresh
_MEMORY_LIMIT = 10_000


class _Deduplicator:
    """Remembers what was logged recently; ``window=None`` means "forever"."""

    def __init__(self, window: float | None) -> None:
        self._window = window
        self._seen: dict[object, float] = {}

    def first(self, key: object) -> bool:
        now = time.monotonic()
        last = self._seen.get(key)
        if last is not None and (self._window is None or now - last < self._window):
            return False
        if len(self._seen) >= _MEMORY_LIMIT:
            self._seen.clear()
        self._seen[key] = now
        return True


_corrupt_keys = _Deduplicator(window=None)
_messages = _Deduplicator(window=REPEAT_WINDOW_S)
_crash_sites = _Deduplicator(window=None)


#: errnos of the store's own file system that a ``StoreError`` passes on as they are: a full
#: disk is ENOSPC to ``dd``, ``cp`` and ``rsync``, not a bare EIO (as NFS reports it at close)
PASSED_ON = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES})


def _passed_on(exc: BaseException) -> int | None:
    """The ``PASSED_ON`` errno of the ``OSError`` a ``StoreError`` was raised from, if any."""
    cause = exc.__cause__
    for _ in range(4):  # (a short chain: the store wraps the OSError once or twice)
        if cause is None:
            return None
        if isinstance(cause, OSError) and cause.errno in PASSED_ON:
            return cause.errno
        cause = cause.__cause__
    return None


def _table_entry(exc: BaseException) -> tuple[int, int | None] | None:
    for cls in type(exc).__mro__:
        entry = ERRNO_TABLE.get(cls)
        if entry is not None:
            if cls is StoreError:
                passed = _passed_on(exc)
                if passed is not None:
                    return passed, entry[1]
            return entry
    return None


def errno_for(exc: BaseException) -> int:
    """The errno a handler answers for ``exc`` (EIO for anything the table does not list)."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc.errno
    entry = _table_entry(exc)
    return errno.EIO if entry is None else entry[0]


def fuse_error(exc: BaseException, what: str) -> pyfuse3.FUSEError:
    """``exc`` (raised while doing ``what``) as a FUSEError, logged as the table says."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc
    entry = _table_entry(exc)
    if entry is None:
        _log_unexpected(exc, what)
        return pyfuse3.FUSEError(errno.EIO)
    _log_known(exc, what, entry[1])
    return pyfuse3.FUSEError(entry[0])


def _log_known(exc: BaseException, what: str, level: int | None) -> None:
    if level is None:
        log.debug("%s: %s: %s", what, type(exc).__name__, exc)
        return
    if isinstance(exc, CorruptDataError):
        first = _corrupt_keys.first(exc.key if exc.key is not None else str(exc))
    else:
        first = _messages.first((type(exc), str(exc)))
    if first:
        log.log(level, "%s: %s: %s", what, type(exc).__name__, exc)
    else:
        log.debug("%s (repeated): %s: %s", what, type(exc).__name__, exc)


def _log_unexpected(exc: BaseException, what: str) -> None:
    frames = traceback.extract_tb(exc.__traceback__)
    site = (type(exc), frames[-1].filename, frames[-1].lineno) if frames else (type(exc),)
    if _crash_sites.first(site):
        log.error(
            "%s: unexpected %s (answered EIO; please report this)",
            what,
            type(exc).__name__,
            exc_info=exc,
        )
    else:
        log.debug("%s (repeated): unexpected %s: %s", what, type(exc).__name__, exc)
