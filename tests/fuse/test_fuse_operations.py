"""ZarrOperations driven directly (no kernel): lookup counting, caching flags, errno rules."""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from types import SimpleNamespace
from typing import Any

import pyfuse3
import pytest
import trio
from fuse_fake_tree import MANY, PATTERN, SIZE, MemDir, MemFile, build_tree

from zarrfs.fuse import directories
from zarrfs.fuse.directories import READDIR_BATCH, kernel_dir_cache_supported
from zarrfs.fuse.operations import DEFAULT_TIMEOUTS, SIBLING_INVALIDATION_LIMIT, ZarrOperations
from zarrfs.fuse.options import MountOptions, parse_options

ROOT = pyfuse3.ROOT_INODE
pytestmark = pytest.mark.timeout(30)


def make_ops(options: str = "") -> ZarrOperations:
    tree = build_tree(read_only="ro" in options.split(","))
    ops = ZarrOperations(tree, parse_options([options]))
    ops.kernel_dir_cache = False  # directories opened with opendir (tests turn it on)
    ops.invalidated = []  # type: ignore[attr-defined]
    ops.invalidate_attrs = ops.invalidated.append  # type: ignore[attr-defined]
    return ops


def run(fn: Any, *args: Any) -> Any:
    return trio.run(fn, *args)


def lookup(ops: ZarrOperations, *path: str) -> pyfuse3.EntryAttributes:
    async def walk() -> pyfuse3.EntryAttributes:
        inode = ROOT
        attrs = None
        for name in path:
            attrs = await ops.lookup(inode, name.encode(), None)
            inode = attrs.st_ino
        return attrs

    return run(walk)


def _record_offloads(ops: ZarrOperations) -> list[str]:
    """The names of the node calls ``ops`` sends to worker threads from now on."""
    offloaded: list[str] = []
    real_offload = ops.offload

    async def recording_offload(fn: Any, *args: Any, **kwargs: Any) -> Any:
        offloaded.append(getattr(fn, "__name__", repr(fn)))
        return await real_offload(fn, *args, **kwargs)

    ops.offload = recording_offload  # type: ignore[assignment]
    return offloaded


def test_attributes() -> None:
    ops = make_ops("uid=7,gid=8,umask=022")
    attrs = lookup(ops, "data.bin")
    assert attrs.st_size == SIZE and attrs.st_blocks == 2 and attrs.st_blksize == 128 * 1024
    assert (attrs.st_uid, attrs.st_gid, attrs.st_nlink) == (7, 8, 1)
    assert attrs.st_mode == stat.S_IFREG | 0o644
    assert attrs.attr_timeout == attrs.entry_timeout == DEFAULT_TIMEOUTS[False]
    assert lookup(ops, "scratch").st_mode == stat.S_IFDIR | 0o755
    ro = make_ops("ro")
    assert lookup(ro, "data.bin").st_mode == stat.S_IFREG | 0o444
    assert lookup(ro, "data.bin").attr_timeout == DEFAULT_TIMEOUTS[True]
    assert lookup(make_ops("attr_timeout=0"), "data.bin").attr_timeout == 0
    default = ZarrOperations(build_tree(), MountOptions())
    assert lookup(default, "hello.txt").st_uid == os.getuid()


def test_only_fuse_errors_leave_handlers() -> None:
    ops = make_ops()

    async def main() -> None:
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.lookup(ROOT, b"missing", None)
        assert info.value.errno == errno.ENOENT
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.getattr(987654321, None)
        assert info.value.errno == errno.ESTALE
        boom = await ops.lookup(ROOT, b"boom.bin", None)
        fi = await ops.open(boom.st_ino, os.O_RDONLY, None)
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.read(fi.fh, 0, 10)  # ZeroDivisionError inside the node
        assert info.value.errno == errno.EIO
        assert await ops.read(fi.fh, 4096, 4) == PATTERN[4096:4100]
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.read(999, 0, 1)
        assert info.value.errno == errno.EBADF

    run(main)


