"""``zarrfs info``: tree, array facts, sizes, codecs, skipped nodes, store URL forms, errors."""

from __future__ import annotations

import json
import shutil
import zipfile
from math import prod
from pathlib import Path
from typing import Any

import pytest

from zarrfs.core.codecs.base import parse_codec
from zarrfs.tools import format_shape, human_size, info

from . import build_store, copy_to_memory, stored_bytes

TEMP_CODECS = "sharding_indexed[inner (4,16,16): bytes, blosc(lz4,5,shuffle)] ; crc32c index"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("info") / "sample.zarr")


@pytest.fixture
def store(sample: Path, tmp_path: Path) -> Path:
    """A private copy of the sample store (tests may change it)."""
    return Path(shutil.copytree(sample, tmp_path / "s.zarr"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = info.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def node(doc: dict[str, Any], path: str) -> dict[str, Any]:
    matches = [n for n in doc["nodes"] if n["path"] == path]
    assert len(matches) == 1, [n["path"] for n in doc["nodes"]]
    return matches[0]


# ----------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (512 << 20, "512.0 MiB"),
        (3 << 30, "3.0 GiB"),
        (5 << 60, "5.0 EiB"),
        (None, "unknown"),
    ],
)
def test_human_size(nbytes: int | None, text: str) -> None:
    assert human_size(nbytes) == text


def test_format_shape() -> None:
    assert format_shape((32, 128, 128)) == "(32,128,128)"
    assert format_shape((10,)) == "(10,)"
    assert format_shape(()) == "()"


@pytest.mark.parametrize(
    ("doc", "text"),
    [
        ({"name": "bytes", "configuration": {"endian": "little"}}, "bytes"),
        ({"name": "bytes", "configuration": {"endian": "big"}}, "bytes(big)"),
        ({"name": "transpose", "configuration": {"order": [2, 0, 1]}}, "transpose(2,0,1)"),
        ({"name": "gzip", "configuration": {"level": 9}}, "gzip(9)"),
        ({"name": "zstd", "configuration": {"level": 3, "checksum": True}}, "zstd(3,checksum)"),
        ({"name": "zstd", "configuration": {"level": 0, "checksum": False}}, "zstd(0)"),
        (
            {
                "name": "blosc",
                "configuration": {
                    "cname": "zstd",
                    "clevel": 1,
                    "shuffle": "bitshuffle",
                    "typesize": 4,
                    "blocksize": 0,
                },
            },
            "blosc(zstd,1,bitshuffle)",
        ),
        ({"name": "crc32c"}, "crc32c"),
    ],
)
def test_compact_codec(doc: dict[str, Any], text: str) -> None:
    codec = parse_codec(doc)
    assert codec is not None
    assert info.compact_codec(codec) == text


# ----------------------------------------------------------------------------- text output


def test_text_tree_and_array_facts(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, str(store))
    assert rc == 0, err
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"store {store.resolve().as_uri()}"
    assert lines[1] == "/  group v3"
    # children in name order, drawn as a tree; sub's children nested under it
    tree = [ln for ln in lines if "── " in ln]
    assert tree == [
        "├── inner  array v3",
        "├── start  array v3",
        "├── sub  group v3",
        "│   ├── crc  array v3",
        "│   └── sparse  array v3",
        "└── temp  array v3",
    ]
    temp = "\n".join(lines[lines.index("└── temp  array v3") :])
    assert "shape              (16,32,32)" in temp
    assert "data type          float32" in temp
    assert "shard shape        (8,32,32)" in temp
    assert "inner chunk shape  (4,16,16)" in temp
    assert f"codecs             {TEMP_CODECS}" in temp
    assert "fill value         0.0" in temp
    assert "dimension names    t, y, x" in temp
    assert "chunks             2 of 2 stored" in temp
    decoded = 16 * 32 * 32 * 4
    stored = stored_bytes(store / "temp")
    assert (
        f"size               {human_size(decoded)} decoded, {human_size(stored)} stored, "
        f"ratio {decoded / stored:.2f}" in temp
    )
    crc = out[out.index("crc  array v3") : out.index("sparse  array v3")]
    assert "chunk shape        (4,4)" in crc
    assert "shard shape" not in crc
    assert "codecs             bytes, gzip(3), crc32c" in crc
    assert "fill value         -1" in crc
    assert "dimension names    -" in crc
    assert "chunks             9 of 9 stored" in crc
    start = out[out.index("start  array v3") : out.index("sub  group v3")]
    assert (
        "codecs             sharding_indexed[inner (2,2): bytes] ; index without checksum at start"
        in start
    )
    assert "chunks             1 of 4 stored" in out[out.index("sparse  array v3") :]
    assert lines[-1].startswith("2 groups, 5 arrays, 0 skipped; ")


