"""The one store adapter type forwards the whole Store interface (tests every method)."""

from __future__ import annotations

import inspect

import pytest

from zarrfs.core.errors import MetadataError
from zarrfs.core.stores.base import ByteRange, Store
from zarrfs.core.stores.memory import MemoryStore
from zarrfs.core.stores.wrapper import CountingReads, DocumentReads, StoreWrapper


def test_every_store_method_is_forwarded() -> None:
    public = {n for n, v in inspect.getmembers(Store, inspect.isfunction) if not n.startswith("_")}
    assert public <= set(vars(StoreWrapper)), public - set(vars(StoreWrapper))


@pytest.mark.parametrize(
    "wrap",
    [StoreWrapper, lambda s: CountingReads(s, lambda n: None), lambda s: DocumentReads(s, 1 << 20)],
)
def test_a_wrapped_store_answers_like_the_store(wrap) -> None:
    store = MemoryStore()
    w = wrap(store)
    assert (w.writable, w.listable, w.url, w.streams_sets) == (
        store.writable,
        store.listable,
        store.url,
        store.streams_sets,
    )
    w.set("a/x", b"12345")
    w.set_stream("a/b/y", lambda: [b"ab", memoryview(b"cd")])
    assert store.get("a/b/y") == b"abcd"
    assert w.get("a/x", ByteRange(1, 2)) == b"23"
    assert w.get_many([("a/x", None), ("nope", None)]) == [b"12345", None]
    assert (w.size("a/x"), w.exists("a/x"), w.exists("nope")) == (5, True, False)
    assert w.version("a/x") == store.version("a/x")
    assert w.list_dir("a/") == (["x"], ["b"])  # a listing through an adapter works
    assert sorted(w.list_prefix("a/")) == ["a/b/y", "a/x"]
    assert sorted(w.list_sizes("a/")) == [("a/b/y", 4), ("a/x", 5)]
    w.delete("a/x")
    assert store.get("a/x") is None
    w.close()
    assert store.get("a/b/y") == b"abcd"  # closing an adapter leaves the store open


def test_counting_reads_counts_what_reads_return() -> None:
    store = MemoryStore()
    store.set("k", b"x" * 10)
    seen: list[int] = []
    w = CountingReads(store, seen.append)
    w.get("k", ByteRange(0, 4))
    w.get_many([("k", None), ("missing", None)])
    assert w.get("missing") is None
    assert seen == [4, 10]


def test_document_reads_refuse_a_longer_document() -> None:
    store = MemoryStore()
    store.set("zarr.json", b"{" + b" " * 100 + b"}")
    with pytest.raises(MetadataError, match="larger than 50 bytes"):
        DocumentReads(store, 50).get("zarr.json")
    assert DocumentReads(store, 200).get("zarr.json") == store.get("zarr.json")
