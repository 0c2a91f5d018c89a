"""The inode table: stable numbers per path, lookup counts, forget, rename and unlink."""

from __future__ import annotations

import pyfuse3
from fuse_fake_tree import MemDir, MemFile

from zarrfs.fuse.inodes import InodeTable, path_hash


def leaf() -> MemFile:
    return MemFile(b"x", writable=False)


def test_root_is_root_inode_and_never_freed() -> None:
    root = MemDir()
    table = InodeTable(root)
    assert table.get(pyfuse3.ROOT_INODE).node is root
    table.forget(pyfuse3.ROOT_INODE, 10)
    assert table.get(pyfuse3.ROOT_INODE).node is root
    assert table.remember((), root).inode == pyfuse3.ROOT_INODE
    assert len(table) == 1


def test_numbers_are_stable_per_path_and_counted() -> None:
    table = InodeTable(MemDir())
    a = table.remember(("a",), leaf())
    assert a.inode == path_hash(("a",)) and a.inode not in (0, pyfuse3.ROOT_INODE)
    assert table.remember(("a",), leaf()).inode == a.inode
    assert table.get(a.inode).lookups == 2
    b = table.remember(("dir", "a"), leaf())
    assert b.inode != a.inode
    # a fresh table (a remount) gives the same numbers
    assert InodeTable(MemDir()).number_for(("dir", "a")) == b.inode


def test_forget_frees_at_zero_and_the_path_keeps_its_number() -> None:
    table = InodeTable(MemDir())
    inodes = [table.remember(("big", f"f{i}"), leaf()).inode for i in range(1000)]
    for _ in range(2):  # many stats: the kernel looks each up again
        for i in range(1000):
            table.remember(("big", f"f{i}"), leaf())
    assert len(table) == 1001
    for inode in inodes:
        table.forget(inode, 2)
    assert len(table) == 1001
    for inode in inodes:
        table.forget(inode, 1)
    assert len(table) == 1  # only the root is left
    assert table.get(inodes[5]) is None
    assert table.remember(("big", "f5"), leaf()).inode == inodes[5]


def test_forget_of_unknown_inode_is_ignored() -> None:
    table = InodeTable(MemDir())
    table.forget(12345, 1)
    assert len(table) == 1


def test_number_for_does_not_register() -> None:
    table = InodeTable(MemDir())
    number = table.number_for(("x",))
    assert table.get(number) is None and len(table) == 1
    assert table.remember(("x",), leaf()).inode == number


def test_collisions_probe_to_a_free_number() -> None:
    table = InodeTable(MemDir(), hash_path=lambda path: 77)
    a = table.remember(("a",), leaf())
    b = table.remember(("b",), leaf())
    assert (a.inode, b.inode) == (77, 78)
    assert table.remember(("b",), leaf()).inode == 78  # keeps its probed number while live
    table.forget(77, 1)
    assert table.number_for(("c",)) == 77
    zero = InodeTable(MemDir(), hash_path=lambda path: 0)
    assert zero.remember(("a",), leaf()).inode == 2  # never 0 or the root


def test_lookup_refreshes_the_node() -> None:
    table = InodeTable(MemDir())
    first, second = leaf(), leaf()
    entry = table.remember(("a",), first)
    table.remember(("a",), second)
    assert entry.node is second


def test_detach_keeps_the_inode_for_open_references() -> None:
    table = InodeTable(MemDir())
    old = table.remember(("f",), leaf())
    table.detach(("f",))
    assert table.get(old.inode) is old and old.path is None
    new = table.remember(("f",), leaf())
    assert new is not old and new.inode != old.inode  # a new file, not the unlinked one
    table.forget(old.inode, 1)
    assert table.get(old.inode) is None
    assert table.at(("f",)) is new


def test_rename_moves_the_subtree_and_replaces_the_target() -> None:
    table = InodeTable(MemDir())
    d = table.remember(("d",), MemDir())
    inner = table.remember(("d", "x"), leaf())
    deeper = table.remember(("d", "s", "y"), leaf())
    target = table.remember(("e",), MemDir())
    table.moved(("d",), ("e",))
    assert table.at(("e",)) is d and d.path == ("e",)
    assert table.at(("e", "x")) is inner and table.at(("e", "s", "y")) is deeper
    assert table.at(("d",)) is None and table.at(("d", "x")) is None
    assert target.path is None and table.get(target.inode) is target  # until forgotten
    # the renamed entries keep their numbers while live
    assert table.remember(("e", "x"), leaf()).inode == inner.inode


def test_siblings_follow_the_live_entries() -> None:
    table = InodeTable(MemDir())
    a = table.remember(("d", "a"), leaf())
    b = table.remember(("d", "b"), leaf())
    table.remember(("e", "c"), leaf())
    assert set(map(id, table.siblings(("d", "a")))) == {id(a), id(b)}
    table.forget(b.inode, 1)
    assert table.siblings(("d", "a")) == [a]
    table.moved(("d", "a"), ("e", "a"))
    assert table.siblings(("d", "x")) == []
    assert {e.path for e in table.siblings(("e", "a"))} == {("e", "a"), ("e", "c")}
    table.detach(("e", "a"))
    assert [e.path for e in table.siblings(("e", "c"))] == [("e", "c")]
    assert table.siblings(()) == []
