"""``open_store(url)``: a store URL or path to a ``Store``.

Spec: Zarr v3 core, "Stores" (a store specifies a canonical URI format used to pick the store)
and "File system store" (canonical ``file://`` URI; a string without a scheme is a path).

Invariants:
- The URL names the root of the Zarr hierarchy; it never carries a path inside the store.
- A plain path or ``file://`` URL is a directory store, unless it names an existing regular file
  ending in ``.zip``, which is a zip store (as is any ``zip://PATH``).
- A scheme maps to a factory through one table, ``SCHEMES``: ``"module:function"`` entries are
  imported on first use, so a store with heavy dependencies (HTTP, object stores) costs nothing
  until it is opened. New schemes are one line in the table (or ``register_scheme``).
- Every factory is called as ``factory(url, read_only=..., **options)`` and returns an open
  ``Store``; an unknown scheme raises ``UnsupportedError`` listing the known ones.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from zarrfs.core.errors import StoreError, UnsupportedError
from zarrfs.core.stores.base import Store

StoreFactory = Callable[..., Store]

#: scheme -> factory, or "module:function" naming one (imported on first use)
SCHEMES: dict[str, StoreFactory | str] = {
    "file": "zarrfs.core.stores.registry:open_file_url",
    "zip": "zarrfs.core.stores.registry:open_zip_url",
    "memory": "zarrfs.core.stores.registry:open_memory_url",
    # remote stores (obstore): options endpoint=, anon, timeout=, disk_cache=, disk_cache_size=
    "s3": "zarrfs.core.stores.objstore:open_s3_url",
    "gs": "zarrfs.core.stores.objstore:open_gcs_url",
    "az": "zarrfs.core.stores.objstore:open_azure_url",
    "http": "zarrfs.core.stores.http:open_http_url",
    "https": "zarrfs.core.stores.http:open_http_url",
}

_lock = threading.Lock()
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def register_scheme(scheme: str, factory: StoreFactory | str) -> None:
    """Make ``scheme://...`` URLs open through ``factory`` (a callable or "module:function")."""
    with _lock:
        SCHEMES[scheme.lower()] = factory


def url_scheme(url: str) -> str | None:
    """The lower-cased scheme of ``url``, or None for a plain path."""
    match = _SCHEME_RE.match(url)
    return match.group(1).lower() if match else None


def _factory(scheme: str, url: str) -> StoreFactory:
    with _lock:
        entry = SCHEMES.get(scheme)
    if entry is None and scheme.startswith("fsspec+"):
        entry = "zarrfs.core.stores.fsspecstore:open_fsspec_url"
    if entry is None:
        from zarrfs.core.stores.fsspecstore import fsspec_knows

        if fsspec_knows(scheme):
            entry = "zarrfs.core.stores.fsspecstore:open_fsspec_url"
    if entry is None:
        known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
        raise UnsupportedError(
            f"unsupported store URL {url!r}: unknown scheme {scheme!r} "
            f"(supported: plain paths, {known})"
        )
    if not isinstance(entry, str):
        return entry
    module_name, _, attr = entry.partition(":")
    try:
        factory: StoreFactory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UnsupportedError(
            f"store URL scheme {scheme!r} is not available in this installation: {exc}"
        ) from exc
    return factory


def open_store(url: str | os.PathLike[str], *, read_only: bool = False, **options: Any) -> Store:
    """Open the store at ``url`` (a path, ``file://``, ``zip://``, ``memory://`` ...).

    ``read_only`` opens a writable kind of store read-only; ``options`` go to the store's
    factory (``create=True`` makes a missing local directory).
    """
    text = os.fspath(url)
    scheme = url_scheme(text)
    if scheme is None:
        return open_path(text, read_only=read_only, **options)
    return _factory(scheme, text)(text, read_only=read_only, **options)


# -- built-in factories ---------------------------------------------------------------------


def open_path(path: str, *, read_only: bool = False, **options: Any) -> Store:
    """A directory store, or a zip store for an existing ``*.zip`` regular file."""
    from zarrfs.core.stores.local import LocalStore
    from zarrfs.core.stores.zipstore import ZipStore

    if not path:
        raise StoreError("empty store path")
    if path.lower().endswith(".zip") and os.path.isfile(path):
        options.pop("create", None)
        return ZipStore(path, **options)
    return LocalStore(path, read_only=read_only, **options)


def open_file_url(url: str, *, read_only: bool = False, **options: Any) -> Store:
    """``file:///abs/path`` (percent-encoded, RFC 8089); host must be empty or localhost."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise UnsupportedError(f"file URL {url!r} names a remote host {parts.netloc!r}")
    if parts.query or parts.fragment:
        raise StoreError(f"file URL {url!r} must not have a query or fragment")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise StoreError(f"file URL {url!r} must hold an absolute path")
    return open_path(path, read_only=read_only, **options)


def open_zip_url(url: str, *, read_only: bool = False, **options: Any) -> Store:
    """``zip://PATH``: the zip archive at PATH (relative or absolute, taken literally)."""
    from zarrfs.core.stores.zipstore import ZipStore

    path = url.split("://", 1)[1]
    if not path:
        raise StoreError(f"zip URL {url!r} names no file")
    options.pop("create", None)
    return ZipStore(path, **options)


def open_memory_url(url: str, *, read_only: bool = False, **options: Any) -> Store:
    """``memory://NAME``: the process-wide in-memory store NAME (``memory://`` alone: a new,
    unnamed store)."""
    from zarrfs.core.stores.memory import MemoryStore

    options.pop("create", None)
    if options:
        raise StoreError(f"memory store takes no options, got {sorted(options)}")
    name = url.split("://", 1)[1].strip("/")
    store = MemoryStore.named(name) if name else MemoryStore()
    return store.read_only_view() if read_only else store
