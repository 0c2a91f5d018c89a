"""The store contract: one test class every store runs (v3 core "Stores" + zarrfs/core/stores/base).

A store's test module subclasses ``ReadOnlyStoreContract`` or ``WritableStoreContract`` (pytest
collects the subclass, named ``Test...``) and implements ``make_store(tmp_path, contents)``
returning a store that holds exactly ``contents``. Both add to the common tests of
``StoreContract`` those of refused writes or of writing, so no test is collected for a store it
cannot apply to.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrfs.core.errors import ReadOnlyError, StoreError
from zarrfs.core.stores.base import ByteRange, Store, SuffixRange

BLOB = bytes(range(256)) * 40  # 10240 bytes, every offset distinguishable modulo 256

REFERENCE: dict[str, bytes] = {
    "zarr.json": b'{"zarr_format": 3, "node_type": "group"}',
    "a/zarr.json": b'{"zarr_format": 3, "node_type": "array"}',
    "a/c/0/0": BLOB,
    "a/c/0/1": b"",
    "a/c/1/0": b"x" * 77,
    "b/x/y/z": b"deep",
    "b/w": b"w",
}

BAD_KEYS = [
    "",
    "../x",
    "a/../../x",
    "a/..",
    "/abs",
    "a//b",
    "a/",
    "a\\b",
    "..\\x",
    "a\x00b",
    ".",
    "./a",
    "a/./b",
]

# (range, expected slice of BLOB) -- the expectation written with Python slicing
RANGES = [
    (None, slice(None)),
    (ByteRange(0), slice(None)),
    (ByteRange(0, 0), slice(0, 0)),
    (ByteRange(10, 20), slice(10, 30)),
    (ByteRange(10239, 1), slice(10239, 10240)),
    (ByteRange(10000, 1000), slice(10000, None)),  # runs past the end: clipped
    (ByteRange(10240), slice(0, 0)),  # starts at the end
    (ByteRange(50000, 10), slice(0, 0)),  # starts past the end
    (ByteRange(4096, None), slice(4096, None)),
    (SuffixRange(0), slice(0, 0)),
    (SuffixRange(1), slice(-1, None)),
    (SuffixRange(100), slice(-100, None)),
    (SuffixRange(10240), slice(None)),
    (SuffixRange(99999), slice(None)),  # longer than the object: the whole object
]


class StoreContract:
    """Behaviour every store must have; ``ReadOnlyStoreContract`` and ``WritableStoreContract``
    set ``writable`` and add their own tests."""

    writable: bool

    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        store = self.make_store(tmp_path, REFERENCE)
        try:
            yield store
        finally:
            store.close()

    # -- reading ----------------------------------------------------------------------------

    def test_capability_flags(self, store: Store) -> None:
        assert store.writable is self.writable
        assert store.listable is True
        assert store.url

    def test_get_returns_every_object(self, store: Store) -> None:
        for key, value in REFERENCE.items():
            assert store.get(key) == value, key

    def test_get_missing_is_none(self, store: Store) -> None:
        for key in ["nope", "a/nope", "a/c/9/9", "nope/deeper/still", "a/c", "b/x"]:
            assert store.get(key) is None, key
            assert store.get(key, ByteRange(0, 4)) is None, key
            assert store.get(key, SuffixRange(4)) is None, key
            assert store.size(key) is None, key
            assert store.exists(key) is False, key
            assert store.version(key) is None, key
            assert store.get_versioned(key) == (None, None), key

    def test_open_reader_reads_what_get_returns(self, store: Store) -> None:
        for key, value in REFERENCE.items():
            reader = store.open_reader(key)
            assert reader is not None and reader.size == len(value), key
            with reader:
                buf = bytearray(len(value) + 7)
                half = len(value) // 2
                assert reader.readinto(memoryview(buf)[half:], half) == len(value) - half
                assert reader.readinto(memoryview(buf)[:half], 0) == half
                assert bytes(buf[: len(value)]) == value, key
        for key in ["nope", "a/c/9/9", "a/c", "b/x"]:
            assert store.open_reader(key) is None, key

    def test_get_below_a_key_is_none(self, store: Store) -> None:
        assert store.get("zarr.json/inner") is None
        assert store.size("zarr.json/inner") is None

    @pytest.mark.parametrize(("byte_range", "expected"), RANGES, ids=repr)
    def test_byte_ranges(self, store: Store, byte_range: object, expected: slice) -> None:
        assert store.get("a/c/0/0", byte_range) == BLOB[expected]  # type: ignore[arg-type]

    def test_ranges_on_empty_object(self, store: Store) -> None:
        for rng in [None, ByteRange(0), ByteRange(0, 5), ByteRange(3), SuffixRange(4)]:
            assert store.get("a/c/0/1", rng) == b""

    @settings(
        max_examples=60,
        deadline=None,
        # the store is only read, so sharing it across examples and subclasses is sound
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        start=st.integers(0, 12000),
        length=st.none() | st.integers(0, 12000),
        suffix=st.integers(0, 12000),
    )
    def test_byte_ranges_agree_with_slicing(
        self, store: Store, start: int, length: int | None, suffix: int
    ) -> None:
        end = None if length is None else start + length
        assert store.get("a/c/0/0", ByteRange(start, length)) == BLOB[start:end]
        assert store.get("a/c/0/0", SuffixRange(suffix)) == (BLOB[-suffix:] if suffix else b"")

    def test_get_many_keeps_order(self, store: Store) -> None:
        requests = [
            ("a/c/0/0", ByteRange(5, 3)),
            ("nope", None),
            ("b/w", None),
            ("a/c/0/0", SuffixRange(2)),
        ]
        assert store.get_many(requests) == [BLOB[5:8], None, b"w", BLOB[-2:]]

    def test_size_exists_version(self, store: Store) -> None:
        for key, value in REFERENCE.items():
            assert store.size(key) == len(value), key
            assert store.exists(key), key
            assert store.version(key) is not None, key

    def test_get_versioned_names_the_bytes_it_returns(self, store: Store) -> None:
        for key, value in REFERENCE.items():
            data, version = store.get_versioned(key)
            assert data == value, key
            assert version is not None and version == store.version(key), key
        assert store.get_versioned("a/c/0/0", ByteRange(1, 3))[0] == BLOB[1:4]

    # -- listing ----------------------------------------------------------------------------

    def test_list_dir(self, store: Store) -> None:
        assert store.list_dir("") == (["zarr.json"], ["a", "b"])
        assert store.list_dir("a/") == (["zarr.json"], ["c"])
        assert store.list_dir("a") == (["zarr.json"], ["c"])
        assert store.list_dir("a/c/") == ([], ["0", "1"])
        assert store.list_dir("a/c/0/") == (["0", "1"], [])
        assert store.list_dir("b/") == (["w"], ["x"])
        assert store.list_dir("b/x/y/") == (["z"], [])

    def test_list_dir_missing_or_file_prefix_is_empty(self, store: Store) -> None:
        assert store.list_dir("nope/") == ([], [])
        assert store.list_dir("a/nope/deeper/") == ([], [])
        assert store.list_dir("zarr.json/") == ([], [])

    def test_list_prefix(self, store: Store) -> None:
        assert sorted(store.list_prefix("")) == sorted(REFERENCE)
        expected_a = sorted(k for k in REFERENCE if k.startswith("a/"))
        assert sorted(store.list_prefix("a/")) == expected_a
        assert sorted(store.list_prefix("a")) == expected_a
        assert sorted(store.list_prefix("b/x/")) == ["b/x/y/z"]
        assert list(store.list_prefix("nope/")) == []

    def test_list_sizes(self, store: Store) -> None:
        assert dict(store.list_sizes("")) == {k: len(v) for k, v in REFERENCE.items()}
        assert dict(store.list_sizes("a/")) == {
            k: len(v) for k, v in REFERENCE.items() if k.startswith("a/")
        }

    # -- key safety -------------------------------------------------------------------------

    @pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
    def test_bad_keys_refused_for_reading(self, store: Store, key: str) -> None:
        for call in (store.get, store.size, store.exists, store.version, store.get_versioned):
            with pytest.raises(StoreError):
                call(key)
        with pytest.raises(StoreError):
            store.get(key, ByteRange(0, 1))

    @pytest.mark.parametrize("prefix", ["../", "/abs/", "a/../../", "a\\b/", "a//b/", "./"])
    def test_bad_prefixes_refused_for_listing(self, store: Store, prefix: str) -> None:
        with pytest.raises(StoreError):
            store.list_dir(prefix)
        with pytest.raises(StoreError):
            list(store.list_prefix(prefix))

    @pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
    def test_bad_keys_refused_for_writing(self, store: Store, key: str) -> None:
        with pytest.raises((StoreError, ReadOnlyError)):
            store.set(key, b"evil")
        with pytest.raises((StoreError, ReadOnlyError)):
            store.delete(key)
        assert sorted(store.list_prefix("")) == sorted(REFERENCE)


class ReadOnlyStoreContract(StoreContract):
    """The common tests, and writes refused."""

    writable = False

    def test_read_only_refuses_writes(self, store: Store) -> None:
        with pytest.raises(ReadOnlyError):
            store.set("zarr.json", b"changed")
        with pytest.raises(ReadOnlyError):
            store.set("new", b"new")
        with pytest.raises(ReadOnlyError):
            store.delete("zarr.json")
        assert store.get("zarr.json") == REFERENCE["zarr.json"]
        assert store.get("new") is None


class WritableStoreContract(StoreContract):
    """The common tests, and writing."""

    writable = True

    @pytest.fixture
    def wstore(self, store: Store) -> Store:
        return store

    def test_set_then_get(self, wstore: Store) -> None:
        wstore.set("new/key", b"hello")
        assert wstore.get("new/key") == b"hello"
        assert wstore.get("new/key", ByteRange(1, 3)) == b"ell"
        assert wstore.size("new/key") == 5
        assert wstore.list_dir("new/") == (["key"], [])
        assert wstore.list_dir("") == (["zarr.json"], ["a", "b", "new"])

    def test_overwrite_replaces_whole_object(self, wstore: Store) -> None:
        wstore.set("a/c/0/0", b"short")
        assert wstore.get("a/c/0/0") == b"short"
        assert wstore.size("a/c/0/0") == 5
        wstore.set("a/c/0/0", BLOB * 3)
        assert wstore.get("a/c/0/0") == BLOB * 3

    def test_empty_value(self, wstore: Store) -> None:
        wstore.set("empty", b"")
        assert wstore.get("empty") == b""
        assert wstore.exists("empty")
        assert wstore.size("empty") == 0

    def test_set_copies_the_buffer(self, wstore: Store) -> None:
        buf = bytearray(b"abcdef")
        wstore.set("buf", buf)  # type: ignore[arg-type]
        buf[:] = b"XXXXXX"
        assert wstore.get("buf") == b"abcdef"
        wstore.set("view", memoryview(b"0123456789")[2:5])  # type: ignore[arg-type]
        assert wstore.get("view") == b"234"

    def test_set_stream_stores_the_pieces_or_nothing(self, wstore: Store) -> None:
        wstore.set_stream("s/k", lambda: iter([b"ab", memoryview(b"xcdx")[1:3], b"", b"e"]))
        assert wstore.get("s/k") == b"abcde"

        def broken():
            yield b"new"
            raise ValueError("producer failed")

        with pytest.raises(ValueError):
            wstore.set_stream("s/k", broken)
        assert wstore.get("s/k") == b"abcde"
        assert sorted(wstore.list_prefix("s/")) == ["s/k"]

    def test_group_commit_stores_every_object(self, wstore: Store) -> None:
        group = wstore.group()
        group.set("a/c/0/0", b"new")
        group.set_stream("g/h/k", lambda: iter([b"pie", memoryview(b"xcesx")[1:4]]))
        group.set("b/w", b"first")
        group.set("b/w", b"second")  # staged twice: the later bytes win
        group.commit()
        assert wstore.get("a/c/0/0") == b"new"
        assert wstore.get("g/h/k") == b"pieces"
        assert wstore.get("b/w") == b"second"
        assert sorted(wstore.list_prefix("")) == sorted({*REFERENCE, "g/h/k"})
        group.commit()  # nothing staged since: nothing happens
        group.abort()
        assert wstore.get("g/h/k") == b"pieces"

    def test_group_failed_producer_stores_nothing_of_it(self, wstore: Store) -> None:
        def broken():
            yield b"new"
            raise ValueError("producer failed")

        group = wstore.group()
        group.set("b/w", b"kept")
        with pytest.raises(ValueError):
            group.set_stream("a/c/0/0", broken)
        group.commit()
        assert wstore.get("b/w") == b"kept"
        assert wstore.get("a/c/0/0") == REFERENCE["a/c/0/0"]
        assert sorted(wstore.list_prefix("")) == sorted(REFERENCE)

    def test_version_changes_on_set(self, wstore: Store) -> None:
        before = wstore.version("b/w")
        wstore.set("b/w", b"v")  # same length, different bytes
        after = wstore.version("b/w")
        assert after is not None and after != before
        assert wstore.version("b/w") == after  # stable while unchanged

    def test_delete(self, wstore: Store) -> None:
        wstore.delete("b/w")
        assert wstore.get("b/w") is None
        assert not wstore.exists("b/w")
        assert wstore.list_dir("b/") == ([], ["x"])
        wstore.delete("b/w")  # missing: no error
        wstore.delete("never/was/here")

    def test_delete_last_key_removes_prefix(self, wstore: Store) -> None:
        wstore.delete("b/x/y/z")
        assert wstore.list_dir("b/") == (["w"], [])
        assert sorted(wstore.list_prefix("b/")) == ["b/w"]
        wstore.delete("b/w")
        assert wstore.list_dir("") == (["zarr.json"], ["a"])

    def test_delete_prefix_is_not_a_key(self, wstore: Store) -> None:
        wstore.delete("a/c")  # a prefix, not a key: nothing happens
        assert sorted(wstore.list_prefix("")) == sorted(REFERENCE)

    def test_concurrent_writers_and_readers(self, wstore: Store) -> None:
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(40):
                    key = f"t/{n}/{i % 5}"
                    value = f"{n}:{i}".encode() * (i + 1)
                    wstore.set(key, value)
                    assert wstore.get(key) == value
                    if i % 7 == 0:
                        wstore.delete(key)
                        assert wstore.get(key) is None
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
