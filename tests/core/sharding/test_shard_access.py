"""Shard I/O on a store: index reads, partial inner-chunk reads with coalescing, rewrites."""

from __future__ import annotations

import numpy as np
import pytest
from shard_helpers import BYTES_LE, CRC, CountingStore, sharding, spec

from zarrfs.core.errors import CorruptDataError
from zarrfs.core.sharding import access
from zarrfs.core.sharding import format as fmt
from zarrfs.core.stores.base import ByteRange, SuffixRange

KEY = "arr/c/0/0"
GZIP = {"name": "gzip", "configuration": {"level": 1}}


def numbered(shape: tuple[int, ...], dtype: str = "<f8") -> np.ndarray:
    return (np.arange(int(np.prod(shape))) + 1).astype(dtype).reshape(shape)


def write(store: CountingStore, codec, s, arr: np.ndarray) -> bytes:
    data = codec.encode(arr, s)
    assert data is not None
    store.data[KEY] = data
    store.reset()
    return data


class TestReadShardIndex:
    @pytest.mark.parametrize("location", ["start", "end"])
    def test_one_ranged_request(self, location: str) -> None:
        store = CountingStore()
        codec = sharding([2, 2], index_location=location)
        s = spec((4, 6))
        data = write(store, codec, s, numbered((4, 6), "<f4"))
        index = access.read_shard_index(store, KEY, codec, s)
        assert index is not None
        size = 16 * 6 + 4
        expected = SuffixRange(size) if location == "end" else ByteRange(0, size)
        assert store.gets == [(KEY, expected)]
        assert store.bytes_read == size
        whole = codec.read_index(data, s)
        np.testing.assert_array_equal(index.offsets, whole.offsets)
        np.testing.assert_array_equal(index.nbytes, whole.nbytes)

    def test_missing_shard(self) -> None:
        store = CountingStore()
        assert access.read_shard_index(store, KEY, sharding([2]), spec((4,))) is None
        assert len(store.gets) == 1

    @pytest.mark.parametrize("location", ["start", "end"])
    def test_shard_shorter_than_index(self, location: str) -> None:
        store = CountingStore({KEY: b"\x01" * 20})
        with pytest.raises(CorruptDataError) as err:
            access.read_shard_index(store, KEY, sharding([2], index_location=location), spec((4,)))
        assert err.value.key == KEY

    def test_garbage_index(self) -> None:
        store = CountingStore({KEY: bytes(range(256)) * 2})
        with pytest.raises(CorruptDataError) as err:
            access.read_shard_index(store, KEY, sharding([2, 2]), spec((4, 4)))
        assert err.value.key == KEY