def test_keep_cache_follows_the_cache_token() -> None:
    ops = make_ops()
    inode = lookup(ops, "data.bin").st_ino
    node = ops.inodes.get(inode).node

    async def open_twice() -> list[bool]:
        flags = []
        for _ in range(2):
            fi = await ops.open(inode, os.O_RDONLY, None)
            flags.append(fi.keep_cache)
            await ops.release(fi.fh)
        return flags

    assert run(open_twice) == [False, True]
    node.generation += 1  # content changed behind the kernel's back
    assert run(open_twice) == [False, True]

    class Uncached(MemFile):
        def cache_token(self) -> object:
            return None

    ops.inodes.get(ROOT).node.children["plain"] = Uncached(b"abc", writable=False)
    inode = lookup(ops, "plain").st_ino
    assert run(open_twice) == [False, False]


def test_open_passes_write_and_truncate_and_ro_refuses() -> None:
    ops = make_ops()
    seen: list[tuple[bool, bool]] = []
    data = ops.inodes.get(ROOT).node.children["data.bin"]
    original = data.open
    data.open = lambda write, truncate: seen.append((write, truncate)) or original(write, truncate)
    inode = lookup(ops, "data.bin").st_ino

    direct: list[bool] = []

    async def main() -> None:
        for flags in (os.O_RDONLY, os.O_WRONLY | os.O_TRUNC, os.O_RDWR):
            fi = await ops.open(inode, flags, None)
            direct.append(fi.direct_io)
            await ops.release(fi.fh)
        scratch = (await ops.lookup(ROOT, b"scratch", None)).st_ino
        for name, flags in ((b"w.bin", os.O_WRONLY), (b"rw.bin", os.O_RDWR)):
            fi, _ = await ops.create(scratch, name, 0o644, flags | os.O_CREAT, None)
            direct.append(fi.direct_io)
            await ops.release(fi.fh)

    run(main)
    assert seen == [(False, False), (True, True), (True, False)]
    # only write-only opens skip the page cache (a descriptor that reads may be mapped)
    assert direct == [False, True, False, True, False]

    ro = make_ops("ro")
    inode = lookup(ro, "data.bin").st_ino
    with pytest.raises(pyfuse3.FUSEError) as info:
        run(ro.open, inode, os.O_WRONLY, None)
    assert info.value.errno == errno.EROFS


def test_readdir_counts_only_accepted_entries_and_resumes_by_offset() -> None:
    ops = make_ops()
    big = lookup(ops, "big").st_ino
    table_before = len(ops.inodes)
    replies: list[tuple[str, int, int]] = []
    budget = [0]

    def reply(token: Any, name: bytes, attrs: pyfuse3.EntryAttributes, next_id: int) -> bool:
        if budget[0] == 0:
            return False
        budget[0] -= 1
        replies.append((name.decode(), attrs.st_ino, next_id))
        return True

    ops.readdir_reply = reply

    async def list_all() -> None:
        fh = await ops.opendir(big, None)
        offset = 0
        while True:
            budget[0] = 37  # the kernel buffer fits 37 entries per call
            before = len(replies)
            await ops.readdir(fh, offset, None)
            if len(replies) == before:
                break
            offset = replies[-1][2]
        await ops.releasedir(fh)

    run(list_all)
    assert [name for name, _, _ in replies] == [f"f{i:05d}" for i in range(MANY)]
    assert [next_id for _, _, next_id in replies] == list(range(1, MANY + 1))
    assert len(ops.inodes) == table_before + MANY  # one entry per accepted reply
    for name, inode, _ in replies[:3]:
        entry = ops.inodes.get(inode)
        assert entry.lookups == 1 and entry.path == ("big", name)
    # the kernel forgets them all: the table shrinks back
    run(ops.forget, [(inode, 1) for _, inode, _ in replies])
    assert len(ops.inodes) == table_before
    assert READDIR_BATCH < MANY  # several worker batches were needed


