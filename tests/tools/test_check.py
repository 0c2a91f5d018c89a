"""``zarrfs check``: clean stores pass; each kind of damage is found and named by its key."""

from __future__ import annotations

import io
import json
import shutil
import struct
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from zarrfs.core.errors import StoreError
from zarrfs.core.stores.base import RangeRequest, Store
from zarrfs.core.stores.local import LocalStore
from zarrfs.tools import check, human_size

from . import build_store, copy_to_memory, flip_byte


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("check") / "sample.zarr", consolidated=True)


@pytest.fixture
def store(sample: Path, tmp_path: Path) -> Path:
    """A private copy of the sample store (the tests damage it)."""
    return Path(shutil.copytree(sample, tmp_path / "s.zarr"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = check.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def chunk_bytes(store: Path) -> int:
    return sum(f.stat().st_size for f in store.rglob("*") if f.is_file() and f.name != "zarr.json")


def lines_of(out: str, kind: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(kind)]


def damaged_keys(out: str) -> list[str]:
    return sorted(ln.split(": ")[1] for ln in lines_of(out, "damaged: "))


class Wrapped(Store):
    """A store over another one that can hide listing or fail reads of chosen keys."""

    def __init__(self, inner: Store, *, listable: bool = True, fail: Sequence[str] = ()) -> None:
        self.inner = inner
        self.listable = listable
        self.fail = set(fail)
        self.url = inner.url
        self.requested: list[str] = []

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        self.requested.append(key)
        if key in self.fail:
            raise StoreError(f"{key}: injected I/O error")
        return self.inner.get(key, byte_range)

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        if not self.listable:
            return super().list_dir(prefix)
        return self.inner.list_dir(prefix)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        if not self.listable:
            return super().list_prefix(prefix)
        return self.inner.list_prefix(prefix)


# ----------------------------------------------------------------------------- clean


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_clean_store_exits_0(store: Path, jobs: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, str(store), "--jobs", jobs)
    assert rc == 0, out
    assert err == ""  # not a terminal: no progress bar
    assert out.splitlines() == [
        f"checked 5 arrays: 20 stored chunks (48 inner chunks), {human_size(chunk_bytes(store))} "
        "read; OK"
    ]


def test_report_counts(store: Path) -> None:
    with LocalStore(store, read_only=True) as s:
        report = check.check_store(s, 2)
    assert report.ok and report.findings == []
    assert report.arrays == 5
    # temp 2 shards, crc 9 chunks, sparse 1 of 4, start 4 shards, inner 4 shards
    assert (report.chunks_total, report.chunks_stored) == (20, 20)
    # temp 2 shards x 8 inner, start 4 x 4, inner 4 x 4 (every inner chunk written)
    assert report.inner_chunks == 16 + 16 + 16
    assert report.bytes_read == chunk_bytes(store)


def test_quiet_clean_store_prints_nothing(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, str(store), "--quiet") == (0, "", "")


# ----------------------------------------------------------------------------- damage


@pytest.mark.parametrize("jobs", ["1", "4"])
def test_flipped_byte_in_crc32c_chunk(
    store: Path, jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    flip_byte(store / "sub" / "crc" / "c" / "1" / "2", 5)
    rc, out, _ = run(capsys, str(store), "-j", jobs)
    assert rc == 1
    assert damaged_keys(out) == ["sub/crc/c/1/2"]
    assert "crc32c" in lines_of(out, "damaged: ")[0]
    assert out.splitlines()[-1].endswith("1 damaged; FAILED")


def test_truncated_shard(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = store / "temp" / "c" / "1" / "0" / "0"
    shard.write_bytes(shard.read_bytes()[:-100])
    rc, out, _ = run(capsys, str(store))
    assert rc == 1
    assert damaged_keys(out) == ["temp/c/1/0/0"]
    assert "shard index" in lines_of(out, "damaged: ")[0]


def test_garbled_shard_index_with_checksum(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flip_byte(store / "temp" / "c" / "0" / "0" / "0", -12)  # inside the index at the end
    rc, out, _ = run(capsys, str(store))
    assert rc == 1
    assert damaged_keys(out) == ["temp/c/0/0/0"]
    assert "shard index: crc32c checksum mismatch" in out


def test_garbled_shard_index_without_checksum(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # index at the start, no crc32c: entry 0 is (offset, nbytes); point it past the shard's end
    shard = store / "start" / "c" / "1" / "1"
    data = bytearray(shard.read_bytes())
    data[8:16] = struct.pack("<Q", 10**6)
    shard.write_bytes(bytes(data))
    rc, out, _ = run(capsys, str(store))
    assert rc == 1
    assert damaged_keys(out) == ["start/c/1/1"]
    assert "past the end" in lines_of(out, "damaged: ")[0]


def test_truncated_shard_with_index_at_start(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = store / "start" / "c" / "0" / "1"
    shard.write_bytes(shard.read_bytes()[:-3])  # the last inner chunk now ends past the end
    rc, out, _ = run(capsys, str(store))
    assert rc == 1
    assert damaged_keys(out) == ["start/c/0/1"]
    assert "past the end" in out


def inner_offset(shard: Path, coords: tuple[int, int]) -> int:
    """Offset of an inner chunk of a (2, 2)-inner-chunk shard with a crc32c index at the end."""
    data = shard.read_bytes()
    index = data[-(4 * 16 + 4) : -4]  # (offset, nbytes) uint64 pairs in C order, then crc32c
    offset, _ = struct.unpack_from("<QQ", index, 16 * (coords[0] * 2 + coords[1]))
    return int(offset)


def test_damaged_inner_chunks_are_named(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = store / "inner" / "c" / "1" / "0"
    flip_byte(shard, inner_offset(shard, (0, 1)))
    flip_byte(shard, inner_offset(shard, (1, 1)) + 2)
    rc, out, _ = run(capsys, str(store))
    assert rc == 1
    assert damaged_keys(out) == ["inner/c/1/0"]
    line = lines_of(out, "damaged: ")[0]
    assert "inner chunk (0, 1): crc32c" in line and "inner chunk (1, 1): crc32c" in line
    assert "inner chunk (0, 0)" not in line and "inner chunk (1, 0)" not in line


def test_many_damaged_inner_chunks_are_counted(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = store / "inner" / "c" / "0" / "1"
    for coords in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        flip_byte(shard, inner_offset(shard, coords))
    rc, out, _ = run(capsys, str(store))
    assert rc == 1
    assert damaged_keys(out) == ["inner/c/0/1"]
    line = lines_of(out, "damaged: ")[0]
    assert line.count("inner chunk (") == 3
    assert line.endswith("(and 1 more damaged inner chunks)")


def test_several_damaged_objects_each_reported_once(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flip_byte(store / "sub" / "crc" / "c" / "0" / "0", 3)
    flip_byte(store / "sub" / "crc" / "c" / "2" / "2", -1)
    flip_byte(store / "inner" / "c" / "0" / "0", 0)
    rc, out, _ = run(capsys, str(store), "-j", "3")
    assert rc == 1
    assert damaged_keys(out) == ["inner/c/0/0", "sub/crc/c/0/0", "sub/crc/c/2/2"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_chain_with_codecs_around_sharding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[transpose, sharding_indexed]: whole shards are decoded through the chain."""
    import numpy as np
    import zarr
    from zarr.codecs import BytesCodec, ShardingCodec, TransposeCodec

    path = tmp_path / "t.zarr"
    arr = zarr.create_array(
        str(path),
        shape=(8, 6),
        chunks=(4, 6),
        dtype="int32",
        filters=[TransposeCodec(order=[1, 0])],
        serializer=ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec()]),
        compressors=None,
    )
    arr[:] = np.arange(48, dtype="int32").reshape(8, 6)
    codecs = json.loads((path / "zarr.json").read_text())["codecs"]
    assert [c["name"] for c in codecs] == ["transpose", "sharding_indexed"]
    assert run(capsys, str(path))[0] == 0
    shard = path / "c" / "1" / "0"
    shard.write_bytes(shard.read_bytes()[:-30])
    rc, out, _ = run(capsys, str(path))
    assert rc == 1
    assert damaged_keys(out) == ["c/1/0"]


def test_quiet_prints_only_the_damage(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flip_byte(store / "sub" / "crc" / "c" / "0" / "1", 4)
    rc, out, err = run(capsys, str(store), "-q")
    assert rc == 1
    assert len(out.splitlines()) == 1 and out.startswith("damaged: sub/crc/c/0/1: ")
    assert err == ""


def test_undecodable_chunk_without_checksum(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (store / "sub" / "sparse" / "c" / "0").write_bytes(b"not zstd at all")
    rc, out, _ = run(capsys, str(store))
    assert rc == 1
    assert damaged_keys(out) == ["sub/sparse/c/0"]


def test_unreadable_chunk_is_an_error(store: Path) -> None:
    with LocalStore(store, read_only=True) as local:
        report = check.check_store(Wrapped(local, fail=["sub/crc/c/2/1"]), 2)
    assert not report.ok
    assert [(f.kind, f.key) for f in report.findings] == [("unreadable", "sub/crc/c/2/1")]
    assert report.findings[0].reason == "injected I/O error"


def test_invalid_node_is_an_error(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (store / "sub" / "bad").mkdir()
    (store / "sub" / "bad" / "zarr.json").write_text("[1, 2]")
    rc, out, err = run(capsys, str(store))
    assert rc == 1
    assert len(lines_of(out, "invalid: /sub/bad: ")) == 1
    assert damaged_keys(out) == []
    assert err == ""


# ----------------------------------------------------------------------------- stray keys


def test_stray_keys_are_warnings(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (store / "sub" / "crc" / "c" / "7").mkdir()
    (store / "sub" / "crc" / "c" / "7" / "7").write_bytes(b"old chunk")  # outside the grid
    (store / "sub" / "crc" / "junk").write_bytes(b"x")
    (store / "temp" / "c" / "0" / "0" / "0.bak").write_bytes(b"x")
    rc, out, _ = run(capsys, str(store))
    assert rc == 0
    stray = lines_of(out, "warning: stray key ")
    assert sorted(ln.split(": ")[1].removeprefix("stray key ") for ln in stray) == [
        "sub/crc/c/7/7",
        "sub/crc/junk",
        "temp/c/0/0/0.bak",
    ]
    assert damaged_keys(out) == []
    assert out.splitlines()[-1].endswith("3 stray; OK")


# ----------------------------------------------------------------------------- stores


def test_store_that_cannot_list_is_checked_through_the_grid(store: Path) -> None:
    flip_byte(store / "sub" / "crc" / "c" / "1" / "1", 6)
    with LocalStore(store, read_only=True) as local:
        wrapped = Wrapped(local, listable=False)
        report = check.check_store(wrapped, 2)
    assert report.arrays == 5  # found through the consolidated metadata
    # every chunk key of every grid was asked for: 2 + 9 + 4 + 4 + 4
    assert report.chunks_total == 23
    assert "sub/sparse/c/3" in wrapped.requested
    assert report.chunks_stored == 20  # three chunks of sparse are not stored
    assert [(f.kind, f.key) for f in report.findings] == [("damaged", "sub/crc/c/1/1")]


def test_memory_store(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flip_byte(store / "inner" / "c" / "1" / "1", 7)
    copy_to_memory(store, "tools-test-check")
    rc, out, _ = run(capsys, "memory://tools-test-check")
    assert rc == 1
    assert damaged_keys(out) == ["inner/c/1/1"]


# ----------------------------------------------------------------------------- progress


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tty = FakeTTY()
    monkeypatch.setattr(check, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(sys, "stderr", tty)
    assert check.main([str(store), "-j", "1"]) == 0
    bar = tty.getvalue()
    assert "\rchecked 1/20 chunks (5%)" in bar
    assert "chunks/s" in bar and "/s" in bar
    assert bar.endswith("\r")  # erased at the end
    assert "OK" in capsys.readouterr().out


def test_no_bar_when_stderr_is_not_a_terminal(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(check, "PROGRESS_DELAY", 0.0)
    rc, out, err = run(capsys, str(store), "-j", "1")
    assert rc == 0
    assert err == ""
    assert "\r" not in out


def test_no_bar_when_quiet_on_a_terminal(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tty = FakeTTY()
    monkeypatch.setattr(check, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(sys, "stderr", tty)
    assert check.main([str(store), "-q"]) == 0
    assert tty.getvalue() == ""


def test_progress_waits_for_its_delay_and_throttles() -> None:
    tty = FakeTTY()
    bar = check.Progress(tty, 10, enabled=True, delay=60.0)
    bar.update(1, 100)
    assert tty.getvalue() == ""  # a short run never shows a bar
    bar = check.Progress(tty, 10, enabled=True, delay=0.0, interval=60.0)
    bar.update(1, 100)
    bar.update(1, 100)
    assert tty.getvalue().count("\r") == 1  # redrawn at most once per interval
    assert "checked 1/10 chunks (10%)" in tty.getvalue()
    bar.clear()
    assert tty.getvalue().endswith("\r")
    off = FakeTTY()
    check.Progress(off, 10, enabled=False, delay=0.0, interval=0.0).update(1)
    assert off.getvalue() == ""


# ----------------------------------------------------------------------------- bounds


class _Task:
    running = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self, i: int) -> None:
        self.i = i

    def run(self) -> check.Outcome:
        with _Task.lock:
            _Task.running += 1
            _Task.peak = max(_Task.peak, _Task.running)
        time.sleep(0.002)
        with _Task.lock:
            _Task.running -= 1
        return check.Outcome(stored=True, nbytes=self.i)


@pytest.mark.parametrize("jobs", [1, 3])
def test_work_in_flight_is_bounded(jobs: int) -> None:
    produced = 0

    def tasks() -> Iterator[check.Task]:
        nonlocal produced
        for i in range(40):
            produced += 1
            yield _Task(i)  # type: ignore[misc]

    _Task.peak = 0
    consumed = 0
    seen = []
    for outcome in check._run_tasks(tasks(), jobs):
        consumed += 1
        seen.append(outcome.nbytes)
        assert produced - consumed <= 2 * jobs
    assert sorted(seen) == list(range(40))
    assert _Task.peak <= jobs


# ----------------------------------------------------------------------------- usage


def test_missing_store_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run(capsys, str(tmp_path / "missing"))
    assert rc == 1 and out == ""
    assert err.startswith("zarrfs check: error: ") and err.count("\n") == 1


@pytest.mark.parametrize("argv", [[], ["s", "--jobs", "0"], ["s", "--jobs", "x"], ["s", "--x"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert "usage: zarrfs check" in err


def test_leftover_temporary_files_are_warnings_reported_and_kept(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A temporary file a crashed writer left is named with its size (exit status 0: the data
    is intact); check never removes it, and a link with such a name is not reported."""
    first = next(p for p in sorted(store.rglob("*")) if p.is_dir())
    left = first / ".zarrfs-tmp-0badc0de00000001"
    left.write_bytes(b"x" * 3000)
    (store / ".zarrfs-tmp-0badc0de00000002").symlink_to(left)
    rc, out, _ = run(capsys, str(store))
    assert rc == 0
    warnings = lines_of(out, "warning: leftover temporary file")
    assert warnings == [
        f"warning: leftover temporary file {left.relative_to(store)}: 2.9 KiB, left by a zarrfs "
        "process that ended before storing it (not a key; the next writable mount of the "
        "store removes it)"
    ]
    assert "1 leftover" in out.splitlines()[-1] and out.splitlines()[-1].endswith("OK")
    assert left.exists()
