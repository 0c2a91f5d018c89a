"""Variable-length arrays mounted for real: ``data.txt``, ``data.json``, ``info.json``.

zarr-python 3 writes v3 ``string`` and ``variable_length_bytes`` arrays and v2 object arrays
(``vlen-utf8``, ``vlen-bytes``); ``json2`` and ``msgpack2`` object arrays (which zarr-python 3
no longer writes) are written with numcodecs' own encoders as zarr-python 2 stored them. Every
element must appear in C order, escaped as ``info.json`` states, missing chunks as the fill
value; writes are refused with EROFS and a log line; a chunk whose item count lies is EIO.
"""

from __future__ import annotations

import base64
import errno
import json
import warnings
from pathlib import Path

import numcodecs
import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

from zarrfs.views.text import text_line  # noqa: E402

pytestmark = pytest.mark.timeout(300)

STRINGS = np.array(
    [["a", "b\nc", "tab\there", "back\\slash", ""], ["é", "日本", "\x00nul", "\r", "z"]] * 2
    + [["last", "row", "of", "five", "!"]],
    dtype=object,
)
BYTES = np.array([b"x", b"\x00y", b"", b"\xff\xfe", b"plain", b"\n"], dtype=object)
OBJECTS = np.array(["x", 1, [1, 2], {"k": "v"}, None, 2.5], dtype=object)


#: the escaping rule, spelled out for the first two rows and the byte strings
ROW0 = ["a", "b\\nc", "tab\\there", "back\\\\slash", ""]
ROW1 = ["é", "日本", "\\x00nul", "\\r", "z"]
BYTES_LINES = ["x", "\\x00y", "", "\\xff\\xfe", "plain", "\\n"]


def _unescape_check(lines: list[str], values: list, element: str) -> None:
    assert lines == [text_line(v, element) for v in values]
    if element == "bytes":
        assert lines == BYTES_LINES
    else:
        assert lines[:10] == ROW0 + ROW1