def test_rejected_readdir_entry_is_not_counted() -> None:
    ops = make_ops()
    ops.readdir_reply = lambda token, name, attrs, next_id: False
    sub = lookup(ops, "sub").st_ino
    before = len(ops.inodes)

    async def main() -> None:
        fh = await ops.opendir(sub, None)
        await ops.readdir(fh, 0, None)

    run(main)
    assert len(ops.inodes) == before


def test_rename_flags_and_release_errors(caplog) -> None:
    ops = make_ops()
    scratch = lookup(ops, "scratch").st_ino

    async def main() -> None:
        for name in (b"a", b"b"):
            fi, _ = await ops.create(scratch, name, 0o644, os.O_WRONLY | os.O_CREAT, None)
            await ops.release(fi.fh)
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.rename(scratch, b"a", scratch, b"b", pyfuse3.RENAME_NOREPLACE, None)
        assert info.value.errno == errno.EEXIST
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.rename(scratch, b"a", scratch, b"b", pyfuse3.RENAME_EXCHANGE, None)
        assert info.value.errno == errno.EINVAL
        await ops.rename(scratch, b"a", scratch, b"c", 0, None)
        assert ops.inodes.at(("scratch", "c")) is not None

        data = await ops.lookup(ROOT, b"flushfail.bin", None)
        fi = await ops.open(data.st_ino, os.O_WRONLY, None)
        handle = ops._files[fi.fh].handle

        def failing_release() -> None:
            raise OSError("release exploded")

        handle.release = failing_release
        await ops.release(fi.fh)  # logged, not raised

    with caplog.at_level(logging.ERROR):
        run(main)
    assert any("release /flushfail.bin" in r.getMessage() for r in caplog.records)


def test_commits_invalidate_the_file_and_its_siblings() -> None:
    ops = make_ops()
    doc = lookup(ops, "edit", "doc.json").st_ino
    shadow = lookup(ops, "edit", "shadow.txt").st_ino
    hello = lookup(ops, "hello.txt").st_ino

    async def open_close(inode: int, flags: int) -> None:
        fi = await ops.open(inode, flags, None)
        await ops.flush(fi.fh)
        await ops.release(fi.fh)

    run(open_close, doc, os.O_RDONLY)
    assert ops.invalidated == []  # reading commits nothing
    run(open_close, doc, os.O_WRONLY)
    # the file, its siblings, and the entries beside its directory (a chunk file's array views)
    edit = ops.inodes.at(("edit",)).inode
    assert set(ops.invalidated) == {doc, shadow, edit, hello}
    ops.invalidated.clear()
    run(open_close, doc, os.O_RDWR)  # nothing written: only the flush invalidates, not release
    assert sorted(ops.invalidated) == sorted({doc, shadow, edit, hello})

    # in a directory with more live entries than the limit only the file itself is refreshed
    # (and the entries beside that directory)
    names = [f"f{i:05d}" for i in range(SIBLING_INVALIDATION_LIMIT + 1)]
    for name in names:
        lookup(ops, "big", name)
    ops.invalidated.clear()
    run(ops._changed, ops.inodes.at(("big", names[0])).inode)
    big = ops.inodes.at(("big",)).inode
    assert sorted(ops.invalidated) == sorted(
        [ops.inodes.at(("big", names[0])).inode, big, edit, hello]
    )


def test_rename_serves_the_node_the_view_puts_at_the_new_path() -> None:
    ops = make_ops()
    edit = lookup(ops, "edit").st_ino
    doc_node = ops.inodes.at(("edit",)).node.children["doc.json"]

    async def main() -> int:
        fi, attrs = await ops.create(edit, b"doc.tmp", 0o644, os.O_WRONLY | os.O_CREAT, None)
        await ops.write(fi.fh, 0, b"new")
        await ops.release(fi.fh)
        await ops.rename(edit, b"doc.tmp", edit, b"doc.json", 0, None)
        return attrs.st_ino

    moved = run(main)
    entry = ops.inodes.get(moved)
    assert entry.path == ("edit", "doc.json") and entry.node is doc_node
    assert moved in ops.invalidated