class TestReadInnerChunks:
    def setup_method(self) -> None:
        # 4x4 inner chunks of 128x128 float64 = 128 KiB each, uncompressed: no two chunks are
        # closer than the coalescing gap unless adjacent.
        self.store = CountingStore()
        self.codec = sharding([128, 128], index_location="end")
        self.s = spec((512, 512), "<f8")
        self.arr = numbered((512, 512))
        self.arr[128:256, 0:128] = 0  # inner chunk (1, 0) empty
        write(self.store, self.codec, self.s, self.arr)
        self.index = access.read_shard_index(self.store, KEY, self.codec, self.s)
        self.store.reset()

    def block(self, c: tuple[int, int]) -> np.ndarray:
        return self.arr[c[0] * 128 : (c[0] + 1) * 128, c[1] * 128 : (c[1] + 1) * 128]

    def test_fetches_only_the_needed_chunks(self) -> None:
        wanted = [(0, 0), (2, 3), (1, 0)]
        got = access.read_inner_chunks(self.store, KEY, self.codec, self.s, self.index, wanted)
        assert set(got) == set(wanted)
        assert got[(1, 0)] is None
        np.testing.assert_array_equal(got[(0, 0)], self.block((0, 0)))
        np.testing.assert_array_equal(got[(2, 3)], self.block((2, 3)))
        assert len(self.store.get_many_calls) == 1
        assert len(self.store.gets) == 2
        assert self.store.bytes_read == 2 * 128 * 128 * 8

    def test_adjacent_chunks_are_coalesced(self) -> None:
        wanted = [(0, 1), (0, 2), (0, 3)]  # stored back to back in C order
        got = access.read_inner_chunks(self.store, KEY, self.codec, self.s, self.index, wanted)
        assert len(self.store.gets) == 1
        assert self.store.bytes_read == 3 * 128 * 128 * 8
        for c in wanted:
            np.testing.assert_array_equal(got[c], self.block(c))

    def test_gap_threshold(self) -> None:
        wanted = [(0, 0), (0, 2)]  # one 128 KiB chunk between them
        access.read_inner_chunks(self.store, KEY, self.codec, self.s, self.index, wanted)
        assert len(self.store.gets) == 2
        self.store.reset()
        got = access.read_inner_chunks(
            self.store, KEY, self.codec, self.s, self.index, wanted, coalesce_gap=200_000
        )
        assert len(self.store.gets) == 1
        assert self.store.bytes_read == 3 * 128 * 128 * 8
        np.testing.assert_array_equal(got[(0, 2)], self.block((0, 2)))

    def test_only_missing_chunks_make_no_request(self) -> None:
        got = access.read_inner_chunks(self.store, KEY, self.codec, self.s, self.index, [(1, 0)])
        assert got == {(1, 0): None}
        assert self.store.gets == [] and self.store.get_many_calls == []

    def test_corrupt_inner_chunk_names_the_key(self) -> None:
        offset, _ = self.index.get((3, 3))  # type: ignore[misc]
        data = bytearray(self.store.data[KEY])
        # bytes codec without checksum cannot notice a flipped byte; truncate instead
        self.store.data[KEY] = bytes(data[: offset + 10])
        with pytest.raises(CorruptDataError) as err:
            access.read_inner_chunks(self.store, KEY, self.codec, self.s, self.index, [(3, 3)])
        assert err.value.key == KEY

    def test_index_past_the_end_is_caught_on_read(self) -> None:
        # With the index at the end the shard size is unknown when the index is read; a range
        # past the end must still never be decoded from a short read.
        s = spec((4,), "<f4")
        codec = sharding([2])
        offsets = np.array([0, 1000], dtype=np.uint64)
        nbytes = np.array([8, 8], dtype=np.uint64)
        body = np.array([1, 2, 3, 4], dtype="<f4").tobytes()
        self.store.data[KEY] = body + fmt.encode_index(
            fmt.ShardIndex(offsets, nbytes), codec.index_codecs
        )
        index = access.read_shard_index(self.store, KEY, codec, s)
        assert index is not None
        got = access.read_inner_chunks(self.store, KEY, codec, s, index, [(0,)])
        np.testing.assert_array_equal(got[(0,)], [1, 2])
        with pytest.raises(CorruptDataError, match="ends at") as err:
            access.read_inner_chunks(self.store, KEY, codec, s, index, [(1,)])
        assert err.value.key == KEY

    def test_checksummed_inner_chunk(self) -> None:
        store = CountingStore()
        codec = sharding([2, 2], codecs=[BYTES_LE, GZIP, CRC])
        s = spec((4, 4), "<i2")
        data = write(store, codec, s, numbered((4, 4), "<i2"))
        index = access.read_shard_index(store, KEY, codec, s)
        offset, _ = index.get((0, 1))  # type: ignore[union-attr,misc]
        bad = bytearray(data)
        bad[offset + 3] ^= 0x40
        store.data[KEY] = bytes(bad)
        with pytest.raises(CorruptDataError, match=r"inner chunk \(0, 1\)") as err:
            access.read_inner_chunks(store, KEY, codec, s, index, [(0, 1)])
        assert err.value.key == KEY


class TestCoalesce:
    def test_spans(self) -> None:
        ranges = [(100, 10), (0, 10), (15, 5), (1000, 1)]
        assert access.coalesce(ranges, gap=10) == [(0, 20), (100, 110), (1000, 1001)]
        assert access.coalesce(ranges, gap=5) == [(0, 10), (15, 20), (100, 110), (1000, 1001)]
        assert access.coalesce(ranges, gap=0) == [(0, 10), (15, 20), (100, 110), (1000, 1001)]

    def test_overlapping_and_duplicate(self) -> None:
        assert access.coalesce([(0, 10), (5, 2), (0, 10)], gap=0) == [(0, 10)]


