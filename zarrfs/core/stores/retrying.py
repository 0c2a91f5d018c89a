"""Deadlines and retries for the requests of a remote store (``remote.py``, ``objstore.py``).

Invariants:
- One public store call has one deadline; ``Retrying.call`` runs an attempt until it succeeds,
  fails for good, or the next attempt (after its backoff) would not fit before the deadline.
- Transient failures -- 5xx other than 501/505, 408, 429, connection errors, timeouts, and the
  ``Transient`` an attempt raises itself (a body shorter than announced) -- are retried at most
  ``retries`` times with exponential backoff (0.1 s doubling up to 4 s) and jitter. Any other
  failure raises ``StoreError`` at once; access denied says which credentials are read.
- Giving up raises ``StoreTimeout`` when the last failure was a timeout, else ``StoreError``.
  The exceptions of this module other than those two never leave ``remote.py``: they carry an
  attempt's outcome (416, a server ignoring ranges, a failed precondition) back to its caller.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

from obstore import exceptions as oe

from zarrfs.core.errors import StoreError, StoreTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 6
_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 4.0
_STATUS = re.compile(r"status code: (\d{3})")
#: how obstore (reqwest, hyper) describes a request cut off by its timeout
_TIMEOUT_MARKS = ("TimedOut", "kind: Timeout", "timed out")
#: obstore raises the builtin FileNotFoundError for a 404
NOT_FOUND = (oe.NotFoundError, FileNotFoundError)


class Transient(Exception):
    """A failure worth retrying (raised inside an attempt)."""

    def __init__(self, message: str, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class RangeUnsatisfiable(Exception):
    """The server answered 416: the range starts at or past the end."""


class NoRangeSupport(Exception):
    """The server sent the whole object for a range request."""


class Changed(Exception):
    """An ``If-Match`` read found another version."""


class Conflict(Exception):
    """A conditional PUT failed its precondition."""


class NoConditional(Exception):
    """The server does not support conditional PUTs."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().split("\n", 1)[0]
    return text if len(text) <= limit else text[:limit] + "..."


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an obstore error names, if any."""
    match = _STATUS.search(str(exc))
    return int(match.group(1)) if match else None


class Retrying:
    """The retry policy of one store: its URL (for messages), deadline and retry budget."""

    def __init__(
        self, url: str, timeout: float, attempt_timeout: float | None, retries: int
    ) -> None:
        self.url = url
        self.timeout = float(timeout)
        self.attempt_timeout = float(attempt_timeout or timeout / 3)
        self.retries = retries

    def call(self, op: str, key: str, attempt: Callable[[], T], deadline: float | None = None) -> T:
        """Run ``attempt`` until it succeeds, fails for good, or ``deadline`` (a
        ``time.monotonic()`` value; default ``timeout`` from now) is near."""
        start = time.monotonic()
        deadline = start + self.timeout if deadline is None else deadline
        if start >= deadline:
            raise StoreTimeout(f"{self.url}: {op} {key!r}: no time left before the deadline")
        tries = 0
        while True:
            tries += 1
            try:
                return attempt()
            except Transient as exc:
                failure = exc
            except (oe.BaseError, OSError) as exc:
                failure = self.classify(op, key, exc)
            now = time.monotonic()
            delay = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (tries - 1)) * random.uniform(0.5, 1)
            if tries > self.retries or now + delay + self.attempt_timeout > deadline:
                kind = StoreTimeout if failure.timeout else StoreError
                raise kind(
                    f"{self.url}: {op} {key!r} failed after {tries} attempt(s) in "
                    f"{now - start:.1f} s: {failure}"
                )
            log.info("%s: %s %r: %s; retry %d in %.2f s", self.url, op, key, failure, tries, delay)
            time.sleep(delay)

    def classify(self, op: str, key: str, exc: Exception) -> Transient:
        """A transient failure to retry, or raise the permanent ``StoreError`` for ``exc``."""
        message = first_line(exc)
        if isinstance(exc, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            raise StoreError(
                f"{self.url}: {op} {key!r}: access denied ({message}); check the credentials "
                "(AWS_*/GOOGLE_*/AZURE_* environment variables) or use -o anon for public data"
            ) from None
        if not isinstance(exc, oe.GenericError):
            raise StoreError(f"{self.url}: {op} {key!r}: {message}") from None
        status = status_of(exc)
        if status is not None and 400 <= status < 500 and status not in (408, 429):
            raise StoreError(f"{self.url}: {op} {key!r}: {message}") from None
        if status in (501, 505):
            raise StoreError(f"{self.url}: {op} {key!r}: {message}") from None
        text = str(exc)
        timed_out = status is None and any(mark in text for mark in _TIMEOUT_MARKS)
        return Transient(message, timeout=timed_out)