def _write_v2_objects(root: Path, name: str, codec, values: np.ndarray) -> None:
    """A v2 object array as zarr-python 2 stored it: .zarray + one chunk per 4 elements."""
    d = root / name
    d.mkdir(parents=True)
    meta = {
        "zarr_format": 2,
        "shape": [len(values)],
        "chunks": [4],
        "dtype": "|O",
        "fill_value": None,
        "order": "C",
        "filters": [codec.get_config()],
        "compressor": {"id": "zlib", "level": 1},
        "dimension_separator": ".",
    }
    (d / ".zarray").write_text(json.dumps(meta))
    zlib = numcodecs.Zlib(1)
    for i in range(0, len(values), 4):
        chunk = np.empty(4, dtype=object)
        chunk[:] = [None] * 4
        part = values[i : i + 4]
        chunk[: len(part)] = part
        (d / str(i // 4)).write_bytes(zlib.encode(codec.encode(chunk)))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vlen") / "v.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.open_group(root, mode="w")
        s = zarr.create_array(root / "strings", shape=STRINGS.shape, chunks=(2, 2), dtype=str)
        s[:4, :] = STRINGS[:4, :]  # the last chunk row stays missing: fill value ""
        b = zarr.create_array(
            root / "bytes", shape=BYTES.shape, chunks=(4,), dtype=zarr.dtype.VariableLengthBytes()
        )
        b[:] = BYTES
        s2 = zarr.create_array(
            root / "v2_strings", shape=STRINGS.shape, chunks=(3, 2), dtype=str, zarr_format=2
        )
        s2[:] = STRINGS
    _write_v2_objects(root, "json2", numcodecs.JSON(), OBJECTS)
    _write_v2_objects(root, "msgpack2", numcodecs.MsgPack(), OBJECTS)
    return root


def _zarr_values(root: Path, name: str) -> np.ndarray:
    return np.asarray(zarr.open_array(root / name, mode="r")[:], dtype=object)


@pytest.mark.parametrize("name", ["strings", "bytes", "v2_strings"])
def test_text_views_match_zarr_python(store: Path, mounter, name: str) -> None:
    m = mounter(store, "ro")
    want = _zarr_values(store, name)
    d = m.path / name
    assert sorted(p.name for p in d.iterdir()) == sorted(
        ["data.json", "data.txt", "info.json"]
        + (["zarr.json"] if name != "v2_strings" else [".zarray", ".zattrs"])
    )
    text = (d / "data.txt").read_text(encoding="utf-8")
    element = "bytes" if name == "bytes" else "str"
    _unescape_check(text.split("\n")[:-1], list(want.reshape(-1)), element)
    assert text.endswith("\n")
    doc = json.loads((d / "data.json").read_text(encoding="utf-8"))
    if name == "bytes":
        assert [base64.b64decode(v) for v in doc] == list(want)
    else:
        assert doc == want.tolist()
    info = json.loads((d / "info.json").read_text())
    assert info["shape"] == list(want.shape) and info["variable_length"] is True
    assert "backslash" in info["data.txt"]
    # partial reads at odd offsets agree with the whole file
    with open(d / "data.txt", "rb") as f:
        whole = text.encode()
        for offset in (0, 1, 7, len(whole) // 2, len(whole) - 1):
            f.seek(offset)
            assert f.read(5) == whole[offset : offset + 5]


def test_missing_chunks_read_as_the_fill_value(store: Path, mounter) -> None:
    m = mounter(store, "ro")
    lines = (m.path / "strings" / "data.txt").read_text().split("\n")[:-1]
    assert lines[-5:] == [""] * 5 == [text_line(v) for v in _zarr_values(store, "strings")[-1]]


@pytest.mark.parametrize("name", ["json2", "msgpack2"])
def test_v2_object_codecs(store: Path, mounter, name: str) -> None:
    m = mounter(store, "ro")
    doc = json.loads((m.path / name / "data.json").read_text())
    assert doc == [None if v is None else v for v in OBJECTS.tolist()]
    lines = (m.path / name / "data.txt").read_text().split("\n")[:-1]
    assert lines == [json.dumps(v, ensure_ascii=False) for v in OBJECTS.tolist()]


def test_writes_are_refused(store: Path, mounter) -> None:
    m = mounter(store, "rw")
    for view in ("data.txt", "data.json", "info.json"):
        with pytest.raises(OSError) as exc:
            with open(m.path / "strings" / view, "r+b") as f:
                f.write(b"x")
        assert exc.value.errno in (errno.EROFS, errno.EACCES), view
    assert "write refused" in m.log() and "variable-length" in m.log()


def test_lying_item_count_is_eio(tmp_path: Path, mounter) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = zarr.create_array(tmp_path / "s", shape=(3,), chunks=(3,), dtype=str, compressors=None)
    a[:] = ["a", "b", "c"]
    (tmp_path / "s" / "c" / "0").write_bytes((2**31).to_bytes(4, "little") + b"\x00" * 8)
    m = mounter(tmp_path / "s", "ro")
    with pytest.raises(OSError) as exc:
        (m.path / "data.txt").read_bytes()
    assert exc.value.errno == errno.EIO
    assert json.loads((m.path / "info.json").read_text())["shape"] == [3]


def test_zarrfs_check_decodes_variable_length_chunks(store: Path, tmp_path: Path) -> None:
    import shutil

    from zarrfs.core.stores.local import LocalStore
    from zarrfs.tools.check import check_store

    report = check_store(LocalStore(store, read_only=True))
    assert report.ok and report.arrays == 5 and report.chunks_stored > 5
    copy = tmp_path / "c.zarr"
    shutil.copytree(store, copy)
    (copy / "strings" / "c" / "0" / "0").write_bytes(b"\xff\xff\xff\x7f")
    report = check_store(LocalStore(copy, read_only=True))
    assert [f.kind for f in report.errors] == ["damaged"]
    assert report.errors[0].key == "/strings/c/0/0"