def test_reads_a_handle_can_answer_from_memory_skip_the_worker_thread() -> None:
    ops = make_ops()
    inode = lookup(ops, "data.bin").st_ino
    offloaded = _record_offloads(ops)
    cached: dict[tuple[int, int], Any] = {}

    async def main() -> list[Any]:
        fi = await ops.open(inode, os.O_RDONLY, None)
        handle = ops._files[fi.fh].handle
        handle.read_cached = lambda off, size: cached.get((off, size))  # type: ignore[method-assign]
        cached[(0, 4)] = memoryview(b"fast")
        out = [await ops.read(fi.fh, 0, 4)]  # answered inline
        out.append(await ops.read(fi.fh, 8, 4))  # not cached: through a worker thread
        cached[(16, 2)] = "not bytes"  # a broken fast path still fails inside the handler
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.read(fi.fh, 16, 2)
        out.append(info.value.errno)
        await ops.release(fi.fh)
        return out

    offloaded.clear()
    fast, slow, err = run(main)
    assert bytes(fast) == b"fast" and slow == PATTERN[8:12] and err == errno.EIO
    assert offloaded.count("read") == 1  # only the uncached read went to a thread


def test_writes_a_handle_can_take_in_memory_skip_the_worker_thread() -> None:
    ops = make_ops()
    inode = lookup(ops, "flushfail.bin").st_ino  # a writable file
    offloaded = _record_offloads(ops)
    taken: list[tuple[int, bytes]] = []

    async def main() -> list[int]:
        fi = await ops.open(inode, os.O_WRONLY, None)
        handle = ops._files[fi.fh].handle
        handle.write_cached = lambda off, data: off == 0 and not taken.append((off, data))  # type: ignore[method-assign]
        out = [await ops.write(fi.fh, 0, b"fast")]  # taken inline
        out.append(await ops.write(fi.fh, 8, b"slow"))  # refused inline: a worker thread
        return out

    offloaded.clear()
    assert run(main) == [4, 4]
    assert taken == [(0, b"fast")]
    assert offloaded.count("write") == 1  # only the refused write went to a thread


class _MetaDir(MemDir):
    """A directory whose listing comes from metadata already read (like an array's views)."""

    lists_from_metadata = True


def _listing_ops(options: str = "") -> tuple[ZarrOperations, list[str], list[str]]:
    ops = make_ops(options)
    leaf = _MetaDir({"x.bin": MemFile(b"x", writable=False)})
    kid = _MetaDir({"a.bin": MemFile(b"abc", writable=False), "leaf": leaf}, writable=True)
    ops.inodes.get(ROOT).node.children["walk"] = MemDir({"kid": kid})  # type: ignore[union-attr]
    offloaded = _record_offloads(ops)
    seen: list[str] = []

    def reply(token: Any, name: bytes, attrs: pyfuse3.EntryAttributes, next_id: int) -> bool:
        seen.append(name.decode())
        return True

    ops.readdir_reply = reply
    return ops, offloaded, seen


async def _list(ops: ZarrOperations, inode: int) -> None:
    fh = await ops.opendir(inode, None)
    await ops.readdir(fh, 0, None)
    await ops.releasedir(fh)


def test_directories_listed_with_their_parent_are_answered_without_a_worker_thread() -> None:
    ops, offloaded, seen = _listing_ops()
    walk = lookup(ops, "walk").st_ino

    async def main() -> None:
        offloaded.clear()
        await _list(ops, walk)  # prepares kid/ and kid/leaf/ too
        assert offloaded == ["list_dir", "prepare_listing"] and seen == ["kid"]
        offloaded.clear()
        seen.clear()
        kid = ops.inodes.at(("walk", "kid")).inode  # type: ignore[union-attr]
        await _list(ops, kid)
        leaf = ops.inodes.at(("walk", "kid", "leaf")).inode  # type: ignore[union-attr]
        await _list(ops, leaf)
        assert offloaded == [] and seen == ["a.bin", "leaf", "x.bin"]
        seen.clear()
        await _list(ops, kid)  # a listing prepared ahead serves one opendir only
        assert offloaded == ["list_dir", "prepare_listing"] and seen == ["a.bin", "leaf"]

    run(main)