class TestRewriteShard:
    def setup_method(self) -> None:
        self.store = CountingStore()
        self.codec = sharding([2, 2], codecs=[BYTES_LE, GZIP, CRC])
        self.s = spec((4, 6), "<i4", fill=0)
        self.arr = numbered((4, 6), "<i4")
        self.old = write(self.store, self.codec, self.s, self.arr)
        self.old_index = self.codec.read_index(self.old, self.s)

    def stored(self, data: bytes, index: fmt.ShardIndex, c: tuple[int, int]) -> bytes:
        offset, nbytes = index.get(c)  # type: ignore[misc]
        return data[offset : offset + nbytes]

    def test_untouched_chunks_keep_their_bytes(self) -> None:
        new = np.full((2, 2), 77, dtype="<i4")
        index = access.rewrite_shard(self.store, KEY, self.codec, self.s, {(1, 2): new})
        # the old index, then one range for the kept chunks (adjacent in the old shard)
        offset, nbytes = self.old_index.get((1, 1))  # type: ignore[misc]
        assert self.store.gets == [
            (KEY, SuffixRange(self.codec.index_size(self.s))),
            (KEY, ByteRange(0, offset + nbytes)),
        ]
        assert self.store.sets == [KEY] and self.store.deletes == []
        data = self.store.data[KEY]
        assert index is not None
        for c in self.codec.iter_inner(self.s.shape):
            if c != (1, 2):
                assert self.stored(data, index, c) == self.stored(self.old, self.old_index, c)
        expected = self.arr.copy()
        expected[2:4, 4:6] = 77
        np.testing.assert_array_equal(self.codec.decode(data, self.s), expected)

    def test_untouched_chunks_are_never_decoded(self) -> None:
        # Corrupt the stored bytes of an untouched inner chunk: a rewrite keeps them verbatim
        # rather than decoding them (it cannot know, and must not re-encode them).
        offset, _ = self.old_index.get((0, 0))  # type: ignore[misc]
        bad = bytearray(self.old)
        bad[offset + 2] ^= 0x10
        self.store.data[KEY] = bytes(bad)
        access.rewrite_shard(self.store, KEY, self.codec, self.s, {(1, 1): None})
        data = self.store.data[KEY]
        index = self.codec.read_index(data, self.s)
        assert self.stored(data, index, (0, 0)) == self.stored(bytes(bad), self.old_index, (0, 0))

    def test_none_and_fill_remove_chunks(self) -> None:
        access.rewrite_shard(
            self.store,
            KEY,
            self.codec,
            self.s,
            {(0, 0): None, (0, 1): np.zeros((2, 2), dtype="<i4")},
        )
        data = self.store.data[KEY]
        index = self.codec.read_index(data, self.s)
        assert index.get((0, 0)) is None and index.get((0, 1)) is None
        assert sum(1 for _ in index.present()) == 4
        expected = self.arr.copy()
        expected[0:2, 0:4] = 0
        np.testing.assert_array_equal(self.codec.decode(data, self.s), expected)

    def test_empty_shard_is_deleted(self) -> None:
        updates = {c: None for c in self.codec.iter_inner(self.s.shape)}
        assert access.rewrite_shard(self.store, KEY, self.codec, self.s, updates) is None
        assert KEY not in self.store.data
        assert self.store.deletes == [KEY] and self.store.sets == []

    def test_full_rewrite_skips_the_read(self) -> None:
        new = numbered((4, 6), "<i4") * 3
        updates = {
            c: new[c[0] * 2 : c[0] * 2 + 2, c[1] * 2 : c[1] * 2 + 2]
            for c in self.codec.iter_inner(self.s.shape)
        }
        access.rewrite_shard(self.store, KEY, self.codec, self.s, updates)
        assert self.store.gets == []
        np.testing.assert_array_equal(self.codec.decode(self.store.data[KEY], self.s), new)

    def test_new_shard(self) -> None:
        store = CountingStore()
        access.rewrite_shard(store, KEY, self.codec, self.s, {(1, 1): np.ones((2, 2), "<i4")})
        expected = np.zeros((4, 6), "<i4")
        expected[2:4, 2:4] = 1
        np.testing.assert_array_equal(self.codec.decode(store.data[KEY], self.s), expected)

    def test_returned_index_matches_the_stored_shard(self) -> None:
        index = access.rewrite_shard(self.store, KEY, self.codec, self.s, {(0, 2): None})
        stored = access.read_shard_index(self.store, KEY, self.codec, self.s)
        assert index is not None and stored is not None
        np.testing.assert_array_equal(index.offsets, stored.offsets)
        np.testing.assert_array_equal(index.nbytes, stored.nbytes)

    def test_corrupt_existing_shard_changes_nothing(self) -> None:
        self.store.data[KEY] = self.old[:-1]
        with pytest.raises(CorruptDataError) as err:
            access.rewrite_shard(self.store, KEY, self.codec, self.s, {(0, 0): None})
        assert err.value.key == KEY
        assert self.store.sets == [] and self.store.deletes == []
        assert self.store.data[KEY] == self.old[:-1]

    @pytest.mark.parametrize("location", ["start", "end"])
    def test_round_trip_with_partial_reads(self, location: str) -> None:
        store = CountingStore()
        codec = sharding([2, 3], codecs=[BYTES_LE, GZIP], index_location=location)
        s = spec((4, 6), "<f4", fill=np.nan)
        access.rewrite_shard(store, KEY, codec, s, {(1, 0): np.full((2, 3), 5, "<f4")})
        index = access.read_shard_index(store, KEY, codec, s)
        got = access.read_inner_chunks(store, KEY, codec, s, index, [(0, 0), (1, 0)])
        assert got[(0, 0)] is None
        np.testing.assert_array_equal(got[(1, 0)], np.full((2, 3), 5))


