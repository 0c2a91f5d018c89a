"""HTTP store (``http(s)://`` through obstore) against a static server on 127.0.0.1: the
read-only store contract with and without Range support (and with and without ETags), suffix
ranges, the whole-object fallback and its size bound, and the disk cache's revalidation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from remote.httpserver import StaticServer, write_tree
from test_store_contract import BAD_KEYS, BLOB, REFERENCE, ReadOnlyStoreContract

from zarrfs.core.errors import ReadOnlyError, StoreError
from zarrfs.core.stores.base import ByteRange, Store, SuffixRange
from zarrfs.core.stores.registry import open_store
from zarrfs.core.stores.remote import RemoteStore


class TestHttpStore(ReadOnlyStoreContract):
    """Read-only and not listable: the listing tests become "listing is refused"."""

    ranges = True
    etags = True

    @pytest.fixture(autouse=True)
    def _servers(self) -> Iterator[None]:
        self.servers: list[StaticServer] = []
        yield
        for server in self.servers:
            server.stop()

    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        root = tmp_path / "site" / "data.zarr"
        write_tree(root, contents)
        server = StaticServer(tmp_path / "site", ranges=self.ranges, etags=self.etags).start()
        self.servers.append(server)
        return open_store(f"{server.url}/data.zarr")

    def test_capability_flags(self, store: Store) -> None:
        assert store.writable is False
        assert store.listable is False
        assert store.url.endswith("/data.zarr")

    def test_list_dir(self, store: Store) -> None:
        with pytest.raises(StoreError, match="cannot list"):
            store.list_dir("")

    def test_list_dir_missing_or_file_prefix_is_empty(self, store: Store) -> None:
        with pytest.raises(StoreError, match="cannot list"):
            store.list_dir("nope/")

    def test_list_prefix(self, store: Store) -> None:
        with pytest.raises(StoreError, match="cannot list"):
            list(store.list_prefix(""))

    def test_list_sizes(self, store: Store) -> None:
        with pytest.raises(StoreError):
            list(store.list_sizes(""))

    @pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
    def test_bad_keys_refused_for_writing(self, store: Store, key: str) -> None:
        with pytest.raises((StoreError, ReadOnlyError)):
            store.set(key, b"evil")
        with pytest.raises((StoreError, ReadOnlyError)):
            store.delete(key)

    def test_read_only_even_when_asked_for_writes(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path, {"k": b"v"})
        assert open_store(store.url, read_only=False).writable is False
        with pytest.raises(ReadOnlyError):
            store.set("k", b"w")


class TestHttpStoreWithoutRanges(TestHttpStore):
    """A server that ignores Range headers and sends no ETag."""

    ranges = False
    etags = False


@pytest.fixture
def site(tmp_path: Path) -> Path:
    write_tree(tmp_path / "store", REFERENCE)
    return tmp_path


def test_suffix_and_ranged_reads_are_single_range_requests(site: Path) -> None:
    with StaticServer(site) as server:
        store = open_store(f"{server.url}/store")
        assert store.get("a/c/0/0", SuffixRange(16)) == BLOB[-16:]
        assert store.get("a/c/0/0", ByteRange(100, 50)) == BLOB[100:150]
        assert [(r.method, r.range) for r in server.requests] == [
            ("GET", "bytes=-16"),
            ("GET", "bytes=100-149"),
        ]


def test_server_without_ranges_reads_whole_objects_once_per_call(site: Path) -> None:
    with StaticServer(site, ranges=False) as server:
        store = open_store(f"{server.url}/store")
        assert store.get("a/c/0/0", ByteRange(10, 5)) == BLOB[10:15]
        server.requests.clear()
        ranges = [ByteRange(i * 1000, 10) for i in range(10)] + [SuffixRange(8)]
        got = store.get_many([("a/c/0/0", r) for r in ranges])
        assert got[:10] == [BLOB[i * 1000 : i * 1000 + 10] for i in range(10)]
        assert got[10] == BLOB[-8:]
        gets = [r for r in server.requests if r.method == "GET"]
        assert all(r.range is None for r in gets)
        assert len(gets) <= 2  # the merged span and the suffix, each one whole GET


def test_whole_object_fallback_is_size_bounded(site: Path) -> None:
    with StaticServer(site, ranges=False) as server:
        store = open_store(f"{server.url}/store", max_full_get=4096)
        assert store.get("a/c/1/0", ByteRange(0, 5)) == b"xxxxx"  # 77 bytes: fine
        with pytest.raises(StoreError, match="ignores byte ranges"):
            store.get("a/c/0/0", ByteRange(0, 5))  # 10240 bytes: refused
        assert store.get("a/c/0/0") == BLOB  # a whole read is not a fallback


def test_directories_and_missing_files_are_missing(site: Path) -> None:
    with StaticServer(site) as server:
        store = open_store(f"{server.url}/store")
        assert store.get("a") is None
        assert store.get("a/c/0") is None
        assert store.version("nope") is None


def test_version_without_etag_uses_last_modified_and_size(site: Path) -> None:
    with StaticServer(site, etags=False) as server:
        store = open_store(f"{server.url}/store")
        token = store.version("b/w")
        assert token is not None and token.endswith("|1")
        (site / "store" / "b" / "w").write_bytes(b"ww")
        assert store.version("b/w") != token


def test_disk_cache_revalidates_with_if_none_match(site: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    with StaticServer(site) as server:
        store = open_store(f"{server.url}/store", disk_cache=str(cache_dir))
        assert isinstance(store, RemoteStore) and store.disk_cache is not None
        assert store.get("a/c/0/0") == BLOB
        assert any(cache_dir.iterdir())
        server.requests.clear()
        # a second store (a remount) finds the entry and revalidates it: 304, no body
        again = open_store(f"{server.url}/store", disk_cache=str(cache_dir))
        assert again.get("a/c/0/0") == BLOB
        assert again.get("a/c/0/0", ByteRange(5, 5)) == BLOB[5:10]
        assert again.disk_cache is not None and again.disk_cache.hits == 2
        # a changed object is fetched again, never served stale
        (site / "store" / "a" / "c" / "0" / "0").write_bytes(b"changed")
        assert again.get("a/c/0/0") == b"changed"
        assert again.get("a/c/0/0", SuffixRange(3)) == b"ged"


def test_disk_cache_keeps_objects_read_by_a_covering_range(site: Path, tmp_path: Path) -> None:
    """Chunks are read as ``ByteRange(0, max encoded size + 1)``: that is the whole object."""
    with StaticServer(site) as server:
        store = open_store(f"{server.url}/store", disk_cache=str(tmp_path / "cache"))
        assert isinstance(store, RemoteStore) and store.disk_cache is not None
        assert store.get("a/c/1/0", ByteRange(0, 1000)) == b"x" * 77
        assert store.get("a/c/0/0", ByteRange(0, 100)) == BLOB[:100]  # a part: not kept
        assert store.disk_cache.version_of("a/c/1/0") is not None
        assert store.disk_cache.version_of("a/c/0/0") is None
        server.requests.clear()
        assert store.get("a/c/1/0", ByteRange(0, 1000)) == b"x" * 77
        assert store.disk_cache.hits == 1


def test_disk_cache_spares_whole_reads_on_a_server_without_ranges(
    site: Path, tmp_path: Path
) -> None:
    with StaticServer(site, ranges=False) as server:
        store = open_store(f"{server.url}/store", disk_cache=str(tmp_path / "cache"))
        assert isinstance(store, RemoteStore) and store.disk_cache is not None
        assert store.get("a/c/0/0", SuffixRange(10)) == BLOB[-10:]
        assert store.get("a/c/0/0", ByteRange(10, 10)) == BLOB[10:20]
        assert store.disk_cache.hits == 1  # the second whole GET was answered 304
