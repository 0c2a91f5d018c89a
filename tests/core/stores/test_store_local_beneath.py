"""LocalStore path resolution: one ``openat2`` per key where the kernel has it, the same answers
(links refused, nothing outside the root) whether a key is resolved by ``openat2`` or walked one
component at a time; ``list_sizes`` equal to the generic listing + ``size`` per key."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from zarrfs.core.errors import StoreError
from zarrfs.core.stores import beneath
from zarrfs.core.stores.base import Store
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.localgroup import TEMP_PREFIX

needs_openat2 = pytest.mark.skipif(not beneath.available(), reason="no openat2 here")


@pytest.fixture(params=["openat2", "walk"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_enabled", False)
    elif not beneath.available():
        pytest.skip("no openat2 here")
    yield request.param


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"canary")
    (outside / "zarr.json").write_bytes(b"{}")
    for key, data in {
        "zarr.json": b"{}",
        "a/zarr.json": b'{"node_type": "array"}',
        "a/c/0/0": b"12345678",
        "a/c/0/1": b"1234",
        "a/c/1/0": b"",
        "b/deep/er/x": b"xyz",
    }.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "a" / "c" / f"{TEMP_PREFIX}leftover").write_bytes(b"partial")
    (root / "a" / "c" / "dirlink").symlink_to(outside)
    (root / "a" / "c" / "0" / "filelink").symlink_to(outside / "secret")
    (root / "innerlink").symlink_to(root / "a")
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(root / "a" / "c" / "fifo")
    return root


@pytest.mark.parametrize(
    "key",
    ["a/c/dirlink/secret", "a/c/0/filelink", "innerlink/zarr.json", "dangling", "dangling/x"],
)
def test_links_refused_either_way(tree: Path, mode: str, key: str) -> None:
    store = LocalStore(tree)
    for call in (store.get, store.size, store.version):
        with pytest.raises(StoreError, match="symbolic link"):
            call(key)


def test_answers_equal_either_way(tree: Path, mode: str) -> None:
    store = LocalStore(tree)
    assert store.get("a/c/0/0") == b"12345678"
    assert store.size("a/c/0/1") == 4
    assert store.version("a/c/1/0") is not None
    for missing in ("a/c/2/0", "nothing/at/all", "a/c/0/0/below_a_file", "a/c", "a"):
        assert store.get(missing) is None
        assert store.size(missing) is None
    with pytest.raises(StoreError, match="not a regular file"):
        store.get("a/c/fifo")
    assert store.list_dir("a/c/") == ([], ["0", "1"])  # no fifo, temporary or link
    with pytest.raises(StoreError, match="symbolic link"):
        store.list_dir("innerlink/")


def _count_opens(store: LocalStore, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The names ``os.open`` is called with from now on (the store's root opened first)."""
    store.get("zarr.json")  # opens the root once
    opened: list[object] = []
    real_open = os.open

    def counting_open(*args: object, **kwargs: object) -> int:
        opened.append(args[0])
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting_open)
    return opened


@needs_openat2
def test_a_nested_key_is_resolved_in_one_call(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tree)
    opened = _count_opens(store, monkeypatch)
    assert store.get("a/c/0/0") == b"12345678"
    assert store.version("b/deep/er/x") is not None
    assert store.list_dir("b/deep/") == ([], ["er"])
    assert opened == []  # no component walk


@needs_openat2
def test_a_set_into_an_existing_directory_opens_it_in_one_call(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tree)
    opened = _count_opens(store, monkeypatch)
    store.set("b/deep/er/x", b"new")
    assert all(str(name).startswith(TEMP_PREFIX) for name in opened)  # no directory walked
    store.set("b/deep/new/dir/y", b"made")  # missing directories: walked and created
    assert "new" in opened and "dir" in opened
    monkeypatch.undo()
    assert store.get("b/deep/er/x") == b"new"
    assert store.get("b/deep/new/dir/y") == b"made"


@pytest.mark.parametrize("key", ["a/c/dirlink/new", "innerlink/new", "a/c/0/filelink/x"])
def test_sets_through_links_refused_either_way(tree: Path, mode: str, key: str) -> None:
    store = LocalStore(tree)
    with pytest.raises(StoreError, match="symbolic link|not a directory"):
        store.set(key, b"evil")
    assert sorted(p.name for p in (tree.parent / "outside").iterdir()) == ["secret", "zarr.json"]
    assert not (tree / "a" / "new").exists()


@pytest.mark.parametrize("prefix", ["", "a/", "a/c/", "b/deep/", "missing/", "a/c/0/"])
def test_list_sizes_equals_listing_plus_size(tree: Path, mode: str, prefix: str) -> None:
    store = LocalStore(tree)
    fast = sorted(store.list_sizes(prefix))
    generic = sorted(Store.list_sizes(store, prefix))
    assert fast == generic
    if prefix == "a/c/":
        assert fast == [("a/c/0/0", 8), ("a/c/0/1", 4), ("a/c/1/0", 0)]


def test_root_descriptor_reopened_after_close(tree: Path) -> None:
    store = LocalStore(tree)
    assert store.get("a/c/0/1") == b"1234"
    store.close()
    assert store.get("a/c/0/1") == b"1234"
    store.close()
