"""MemoryStore: the store contract, named process-wide stores and read-only views."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_store_contract import WritableStoreContract

from zarrfs.core.errors import ReadOnlyError
from zarrfs.core.stores.base import Store
from zarrfs.core.stores.memory import MemoryStore


class TestMemoryStore(WritableStoreContract):
    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        store = MemoryStore()
        for key, value in contents.items():
            store.set(key, value)
        return store


@pytest.fixture
def name() -> Iterator[str]:
    name = "test-memory-store-named"
    yield name
    MemoryStore.forget(name)


def test_named_store_is_shared_within_the_process(name: str) -> None:
    first = MemoryStore.named(name)
    first.set("k", b"v")
    assert MemoryStore.named(name) is first
    assert MemoryStore.named(name).get("k") == b"v"
    assert first.url == f"memory://{name}"


def test_forget_starts_afresh(name: str) -> None:
    MemoryStore.named(name).set("k", b"v")
    MemoryStore.forget(name)
    assert MemoryStore.named(name).get("k") is None


def test_anonymous_stores_are_independent() -> None:
    a, b = MemoryStore(), MemoryStore()
    a.set("k", b"a")
    assert b.get("k") is None
    assert a.url != b.url


def test_read_only_view_shares_data_but_refuses_writes() -> None:
    store = MemoryStore()
    store.set("k", b"1")
    view = store.read_only_view()
    assert view.writable is False
    with pytest.raises(ReadOnlyError):
        view.set("k", b"2")
    with pytest.raises(ReadOnlyError):
        view.delete("k")
    store.set("k", b"3")
    assert view.get("k") == b"3"
    assert view.version("k") == store.version("k")


def test_read_only_store() -> None:
    store = MemoryStore(read_only=True)
    with pytest.raises(ReadOnlyError):
        store.set("k", b"1")
