"""``RemoteStore``: a ``Store`` over one obstore client (S3, GCS, Azure, HTTP), with deadlines,
retries, coalesced concurrent range reads and conditional writes. The URL factories are in
``objstore.py`` (``s3://``, ``gs://``, ``az://``) and ``http.py`` (``http(s)://``).

Spec: Zarr v3 core, "Stores" (get, get_partial_values, set, erase, list_dir) mapped onto object
storage requests; RFC 9110 ranges (``bytes=a-b``, ``bytes=-n``) and preconditions (ETag,
``If-Match``, ``If-None-Match``).

Invariants:
- Deadline. One public call (``get``, ``get_many``, ``set``, a listing ...) has one deadline,
  ``timeout`` seconds (default 30) from its start, shared by every request it makes (a HEAD
  after a 416, the parts of ``get_many``, the re-read after a failed precondition). Each
  attempt is cut off by the client after ``attempt_timeout`` (default ``timeout / 3``); a
  ``get_many`` part still queued at the deadline fails without starting. Which failures are
  retried, and how, is ``retrying.py``'s; giving up raises ``StoreTimeout`` or ``StoreError``,
  which the FUSE layer turns into EIO for the bytes concerned, never into fill values.
- Absence. ``get`` returns None only when the server said 404 for that key.
- Whole bytes. A body is accepted only when its length equals the range the server says it sent
  (the whole object: its size). The ranges of one key that ``get_many`` fetches in several
  requests must all carry the same ETag; if the object changed in between, they are fetched
  again, the later ones with ``If-Match``.
- ``get_many`` merges the byte ranges of one key that lie within ``coalesce_gap`` of each other
  (and all suffix ranges of a key into the longest one) and fetches different keys and separate
  spans concurrently on a pool of ``concurrency`` threads.
- Range clipping follows the store contract (``base.py``): a range past the end is clipped, an
  empty or wholly past-the-end range is ``b""``; the answers a server gives for those (416, a
  200 for an empty object) are resolved with one HEAD request.

Conditional writes (no silent overwrite of a concurrent change). The store remembers, per key,
the version (ETag and generation) it last saw in a *data read* (``get``/``get_many``) or in its
own ``set``, or that the key was missing (a 404, its own ``delete``). ``set`` is a single PUT:
- when a version is remembered: ``If-Match`` it (obstore ``PutMode`` update);
- when the key was seen missing: ``If-None-Match: *`` (``PutMode`` "create");
- when the key was never read here (a chunk overwritten whole without being read first) or was
  forgotten (the memory keeps the ``remember`` most recent keys): an unconditional PUT.
So a write-back whose data was based on an object that someone else has changed since fails
with ``ConflictError`` (EIO) and one log line, and the other writer's object survives. The
remembered version is kept after a conflict, so later flushes of the same dirty data fail too.
A PUT retried after a transient failure that then meets a failed precondition re-reads the
object: if it holds exactly our bytes, the earlier attempt landed and the write succeeded.
HEAD requests (``size``, ``version``) and listings never change what is remembered, so a
metadata revalidation cannot bless data read before it. ``delete`` is unconditional (obstore
offers no conditional delete). A server that rejects conditional PUTs as unsupported gets
unconditional ones from then on, after one warning.

Optional disk cache (``diskcache.py``): objects read whole (or through a range that covered
the whole object) that have an ETag are kept on disk; a later read of the key, whole or ranged,
asks the server with ``If-None-Match`` and a 304 serves the cached bytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import obstore
from obstore import exceptions as oe

from zarrfs.core.errors import ConflictError, ReadOnlyError, StoreError
from zarrfs.core.stores.base import (
    ByteRange,
    RangeRequest,
    Store,
    check_key,
    check_prefix,
    resolve_range,
    slice_range,
)
from zarrfs.core.stores.diskcache import DiskCache
from zarrfs.core.stores.rangeplan import Fetched, KeyPlan, consistent, is_empty, obstore_range
from zarrfs.core.stores.retrying import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    NOT_FOUND,
    Changed,
    Conflict,
    NoConditional,
    NoRangeSupport,
    RangeUnsatisfiable,
    Retrying,
    Transient,
    first_line,
    status_of,
)
from zarrfs.core.stores.versions import VersionMemory

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_CONCURRENCY = 16
#: ranges of one key closer than this are fetched as one span
DEFAULT_COALESCE_GAP = 256 << 10
#: largest object fetched whole when a server ignores Range headers
DEFAULT_MAX_FULL_GET = 256 << 20
#: keys whose last seen version is remembered for conditional writes
DEFAULT_REMEMBER = 100_000


class RemoteStore(Store):
    """A ``Store`` over one obstore client, with deadlines, retries and conditional writes."""

    def __init__(
        self,
        backend: Any,
        url: str,
        *,
        read_only: bool = False,
        listable: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        attempt_timeout: float | None = None,
        retries: int = DEFAULT_RETRIES,
        concurrency: int = DEFAULT_CONCURRENCY,
        coalesce_gap: int = DEFAULT_COALESCE_GAP,
        max_full_get: int = DEFAULT_MAX_FULL_GET,
        remember: int = DEFAULT_REMEMBER,
        disk_cache: DiskCache | None = None,
    ) -> None:
        if timeout <= 0 or retries < 0 or concurrency < 1:
            raise StoreError("timeout and concurrency must be positive, retries >= 0")
        self.backend = backend
        self.url = url
        self.writable = not read_only
        self.listable = listable
        self.retrying = Retrying(url, timeout, attempt_timeout, retries)
        self.timeout = self.retrying.timeout
        self.attempt_timeout = self.retrying.attempt_timeout
        self.coalesce_gap = coalesce_gap
        self.max_full_get = max_full_get
        self.conditional_writes = True
        self.disk_cache = disk_cache
        self._versions = VersionMemory(remember)
        self._ranges_ignored = False
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="zarrfs-remote")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, read_only={not self.writable})"

    def call(self, op: str, key: str, attempt: Callable[[], T], deadline: float | None = None) -> T:
        """``attempt`` under this store's deadline and retries (``retrying.Retrying.call``)."""
        return self.retrying.call(op, key, attempt, deadline)

    def _remember(self, key: str, fetched: Fetched) -> None:
        self._versions.remember(key, fetched)

    # -- reading ----------------------------------------------------------------------------

    def _head(self, key: str, deadline: float | None = None) -> Any:
        """The object's metadata (obstore ``ObjectMeta``), or None if missing."""

        def attempt() -> Any:
            try:
                return obstore.head(self.backend, key)
            except NOT_FOUND:
                return None

        return self.call("HEAD", key, attempt, deadline)

    def _attempt_get(
        self, key: str, rng: RangeRequest, if_match: str | None, cached: str | None
    ) -> Fetched:
        options: dict[str, Any] = {}
        if rng is not None:
            options["range"] = obstore_range(rng)
        if if_match is not None:
            options["if_match"] = if_match
        if cached is not None:
            options["if_none_match"] = cached
        try:
            result = obstore.get(self.backend, key, options=options or None)  # type: ignore[arg-type]
            meta = result.meta
            lo, hi = result.range
            body = result.bytes()
        except NOT_FOUND:
            return Fetched(None)
        except oe.NotModifiedError:
            assert self.disk_cache is not None and cached is not None
            data = self.disk_cache.read(key, cached, rng)
            if data is None:  # the entry went away: ask again without it
                return self._attempt_get(key, rng, if_match, None)
            return Fetched(data, cached)
        except oe.PreconditionError:
            raise Changed() from None
        except oe.NotSupportedError as exc:
            if "range" in str(exc).lower():
                raise NoRangeSupport() from None
            raise
        except oe.GenericError as exc:
            if status_of(exc) == 416:
                raise RangeUnsatisfiable() from None
            if "non-partial" in str(exc).lower():
                raise NoRangeSupport() from None
            raise
        data = bytes(body)
        expected = meta["size"] if rng is None else hi - lo
        if len(data) != expected:
            raise Transient(f"body of {len(data)} bytes where {expected} were announced")
        return Fetched(data, meta.get("e_tag"), meta.get("version"), meta.get("size"))

    def _fetch(
        self,
        key: str,
        rng: RangeRequest,
        if_match: str | None = None,
        deadline: float | None = None,
    ) -> Fetched:
        """One object or range, with retries, clipping and the no-Range fallback, all before
        one deadline."""
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        if is_empty(rng):
            meta = self._head(key, deadline)
            return Fetched(None) if meta is None else Fetched(b"", meta.get("e_tag"))
        if rng is not None and self._ranges_ignored:
            return self._fetch_whole_sliced(key, rng, if_match, deadline)
        cached = self.disk_cache.version_of(key) if self.disk_cache else None
        try:
            fetched = self.call(
                "GET", key, lambda: self._attempt_get(key, rng, if_match, cached), deadline
            )
        except RangeUnsatisfiable:
            meta = self._head(key, deadline)
            if meta is None:
                return Fetched(None)
            start, length = resolve_range(meta["size"], rng)
            if length == 0:
                return Fetched(b"", meta.get("e_tag"), meta.get("version"))
            exact = ByteRange(start, length)
            try:
                fetched = self.call(
                    "GET", key, lambda: self._attempt_get(key, exact, if_match, None), deadline
                )
            except (RangeUnsatisfiable, NoRangeSupport):
                raise StoreError(
                    f"{self.url}: GET {key!r}: the object changed during the read"
                ) from None
        except NoRangeSupport:
            return self._fetch_whole_sliced(key, rng, if_match, deadline)
        if self.disk_cache and fetched.whole and fetched.etag and fetched.etag != cached:
            assert fetched.data is not None
            self.disk_cache.put(key, fetched.etag, fetched.data)
        return fetched

    def _fetch_whole_sliced(
        self, key: str, rng: RangeRequest, if_match: str | None, deadline: float
    ) -> Fetched:
        """For a server that ignores Range: one whole GET (size-bounded), then slice."""
        meta = self._head(key, deadline)
        if meta is None:
            return Fetched(None)
        if meta["size"] > self.max_full_get:
            raise StoreError(
                f"{self.url}: {key!r}: the server ignores byte ranges and the object has "
                f"{meta['size']} bytes (more than the {self.max_full_get}-byte limit for "
                "whole reads)"
            )
        if meta["size"] and not self._ranges_ignored:
            log.warning("%s: the server ignores Range requests; reading whole objects", self.url)
            self._ranges_ignored = True
        whole = self._fetch(key, None, if_match, deadline)  # through the disk cache, if any
        if whole.data is None:
            return whole
        return Fetched(slice_range(whole.data, rng), whole.etag, whole.generation)

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        check_key(key)
        try:
            fetched = self._fetch(key, byte_range)
        except Changed:  # only with if_match, which get() never sends
            raise StoreError(f"{self.url}: GET {key!r}: the object changed") from None
        if not is_empty(byte_range):  # an empty range is a HEAD: it reads no data
            self._remember(key, fetched)
        return fetched.data

    def get_many(self, requests: Sequence[tuple[str, RangeRequest]]) -> list[bytes | None]:
        by_key: dict[str, list[int]] = {}
        for i, (key, _) in enumerate(requests):
            check_key(key)
            by_key.setdefault(key, []).append(i)
        plans = {
            key: KeyPlan([requests[i][1] for i in idx], self.coalesce_gap)
            for key, idx in by_key.items()
        }
        jobs = [(key, part) for key, plan in plans.items() for part in plan.parts]
        if not jobs:
            return []
        deadline = time.monotonic() + self.timeout  # one for all parts
        # every part but the first on the pool, the first in this thread
        futures = [
            self._pool.submit(self._fetch, key, part, None, deadline) for key, part in jobs[1:]
        ]
        done: list[Fetched] = []
        first_error: BaseException | None = None
        for n, (key, part) in enumerate(jobs):
            try:
                if n == 0:
                    done.append(self._fetch(key, part, None, deadline))
                else:
                    done.append(futures[n - 1].result())
            except BaseException as exc:  # noqa: BLE001 - raised once every part has finished
                first_error = first_error or exc
                done.append(Fetched(None))
        if first_error is not None:
            raise first_error
        out: list[bytes | None] = [None] * len(requests)
        pos = 0
        for key, plan in plans.items():
            got = done[pos : pos + len(plan.parts)]
            pos += len(plan.parts)
            if not consistent(got):
                got = self._refetch_consistent(key, plan, deadline)
            if not all(is_empty(part) for part in plan.parts):
                self._remember(key, got[0])
            for i, value in zip(by_key[key], plan.slices(got), strict=True):
                out[i] = value
        return out

    def _refetch_consistent(self, key: str, plan: KeyPlan, deadline: float) -> list[Fetched]:
        """The parts of one key again, one after the other, all of one version."""
        for _ in range(3):
            got = [self._fetch(key, plan.parts[0], None, deadline)]
            try:
                for part in plan.parts[1:]:
                    got.append(self._fetch(key, part, got[0].etag, deadline))
            except Changed:
                continue
            if consistent(got):
                return got
        raise StoreError(f"{self.url}: {key!r} kept changing while it was read")

    def size(self, key: str) -> int | None:
        check_key(key)
        meta = self._head(key)
        return None if meta is None else int(meta["size"])

    def version(self, key: str) -> str | None:
        check_key(key)
        meta = self._head(key)
        if meta is None:
            return None
        if meta.get("e_tag") or meta.get("version"):
            return f"{meta.get('e_tag') or ''}|{meta.get('version') or ''}"
        return f"{meta['last_modified'].isoformat()}|{meta['size']}"

    # -- writing ----------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyError(f"store {self.url} is read-only")

    def set(self, key: str, data: bytes | memoryview) -> None:
        self._check_writable()
        check_key(key)
        payload = bytes(data)
        mode: Any = "overwrite"
        if self.conditional_writes:
            mode = self._versions.put_mode(key)
        tries = 0
        deadline = time.monotonic() + self.timeout

        def attempt() -> Any:
            nonlocal tries
            tries += 1
            try:
                return obstore.put(self.backend, key, payload, mode=mode, use_multipart=False)
            except (oe.PreconditionError, oe.AlreadyExistsError) as exc:
                raise Conflict(first_line(exc)) from None
            except oe.NotSupportedError:
                if mode == "overwrite":
                    raise
                raise NoConditional() from None
            except oe.GenericError as exc:
                if mode != "overwrite" and status_of(exc) == 501:
                    raise NoConditional() from None
                raise

        try:
            result = self.call("PUT", key, attempt, deadline)
        except Conflict as exc:
            if tries > 1:
                now = self._fetch(key, None, None, deadline)
                if now.data == payload:  # an earlier attempt of ours landed
                    self._remember(key, now)
                    return
            log.error(
                "%s: not writing %r: it changed in the store since zarrfs read it (%s); "
                "the other writer's version is kept",
                self.url, key, exc,
            )  # fmt: skip
            raise ConflictError(
                f"{self.url}: {key!r} was changed by another writer; not overwritten"
            ) from None
        except NoConditional:
            log.warning("%s: conditional writes are not supported; writing unconditionally",
                        self.url)  # fmt: skip
            self.conditional_writes = False
            mode = "overwrite"
            result = self.call("PUT", key, attempt, deadline)
        fetched = Fetched(payload, result.get("e_tag"), result.get("version"))
        self._remember(key, fetched)
        if self.disk_cache is not None:
            if fetched.etag:
                self.disk_cache.put(key, fetched.etag, payload)
            else:
                self.disk_cache.discard(key)

    def delete(self, key: str) -> None:
        self._check_writable()
        check_key(key)

        def attempt() -> None:
            try:
                obstore.delete(self.backend, key)
            except NOT_FOUND:
                pass

        self.call("DELETE", key, attempt)
        self._remember(key, Fetched(None))
        if self.disk_cache is not None:
            self.disk_cache.discard(key)

    # -- listing ----------------------------------------------------------------------------

    def _require_listing(self) -> None:
        if not self.listable:
            raise StoreError(f"store {self.url} cannot list")

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        self._require_listing()
        check_prefix(prefix)
        base = prefix.rstrip("/")
        start = base + "/" if base else ""
        found = self.call(
            "LIST", start, lambda: obstore.list_with_delimiter(self.backend, base or None)
        )
        files = {o["path"][len(start) :] for o in found["objects"] if o["path"].startswith(start)}
        dirs = {p.rstrip("/")[len(start) :] for p in found["common_prefixes"]
                if p.startswith(start)}  # fmt: skip
        return (
            sorted(n for n in files if n and "/" not in n),
            sorted(n for n in dirs if n and "/" not in n),
        )

    def list_prefix(self, prefix: str) -> Iterator[str]:
        self._require_listing()
        check_prefix(prefix)
        base = prefix.rstrip("/")

        def attempt() -> list[str]:
            stream = obstore.list(self.backend, base or None, chunk_size=1000)
            return [meta["path"] for batch in stream for meta in batch]

        keys = self.call("LIST", base + "/" if base else "", attempt)
        return iter([k for k in keys if _valid_key(k)])

    def list_sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) pairs from the listing itself: no request per key."""
        self._require_listing()
        check_prefix(prefix)
        base = prefix.rstrip("/")

        def attempt() -> list[tuple[str, int]]:
            stream = obstore.list(self.backend, base or None, chunk_size=1000)
            return [(meta["path"], int(meta["size"])) for batch in stream for meta in batch]

        pairs = self.call("LIST", base + "/" if base else "", attempt)
        return iter([(k, n) for k, n in pairs if _valid_key(k)])

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.disk_cache is not None:
            self.disk_cache.close()


def _valid_key(key: str) -> bool:
    try:
        check_key(key)
    except StoreError:
        return False
    return True
