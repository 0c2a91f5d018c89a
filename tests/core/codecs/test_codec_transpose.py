"""The transpose codec: permutation checks, encoded shape, inverse on decode, C order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from codec_helpers import DTYPES, same_bits, sample, spec

from zarrfs.core.codecs.base import parse_codec
from zarrfs.core.codecs.transpose import TransposeCodec
from zarrfs.core.errors import MetadataError


@pytest.mark.parametrize("shape", [(), (5,), (0, 3), (2, 3, 4), (2, 1, 3, 2)], ids=str)
def test_every_permutation_round_trips(shape: tuple[int, ...]) -> None:
    arr = sample(shape, "int32")
    s = spec(shape, "int32")
    for order in itertools.permutations(range(len(shape))):
        codec = TransposeCodec(order)
        encoded_spec = codec.resolve_spec(s)
        assert encoded_spec.shape == tuple(shape[i] for i in order)
        assert encoded_spec.dtype == s.dtype
        enc = codec.encode(arr, s)
        assert enc.shape == encoded_spec.shape and enc.flags.c_contiguous
        np.testing.assert_array_equal(enc, np.transpose(arr, order))
        dec = codec.decode(enc, s)
        assert dec.shape == shape and dec.flags.c_contiguous
        np.testing.assert_array_equal(dec, arr)


def test_spec_definition_of_positions() -> None:
    # B[B_pos] = A[A_pos] with B_pos[i] = A_pos[order[i]]
    order = (2, 0, 1)
    a = np.arange(24).reshape(2, 3, 4)
    b = TransposeCodec(order).encode(a, spec(a.shape, a.dtype))
    for a_pos in np.ndindex(a.shape):
        b_pos = tuple(a_pos[order[i]] for i in range(3))
        assert b[b_pos] == a[a_pos]


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_type(dtype: str) -> None:
    arr = sample((3, 4), DTYPES[dtype])
    s = spec((3, 4), DTYPES[dtype])
    codec = TransposeCodec([1, 0])
    assert same_bits(codec.decode(codec.encode(arr, s), s), arr)


def test_configuration_round_trip() -> None:
    doc = {"name": "transpose", "configuration": {"order": [1, 2, 0]}}
    codec = parse_codec(doc)
    assert isinstance(codec, TransposeCodec)
    assert codec.order == (1, 2, 0)
    assert codec.to_json() == doc


@pytest.mark.parametrize(
    "conf",
    [
        {},
        {"order": [0, 0]},
        {"order": [1, 2]},
        {"order": [0, -1]},
        {"order": "X"},
        {"order": [0.0, 1]},
        {"order": [True, False]},
        {"order": 1},
        {"order": [0], "extra": 1},
    ],
    ids=str,
)
def test_invalid_configuration(conf: dict) -> None:
    with pytest.raises(MetadataError, match="order|extra"):
        TransposeCodec.from_config(conf)


def test_order_must_match_chunk_rank() -> None:
    codec = TransposeCodec([1, 0])
    with pytest.raises(MetadataError, match="2 entries but the chunks have 3 dimensions"):
        codec.validate(spec((2, 3, 4)))
    with pytest.raises(MetadataError):
        codec.resolve_spec(spec((2,)))


def test_draft_c_and_f_orders():
    import numpy as np

    from zarrfs.core.codecs.base import ChunkSpec, parse_codec

    spec = ChunkSpec((2, 3, 4), np.dtype("<i2"), np.zeros((), "<i2"))
    a = np.arange(24, dtype="<i2").reshape(2, 3, 4)
    f = parse_codec({"name": "transpose", "configuration": {"order": "F"}})
    assert f.resolve_spec(spec).shape == (4, 3, 2)
    assert (f.encode(a, spec) == a.T).all()
    assert (f.decode(f.encode(a, spec), spec) == a).all()
    assert f.to_json() == {"name": "transpose", "configuration": {"order": "F"}}
    c = parse_codec({"name": "transpose", "configuration": {"order": "C"}})
    assert (c.encode(a, spec) == a).all() and c.resolve_spec(spec).shape == (2, 3, 4)