def test_json_matches_the_store(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, str(store))
    assert doc["store"] == store.resolve().as_uri()
    assert [n["path"] for n in doc["nodes"]] == [
        "/",
        "/inner",
        "/start",
        "/sub",
        "/sub/crc",
        "/sub/sparse",
        "/temp",
    ]
    assert node(doc, "/")["kind"] == "group"
    assert node(doc, "/sub") == {"path": "/sub", "name": "sub", "kind": "group", "format": "v3"}
    temp = node(doc, "/temp")
    assert temp["kind"] == "array" and temp["format"] == "v3"
    assert temp["shape"] == [16, 32, 32]
    assert temp["data_type"] == "float32"
    assert temp["chunk_shape"] == [4, 16, 16]
    assert temp["shard_shape"] == [8, 32, 32]
    assert temp["grid_shape"] == [2, 1, 1]
    assert temp["codecs"] == TEMP_CODECS
    assert temp["codecs_json"][0]["name"] == "sharding_indexed"
    assert temp["fill_value"] == 0.0
    assert temp["dimension_names"] == ["t", "y", "x"]
    assert temp["decoded_bytes"] == 16 * 32 * 32 * 4
    assert temp["stored_bytes"] == stored_bytes(store / "temp")
    assert temp["compression_ratio"] == round(temp["decoded_bytes"] / temp["stored_bytes"], 3)
    assert (temp["grid_chunks"], temp["stored_chunks"]) == (2, 2)
    crc = node(doc, "/sub/crc")
    assert crc["chunk_shape"] == [4, 4] and crc["shard_shape"] is None
    assert crc["fill_value"] == -1 and crc["dimension_names"] is None
    assert crc["codecs"] == "bytes, gzip(3), crc32c"
    assert crc["stored_bytes"] == stored_bytes(store / "sub" / "crc")
    sparse = node(doc, "/sub/sparse")
    assert (sparse["grid_chunks"], sparse["stored_chunks"]) == (4, 1)
    assert sparse["decoded_bytes"] == 100
    arrays = [n for n in doc["nodes"] if n["kind"] == "array"]
    assert doc["summary"] == {
        "groups": 2,
        "arrays": 5,
        "invalid": 0,
        "decoded_bytes": sum(n["decoded_bytes"] for n in arrays),
        "stored_bytes": sum(stored_bytes(store / n["path"][1:]) for n in arrays),
    }
    assert doc["problems"] == {}


def test_stray_keys_count_in_stored_size_not_in_chunks(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (store / "sub" / "crc" / "junk").write_bytes(b"x" * 1000)
    crc = node(run_json(capsys, str(store)), "/sub/crc")
    assert crc["stored_chunks"] == 9
    assert crc["stored_bytes"] == stored_bytes(store / "sub" / "crc")


def test_all_fill_array_has_no_ratio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import zarr

    zarr.create_array(str(tmp_path / "e.zarr"), shape=(4, 4), chunks=(2, 2), dtype="float64")
    doc = run_json(capsys, str(tmp_path / "e.zarr"))
    root = node(doc, "/")
    assert root["kind"] == "array"
    assert (root["stored_bytes"], root["stored_chunks"], root["compression_ratio"]) == (0, 0, None)
    rc, out, _ = run(capsys, str(tmp_path / "e.zarr"))
    assert rc == 0
    assert "size               128 B decoded, 0 B stored\n" in out


def test_invalid_nodes_are_listed_with_their_reason(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (store / "sub" / "bad").mkdir()
    (store / "sub" / "bad" / "zarr.json").write_text("{not json")
    (store / "weird").mkdir()
    (store / "weird" / "zarr.json").write_text(
        '{"zarr_format": 3, "node_type": "array", "shape": [2], "data_type": "float32", '
        '"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}}, '
        '"chunk_key_encoding": {"name": "default"}, "fill_value": 0, '
        '"codecs": [{"name": "bytes"}, {"name": "no-such-codec"}]}'
    )
    rc, out, err = run(capsys, str(store))
    assert rc == 0
    assert err == ""  # the core's log line about skipped nodes is not repeated on stderr
    bad = [ln for ln in out.splitlines() if "bad  [skipped: " in ln]
    assert len(bad) == 1 and "invalid JSON" in bad[0]
    assert bad[0].startswith("│   ├── bad")  # in its place in the tree, under sub
    assert "weird  [skipped: " in out and "no-such-codec" in out
    assert "2 groups, 5 arrays, 2 skipped" in out
    doc = run_json(capsys, str(store))
    assert set(doc["problems"]) == {"/sub/bad", "/weird"}
    assert "invalid JSON" in doc["problems"]["/sub/bad"]
    assert node(doc, "/weird")["kind"] == "invalid"


# ----------------------------------------------------------------------------- store URLs


def test_file_url(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, store.resolve().as_uri())
    assert node(doc, "/temp")["shape"] == [16, 32, 32]


def test_zip_store(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "s.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for f in sorted(store.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(store).as_posix())
    for url in (str(archive), f"zip://{archive}"):
        doc = run_json(capsys, url)
        crc = node(doc, "/sub/crc")
        assert crc["shape"] == [10, 10]
        assert crc["stored_chunks"] == 9


def test_memory_store(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy_to_memory(store, "tools-test-info")
    doc = run_json(capsys, "memory://tools-test-info")
    temp = node(doc, "/temp")
    assert temp["stored_bytes"] == stored_bytes(store / "temp")
    assert prod(temp["shape"]) * 4 == temp["decoded_bytes"]


# ----------------------------------------------------------------------------- errors


def test_missing_store_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run(capsys, str(tmp_path / "nope.zarr"))
    assert rc == 1
    assert out == ""
    assert err.startswith("zarrfs info: error: ") and err.count("\n") == 1
    assert "does not exist" in err
    assert "Traceback" not in err


def test_empty_directory_is_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, str(tmp_path))
    assert rc == 1
    assert out == ""
    assert err.startswith("zarrfs info: error: no Zarr node") and err.count("\n") == 1


def test_unknown_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "bogus://x")
    assert rc == 1
    assert "unknown scheme" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [[], ["a", "b"], ["a", "--bogus"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    assert "usage: zarrfs info" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "--help")
    assert rc == 0
    assert "usage: zarrfs info" in out
