"""The interop corpus: Zarr v3 arrays written by zarr-python and tensorstore, with numpy models.

Every case is one array: a shape case (3-D with edge chunks, 1-D, 0-d, zero-length), a codec
chain, a data type, a fill value and a writer. ``CASES`` lists them all at import time so tests
can be parametrized by name (``writer-shape-chain-dtype``); ``build_corpus`` writes them once per
test session and returns the numpy model of each array: the fill value everywhere, then the data
that was written into a few regions chosen so that some chunks (and shards, and inner chunks of
shards) are partial, some are edge chunks and some are never written.

Invariants the tests rely on:
- ``CorpusArray.expected`` is the model, and ``build_corpus`` has checked it byte for byte
  against the writer's own read of the stored array (so a model bug cannot hide a reader bug).
- ``document(case)`` is the full v3 metadata document of the case; tensorstore and zarrfs'
  ``create_array`` receive it as is, zarr-python receives the same chain through
  ``zarr.create_array`` (filters / serializer / compressors).
- Combinations a writer cannot produce are in ``WRITER_LIMITS`` with the reason, and are written
  by the other writer only.

Spec: Zarr v3 core (array metadata, fill values), data-types, codecs/* and sharding-indexed.
"""

from __future__ import annotations

import base64
import json
import math
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# fmt: off
DTYPES: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "raw_bytes3",
)
# fmt: on
WRITERS: tuple[str, ...] = ("zarr-python", "tensorstore")

_TRANSPOSE_SHARD = (
    "zarr-python checks the sharding codec's inner chunk_shape against the untransposed chunk "
    "shape, so it refuses to create (or open) a transpose -> sharding chain whose inner chunks "
    "tile only the transposed shard ((5, 3, 4) of the (6, 8, 5) shard transposed to (5, 6, 8)); "
    "'transpose-shard-small' uses (1, 2, 1), valid both ways"
)
_TS_RAW_BYTES = (
    "tensorstore maps raw_bytes to its 'byte' type with an extra dimension: creating one aborts "
    "the process as for r<N>, and reading one gives numpy void arrays of size 0 in Python"
)
_ZP_RAW_BYTES_SHARDING = (
    "zarr-python fails with 'TypeError: unhashable type: writeable void-scalar' on any sharded "
    "raw_bytes array (the sharding codec hashes the chunk spec, fill value included)"
)

#: What an oracle cannot write, and why (checked with zarr 3.1.6 and tensorstore 0.1.86).
#: Keys are (writer, feature); a feature is a data type, a chain name, "fill:<kind>",
#: "<dtype>+sharding" or "<dtype>+fill:<kind>" (see ``features``). The r16 rows are why no
#: r<N> type is in the corpus: no oracle writes one as the spec defines it.
WRITER_LIMITS: dict[tuple[str, str], str] = {
    ("zarr-python", "r16"): (
        "zarr-python has no r<N> data type: numpy 'V2' is written as the 'raw_bytes' extension "
        "({'name': 'raw_bytes', 'configuration': {'length_bytes': 2}}, base64 fill value)"
    ),
    ("tensorstore", "r16"): (
        "tensorstore aborts the process (Check failed: range size mismatch) when creating an "
        "r<N> array, and when opening one requires a base64 string fill value instead of the "
        "spec's array of integers"
    ),
    ("zarr-python", "transpose-shard"): _TRANSPOSE_SHARD,
    ("tensorstore", "raw_bytes3"): _TS_RAW_BYTES,
    ("zarr-python", "raw_bytes3+sharding"): _ZP_RAW_BYTES_SHARDING,
    ("zarr-python", "fill:hexnan"): (
        'zarr-python writes a NaN fill value with a payload as "NaN" in zarr.json, while the '
        "chunks it writes in the same session hold the payload, so its own array disagrees "
        "with itself once reopened"
    ),
}

