"""Chunk key encodings (zarrfs.core.keys) against the default and v2 encoding specs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrfs.core.errors import MetadataError, UnsupportedError
from zarrfs.core.keys import ChunkKeyEncoding, parse_chunk_key_encoding


@pytest.mark.parametrize(
    ("doc", "coords", "key"),
    [
        ("default", (1, 23, 45), "c/1/23/45"),
        ({"name": "default", "configuration": {"separator": "."}}, (1, 23, 45), "c.1.23.45"),
        ("default", (), "c"),
        ({"name": "default", "configuration": {"separator": "."}}, (), "c"),
        ("default", (0,), "c/0"),
        ("v2", (1, 23, 45), "1.23.45"),
        ({"name": "v2", "configuration": {"separator": "/"}}, (1, 23, 45), "1/23/45"),
        ("v2", (), "0"),
        ("v2", (7,), "7"),
        ("default", (2**40, 0), "c/1099511627776/0"),
    ],
)
def test_spec_examples(doc: object, coords: tuple[int, ...], key: str) -> None:
    enc = parse_chunk_key_encoding(doc)
    assert enc.encode(coords) == key
    assert enc.decode(key, ndim=len(coords)) == coords


def test_defaults_per_encoding() -> None:
    assert parse_chunk_key_encoding("default") == ChunkKeyEncoding("default", "/")
    assert parse_chunk_key_encoding({"name": "default"}) == ChunkKeyEncoding("default", "/")
    assert parse_chunk_key_encoding("v2") == ChunkKeyEncoding("v2", ".")
    assert parse_chunk_key_encoding({"name": "v2", "configuration": {}}) == ChunkKeyEncoding(
        "v2", "."
    )


def test_to_json_is_explicit() -> None:
    assert parse_chunk_key_encoding("default").to_json() == {
        "name": "default",
        "configuration": {"separator": "/"},
    }
    assert parse_chunk_key_encoding("v2").to_json() == {
        "name": "v2",
        "configuration": {"separator": "."},
    }


def test_v2_zero_key_is_ambiguous_without_ndim() -> None:
    enc = parse_chunk_key_encoding("v2")
    assert enc.decode("0") == (0,)
    assert enc.decode("0", ndim=0) == ()
    assert enc.decode("0", ndim=1) == (0,)
    assert enc.decode("1", ndim=0) is None


@pytest.mark.parametrize(
    "key",
    [
        "c/01",
        "c/-1",
        "c/+1",
        "c/1/",
        "c//1",
        "c/1.2",
        "c/\uff11",  # a non-ASCII digit
        "c/ 1",
        "x/1",
        "c1",
        "",
        "zarr.json",
        "c/a",
    ],
)
def test_default_rejects_non_keys(key: str) -> None:
    assert parse_chunk_key_encoding("default").decode(key) is None


@pytest.mark.parametrize("key", ["01", "1..2", "1.", ".1", "-1", "c.1", "1/2", "", ".zarray"])
def test_v2_rejects_non_keys(key: str) -> None:
    assert parse_chunk_key_encoding("v2").decode(key) is None


def test_decode_checks_rank() -> None:
    enc = parse_chunk_key_encoding("default")
    assert enc.decode("c/1/2", ndim=2) == (1, 2)
    assert enc.decode("c/1/2", ndim=3) is None
    assert enc.decode("c", ndim=1) is None
    assert enc.decode("c", ndim=0) == ()


@pytest.mark.parametrize(
    ("doc", "error", "message"),
    [
        ("custom", UnsupportedError, "'custom'"),
        ({"name": "custom", "must_understand": False}, UnsupportedError, "'custom'"),
        ({"name": "default", "configuration": {"separator": "-"}}, MetadataError, "separator"),
        ({"name": "default", "configuration": {"separator": 1}}, MetadataError, "separator"),
        (
            {"name": "default", "configuration": {"sep": "/"}},
            MetadataError,
            "unknown configuration",
        ),
        ({"name": "default", "configuration": "/"}, MetadataError, "must be an object"),
        ({"name": "default", "other": 1}, MetadataError, "unknown keys"),
        ({"configuration": {}}, MetadataError, "string 'name'"),
        (["default"], MetadataError, "string or an object"),
        (None, MetadataError, "string or an object"),
    ],
)
def test_rejections(doc: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        parse_chunk_key_encoding(doc)


def test_constructor_validates() -> None:
    with pytest.raises(MetadataError):
        ChunkKeyEncoding("default", "-")
    with pytest.raises(UnsupportedError):
        ChunkKeyEncoding("custom", "/")


ENCODINGS = [ChunkKeyEncoding(n, s) for n in ("default", "v2") for s in ("/", ".")]


@pytest.mark.parametrize("enc", ENCODINGS, ids=str)
@given(coords=st.lists(st.integers(0, 2**63 - 1), max_size=6).map(tuple))
def test_round_trip(enc: ChunkKeyEncoding, coords: tuple[int, ...]) -> None:
    key = enc.encode(coords)
    assert enc.decode(key, ndim=len(coords)) == coords
    if coords:
        assert enc.decode(key) == coords


@pytest.mark.parametrize("enc", ENCODINGS, ids=str)
@given(coords=st.lists(st.integers(0, 10**6), min_size=0, max_size=4).map(tuple))
def test_matches_zarr_python(enc: ChunkKeyEncoding, coords: tuple[int, ...]) -> None:
    from zarr.core.chunk_key_encodings import parse_chunk_key_encoding as zarr_parse

    theirs = zarr_parse(enc.to_json())
    assert enc.encode(coords) == theirs.encode_chunk_key(coords)
