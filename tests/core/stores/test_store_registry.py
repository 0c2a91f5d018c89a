"""open_store: URL and path dispatch to the store kinds, and the scheme table."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zarrfs.core.errors import ReadOnlyError, StoreError, UnsupportedError
from zarrfs.core.stores import registry
from zarrfs.core.stores.base import Store
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.memory import MemoryStore
from zarrfs.core.stores.registry import open_store, register_scheme, url_scheme
from zarrfs.core.stores.zipstore import ZipStore


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    root = tmp_path / "my data.zarr"
    root.mkdir()
    (root / "zarr.json").write_bytes(b"{}")
    return root


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "store.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("zarr.json", b"{}")
    return path


@pytest.fixture
def memory_name() -> Iterator[str]:
    yield "test-registry"
    MemoryStore.forget("test-registry")


def test_plain_path_is_a_local_store(directory: Path) -> None:
    store = open_store(str(directory))
    assert isinstance(store, LocalStore)
    assert store.writable
    assert store.root == str(directory.resolve())
    assert store.get("zarr.json") == b"{}"
    assert isinstance(open_store(directory), LocalStore)  # PathLike too


def test_read_only_local(directory: Path) -> None:
    store = open_store(str(directory), read_only=True)
    assert not store.writable
    with pytest.raises(ReadOnlyError):
        store.set("x", b"x")


def test_file_url_is_percent_decoded(directory: Path) -> None:
    url = directory.resolve().as_uri()
    assert "%20" in url
    store = open_store(url)
    assert isinstance(store, LocalStore)
    assert store.get("zarr.json") == b"{}"
    assert isinstance(open_store("file://localhost" + url[len("file://") :]), LocalStore)


def test_file_url_with_a_remote_host_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="remote host"):
        open_store("file://server/share/data.zarr")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(str(tmp_path / "nope"))
    store = open_store(str(tmp_path / "new.zarr"), create=True)
    assert isinstance(store, LocalStore)
    assert (tmp_path / "new.zarr").is_dir()


def test_zip_path_and_url(archive: Path) -> None:
    for url in (str(archive), f"zip://{archive}", archive.as_uri()):
        store = open_store(url)
        assert isinstance(store, ZipStore), url
        assert store.get("zarr.json") == b"{}"
        assert not store.writable
        store.close()


def test_zip_options_reach_the_store(archive: Path) -> None:
    store = open_store(str(archive), max_member_size=123)
    assert isinstance(store, ZipStore) and store.max_member_size == 123


def test_directory_named_zip_is_a_local_store(tmp_path: Path) -> None:
    (tmp_path / "dir.zip").mkdir()
    assert isinstance(open_store(str(tmp_path / "dir.zip")), LocalStore)


def test_memory_urls_share_a_named_store(memory_name: str) -> None:
    first = open_store(f"memory://{memory_name}")
    assert isinstance(first, MemoryStore) and first.writable
    first.set("k", b"v")
    assert open_store(f"memory://{memory_name}") is first
    view = open_store(f"memory://{memory_name}", read_only=True)
    assert view.get("k") == b"v"
    with pytest.raises(ReadOnlyError):
        view.set("k", b"w")


def test_bare_memory_url_is_a_fresh_store() -> None:
    a, b = open_store("memory://"), open_store("memory://")
    a.set("k", b"v")
    assert b.get("k") is None


def test_unknown_scheme_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="unknown scheme 'nosuchproto'.*file://"):
        open_store("nosuchproto://example.org/data.zarr")


def test_scheme_is_case_insensitive(memory_name: str) -> None:
    assert open_store(f"MEMORY://{memory_name}") is MemoryStore.named(memory_name)
    assert url_scheme("S3://bucket/x") == "s3"
    assert url_scheme("/plain/path") is None
    assert url_scheme("relative/x.zarr") is None


def test_register_scheme_with_a_callable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "SCHEMES", dict(registry.SCHEMES))
    calls: list[tuple[str, bool, dict[str, Any]]] = []
    made = MemoryStore()

    def factory(url: str, *, read_only: bool = False, **options: Any) -> Store:
        calls.append((url, read_only, options))
        return made

    register_scheme("Test", factory)
    assert open_store("test://bucket/root", read_only=True, endpoint="x") is made
    assert calls == [("test://bucket/root", True, {"endpoint": "x"})]


def test_lazy_module_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "SCHEMES", dict(registry.SCHEMES))
    register_scheme("lazy", "zarrfs.core.stores.registry:open_memory_url")
    assert isinstance(open_store("lazy://"), MemoryStore)
    register_scheme("gone", "zarrfs.core.stores.no_such_module:open_url")
    with pytest.raises(UnsupportedError, match="'gone' is not available"):
        open_store("gone://x")


def test_empty_path() -> None:
    with pytest.raises(StoreError):
        open_store("")


def test_store_url_reopens_the_same_store(directory: Path, archive: Path) -> None:
    local = open_store(str(directory))
    assert isinstance(local, LocalStore)
    again = open_store(local.url)
    assert isinstance(again, LocalStore) and again.root == local.root
    zipped = open_store(str(archive))
    reopened = open_store(zipped.url)
    assert isinstance(reopened, ZipStore) and reopened.path == str(archive)
    zipped.close()
    reopened.close()