#: Arrays an oracle cannot read back (keys as in WRITER_LIMITS).
READER_LIMITS: dict[tuple[str, str], str] = {
    ("zarr-python", "transpose-shard"): _TRANSPOSE_SHARD,
    ("tensorstore", "raw_bytes3"): _TS_RAW_BYTES,
    ("zarr-python", "raw_bytes3+sharding"): _ZP_RAW_BYTES_SHARDING,
    ("zarr-python", "float16+fill:hexnan"): (
        'zarr-python reads the float16 fill value "0x7e01" as 0x7e00 (the payload is lost)'
    ),
}


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The in-memory numpy type of a corpus data type name (``raw_bytes<N>`` is ``V<N>``)."""
    if name.startswith("raw_bytes"):
        return np.dtype(f"V{int(name[len('raw_bytes') :])}")
    return np.dtype(name)


def data_type_json(name: str) -> Any:
    """The ``data_type`` member of the metadata document for a corpus data type name."""
    if name.startswith("raw_bytes"):
        return {"name": "raw_bytes", "configuration": {"length_bytes": numpy_dtype(name).itemsize}}
    return name


# ---------------------------------------------------------------------------------------------
# codec chains


def _bytes(endian: str = "little") -> dict[str, Any]:
    return {"name": "bytes", "configuration": {"endian": endian}}


def _blosc(cname: str, shuffle: str, itemsize: int) -> dict[str, Any]:
    return {
        "name": "blosc",
        "configuration": {
            "cname": cname,
            "clevel": 5,
            "shuffle": shuffle,
            "typesize": itemsize,
            "blocksize": 0,
        },
    }


def _gzip(level: int = 1) -> dict[str, Any]:
    return {"name": "gzip", "configuration": {"level": level}}


def _crc32c() -> dict[str, Any]:
    return {"name": "crc32c"}


def _sharding(
    inner: tuple[int, ...],
    codecs: list[dict[str, Any]],
    index_location: str = "end",
    index_crc: bool = True,
) -> dict[str, Any]:
    index_codecs = [_bytes()] + ([_crc32c()] if index_crc else [])
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(inner),
            "codecs": codecs,
            "index_codecs": index_codecs,
            "index_location": index_location,
        },
    }


@dataclass(frozen=True)
class Chain:
    """A named codec chain for one shape case; ``chunks`` is the outer (stored) chunk shape."""

    name: str
    chunks: tuple[int, ...]
    # "zero" | "nonzero" | "nan" | "hexnan" (NaN with a payload, as hex); the NaN kinds fall
    # back to nonzero for types without NaN
    fill: str
    dimension_names: bool = False

    def codecs(self, itemsize: int) -> list[dict[str, Any]]:
        return chain_codecs(self.name, itemsize, len(self.chunks))


def chain_codecs(name: str, itemsize: int, rank: int) -> list[dict[str, Any]]:
    """The v3 codec list of a named chain for a data type size and array rank."""
    order = [2, 0, 1] if rank == 3 else list(reversed(range(rank)))
    transpose = {"name": "transpose", "configuration": {"order": order}}
    inner = (3, 4, 5) if rank == 3 else (4,)  # shards are (6, 8, 5) or (16,)
    lz4 = [_bytes(), _blosc("lz4", "shuffle", itemsize)]
    chains: dict[str, list[dict[str, Any]]] = {
        "bytes-le": [_bytes("little")],
        "bytes-be": [_bytes("big")],
        "transpose-bytes": [transpose, _bytes()],
        "gzip1": [_bytes(), _gzip(1)],
        "blosc-lz4-shuffle": lz4,
        "blosc-zstd-bitshuffle": [_bytes(), _blosc("zstd", "bitshuffle", itemsize)],
        "blosc-blosclz-noshuffle": [_bytes(), _blosc("blosclz", "noshuffle", itemsize)],
        "zstd3": [_bytes(), {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
        "zstd3-checksum": [
            _bytes("big"),
            {"name": "zstd", "configuration": {"level": 3, "checksum": True}},
        ],
        "crc32c": [_bytes(), _crc32c()],
        "gzip-crc32c": [_bytes(), _gzip(6), _crc32c()],
        "shard-end": [_sharding(inner, lz4, index_crc=False)],
        "shard-start": [_sharding(inner, lz4, index_location="start", index_crc=False)],
        "shard-crc-index": [_sharding(inner, [_bytes("big"), _gzip(1)])],
        # the (6, 8, 5) shard transposed to (5, 6, 8) is cut into (5, 3, 4) inner chunks
        "transpose-shard": [
            transpose,
            _sharding((5, 3, 4), [_bytes(), _blosc("zstd", "shuffle", itemsize)]),
        ],
        # (1, 2, 1) tiles both the transposed and the untransposed shard
        "transpose-shard-small": [
            transpose,
            _sharding((1, 2, 1), [_bytes("big")], index_location="start"),
        ],
        # shard (6, 8, 5) -> (6, 4, 5) -> (3, 2, 5); outer index at the start, middle at the end
        "nested-shard": [
            _sharding(
                (6, 4, 5),
                [_sharding((3, 2, 5), [_bytes(), _gzip(1)], index_crc=False)],
                index_location="start",
            )
        ],
    }
    return chains[name]


CHAINS_3D: tuple[Chain, ...] = (
    Chain("bytes-le", (3, 4, 5), "zero", dimension_names=True),
    Chain("bytes-be", (3, 4, 5), "nonzero"),
    Chain("transpose-bytes", (3, 4, 5), "nan"),
    Chain("gzip1", (3, 4, 5), "nonzero", dimension_names=True),
    Chain("blosc-lz4-shuffle", (3, 4, 5), "zero"),
    Chain("blosc-zstd-bitshuffle", (3, 4, 5), "nan"),
    Chain("blosc-blosclz-noshuffle", (3, 4, 5), "nonzero"),
    Chain("zstd3", (3, 4, 5), "zero"),
    Chain("zstd3-checksum", (3, 4, 5), "nonzero"),
    Chain("crc32c", (3, 4, 5), "hexnan"),
    Chain("gzip-crc32c", (3, 4, 5), "zero"),
    Chain("shard-end", (6, 8, 5), "nonzero", dimension_names=True),
    Chain("shard-start", (6, 8, 5), "zero"),
    Chain("shard-crc-index", (6, 8, 5), "nan"),
    Chain("transpose-shard", (6, 8, 5), "nonzero"),
    Chain("nested-shard", (6, 8, 5), "nan"),
)
CHAINS_1D: tuple[Chain, ...] = (
    Chain("bytes-be", (8,), "nonzero", dimension_names=True),
    Chain("gzip-crc32c", (8,), "nan"),
    Chain("shard-crc-index", (16,), "zero"),
)
CHAINS_0D: tuple[Chain, ...] = (
    Chain("bytes-be", (), "nonzero"),
    Chain("zstd3-checksum", (), "nan"),
)
CHAINS_EMPTY: tuple[Chain, ...] = (
    Chain("bytes-le", (2, 5), "nonzero"),
    Chain("gzip1", (3, 4, 5), "nan"),
)


# ---------------------------------------------------------------------------------------------
# shape cases: the array shape and the regions written (as index tuples)


@dataclass(frozen=True, repr=False)
class ShapeCase:
    name: str
    shape: tuple[int, ...]
    regions: tuple[tuple[slice, ...], ...]
    chains: tuple[Chain, ...]
    dtypes: tuple[str, ...]

    def __repr__(self) -> str:
        return f"ShapeCase({self.name!r}, {self.shape})"


SHAPES: tuple[ShapeCase, ...] = (
    # chunk grid (3, 4, 1) of (3, 4, 5): only chunks (0..1, 0..1) and (0, 2..3) are written;
    # shard grid (2, 2, 1) of (6, 8, 5): shard row 1 is never written, and shard (0, 1) has
    # written and missing inner chunks
    ShapeCase(
        "3d",
        (7, 13, 5),
        ((slice(0, 5), slice(2, 7), slice(None)), (slice(1, 2), slice(9, 13), slice(1, 4))),
        CHAINS_3D,
        DTYPES,
    ),
    ShapeCase(
        "3d-tshard",
        (7, 13, 5),
        ((slice(0, 5), slice(2, 7), slice(None)), (slice(1, 2), slice(9, 13), slice(1, 4))),
        (Chain("transpose-shard-small", (6, 8, 5), "nonzero"),),
        ("bool", "uint16", "float64", "complex64"),
    ),
    ShapeCase(
        "1d",
        (37,),
        ((slice(3, 19),), (slice(29, 31),)),
        CHAINS_1D,
        ("bool", "int16", "uint64", "float32", "complex128", "raw_bytes3"),
    ),
    ShapeCase("0d", (), ((),), CHAINS_0D, ("int64", "float64", "complex64")),
    ShapeCase("0d-missing", (), (), CHAINS_0D, ("uint16", "float16")),
    ShapeCase("empty", (0, 5), (), CHAINS_EMPTY[:1], ("int32", "float64")),
    ShapeCase("empty3d", (4, 0, 3), (), CHAINS_EMPTY[1:], ("uint8", "complex64")),
)


@dataclass(frozen=True)
class Case:
    writer: str
    shape_case: ShapeCase
    chain: Chain
    dtype: str

    @property
    def id(self) -> str:
        return f"{self.writer}-{self.shape_case.name}-{self.chain.name}-{self.dtype}"

    @property
    def path(self) -> str:
        """The array's path inside the corpus store."""
        return f"{self.writer}/{self.shape_case.name}/{self.chain.name}/{self.dtype}"


