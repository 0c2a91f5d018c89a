"""Codec interop with zarr-python 3.1.6: chunks zarr-python writes decode with our chains, and
chunks our chains encode read back in zarr-python, bit for bit, for every data type."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from codec_helpers import DTYPES, same_bits, sample
from zarr.codecs import BloscCodec as ZBlosc
from zarr.codecs import BytesCodec as ZBytes
from zarr.codecs import Crc32cCodec as ZCrc32c
from zarr.codecs import GzipCodec as ZGzip
from zarr.codecs import TransposeCodec as ZTranspose
from zarr.codecs import ZstdCodec as ZZstd

from zarrfs.core.codecs.base import ChunkSpec, parse_codec
from zarrfs.core.codecs.chain import CodecChain

# zarr-python stores numpy V<n> as its "raw_bytes" extension type (and warns about it); the
# codecs see the same fixed-size bytes as for r<N>.
pytestmark = pytest.mark.filterwarnings("ignore:The data type .* does not have a Zarr V3 spec")

SHAPE, CHUNKS = (10, 7), (4, 3)

# name -> (filters, serializer, compressors) as zarr-python codec objects
CHAINS = {
    "bytes-le": ([], ZBytes(endian="little"), []),
    "gzip-be": ([], ZBytes(endian="big"), [ZGzip(level=6)]),
    "transpose-blosc-crc": (
        [ZTranspose(order=[1, 0])],
        ZBytes(endian="big"),
        [ZBlosc(cname="zstd", clevel=5, shuffle="bitshuffle"), ZCrc32c()],
    ),
    "blosc-auto": ([], ZBytes(endian="little"), [ZBlosc(cname="lz4")]),
    "zstd-checksum-crc": ([], ZBytes(endian="little"), [ZZstd(level=3, checksum=True), ZCrc32c()]),
    "zstd-negative": ([], ZBytes(endian="big"), [ZZstd(level=-2)]),
}


def _create(path: Path, dtype: np.dtype, name: str) -> zarr.Array:
    filters, serializer, compressors = CHAINS[name]
    return zarr.create_array(
        store=str(path),
        shape=SHAPE,
        chunks=CHUNKS,
        dtype=dtype,
        filters=filters,
        serializer=serializer,
        compressors=compressors,
        config={"write_empty_chunks": True},
    )


def _our_chain(path: Path) -> tuple[CodecChain, dict]:
    meta = json.loads((path / "zarr.json").read_text())
    chain = CodecChain.from_json(meta["codecs"])
    return chain, meta


def _chunk_files(path: Path):  # type: ignore[no-untyped-def]
    for i in range(-(-SHAPE[0] // CHUNKS[0])):
        for j in range(-(-SHAPE[1] // CHUNKS[1])):
            yield (i, j), path / "c" / str(i) / str(j)


def _region(idx: tuple[int, int]) -> tuple[slice, ...]:
    return tuple(
        slice(c * n, min((c + 1) * n, s)) for c, n, s in zip(idx, CHUNKS, SHAPE, strict=True)
    )


@pytest.mark.parametrize("name", list(CHAINS))
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_zarr_python_chunks_decode_and_ours_read_back(
    tmp_path: Path, dtype: str, name: str
) -> None:
    dt = DTYPES[dtype]
    written = sample(SHAPE, dt, seed=1)
    arr = _create(tmp_path / "a", dt, name)
    arr[...] = written
    chain, _ = _our_chain(tmp_path / "a")
    fill = np.asarray(arr.metadata.fill_value if dt.kind != "V" else np.zeros((), dt), dtype=dt)
    prepared = chain.prepare(ChunkSpec(CHUNKS, dt, np.asarray(fill).reshape(())))

    # zarr-python -> zarrfs
    for idx, file in _chunk_files(tmp_path / "a"):
        chunk = prepared.decode(file.read_bytes())
        region = _region(idx)
        inner = tuple(slice(0, r.stop - r.start) for r in region)
        assert same_bits(np.ascontiguousarray(chunk[inner]), np.ascontiguousarray(written[region]))

    # zarrfs -> zarr-python
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    target = sample(SHAPE, dt, seed=2)
    for idx, file in _chunk_files(tmp_path / "b"):
        chunk = np.empty(CHUNKS, dtype=dt)
        chunk[...] = fill
        region = _region(idx)
        chunk[tuple(slice(0, r.stop - r.start) for r in region)] = target[region]
        file.write_bytes(prepared.encode(chunk))
    back = zarr.open_array(str(tmp_path / "b"), mode="r")[...]
    assert same_bits(np.asarray(back), target)


@pytest.mark.parametrize(
    "codec",
    [
        ZBytes(endian="little"),
        ZBytes(endian="big"),
        ZTranspose(order=[2, 0, 1]),
        ZGzip(level=0),
        ZGzip(level=9),
        ZCrc32c(),
        ZZstd(level=5, checksum=True),
        ZZstd(),
        ZBlosc(cname="lz4hc", clevel=9, shuffle="noshuffle", typesize=2, blocksize=4096),
        ZBlosc(cname="blosclz", clevel=1, shuffle="shuffle", typesize=8),
    ],
    ids=repr,
)
def test_zarr_python_codec_documents_parse_and_serialise_identically(codec: object) -> None:
    doc = json.loads(json.dumps(codec.to_dict()))  # type: ignore[attr-defined]
    ours = parse_codec(doc)
    assert ours is not None
    assert ours.to_json() == doc


def test_zero_dimensional_array(tmp_path: Path) -> None:
    arr = zarr.create_array(
        store=str(tmp_path), shape=(), dtype="float64", compressors=[ZGzip(level=1), ZCrc32c()]
    )
    arr[...] = 42.5
    chain, _ = _our_chain(tmp_path)
    prepared = chain.prepare(ChunkSpec((), np.dtype("float64"), np.zeros((), "float64")))
    out = prepared.decode((tmp_path / "c").read_bytes())
    assert out.shape == () and out[()] == 42.5
    (tmp_path / "c").write_bytes(prepared.encode(np.array(-1.25)))
    assert zarr.open_array(str(tmp_path), mode="r")[()] == -1.25
