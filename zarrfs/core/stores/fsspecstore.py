"""Stores for any URL scheme fsspec knows (optional extra: ``pip install zarrfs[fsspec]``).

``fsspec+PROTO://rest`` opens ``PROTO://rest`` through fsspec whatever the protocol (even one
zarrfs also serves natively); a scheme zarrfs does not know is tried with fsspec when fsspec is
installed and knows it. The store follows the interface in ``base.py``:

- missing keys are None (``FileNotFoundError`` from fsspec), ranges are clipped like HTTP,
  every other failure is ``StoreError``;
- ``set`` writes the whole object in one call (``pipe_file``); it is as atomic as the
  filesystem's own single-object write (object stores: a PUT; local-like filesystems: not);
- ``version`` is the ETag or modification time plus size fsspec reports.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from zarrfs.core.errors import ReadOnlyError, StoreError, UnsupportedError
from zarrfs.core.stores.base import (
    ByteRange,
    RangeRequest,
    Store,
    SuffixRange,
    check_key,
    check_prefix,
)


class FsspecStore(Store):
    """A Zarr store on an fsspec filesystem, rooted at ``root`` (a path in that filesystem)."""

    listable = True

    def __init__(self, fs: Any, root: str, url: str, *, read_only: bool = False) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        self.writable = not read_only
        self._lock = threading.Lock()

    def _path(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}" if self.root else check_key(key)

    def _call(self, what: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise
        except StoreError:
            raise
        except Exception as exc:  # fsspec backends raise anything
            raise StoreError(f"{self.url}: {what} {key}: {type(exc).__name__}: {exc}") from exc

    def _info(self, key: str) -> dict[str, Any] | None:
        try:
            info = self._call("stat", key, self.fs.info, self._path(key))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return info if info.get("type", "file") == "file" else None

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        path = self._path(key)
        info = self._info(key)
        if info is None:
            return None
        size = int(info.get("size") or 0)
        start, end = 0, size
        if isinstance(byte_range, ByteRange):
            start = min(byte_range.start, size)
            end = size if byte_range.length is None else min(size, start + byte_range.length)
        elif isinstance(byte_range, SuffixRange):
            start = max(0, size - byte_range.length)
        if end <= start:
            return b""
        try:
            data = self._call("get", key, self.fs.cat_file, path, start=start, end=end)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return bytes(data)

    def size(self, key: str) -> int | None:
        info = self._info(key)
        return None if info is None else int(info.get("size") or 0)

    def version(self, key: str) -> str | None:
        info = self._info(key)
        if info is None:
            return None
        tag = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("created")
        return f"{tag}:{info.get('size')}"

    def set(self, key: str, data: bytes | memoryview) -> None:
        if not self.writable:
            raise ReadOnlyError(f"store {self.url} is read-only")
        path = self._path(key)
        self._call("set", key, self.fs.pipe_file, path, bytes(data))

    def delete(self, key: str) -> None:
        if not self.writable:
            raise ReadOnlyError(f"store {self.url} is read-only")
        try:
            self._call("delete", key, self.fs.rm_file, self._path(key))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            pass

    def _listing(self, prefix: str) -> tuple[str, str]:
        check_prefix(prefix)
        rel = prefix.rstrip("/")
        base = "/".join(p for p in (self.root, rel) if p)
        return rel, base

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        rel, base = self._listing(prefix)
        try:
            entries = self._call("list", prefix, self.fs.ls, base, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        files: set[str] = set()
        dirs: set[str] = set()
        for entry in entries:
            if str(entry["name"]).strip("/") == base.strip("/"):
                continue  # ls of a file lists the file itself: a file has no children
            name = str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
            if not name or name in (".", ".."):
                continue
            (dirs if entry.get("type") == "directory" else files).add(name)
        return sorted(files), sorted(dirs)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return (key for key, _ in self.list_sizes(prefix))

    def list_sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        rel, base = self._listing(prefix)
        try:
            found = self._call("list", prefix, self.fs.find, base, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return iter(())
        root = f"{self.root}/" if self.root else ""
        out = []
        for path, info in found.items():
            path = str(path).lstrip("/") if not root.startswith("/") else str(path)
            key = path[len(root) :] if root and path.startswith(root) else path
            try:
                check_key(key)
            except StoreError:
                continue
            if rel and not (key == rel or key.startswith(rel + "/")):
                continue
            out.append((key, int(info.get("size") or 0)))
        return iter(out)


def open_fsspec_url(url: str, *, read_only: bool = False, **options: Any) -> FsspecStore:
    """``fsspec+PROTO://rest`` or ``PROTO://rest`` -> a store through fsspec (storage options
    from ``options``)."""
    try:
        import fsspec
    except ImportError:
        raise UnsupportedError(
            f"{url!r} needs fsspec (install the optional extra: pip install 'zarrfs[fsspec]')"
        ) from None
    target = url.split("+", 1)[1] if url.lower().startswith("fsspec+") else url
    try:
        fs, root = fsspec.core.url_to_fs(target, **options)
    except (ValueError, ImportError) as exc:
        raise UnsupportedError(f"fsspec cannot open {target!r}: {exc}") from None
    return FsspecStore(fs, root, url, read_only=read_only)


def fsspec_knows(scheme: str) -> bool:
    """True when fsspec is installed and has an implementation registered for ``scheme``."""
    try:
        import fsspec
        from fsspec.registry import known_implementations
    except ImportError:
        return False
    return scheme in known_implementations or scheme in fsspec.available_protocols()