class TestStreamedRewrite:
    """Kept chunks are copied in bounded ranges; the new shard is produced piece by piece."""

    @pytest.mark.parametrize("location", ["start", "end"])
    def test_kept_chunks_are_copied_in_bounded_ranges(self, location, monkeypatch) -> None:
        store = CountingStore()
        codec = sharding([2, 2], codecs=[BYTES_LE, GZIP], index_location=location)
        s = spec((4, 6), "<i4", fill=0)
        arr = numbered((4, 6), "<i4")
        write(store, codec, s, arr)
        old = access.read_shard_index(store, KEY, codec, s)
        assert old is not None
        largest = max(n for _, _, n in old.present())
        monkeypatch.setattr(access, "COPY_SPAN", largest)  # one kept chunk per range
        store.gets.clear()
        index = access.rewrite_shard(store, KEY, codec, s, {(0, 1): np.full((2, 2), 9, "<i4")})
        assert len(store.gets) == 1 + 5  # the index, then each of the five kept chunks
        assert all(r.length <= largest for _, r in store.gets[1:])
        expected = arr.copy()
        expected[0:2, 2:4] = 9
        np.testing.assert_array_equal(codec.decode(store.data[KEY], s), expected)
        stored = codec.read_index(store.data[KEY], s)
        assert index is not None and index.same_as(stored)

    def test_a_short_kept_range_stores_nothing(self, tmp_path) -> None:
        from zarrfs.core.stores.local import LocalStore
        from zarrfs.core.stores.localgroup import TEMP_PREFIX

        store = LocalStore(tmp_path)
        codec = sharding([2, 2], codecs=[BYTES_LE, GZIP])
        s = spec((4, 6), "<i4", fill=0)
        data = bytearray(codec.encode(numbered((4, 6), "<i4"), s) or b"")
        old = codec.read_index(bytes(data), s)
        # the index claims the last inner chunk ends past the end of the shard
        offsets = old.offsets.copy()
        offsets[1, 2] = len(data) - 2
        index = fmt.ShardIndex(offsets, old.nbytes.copy())
        data[-fmt.index_size(codec.index_codecs, (2, 3)) :] = fmt.encode_index(
            index, codec.index_codecs
        )
        store.set(KEY, bytes(data))
        with pytest.raises(CorruptDataError, match="shard ends at") as err:
            access.rewrite_shard(store, KEY, codec, s, {(0, 0): np.ones((2, 2), "<i4")})
        assert err.value.key == KEY
        assert store.get(KEY) == bytes(data)
        assert not [p for p in tmp_path.rglob("*") if p.name.startswith(TEMP_PREFIX)]