def test_a_change_through_the_mount_drops_listings_prepared_ahead() -> None:
    ops, offloaded, seen = _listing_ops()
    walk = lookup(ops, "walk").st_ino

    async def main() -> None:
        await _list(ops, walk)
        kid = ops.inodes.at(("walk", "kid")).inode  # type: ignore[union-attr]
        fi, _ = await ops.create(kid, b"new.bin", 0o644, os.O_WRONLY, None)
        await ops.release(fi.fh)
        offloaded.clear()
        seen.clear()
        await _list(ops, kid)
        assert "list_dir" in offloaded and seen == ["a.bin", "leaf", "new.bin"]

    run(main)


def test_listings_prepared_ahead_expire_with_the_attribute_timeout() -> None:
    ops, offloaded, seen = _listing_ops("attr_timeout=0")
    walk = lookup(ops, "walk").st_ino

    async def main() -> None:
        await _list(ops, walk)
        offloaded.clear()
        kid = ops.inodes.at(("walk", "kid")).inode  # type: ignore[union-attr]
        await _list(ops, kid)
        assert offloaded == ["list_dir", "prepare_listing"]

    run(main)


def test_without_opendir_the_kernel_reads_listings_by_inode_and_they_expire() -> None:
    ops, offloaded, seen = _listing_ops("ro")
    ops.kernel_dir_cache = True  # what a read-only mount chooses when pyfuse3 names the inode
    walk = lookup(ops, "walk").st_ino

    async def main() -> None:
        offloaded.clear()
        with pytest.raises(pyfuse3.FUSEError) as err:
            await ops.opendir(walk, None)
        assert err.value.errno == errno.ENOSYS  # the kernel opens directories itself
        await ops.readdir(0, 0, SimpleNamespace(inode=walk))
        assert seen == ["kid"] and offloaded == ["list_dir", "prepare_listing"]
        assert ops.describe("readdir", (0, 0, SimpleNamespace(inode=walk))) == "readdir /walk"
        kid = ops.inodes.at(("walk", "kid")).inode  # type: ignore[union-attr]
        seen.clear()
        offloaded.clear()
        await ops.readdir(0, 0, SimpleNamespace(inode=kid))  # listed ahead with its parent
        assert seen == ["a.bin", "leaf"] and offloaded == []
        seen.clear()
        await ops.readdir(0, 1, SimpleNamespace(inode=kid))  # the same snapshot, from entry 1
        await ops.readdir(0, 2, SimpleNamespace(inode=kid))  # the end: nothing more
        assert seen == ["leaf"] and offloaded == []

    run(main)
    now = time.monotonic()
    assert ops.expired_listings(now) == []
    later = now + DEFAULT_TIMEOUTS[True] + 1
    walk_kid = [walk, ops.inodes.at(("walk", "kid")).inode]  # type: ignore[union-attr]
    assert ops.expired_listings(later) == walk_kid  # oldest first, each once
    assert ops.expired_listings(later) == []


def test_listings_are_handed_to_the_kernel_when_it_and_pyfuse3_allow_it() -> None:
    def chosen(options: str) -> bool:
        return ZarrOperations(build_tree(), parse_options([options])).kernel_dir_cache

    assert chosen("") == chosen("ro") == kernel_dir_cache_supported()
    assert not chosen("ro,attr_timeout=0") and not chosen("attr_timeout=0")