def features(chain: Chain, dtype: str) -> tuple[str, ...]:
    """The names under which WRITER_LIMITS / READER_LIMITS may list a chain and data type."""
    found = [dtype, chain.name]
    if any(c["name"] == "sharding_indexed" for c in chain.codecs(1)):
        found.append(f"{dtype}+sharding")
    if numpy_dtype(dtype).kind in "fc":
        found += [f"fill:{chain.fill}", f"{dtype}+fill:{chain.fill}"]
    return tuple(found)


def _writable(writer: str, chain: Chain, dtype: str) -> bool:
    return not any((writer, f) in WRITER_LIMITS for f in features(chain, dtype))


def readers(chain: Chain, dtype: str) -> tuple[str, ...]:
    """The oracles that can read an array of this chain and data type."""
    return tuple(
        w for w in WRITERS if not any((w, f) in READER_LIMITS for f in features(chain, dtype))
    )


CASES: tuple[Case, ...] = tuple(
    Case(w, sc, ch, dt)
    for sc in SHAPES
    for ch in sc.chains
    for dt in sc.dtypes
    for w in WRITERS
    if _writable(w, ch, dt)
)


# ---------------------------------------------------------------------------------------------
# fill values and data


#: NaN with a payload, written as the spec's hex bit pattern, by float size
_HEX_NAN = {2: "0x7e01", 4: "0x7fc00001", 8: "0x7ff8000000000001"}


