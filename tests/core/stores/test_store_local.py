"""LocalStore: the store contract plus atomicity, durability, temp files and containment."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_store_contract import REFERENCE, ReadOnlyStoreContract, WritableStoreContract

from zarrfs.core.errors import ReadOnlyError, StoreError
from zarrfs.core.stores.base import ByteRange, Store, SuffixRange
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.localgroup import TEMP_PREFIX


def fill(root: Path, contents: dict[str, bytes]) -> None:
    for key, value in contents.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)


class TestLocalStore(WritableStoreContract):
    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        root = tmp_path / "store"
        root.mkdir()
        fill(root, contents)
        return LocalStore(root)


class TestLocalStoreReadOnly(ReadOnlyStoreContract):
    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        root = tmp_path / "store"
        root.mkdir()
        fill(root, contents)
        return LocalStore(root, read_only=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    fill(root, REFERENCE)
    return root


@pytest.fixture
def store(root: Path) -> LocalStore:
    return LocalStore(root)


# -- layout --------------------------------------------------------------------------------


def test_keys_are_files_under_the_root(store: LocalStore, root: Path) -> None:
    store.set("g/arr/c/0/1", b"chunk")
    assert (root / "g" / "arr" / "c" / "0" / "1").read_bytes() == b"chunk"
    assert store.url == root.resolve().as_uri()


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        LocalStore(tmp_path / "nope")
    store = LocalStore(tmp_path / "made" / "here", create=True)
    assert (tmp_path / "made" / "here").is_dir()
    assert store.list_dir("") == ([], [])


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(StoreError, match="not a directory"):
        LocalStore(tmp_path / "file")


def test_read_only_refuses_writes(root: Path) -> None:
    store = LocalStore(root, read_only=True)
    with pytest.raises(ReadOnlyError):
        store.set("zarr.json", b"x")
    with pytest.raises(ReadOnlyError):
        store.delete("zarr.json")
    assert (root / "zarr.json").read_bytes() == REFERENCE["zarr.json"]


def test_directory_at_key_reads_as_missing(store: LocalStore) -> None:
    assert store.get("a/c/0") is None
    assert store.get("a/c/0", ByteRange(0, 1)) is None
    assert store.size("a/c/0") is None
    assert store.version("a/c") is None


def test_set_over_a_directory_fails_cleanly(store: LocalStore, root: Path) -> None:
    with pytest.raises(StoreError, match="a/c"):
        store.set("a/c", b"x")
    assert (root / "a" / "c" / "0" / "0").read_bytes() == REFERENCE["a/c/0/0"]
    assert not [p for p in root.rglob(f"{TEMP_PREFIX}*")]


def test_set_below_a_file_fails(store: LocalStore) -> None:
    with pytest.raises(StoreError, match="zarr.json"):
        store.set("zarr.json/inner", b"x")


@pytest.mark.timeout(20)
def test_fifo_at_key_is_an_error_not_a_hang(store: LocalStore, root: Path) -> None:
    os.mkfifo(root / "fifo")
    with pytest.raises(StoreError, match="not a regular file"):
        store.get("fifo")
    with pytest.raises(StoreError, match="not a regular file"):
        store.size("fifo")
    assert store.list_dir("")[0] == ["zarr.json"]


def test_oserror_becomes_store_error_naming_the_key(store: LocalStore, root: Path) -> None:
    if os.geteuid() == 0:
        # root ignores permissions: make the failure an I/O error instead
        def failing_pread(fd: int, n: int, off: int) -> bytes:
            raise OSError(5, "Input/output error")

        mp = pytest.MonkeyPatch()
        mp.setattr(os, "pread", failing_pread)
        try:
            with pytest.raises(StoreError, match="a/c/0/0.*Input/output error"):
                store.get("a/c/0/0")
        finally:
            mp.undo()
    else:  # pragma: no cover - depends on the test user
        (root / "a" / "c" / "0" / "0").chmod(0)
        with pytest.raises(StoreError, match="a/c/0/0"):
            store.get("a/c/0/0")


# -- ranges read only what is asked -----------------------------------------------------------


def test_ranged_get_reads_only_the_range(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.set("big", os.urandom(1 << 20))
    requested: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, off: int) -> bytes:
        requested.append(n)
        return real_pread(fd, n, off)

    monkeypatch.setattr(os, "pread", counting_pread)
    data = store.get("big", ByteRange(500_000, 100))
    tail = store.get("big", SuffixRange(10))
    assert len(data or b"") == 100 and len(tail or b"") == 10
    assert sum(requested) == 110


# -- atomic and durable set -------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_readers_never_see_a_mix(store: LocalStore) -> None:
    one = b"A" * (1 << 20)
    two = b"B" * (700 << 10) + b"b" * 1000
    store.set("k", one)
    stop = threading.Event()
    bad: list[str] = []
    seen: set[bytes] = set()

    def reader() -> None:
        while not stop.is_set():
            got = store.get("k")
            if got not in (one, two):
                bad.append(f"whole read of {None if got is None else len(got)} bytes")
            else:
                seen.add(got[:1])
            part = store.get("k", ByteRange(100_000, 10))
            if part not in (b"A" * 10, b"B" * 10):
                bad.append(f"range read {part!r}")

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        deadline = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < deadline or i < 20:
            store.set("k", two if i % 2 == 0 else one)
            i += 1
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert bad == []
    assert seen == {b"A", b"B"}


def test_set_fsyncs_file_then_directory(
    store: LocalStore, root: Path, record_fsyncs: Callable[[], list[str]]
) -> None:
    synced = record_fsyncs()
    store.set("n1/n2/key", b"data")
    real = str(root.resolve())
    temp_files = [p for p in synced if os.path.basename(p).startswith(TEMP_PREFIX)]
    assert len(temp_files) == 1  # the data, before the rename
    after_temp = synced[synced.index(temp_files[0]) + 1 :]
    assert after_temp == [f"{real}/n1/n2"]  # the rename, made durable
    before = synced[: synced.index(temp_files[0])]
    assert before == [real, f"{real}/n1"]  # each new directory, made durable in its parent


def test_failed_set_keeps_old_content_and_leaves_no_temp(
    store: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StoreError, match="a/c/0/0.*No space left"):
        store.set("a/c/0/0", b"new")
    monkeypatch.undo()
    assert store.get("a/c/0/0") == REFERENCE["a/c/0/0"]
    assert not list(root.rglob(f"{TEMP_PREFIX}*"))


def test_new_files_honour_the_umask(store: LocalStore, root: Path) -> None:
    old = os.umask(0o027)
    try:
        store.set("masked/key", b"x")
    finally:
        os.umask(old)
    assert (root / "masked" / "key").stat().st_mode & 0o777 == 0o640


# -- temporary files ------------------------------------------------------------------------


def test_crash_leftover_temp_files_are_ignored(store: LocalStore, root: Path) -> None:
    (root / f"{TEMP_PREFIX}0123abcd").write_bytes(b"half")
    (root / "a" / "c" / "0" / f"{TEMP_PREFIX}ffff").write_bytes(b"half")
    (root / f"{TEMP_PREFIX}dir").mkdir()
    (root / f"{TEMP_PREFIX}dir" / "inner").write_bytes(b"x")
    assert store.list_dir("") == (["zarr.json"], ["a", "b"])
    assert store.list_dir("a/c/0/") == (["0", "1"], [])
    assert sorted(store.list_prefix("")) == sorted(REFERENCE)
    assert store.list_dir(f"{TEMP_PREFIX}dir/") == ([], [])
    # their names are not valid keys of this store
    for key in (f"{TEMP_PREFIX}0123abcd", f"a/c/0/{TEMP_PREFIX}ffff", f"{TEMP_PREFIX}dir/inner"):
        with pytest.raises(StoreError, match="reserved"):
            store.get(key)
        with pytest.raises(StoreError, match="reserved"):
            store.set(key, b"x")


def test_temp_file_never_listed_during_set(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    listings: list[tuple[list[str], list[str]]] = []
    real_fsync = os.fsync

    def listing_fsync(fd: int) -> None:
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(TEMP_PREFIX):
            listings.append(store.list_dir("b/"))  # the temp file exists right now
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", listing_fsync)
    store.set("b/new", b"x")
    assert listings == [(["w"], ["x"])]


# -- delete prunes empty directories ----------------------------------------------------------


def test_delete_prunes_empty_directories_but_not_the_root(store: LocalStore, root: Path) -> None:
    store.delete("b/x/y/z")
    assert not (root / "b" / "x").exists()
    assert (root / "b" / "w").exists()
    for key in list(store.list_prefix("")):
        store.delete(key)
    assert root.is_dir()
    assert list(root.iterdir()) == []


def test_delete_keeps_directories_with_other_entries(store: LocalStore, root: Path) -> None:
    (root / "b" / "x" / "y" / f"{TEMP_PREFIX}leftover").write_bytes(b"")
    store.delete("b/x/y/z")
    assert (root / "b" / "x" / "y").is_dir()


@pytest.mark.timeout(60)
def test_set_survives_concurrent_pruning(store: LocalStore) -> None:
    errors: list[BaseException] = []
    stop = threading.Event()

    def churn() -> None:
        try:
            while not stop.is_set():
                store.set("p/q/churn", b"c")
                store.delete("p/q/churn")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for i in range(150):
            value = str(i).encode()
            store.set("p/q/mine", value)
            assert store.get("p/q/mine") == value
            store.delete("p/q/mine")
    finally:
        stop.set()
        thread.join()
    assert errors == []


# -- containment: symbolic links are never followed -------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"canary")
    return outside


@pytest.fixture
def linked(root: Path, outside: Path) -> LocalStore:
    (root / "dirlink").symlink_to(outside)
    (root / "filelink").symlink_to(outside / "secret")
    (root / "a" / "c" / "9").symlink_to(outside)
    (root / "innerlink").symlink_to(root / "a")  # inside the root: not followed either
    return LocalStore(root)


def assert_outside_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_bytes() == b"canary"


@pytest.mark.parametrize(
    "key", ["dirlink/secret", "filelink", "a/c/9/secret", "innerlink/zarr.json"]
)
def test_reads_through_links_are_refused(linked: LocalStore, outside: Path, key: str) -> None:
    for call in (linked.get, linked.size, linked.version, linked.exists):
        with pytest.raises(StoreError, match="symbolic link"):
            call(key)
    with pytest.raises(StoreError, match="symbolic link"):
        linked.get(key, ByteRange(0, 3))


@pytest.mark.parametrize("key", ["dirlink/secret", "dirlink/new", "a/c/9/new/deeper"])
def test_writes_through_links_are_refused(linked: LocalStore, outside: Path, key: str) -> None:
    with pytest.raises(StoreError, match="symbolic link"):
        linked.set(key, b"evil")
    with pytest.raises(StoreError, match="symbolic link"):
        linked.delete(key)
    assert_outside_untouched(outside)


def test_links_are_not_listed(linked: LocalStore, outside: Path) -> None:
    assert linked.list_dir("") == (["zarr.json"], ["a", "b"])
    assert linked.list_dir("a/c/") == ([], ["0", "1"])
    assert sorted(linked.list_prefix("")) == sorted(REFERENCE)
    with pytest.raises(StoreError, match="symbolic link"):
        linked.list_dir("dirlink/")
    with pytest.raises(StoreError, match="symbolic link"):
        list(linked.list_prefix("a/c/9/"))


def test_set_and_delete_replace_a_final_link_not_its_target(
    linked: LocalStore, root: Path, outside: Path
) -> None:
    linked.set("filelink", b"mine")
    assert not (root / "filelink").is_symlink()
    assert linked.get("filelink") == b"mine"
    assert_outside_untouched(outside)
    (root / "filelink2").symlink_to(outside / "secret")
    linked.delete("filelink2")
    assert not os.path.lexists(root / "filelink2")
    assert_outside_untouched(outside)


def test_root_given_through_a_link_is_resolved_once(root: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    store = LocalStore(alias)
    assert store.root == str(root.resolve())
    assert store.get("b/w") == b"w"


# -- group commit ---------------------------------------------------------------------------


def test_group_fsyncs_each_temp_then_each_directory_once(
    store: LocalStore,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    record_fsyncs: Callable[[], list[str]],
) -> None:
    keys = [f"a/c/0/{i}" for i in range(5)] + [f"b/x/y/{i}" for i in range(3)]
    synced = record_fsyncs()
    renamed: list[int] = []  # how many fsyncs had happened at each rename
    real_replace = os.replace

    def recording_replace(src: str, dst: str, **kw: object) -> None:
        renamed.append(len(synced))
        real_replace(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", recording_replace)
    group = store.group()
    for key in keys:
        group.set(key, key.encode())
    assert synced == []  # staging starts the write-back only
    for key in keys:  # nothing visible before the commit
        assert store.get(key) == REFERENCE.get(key)
    group.commit()
    temps = [p for p in synced if os.path.basename(p).startswith(TEMP_PREFIX)]
    dirs = [p for p in synced if p not in temps]
    assert len(temps) == len(keys)  # every temporary file, before its directory's renames
    assert len(renamed) == len(keys)
    assert renamed == [5] * 5 + [5 + 1 + 3] * 3
    real = str(root.resolve())
    assert dirs == [f"{real}/a/c/0", f"{real}/b/x/y"]  # one per directory, after its renames
    assert synced.index(dirs[0]) == 5 and synced.index(dirs[1]) == len(synced) - 1
    for key in keys:
        assert store.get(key) == key.encode()
    assert not list(root.rglob(f"{TEMP_PREFIX}*"))


def test_group_replaces_files_held_open_and_closes_them_after(
    store: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file being replaced is open in the daemon while its rename runs (so the rename only
    unlinks it; its blocks are freed at the close), and closed after the commit."""
    from zarrfs.core.stores import localgroup

    keys = ["a/c/0/0", "a/c/0/1", "n/e/w"]
    for key in keys[:2]:  # n/e/w is new: nothing to hold
        store.set(key, b"old " + key.encode())
    assert store.get(keys[2]) is None

    def held_paths() -> set[str]:
        fds = Path("/proc/self/fd")
        out = set()
        for fd in fds.iterdir():
            try:
                out.add(os.readlink(fd))
            except OSError:
                continue
        return out

    held_at_rename: list[bool] = []
    real_replace = os.replace

    def recording_replace(src: str, dst: str, **kw: Any) -> None:
        target = os.path.join(os.readlink(f"/proc/self/fd/{kw['dst_dir_fd']}"), dst)
        held_at_rename.append(target in held_paths())
        real_replace(src, dst, **kw)

    group = store.group()
    for key in keys:
        group.set(key, b"new " + key.encode())
    monkeypatch.setattr(os, "replace", recording_replace)
    group.commit()
    assert held_at_rename == [True, True, False]
    localgroup._closer.submit(lambda: None).result()  # one thread: the closes ran before
    real = str(root.resolve())
    assert not [p for p in held_paths() if p.startswith(real) and p.endswith("(deleted)")]
    for key in keys:
        assert store.get(key) == b"new " + key.encode()


