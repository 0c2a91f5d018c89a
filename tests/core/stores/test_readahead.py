"""The listing read-ahead helper (``zarrfs.core.stores.readahead``): what it reads, what it
never touches, that the daemon never waits for it, and that it never outlives its store."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from zarrfs.core.hierarchy import Hierarchy
from zarrfs.core.stores import readahead
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.readahead import ListingReadAhead, serve, walk
from zarrfs.core.stores.wrapper import StoreWrapper


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    for g in ("g0", "g1"):
        (root / g / "a0" / "c").mkdir(parents=True)  # 1-D: chunk c/0
        (root / g / "a0" / "c" / "0").write_bytes(b"x" * 10)
        (root / g / "a1" / "c" / "0").mkdir(parents=True)  # 2-D: chunk c/0/0
        (root / g / "a1" / "c" / "0" / "0").write_bytes(b"x" * 10)
        for a in ("a0", "a1"):
            (root / g / a / "zarr.json").write_text("{}")
        (root / g / "zarr.json").write_text("{}")
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "zarr.json").write_text("{}")
    (outside / "deep" / "secret").write_text("no")
    (root / "g0" / "link").symlink_to(outside)
    (root / "g0" / "a0" / ".zattrs").symlink_to(outside / "zarr.json")
    return root


def _walk(root: Path, prefix: str) -> list[str]:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        touched: list[str] = []
        walk(fd, prefix, touched)
        return touched
    finally:
        os.close(fd)


def test_walks_depth_levels_in_name_order(tree: Path) -> None:
    assert _walk(tree, "g0") == [
        "g0/link", "g0/zarr.json",  # the link is lstat-ed, never followed
        "g0/a0/.zattrs", "g0/a0/zarr.json",  # a linked document is lstat-ed, not opened
        "g0/a0/c/0",  # a chunk file: depth 3 ends at c/'s entries
        "g0/a1/zarr.json",  # c/0 of a1 is a directory of the fourth level: not walked
    ]  # fmt: skip


def test_never_follows_links_or_leaves_the_root(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real_open = os.open

    def recording(name: str, flags: int, *args: Any, **kwargs: Any) -> int:
        opened.append(os.path.basename(name))
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(readahead.os, "open", recording)
    _walk(tree, "g0")
    assert "link" not in opened and ".zattrs" not in opened and "zarr.json" in opened
    assert _walk(tree, "g0/link") == []  # a link is not walked into
    for bad in ("..", "g0/../..", "", "/", "g0//a0", "./g0"):
        assert _walk(tree, bad) == [], bad
    assert _walk(tree, "missing/prefix") == []


def test_entries_are_bounded(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readahead, "MAX_ENTRIES", 3)
    assert len(_walk(tree, "g0")) <= 3


def test_a_prefix_walked_recently_is_not_walked_again(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walked: list[str] = []
    monkeypatch.setattr(readahead, "walk", lambda fd, prefix: walked.append(prefix))
    now = f"{time.monotonic():.3f} "
    prefixes = ["g0", "g0/a1", "g1/a0", "g0", "g1", "g1/a0/c"]
    serve(str(tree), [now + p + "\n" for p in prefixes])
    assert walked == ["g0", "g1/a0", "g1"]  # g0/a1 and g0 again: below a fresh walk


def test_a_stale_prefix_is_skipped(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[str] = []
    monkeypatch.setattr(readahead, "walk", lambda fd, prefix: walked.append(prefix))
    old = f"{time.monotonic() - readahead.STALE_SECONDS - 1:.3f} "
    now = f"{time.monotonic():.3f} "
    serve(str(tree), [old + "g0\n", now + "g1\n", "garbage\n", "x g0\n"])
    assert walked == ["g1"]


def test_a_listing_sends_a_bounded_number_of_prefixes(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readahead, "PREFIXES_PER_LISTING", 3)
    written: list[bytes] = []
    helper = ListingReadAhead(str(tree))
    monkeypatch.setattr(helper, "_pipe", lambda: 99)
    monkeypatch.setattr(readahead.os, "write", lambda fd, data: written.append(data) or len(data))
    helper.send([f"g{i}" for i in range(10)])
    lines = b"".join(written).decode().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["g0", "g1", "g2"]
    assert all(abs(float(line.split(" ")[0]) - time.monotonic()) < 5 for line in lines)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
        return f.read().split(") ")[1][0] != "Z"


def test_helper_starts_on_first_use_and_stops_with_the_store(tree: Path) -> None:
    store = LocalStore(tree)
    store.enable_read_ahead()
    helper = store._read_ahead
    assert helper is not None and helper._proc is None  # nothing started before a listing
    store.read_ahead(["g0", "g1"])
    proc = helper._proc
    assert proc is not None and _alive(proc.pid)
    store.close()
    assert proc.returncode == 0 and not _alive(proc.pid)


def test_the_helper_exits_when_its_input_closes(tree: Path) -> None:
    helper = ListingReadAhead(str(tree))
    helper.send(["g0"])
    proc = helper._proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # what the kernel does when the daemon dies
    assert proc.wait(timeout=10) == 0
    helper._proc = None


def test_sending_never_waits_for_a_stuck_helper(tree: Path) -> None:
    helper = ListingReadAhead(str(tree))
    helper.send(["g0"])
    proc = helper._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)  # reads nothing more: the pipe fills up
    try:
        began = time.monotonic()
        for i in range(2000):
            helper.send([f"g{i}/array/with/a/long/prefix/{'x' * 100}"])
        assert time.monotonic() - began < 5.0
        assert not helper._failed  # dropped, not given up
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        helper.close()
    assert not _alive(proc.pid)


def test_a_dead_helper_is_given_up_once(tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="zarrfs.core.stores.readahead")
    helper = ListingReadAhead(str(tree))
    helper.send(["g0"])
    proc = helper._proc
    assert proc is not None
    proc.kill()
    proc.wait()
    for _ in range(3):
        helper.send(["g1"])
    assert helper._failed and helper._proc is None
    assert sum("not read ahead" in r.getMessage() for r in caplog.records) == 1


def test_an_unstartable_helper_is_given_up(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readahead.sys, "executable", str(tree / "no-such-python"))
    helper = ListingReadAhead(str(tree))
    helper.send(["g0"])
    helper.send(["g1"])
    assert helper._failed and helper._proc is None


class _Recording(StoreWrapper):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.asked: list[list[str]] = []

    def read_ahead(self, prefixes: Any) -> None:
        self.asked.append(list(prefixes))


def test_listing_a_group_asks_to_read_its_children_ahead(tree: Path) -> None:
    store = _Recording(LocalStore(tree))
    h = Hierarchy(store)
    try:
        h.children("g0")
        assert store.asked == [["g0/a0", "g0/a1"]]
    finally:
        h.engine.close()


def test_stores_without_read_ahead_accept_the_hint(tree: Path) -> None:
    store = LocalStore(tree)  # not enabled: the library API and tests start no process
    store.read_ahead(["g0"])
    assert store._read_ahead is None


def test_names_that_are_not_utf8_reach_the_helper(tmp_path: Path) -> None:
    import io

    root = tmp_path / "s"
    odd = os.fsdecode(b"g\xff")
    (root / odd / "a").mkdir(parents=True)
    (root / odd / "a" / "zarr.json").write_text("{}")
    lines = list(readahead._lines(io.BytesIO(b"1.0 " + os.fsencode(odd) + b"\n")))
    assert lines == ["1.0 " + odd + "\n"]
    assert _walk(root, odd) == [f"{odd}/a/zarr.json"]
    helper = ListingReadAhead(str(root))
    try:
        helper.send([odd, "other"])
        proc = helper._proc
        assert proc is not None
    finally:
        helper.close()
    assert proc.returncode == 0  # read both lines and ended at the end of its input


def test_each_write_is_whole_lines_within_the_pipes_atomic_size(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[bytes] = []
    helper = ListingReadAhead(str(tree))
    monkeypatch.setattr(helper, "_pipe", lambda: 99)
    monkeypatch.setattr(readahead.os, "write", lambda fd, data: written.append(data) or len(data))
    names = [f"grüße-{i}-" + "é" * 100 for i in range(200)]  # 2 bytes per é
    helper.send([*names, "x" * 5000])  # the last one cannot be written atomically: not sent
    assert len(written) > 1
    assert all(len(chunk) <= readahead._PIPE_ATOMIC and chunk.endswith(b"\n") for chunk in written)
    sent = [line.split(" ", 1)[1] for line in b"".join(written).decode().splitlines()]
    assert sent == names