def fill_json(fill: str, dtype: str) -> Any:
    """The JSON fill value of a chain's fill kind for a data type."""
    dt = numpy_dtype(dtype)
    if dt.kind == "V":
        pattern = bytes(dt.itemsize) if fill == "zero" else bytes(range(251, 251 - dt.itemsize, -1))
        return base64.b64encode(pattern).decode()
    if dt.kind == "b":
        return fill != "zero"
    if fill == "zero":
        return [0.0, 0.0] if dt.kind == "c" else (0.0 if dt.kind == "f" else 0)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return int(info.max) - 2 if dt.kind == "u" else int(info.min) + 3
    if fill == "nan":
        return ["NaN", -1.5] if dt.kind == "c" else "NaN"
    if fill == "hexnan":
        return [_HEX_NAN[dt.itemsize // 2], -0.0] if dt.kind == "c" else _HEX_NAN[dt.itemsize]
    return [-2.5, "Infinity"] if dt.kind == "c" else -2.5


def _float_bytes(value: Any, size: int) -> bytes:
    """Little-endian bytes of one JSON float fill value (number, special name or hex bits)."""
    if isinstance(value, str) and value.startswith("0x"):
        return int(value, 16).to_bytes(size, "little")
    special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    number = special[value] if isinstance(value, str) else value
    return np.array(number, dtype=f"<f{size}").tobytes()


def fill_scalar(fill: str, dtype: str) -> np.ndarray:
    """The fill value as a 0-d array of the data type, bit for bit (NaN payloads kept)."""
    value = fill_json(fill, dtype)
    dt = numpy_dtype(dtype)
    if dt.kind == "V":
        raw = base64.b64decode(value)
    elif dt.kind == "c":
        raw = b"".join(_float_bytes(v, dt.itemsize // 2) for v in value)
    elif dt.kind == "f":
        raw = _float_bytes(value, dt.itemsize)
    else:
        return np.array(value, dtype=dt)
    return np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt).reshape(())


def random_data(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random values covering the type's range, with NaN, infinities and -0.0 for floats."""
    rng = np.random.default_rng(seed)
    dt = numpy_dtype(dtype)
    if dt.kind == "V":
        count = math.prod(shape) * dt.itemsize
        return rng.integers(0, 256, size=count, dtype=np.uint8).view(dt).reshape(shape)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        data = (rng.standard_normal(shape) * 1000).astype(dt)
    else:
        data = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    flat = data.reshape(-1)
    specials = [np.nan, np.inf, -np.inf, -0.0]
    for i, pos in enumerate(rng.choice(flat.size, min(flat.size, 8), replace=False)):
        flat[pos] = specials[i % 4] if dt.kind == "f" else complex(specials[i % 4], 1.0)
    return data


def document(case: Case | tuple[ShapeCase, Chain, str]) -> dict[str, Any]:
    """The full v3 array metadata document of a case."""
    sc, ch, dtype = (case.shape_case, case.chain, case.dtype) if isinstance(case, Case) else case
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(sc.shape),
        "data_type": data_type_json(dtype),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(ch.chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_json(ch.fill, dtype),
        "codecs": ch.codecs(numpy_dtype(dtype).itemsize),
        "attributes": {"case": f"{sc.name}-{ch.name}-{dtype}"},
    }
    if ch.dimension_names:
        doc["dimension_names"] = ["z", "y", "x"][-len(sc.shape) :] if sc.shape else []
    return doc


def model(case: Case) -> np.ndarray:
    """The array the writer is asked to store: fill everywhere, random data in the regions."""
    sc = case.shape_case
    dt = numpy_dtype(case.dtype)
    expected = np.full(sc.shape, fill_scalar(case.chain.fill, case.dtype), dtype=dt)
    data = random_data(case.dtype, sc.shape, seed=hash_seed(case.id))
    for region in sc.regions:
        expected[region] = data[region]
    return expected


def hash_seed(text: str) -> int:
    """A stable seed for a name (Python's ``hash`` is salted per process)."""
    return zlib.crc32(text.encode())


# ---------------------------------------------------------------------------------------------
# writers


@dataclass(frozen=True, repr=False)
class CorpusArray:
    case: Case
    expected: np.ndarray

    def __repr__(self) -> str:
        return f"CorpusArray({self.case.id})"


@dataclass(frozen=True, repr=False)
class Corpus:
    """Where the corpus lives and the numpy model of every array in it, by case id."""

    root: Path
    arrays: dict[str, CorpusArray]

    def __repr__(self) -> str:  # short, for failure reports
        return f"Corpus({str(self.root)!r}, {len(self.arrays)} arrays)"


def _write_zarr_python(root: Path, case: Case, expected: np.ndarray) -> np.ndarray:
    import zarr

    doc = document(case)
    filters, serializer, compressors = split_chain(doc["codecs"])
    arr = zarr.create_array(
        store=str(root),
        name=case.path,
        shape=case.shape_case.shape,
        chunks=case.chain.chunks,
        dtype=numpy_dtype(case.dtype),
        fill_value=fill_scalar(case.chain.fill, case.dtype)[()],
        filters=filters,
        serializer=serializer,
        compressors=compressors,
        dimension_names=doc.get("dimension_names"),
        attributes=doc["attributes"],
        zarr_format=3,
    )
    for region in case.shape_case.regions:
        arr[region] = expected[region]
    return read_with("zarr-python", root / case.path)


def split_chain(
    codecs: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Split a v3 codec list into zarr-python's filters, serializer and compressors."""
    at = next(i for i, c in enumerate(codecs) if c["name"] in ("bytes", "sharding_indexed"))
    return codecs[:at], codecs[at], codecs[at + 1 :]


def _ts_spec(array_dir: Path) -> dict[str, Any]:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(array_dir) + "/"}}


def _write_tensorstore(root: Path, case: Case, expected: np.ndarray) -> np.ndarray:
    import tensorstore as ts

    spec = dict(_ts_spec(root / case.path), metadata=document(case))
    arr = ts.open(spec, create=True).result()
    for region in case.shape_case.regions:
        arr[region].write(expected[region]).result()
    return read_with("tensorstore", root / case.path)


def read_with(writer: str, array_dir: Path) -> np.ndarray:
    """Read a whole array with an oracle (``array_dir`` is the array's directory)."""
    with warnings.catch_warnings():
        # zarr-python warns about raw_bytes (no stable v3 spec) and nested sharding
        warnings.simplefilter("ignore")
        if writer == "zarr-python":
            import zarr

            return np.asarray(zarr.open_array(store=str(array_dir), mode="r")[...])
        import tensorstore as ts

        return np.asarray(ts.open(_ts_spec(array_dir), open=True).result().read().result())


def build_corpus(root: Path) -> Corpus:
    """Write every case under ``root`` and return its model, checked against the writer."""
    writers = {"zarr-python": _write_zarr_python, "tensorstore": _write_tensorstore}
    corpus: dict[str, CorpusArray] = {}
    for case in CASES:
        expected = model(case)
        with warnings.catch_warnings():
            # zarr-python warns about raw_bytes (no stable v3 spec) and nested sharding
            warnings.simplefilter("ignore")
            got = writers[case.writer](root, case, expected)
        if (
            got.dtype != expected.dtype
            or got.shape != expected.shape
            or (got.tobytes() != expected.tobytes())
        ):
            raise RuntimeError(f"{case.id}: the writer's own read disagrees with the model")
        corpus[case.id] = CorpusArray(case, expected)
    (root / "corpus.json").write_text(json.dumps(sorted(corpus)))
    return Corpus(root, corpus)


# ---------------------------------------------------------------------------------------------
# comparison


def ordered_bytes(array: np.ndarray, byte_order: str) -> bytes:
    """The C-order bytes of ``array`` in ``byte_order`` ("little" or "big")."""
    return array.astype(array.dtype.newbyteorder("<" if byte_order == "little" else ">")).tobytes()


def assert_same_bytes(got: bytes, want: bytes, itemsize: int, what: str) -> None:
    """Fail with the first differing byte (and its element) instead of two long byte dumps."""
    if got == want:
        return
    if len(got) != len(want):
        raise AssertionError(f"{what}: got {len(got)} bytes, expected {len(want)}")
    at = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
    element = slice(at - at % itemsize, at - at % itemsize + itemsize)
    raise AssertionError(
        f"{what}: first difference at byte {at} (element {at // itemsize}): "
        f"got {got[element].hex()}, expected {want[element].hex()}"
    )
