"""Blosc chunks decoded block by block as they are read (``blosc.decode_progressively``) and
served piece by piece by a streaming load, byte for byte what numcodecs decodes."""

from __future__ import annotations

import threading
import time

import numcodecs
import numpy as np
import pytest
import zarr
from gated_store import GatedStore
from zarr.codecs import BloscCodec

from zarrfs.core.array import Engine
from zarrfs.core.codecs.blosc import HEADER_SIZE, decode_progressively
from zarrfs.core.errors import CorruptDataError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore

GARBAGE = 0xA5


def _data(n: int = 1 << 20, dtype: str = "<f4") -> bytes:
    """Values that every blosc compressor compresses, shuffled or not (runs of 16 equal
    items, slowly rising, a little noise every 1000th)."""
    rng = np.random.default_rng(3)
    x = (np.arange(n) // 16 % 200).astype(dtype)
    x[::1000] = rng.integers(0, 100, len(x[::1000])).astype(dtype)
    return x.tobytes()


class Feed:
    """The stream arriving in ``encoded`` only as far as ``read_to`` asks: the rest of the
    buffer is garbage, so a block decoded before its bytes were read decodes wrong."""

    def __init__(self, stream: bytes, slack: int = 64) -> None:
        self.stream = np.frombuffer(stream, np.uint8)
        self.encoded = np.full(len(stream) + slack, GARBAGE, np.uint8)
        self.have = 0
        self.asks: list[int] = []

    def read_to(self, n: int) -> None:
        assert n <= len(self.stream)
        self.asks.append(n)
        if n > self.have:
            self.encoded[self.have : n] = self.stream[self.have : n]
            self.have = n


def _decode(stream: bytes, nbytes: int, piece: int = 1 << 16):
    feed = Feed(stream)
    out = np.full(nbytes, GARBAGE, np.uint8)
    done: list[tuple[int, int]] = []  # (bytes final, bytes read when told)
    ok = decode_progressively(
        feed.encoded, len(stream), feed.read_to, out, piece,
        lambda k: done.append((k, feed.have)),
    )  # fmt: skip
    return ok, out, done, feed


@pytest.mark.parametrize("cname", ["zstd", "lz4", "lz4hc", "blosclz", "zlib"])
@pytest.mark.parametrize("shuffle", [0, 1, 2])
@pytest.mark.parametrize("blocksize", [0, 4096, 1 << 17])
def test_progressive_decoding_is_byte_for_byte_numcodecs(cname, shuffle, blocksize):
    data = _data()
    stream = numcodecs.Blosc(cname=cname, shuffle=shuffle, blocksize=blocksize, typesize=4
                             ).encode(data)  # fmt: skip
    ok, out, done, feed = _decode(stream, len(data))
    assert ok
    assert out.tobytes() == data == numcodecs.Blosc().decode(stream)
    finals = [k for k, _ in done]
    assert finals == sorted(set(finals)) and finals[-1] == len(data)
    assert len(done) > 1  # served in pieces, not at the end only
    # the first piece was final long before the whole stream was read
    assert done[0][1] < len(stream)
    assert feed.asks == sorted(feed.asks) and max(feed.asks) == len(stream)
    assert bytes(feed.encoded[12:16]) == stream[12:16]  # the header is as it was


@pytest.mark.parametrize("dtype,typesize", [("<i2", 2), ("<f8", 8), ("|u1", 1), ("<f4", 1)])
def test_other_item_sizes_decode_right(dtype, typesize):
    data = _data(300_000, dtype)
    stream = numcodecs.Blosc(cname="lz4", shuffle=1, blocksize=8192, typesize=typesize
                             ).encode(data)  # fmt: skip
    ok, out, _, _ = _decode(stream, len(data))
    assert ok and out.tobytes() == data


def _blocks(stream: bytes) -> tuple[int, list[int]]:
    nbytes = int.from_bytes(stream[4:8], "little")
    bs = int.from_bytes(stream[8:12], "little")
    nblocks = -(-nbytes // bs)
    starts = np.frombuffer(stream[HEADER_SIZE : HEADER_SIZE + 4 * nblocks], "<i4").tolist()
    return nblocks, starts


def _reordered(stream: bytes) -> bytes:
    """The same blocks stored in reverse order (as c-blosc's threads may store them)."""
    nblocks, starts = _blocks(stream)
    ends = starts[1:] + [len(stream)]
    payloads = [stream[s:e] for s, e in zip(starts, ends, strict=True)]
    first = HEADER_SIZE + 4 * nblocks
    pos, new_starts, body = first, [0] * nblocks, b""
    for j in reversed(range(nblocks)):
        new_starts[j] = pos
        body += payloads[j]
        pos += len(payloads[j])
    return stream[:HEADER_SIZE] + np.array(new_starts, "<i4").tobytes() + body


def test_blocks_stored_out_of_order_are_read_before_they_are_decoded():
    data = _data()
    stream = _reordered(numcodecs.Blosc(cname="zstd", shuffle=1, blocksize=1 << 15).encode(data))
    assert numcodecs.Blosc().decode(stream) == data  # still a valid stream
    ok, out, done, _ = _decode(stream, len(data))
    assert ok and out.tobytes() == data
    # block 0 is stored last: nothing is final before the whole stream is read
    assert done[0][1] == len(stream)


def test_a_damaged_block_raises_and_only_the_blocks_before_it_are_final():
    data = _data()
    stream = bytearray(numcodecs.Blosc(cname="lz4", shuffle=1, blocksize=1 << 15).encode(data))
    nblocks, starts = _blocks(bytes(stream))
    bad = nblocks // 2
    stream[starts[bad] : starts[bad] + 4] = (1 << 30).to_bytes(4, "little")  # a split's size
    with pytest.raises(CorruptDataError, match="blosc"):
        _decode(bytes(stream), len(data), piece=1 << 15)
    feed = Feed(bytes(stream))
    out = np.full(len(data), GARBAGE, np.uint8)
    finals: list[int] = []
    with pytest.raises(CorruptDataError):
        decode_progressively(feed.encoded, len(stream), feed.read_to, out, 1 << 15, finals.append)
    bs = int.from_bytes(stream[8:12], "little")
    assert finals and finals[-1] == bad * bs  # every block before the damaged one
    assert out[: finals[-1]].tobytes() == data[: finals[-1]]


@pytest.mark.parametrize("damage", ["overlap", "outside", "size", "memcpyed"])
def test_streams_it_cannot_take_are_left_to_the_whole_decode_untouched(damage):
    data = _data()
    comp = "blosclz" if damage == "memcpyed" else "lz4"
    source = np.frombuffer(data, np.uint8).copy()
    if damage == "memcpyed":
        source = np.random.default_rng(1).integers(0, 256, len(data), dtype=np.uint8)
    stream = bytearray(numcodecs.Blosc(cname=comp, shuffle=0, blocksize=1 << 15).encode(source))
    nblocks, starts = _blocks(bytes(stream))
    if damage == "overlap":
        stream[HEADER_SIZE + 4 : HEADER_SIZE + 8] = starts[0].to_bytes(4, "little")
    elif damage == "outside":
        stream[HEADER_SIZE + 4 : HEADER_SIZE + 8] = len(stream).to_bytes(4, "little")
    elif damage == "size":
        stream[12:16] = (len(stream) - 1).to_bytes(4, "little")
    else:
        assert stream[2] & 0x02  # c-blosc stored the random bytes uncompressed
    ok, out, done, _ = _decode(bytes(stream), len(data))
    assert not ok and not done
    assert (out == GARBAGE).all()


def test_a_blosc_chunk_is_served_from_its_first_blocks_while_the_rest_is_read(tmp_path):
    shape = (16, 512, 512)  # one 16 MiB float32 chunk
    z = zarr.create_array(
        str(tmp_path / "a"),
        shape=shape,
        chunks=shape,
        dtype="<f4",
        compressors=[BloscCodec(cname="zstd", clevel=1, shuffle="shuffle")],
    )
    rng = np.random.default_rng(0)
    data = np.cumsum(rng.standard_normal(shape, dtype=np.float32), axis=2).round(1)
    z[...] = data
    want = data.tobytes()
    store = GatedStore(tmp_path / "a")
    engine = Engine(threads=2, prefetch_bytes=0, direct_reads=False)
    arr = open_array(store, "", engine)
    try:
        assert arr._units.streams and arr._units.progressive and not arr._units.direct
        got: list[bytes] = []
        first = threading.Thread(target=lambda: got.append(arr.read(0, 65536)))
        first.start()
        first.join(10)
        # served from the blocks of the first MiB of the stream, the rest not read yet
        assert not first.is_alive() and got == [want[:65536]]
        assert arr.read_cached(4096, 4096) == want[4096:8192]  # in the event loop
        assert arr.read_cached(len(want) - 4096, 4096) is None  # not decoded yet
        store.gate.set()
        assert arr.read(0, len(want)) == want
        assert store.opened == ["c/0/0/0"]  # one load, joined by every reader
        deadline = time.monotonic() + 10
        while arr._inflight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.chunk_cache.stats()["entries"] == 1  # cached once whole
    finally:
        store.gate.set()
        engine.close()


def test_a_chunk_reordered_by_threads_reads_right_through_the_engine(tmp_path):
    shape = (4, 256, 256)
    z = zarr.create_array(str(tmp_path / "a"), shape=shape, chunks=shape, dtype="<f4",
                          compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle",
                                                  blocksize=1 << 14)])  # fmt: skip
    data = np.arange(np.prod(shape), dtype="f4").reshape(shape)
    z[...] = data
    chunk = tmp_path / "a" / "c" / "0" / "0" / "0"
    chunk.write_bytes(_reordered(chunk.read_bytes()))
    engine = Engine(threads=2, prefetch_bytes=0)
    try:
        arr = open_array(LocalStore(tmp_path / "a"), "", engine)
        assert arr.read(0, data.nbytes) == data.tobytes()
    finally:
        engine.close()
