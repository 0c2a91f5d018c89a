"""numcodecs codecs in Zarr v3 (``numcodecs.*``) and the v2 checksum/pcodec compressors.

zarr-python 3 writes every case of ``numcodecs_cases``; zarrfs must read each byte-identical
(core and through a real mount), write them so that zarr-python reads back what it would have
written itself, and keep decoding bounded: a bomb, a lying size header, a pcodec stream with
more elements than the chunk or a wrong checksum is an error (EIO through the mount), never a
large allocation or made-up data.
"""

from __future__ import annotations

import errno
import json
import os
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

from zarrfs.core.errors import CorruptDataError  # noqa: E402
from zarrfs.core.hierarchy import open_array  # noqa: E402
from zarrfs.core.stores.local import LocalStore  # noqa: E402

from .numcodecs_cases import DATA, V2_CASES, V3_CASES, write_v2, write_v3  # noqa: E402

pytestmark = [
    pytest.mark.timeout(300),
    # zarr-python warns at every numcodecs.* codec it writes; writing them is this module's point
    pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3"),
]


def _le(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("numcodecs") / "s.zarr"
    zarr.open_group(root, mode="w")
    for name in V3_CASES:
        write_v3(root, name)
    zarr.open_group(root / "v2", mode="w", zarr_format=2)
    for name in V2_CASES:
        write_v2(root / "v2", name)
        write_v2(root / "v2", name, filtered=True)
    return root


V2_NAMES = [f"v2/{n}{s}" for n in V2_CASES for s in ("", "_f")]


@pytest.mark.parametrize("name", [*V3_CASES, *V2_NAMES])
def test_read_matches_zarr_python(store_root: Path, name: str) -> None:
    want = np.asarray(zarr.open_array(store_root / name, mode="r")[:])
    arr = open_array(LocalStore(store_root, read_only=True), name)
    assert arr.read(0, arr.nbytes, "little") == _le(want)
    meta = json.loads(
        (store_root / name / ("zarr.json" if "/" not in name else ".zarray")).read_text()
    )
    if "/" not in name:
        assert any(c["name"].startswith("numcodecs.") for c in meta["codecs"])


@pytest.mark.parametrize("name", list(V3_CASES))
def test_write_reads_back_in_zarr_python(tmp_path: Path, name: str) -> None:
    new = np.ascontiguousarray(DATA[name][::-1])
    write_v3(tmp_path / "ours", name)
    arr = open_array(LocalStore(tmp_path / "ours"), name)
    arr.write(0, _le(new), "little")
    arr.flush()
    ref = write_v3(tmp_path / "ref", name)
    ref[:] = new  # what zarr-python makes of the same data (lossy filters included)
    got = zarr.open_array(tmp_path / "ours" / name, mode="r")[:]
    assert _le(np.asarray(got)) == _le(np.asarray(ref[:]))
    if name == "gzip":
        return  # a gzip member carries its write time: the bytes differ by the clock alone
    # chunk for chunk the same stored bytes as zarr-python writes
    for key in sorted(p.relative_to(tmp_path / "ref") for p in (tmp_path / "ref").rglob("c/*/*")):
        assert (tmp_path / "ours" / key).read_bytes() == (tmp_path / "ref" / key).read_bytes(), key


@pytest.mark.parametrize("name", V2_NAMES)
def test_v2_write_reads_back_in_zarr_python(tmp_path: Path, name: str) -> None:
    base = name.removeprefix("v2/").removesuffix("_f")
    write_v2(tmp_path / "ours", base, filtered=name.endswith("_f"))
    leaf = name.removeprefix("v2/")
    arr = open_array(LocalStore(tmp_path / "ours"), leaf)
    new = np.ascontiguousarray(DATA["blosc"][::-1])
    arr.write(0, _le(new), "little")
    arr.flush()
    ref = write_v2(tmp_path / "ref", base, filtered=name.endswith("_f"))
    ref[:] = new  # the float delta filter rounds: compare with zarr-python's own result
    got = np.asarray(zarr.open_array(tmp_path / "ours" / leaf, mode="r")[:])
    assert got.tobytes() == np.asarray(ref[:]).tobytes()


# ----------------------------------------------------------------------------- bounded decoding


@pytest.mark.parametrize(
    "name, payload, message",
    [
        ("zlib", zlib.compress(bytes(64 << 20), 9), "more than"),
        ("lz4", (0xFFFFFFF0).to_bytes(4, "little") + b"\x00" * 16, "claims"),
        ("crc32", None, "checksum"),
        ("pcodec", "more", "exactly"),
        ("pcodec", "fewer", "exactly"),
    ],
)
def test_bombs_and_lies_are_errors(tmp_path: Path, name: str, payload, message: str) -> None:
    write_v3(tmp_path, name)
    chunk = tmp_path / name / "c" / "0" / "0"
    if payload is None:  # flip one data byte under the checksum
        raw = bytearray(chunk.read_bytes())
        raw[0] ^= 1
        payload = bytes(raw)
    elif payload in ("more", "fewer"):
        count = 3 * 4 * 100 if payload == "more" else 5
        payload = numcodecs.PCodec(level=3).encode(np.arange(count, dtype="f4"))
    chunk.write_bytes(payload)
    arr = open_array(LocalStore(tmp_path, read_only=True), name)
    with pytest.raises(CorruptDataError, match=message):
        arr.read(0, arr.nbytes, "little")


# ----------------------------------------------------------------------------- real mount


def test_mount_reads_and_writes_every_case(store_root: Path, mounter, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "copy.zarr"
    shutil.copytree(store_root, root)
    m = mounter(root, "rw")
    for name in [*V3_CASES, *V2_NAMES]:
        want = np.asarray(zarr.open_array(root / name, mode="r")[:])
        assert (m.path / name / "data.raw").read_bytes() == _le(want), name
        info = json.loads((m.path / name / "info.json").read_text())
        assert info["decoded_bytes"] == want.nbytes
    # write through data.raw, then zarr-python reads it
    new = np.ascontiguousarray(DATA["pcodec"][::-1])
    with open(m.path / "pcodec" / "data.raw", "r+b") as f:
        f.write(_le(new))
    new_i = np.ascontiguousarray(DATA["delta_astype"][::-1])
    with open(m.path / "delta_astype" / "data.raw", "r+b") as f:
        f.write(_le(new_i))
    assert m.unmount() == 0
    assert np.asarray(zarr.open_array(root / "pcodec", mode="r")[:]).tobytes() == new.tobytes()
    got = np.asarray(zarr.open_array(root / "delta_astype", mode="r")[:])
    assert got.tobytes() == new_i.tobytes()


def test_mount_gives_eio_for_a_bomb(tmp_path: Path, mounter) -> None:
    write_v3(tmp_path, "zlib")
    (tmp_path / "zlib" / "c" / "0" / "0").write_bytes(zlib.compress(bytes(64 << 20), 9))
    m = mounter(tmp_path, "ro")
    with pytest.raises(OSError) as exc:
        (m.path / "zlib" / "data.raw").read_bytes()
    assert exc.value.errno == errno.EIO
    assert os.path.exists(m.path / "zlib" / "info.json")


def test_zfpy_is_refused_with_its_reason(tmp_path: Path, mounter) -> None:
    write_v3(tmp_path, "zlib")
    doc = json.loads((tmp_path / "zlib" / "zarr.json").read_text())
    doc["codecs"] = [{"name": "numcodecs.zfpy", "configuration": {"mode": 4, "tolerance": 0.1}}]
    (tmp_path / "zlib" / "zarr.json").write_text(json.dumps(doc))
    m = mounter(tmp_path, "ro")
    info = json.loads((m.path / "zlib" / "info.json").read_text())
    assert info["shown"] is False and "zfpy is not installed" in info["reason"]


def test_filters_that_would_invent_numbers_are_refused_with_their_reason(
    tmp_path: Path, mounter
) -> None:
    """An ``astype`` to ``|V3`` stores 3 bytes of each float, which numcodecs decodes to other
    numbers without an error: shown as skipped, with the reason, not read or written."""
    write_v2(tmp_path, "crc32", filtered=True)  # a delta filter, as zarr-python writes it
    zarray = tmp_path / "crc32_f" / ".zarray"
    doc = json.loads(zarray.read_text())
    doc["filters"] = [{"id": "astype", "encode_dtype": "|V3", "decode_dtype": "<f4"}]
    zarray.write_text(json.dumps(doc))
    write_v3(tmp_path, "delta")
    doc = json.loads((tmp_path / "delta" / "zarr.json").read_text())
    doc["codecs"][0] = {"name": "numcodecs.delta", "configuration": {"dtype": "<M8[s]"}}
    (tmp_path / "delta" / "zarr.json").write_text(json.dumps(doc))
    m = mounter(tmp_path, "ro")
    for name, reason in (("crc32_f", "filter 'astype'"), ("delta", "filter 'delta'")):
        info = json.loads((m.path / name / "info.json").read_text())
        assert info["shown"] is False and reason in info["reason"], info
        assert not (m.path / name / "data.raw").exists()


def test_codecs_that_cannot_encode_refuse_writes_and_still_read(tmp_path: Path, mounter) -> None:
    """A configuration numcodecs decodes with but cannot encode with (a ``zlib`` level of 99,
    hand-edited into metadata zarr-python wrote): the array reads as before, and the first
    write fails with EINVAL, naming the codec, with nothing made dirty or stored."""
    write_v3(tmp_path, "zlib")
    doc = json.loads((tmp_path / "zlib" / "zarr.json").read_text())
    (z,) = [c for c in doc["codecs"] if c["name"] == "numcodecs.zlib"]
    z["configuration"]["level"] = 99
    (tmp_path / "zlib" / "zarr.json").write_text(json.dumps(doc))
    write_v2(tmp_path, "crc32")
    zarray = tmp_path / "crc32" / ".zarray"
    v2doc = json.loads(zarray.read_text())
    v2doc["filters"] = [{"id": "bitround", "keepbits": 60}]  # float32 has 23 mantissa bits
    zarray.write_text(json.dumps(v2doc))

    def files() -> list[tuple[Path, bytes]]:
        found = [*(tmp_path / "zlib").rglob("*"), *(tmp_path / "crc32").rglob("*")]
        return sorted((p, p.read_bytes()) for p in found if p.is_file())

    stored = files()
    want = np.asarray(zarr.open_array(tmp_path / "zlib", mode="r")[:])  # (decoding ignores it)
    m = mounter(tmp_path)
    assert (m.path / "zlib" / "data.raw").read_bytes() == _le(want)
    for name in ("zlib", "crc32"):
        with pytest.raises(OSError) as exc:
            with open(m.path / name / "data.raw", "r+b") as f:
                f.write(b"\0" * 4)
        assert exc.value.errno == errno.EINVAL
    stats = json.loads((m.path / ".zarrfs" / "stats.json").read_text())
    assert stats["dirty"]["bytes"] == 0
    m.unmount()
    assert files() == stored