def test_group_failed_rename_leaves_old_or_new_and_no_temp(
    store: LocalStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = ["a/c/0/0", "a/c/0/1", "a/c/1/0", "b/w"]
    group = store.group()
    for key in keys:
        group.set(key, b"new " + key.encode())
    real_replace = os.replace
    renamed: list[str] = []

    def failing_replace(src: str, dst: str, **kw: object) -> None:
        if len(renamed) == 2:
            raise OSError(5, "Input/output error")
        real_replace(src, dst, **kw)  # type: ignore[arg-type]
        renamed.append(dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StoreError, match="Input/output error"):
        group.commit()
    monkeypatch.undo()
    for key in keys:
        assert store.get(key) in (REFERENCE[key], b"new " + key.encode())
    assert sum(store.get(k) == b"new " + k.encode() for k in keys) == 2
    assert not list(root.rglob(f"{TEMP_PREFIX}*"))  # what was not renamed is unlinked
    assert sorted(store.list_prefix("")) == sorted(REFERENCE)


def test_group_abort_unlinks_the_staged_temps(store: LocalStore, root: Path) -> None:
    group = store.group()
    group.set("a/c/0/0", b"new")
    group.set("brand/new/key", b"new")
    assert list(root.rglob(f"{TEMP_PREFIX}*"))
    group.abort()
    assert not list(root.rglob(f"{TEMP_PREFIX}*"))
    assert store.get("a/c/0/0") == REFERENCE["a/c/0/0"]
    assert store.get("brand/new/key") is None
    group.commit()  # nothing left to commit
    assert store.get("a/c/0/0") == REFERENCE["a/c/0/0"]


_CRASH = """
import os, sys
from zarrfs.core.stores.local import LocalStore
store = LocalStore(sys.argv[1])
keys = ["a/c/0/0", "a/c/0/1", "a/c/1/0", "b/w"]
group = store.group()
for key in keys:
    group.set(key, b"new " + key.encode())
after = int(sys.argv[2])
if after == 0:
    os._exit(0)  # the process dies between the temp writes and the renames
real_replace = os.replace
done = []
def replace(src, dst, **kw):
    real_replace(src, dst, **kw)
    done.append(dst)
    if len(done) == after:
        os._exit(0)  # dies in the middle of the renames
os.replace = replace
group.commit()
"""


@pytest.mark.parametrize("after", [0, 1, 3])
def test_group_crash_leaves_each_object_old_or_new(
    store: LocalStore, root: Path, after: int
) -> None:
    subprocess.run([sys.executable, "-c", _CRASH, str(root), str(after)], check=True, timeout=60)
    keys = ["a/c/0/0", "a/c/0/1", "a/c/1/0", "b/w"]
    new = [k for k in keys if store.get(k) == b"new " + k.encode()]
    old = [k for k in keys if store.get(k) == REFERENCE[k]]
    assert len(new) == after and len(new) + len(old) == len(keys)
    assert sorted(store.list_prefix("")) == sorted(REFERENCE)  # leftovers are never keys


def test_threads_racing_on_first_use_share_one_root_descriptor(tmp_path, monkeypatch):
    import zarrfs.core.stores.local as local_mod

    (tmp_path / "k").write_bytes(b"v")
    store = local_mod.LocalStore(tmp_path)
    real_open = os.open
    opened: list[int] = []

    def slow_open(path, flags, *args, **kwargs):  # widens the window between test and set
        fd = real_open(path, flags, *args, **kwargs)
        if os.fspath(path) == store.root:
            opened.append(fd)
            time.sleep(0.05)
        return fd

    monkeypatch.setattr(local_mod.os, "open", slow_open)
    start = threading.Barrier(4)
    got: list[int] = []

    def first_use() -> None:
        start.wait()
        got.append(store._root())

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    assert len(opened) == 1 and set(got) == set(opened)
    store.close()


def test_a_store_that_failed_to_open_is_collected_quietly(tmp_path):
    import gc

    from zarrfs.core.errors import StoreError
    from zarrfs.core.stores.local import LocalStore

    seen: list[object] = []
    old, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        with pytest.raises(StoreError):
            LocalStore(tmp_path / "missing")
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert seen == []