class TestLocalRewrite:
    """On a local store the kept runs come from the old shard opened once, into reused blocks,
    with the kernel asked to read them ahead."""

    @pytest.fixture
    def shard(self, tmp_path, monkeypatch):
        from zarrfs.core.stores import fileio
        from zarrfs.core.stores.local import LocalStore

        store = LocalStore(tmp_path)
        codec = sharding([2, 2], codecs=[BYTES_LE, GZIP])
        s = spec((4, 6), "<i4", fill=0)
        arr = numbered((4, 6), "<i4")
        store.set(KEY, codec.encode(arr, s) or b"")
        old = access.read_shard_index(store, KEY, codec, s)
        assert old is not None
        events: list[tuple[str, int, int]] = []
        real_hint, real_read = fileio.FileReader.will_need, fileio.FileReader.readinto

        def hint(reader, offset: int, length: int) -> None:
            events.append(("hint", offset, length))
            real_hint(reader, offset, length)

        def readinto(reader, buf, offset: int, nowait: bool = False) -> int:
            events.append(("read", offset, len(buf)))
            return real_read(reader, buf, offset, nowait)

        monkeypatch.setattr(fileio.FileReader, "will_need", hint)
        monkeypatch.setattr(fileio.FileReader, "readinto", readinto)
        # one kept chunk per run
        monkeypatch.setattr(access, "COPY_SPAN", max(n for _, _, n in old.present()))
        return store, codec, s, arr, old, events

    def _rewrite(self, shard) -> list[tuple[int, int]]:
        """Rewrites inner chunk (0, 1); checks the result; returns the kept runs, in order."""
        store, codec, s, arr, old, _ = shard
        access.rewrite_shard(store, KEY, codec, s, {(0, 1): np.full((2, 2), 9, "<i4")})
        expected = arr.copy()
        expected[0:2, 2:4] = 9
        np.testing.assert_array_equal(codec.decode(store.get(KEY), s), expected)
        return sorted(((o, n) for c, o, n in old.present() if c != (0, 1)), key=lambda r: r)

    def test_every_run_is_hinted_before_it_is_read(self, shard, monkeypatch) -> None:
        monkeypatch.setattr(access, "READ_AHEAD", 0)  # no run ahead of the one read
        runs = self._rewrite(shard)
        events = shard[5]
        assert events == [(kind, o, n) for o, n in runs for kind in ("hint", "read")]

    def test_runs_ahead_are_hinted_before_the_first_read(self, shard, monkeypatch) -> None:
        monkeypatch.setattr(access, "READ_AHEAD", 1 << 20)  # the whole shard
        runs = self._rewrite(shard)
        events = shard[5]
        assert events == [("hint", o, n) for o, n in runs] + [("read", o, n) for o, n in runs]

    def test_runs_are_read_into_reused_blocks(self, shard, monkeypatch) -> None:
        from zarrfs.core import buffers

        taken: list[tuple[int, int]] = []
        real_take = buffers.take

        def take(nbytes: int, capacity: int = 0):
            taken.append((nbytes, capacity))
            return real_take(nbytes, capacity)

        monkeypatch.setattr(buffers, "take", take)
        runs = self._rewrite(shard)
        # the runs, each in the one size class of kept runs (others: encoding, decoding)
        assert [t for t in taken if t[1] == access.COPY_SPAN] == [
            (n, access.COPY_SPAN) for _, n in runs
        ]

    def test_a_shard_gone_before_its_runs_are_read(self, shard, monkeypatch) -> None:
        store, codec, s, *_ = shard
        before = store.get(KEY)
        monkeypatch.setattr(store, "open_reader", lambda key: None)
        with pytest.raises(CorruptDataError, match="disappeared") as err:
            access.rewrite_shard(store, KEY, codec, s, {(0, 1): np.ones((2, 2), "<i4")})
        assert err.value.key == KEY
        assert store.get(KEY) == before


@pytest.mark.parametrize("location", ["start", "end"])
def test_a_local_shard_replaced_after_its_index_was_read_is_read_by_its_own_index(
    tmp_path, location: str
) -> None:
    """A flush may replace a shard between a reader's index and its read of the inner chunks;
    on a local store the inner chunks are read at the offsets of the index of the very file
    opened, never at the old index's offsets in the new file."""
    from zarrfs.core.stores.local import LocalStore

    store = LocalStore(tmp_path)
    codec = sharding([2, 2], index_location=location)
    s = spec((4, 6))
    old = numbered((4, 6), "<f4")
    store.set(KEY, codec.encode(old, s))
    index = access.read_shard_index(store, KEY, codec, s)
    assert index is not None
    new = -old
    new[:2, :2] = 0  # inner chunk (0, 0) now empty: every other one moved
    store.set(KEY, codec.encode(new, s))
    got = access.read_inner_chunks(store, KEY, codec, s, index, [(0, 0), (0, 1), (1, 2)])
    assert got[(0, 0)] is None
    np.testing.assert_array_equal(got[(0, 1)], new[:2, 2:4])
    np.testing.assert_array_equal(got[(1, 2)], new[2:, 4:])
