"""``http://`` and ``https://`` stores: a Zarr hierarchy served by any web server, read-only.

Spec: Zarr v3 core, "Stores" (a readable store that is neither writeable nor listable);
RFC 9110 §14 range requests. Discovery of child nodes goes through consolidated metadata in the
root ``zarr.json`` (``hierarchy.py`` does that whenever ``store.listable`` is False).

Invariants:
- Read-only and not listable: ``set``/``delete`` raise ``ReadOnlyError``, ``list_dir`` and
  ``list_prefix`` raise ``StoreError``, whatever ``read_only`` says.
- A key is fetched from ``<url>/<key>``. Ranges are HTTP ranges (``bytes=a-b``, ``bytes=-n`` for
  shard indexes at the end of a shard). A server that ignores Range headers (answers 200 with
  the whole body) is detected at the first such answer; from then on each ranged read is one
  whole GET sliced locally, refused for objects above ``max_full_get`` bytes (default 256 MiB).
- Only a 404 means "missing"; deadlines, retries and body-length checks are ``RemoteStore``'s.
- ``version`` is the ETag, or Last-Modified and size when the server sends no ETag.
- Plain ``http://`` is allowed on any host: the store sends no credentials.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from obstore import exceptions as oe

from zarrfs.core.errors import StoreError
from zarrfs.core.stores.objstore import NO_RETRIES, client_options, make_store, store_options
from zarrfs.core.stores.remote import RemoteStore
from zarrfs.core.stores.retrying import DEFAULT_TIMEOUT, first_line


def open_http_url(url: str, *, read_only: bool = True, **options: Any) -> RemoteStore:
    """``http(s)://HOST[:PORT]/PATH`` -> a read-only, non-listable ``RemoteStore``.
    ``options`` are ``RemoteStore``'s (``timeout=``, ``max_full_get=``, ``disk_cache=``)."""
    from obstore.store import HTTPStore

    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise StoreError(f"store URL {url!r} must not have a query or fragment")
    if not parts.hostname:
        raise StoreError(f"store URL {url!r} names no host")
    if parts.username or parts.password:
        raise StoreError(f"store URL {url!r}: credentials in the URL are not supported")
    picked = store_options(url, options)
    timeout = picked.get("timeout", DEFAULT_TIMEOUT)
    base = url.rstrip("/")
    try:
        backend = HTTPStore.from_url(
            base,
            client_options=client_options(timeout, picked.get("attempt_timeout"), True),
            retry_config=NO_RETRIES,
        )
    except (oe.BaseError, ValueError) as exc:
        raise StoreError(f"cannot open {url}: {first_line(exc)}") from None
    return make_store(backend, url.rstrip("/"), True, picked, listable=False)