def _dropped(ops: ZarrOperations, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The inodes whose kept listing the daemon drops from now on."""
    dropped: list[int] = []
    monkeypatch.setattr(directories, "_invalidate_listings", dropped.extend)
    return dropped


def test_a_listing_read_while_something_changed_is_dropped_at_its_end(monkeypatch) -> None:
    ops, offloaded, seen = _listing_ops()
    ops.kernel_dir_cache = True
    dropped = _dropped(ops, monkeypatch)
    walk = lookup(ops, "walk").st_ino
    token = SimpleNamespace(inode=walk)

    async def main() -> None:
        await ops.readdir(0, 0, token)
        await ops.readdir(0, 1, token)  # the end, nothing changed: the kernel may keep it
        assert seen == ["kid"] and dropped == []
        await ops.readdir(0, 0, token)  # read again (the kernel dropped it)
        ops._mutation()  # a change starts before the kernel has all of it
        await ops.readdir(0, 1, token)
        assert dropped == [walk]

    run(main)


def test_a_commit_drops_the_kept_listings_of_its_directory_and_those_below(monkeypatch) -> None:
    ops, offloaded, seen = _listing_ops()
    ops.kernel_dir_cache = True
    dropped = _dropped(ops, monkeypatch)
    ops.inodes.get(ROOT).node.children["walk"].children["other"] = MemDir({})  # type: ignore[union-attr]
    kid_file = ops.inodes.get(ROOT).node.children["walk"].children["kid"].children["a.bin"]  # type: ignore[union-attr]
    kid_file.writable = True
    walk = lookup(ops, "walk").st_ino
    inode = {name: lookup(ops, "walk", *name.split("/")[1:]).st_ino
             for name in ("walk/kid", "walk/kid/leaf", "walk/other", "walk/kid/a.bin")}  # fmt: skip

    async def main() -> None:
        for d in (ROOT, walk, inode["walk/kid"], inode["walk/kid/leaf"], inode["walk/other"]):
            await ops.readdir(0, 0, SimpleNamespace(inode=d))
        fi = await ops.open(inode["walk/kid/a.bin"], os.O_WRONLY, None)
        await ops.write(fi.fh, 0, b"x")
        assert sorted(dropped) == sorted([inode["walk/kid"], inode["walk/kid/leaf"]])
        dropped.clear()
        scans: list[object] = []
        near = ops._drop_listings_near

        async def counted(path: object) -> None:
            scans.append(path)
            await near(path)  # type: ignore[arg-type]

        ops._drop_listings_near = counted  # type: ignore[method-assign]
        for _ in range(5):  # no listing recorded since: no scan of the kept listings per write
            await ops.write(fi.fh, 0, b"x")
        assert scans == [] and dropped == []
        await ops.readdir(0, 0, SimpleNamespace(inode=inode["walk/kid/leaf"]))
        await ops.write(fi.fh, 0, b"x")  # one recorded since: dropped again at the next write
        assert len(scans) == 1 and dropped == [inode["walk/kid/leaf"]]
        ops._drop_listings_near = near  # type: ignore[method-assign]
        dropped.clear()
        await ops.flush(fi.fh)  # nothing kept near it any more: nothing to drop
        assert dropped == []
        kid = SimpleNamespace(inode=inode["walk/kid"])
        await ops.readdir(0, 0, kid)
        await ops.write(fi.fh, 0, b"x")  # after the flush (an mmap page written back late)
        assert dropped == [inode["walk/kid"]]
        dropped.clear()
        await ops.readdir(0, 0, kid)
        await ops.release(fi.fh)  # changed since its flush: drops again
        assert dropped == [inode["walk/kid"]]  # not the root, walk or walk/other
        dropped.clear()
        fi = await ops.open(inode["walk/kid/a.bin"], os.O_WRONLY, None)
        await ops.write(fi.fh, 0, b"x")
        await ops.flush(fi.fh)
        dropped.clear()
        await ops.readdir(0, 0, kid)
        await ops.release(fi.fh)  # nothing changed since the flush: the listing is kept
        assert dropped == []

    run(main)
