"""Layouts other Zarr writers leave, mounted for real: nothing vanishes, mount == ``zarrfs info``.

- a zipped folder (``zip -r x.zarr.zip x.zarr``): the root has no metadata; it is shown as an
  implicit group holding the folder;
- implicit paths (an OME-Zarr plate's ``A/1/0`` where ``A`` and ``A/1`` have no metadata):
  shown as groups whose ``info.json`` says ``"implicit": true``;
- nodes zarrfs cannot show (an unknown codec, an invalid document), including the store root
  itself: a directory with their metadata documents, ``info.json`` and ``ERROR.txt``, and a log
  line that says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.timeout(300)


def _ls(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n != ".zarrfs")


def _zarrfs_info(store: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "zarrfs", "info", "--json", str(store)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def _mount_tree(mnt: Path) -> set[str]:
    """Node directories of a mount: every directory but ``chunks/`` and ``/.zarrfs``."""
    out = {"/"}
    for dirpath, dirnames, _ in os.walk(mnt):
        rel = Path(dirpath).relative_to(mnt)
        for d in list(dirnames):
            if d == "chunks" or (d == ".zarrfs" and rel == Path(".")):
                dirnames.remove(d)
                continue
            out.add("/" + str(rel / d).removeprefix("./"))
    return out


def _assert_same_tree(store: Path, mnt: Path) -> dict:
    doc = _zarrfs_info(store)
    assert _mount_tree(mnt) == {n["path"] for n in doc["nodes"]}
    for n in doc["nodes"]:
        d = mnt / n["path"].lstrip("/")
        if n["kind"] == "array":
            assert (d / "data.raw").stat().st_size == n["decoded_bytes"]
        elif n["kind"] == "invalid":
            assert n["problem"] in (d / "ERROR.txt").read_text()
            info = json.loads((d / "info.json").read_text())
            assert info["shown"] is False and info["reason"] == n["problem"]
        elif n.get("implicit"):
            assert json.loads((d / "info.json").read_text())["implicit"] is True
    return doc


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("foreign")
    warnings.simplefilter("ignore")
    # a zipped folder
    folder = base / "x.zarr"
    g = zarr.open_group(folder, mode="w")
    g.create_array("a", shape=(4, 3), chunks=(2, 2), dtype="i4")[:] = np.arange(12).reshape(4, 3)
    sub = g.create_group("sub")
    sub.create_array("b", shape=(5,), chunks=(2,), dtype="f8")[:] = np.linspace(0, 1, 5)
    subprocess.run(["zip", "-qr", "x.zarr.zip", "x.zarr"], cwd=base, check=True)
    # implicit paths below an explicit root (a plate: row/column/field)
    plate = base / "plate.zarr"
    zarr.open_group(plate, mode="w")
    for well in ("A/1", "A/2", "B/1"):
        zarr.create_array(plate / well / "0", shape=(2, 2), dtype="u2")[:] = [[1, 2], [3, 4]]
    # skipped children and a good sibling
    mixed = base / "mixed.zarr"
    g = zarr.open_group(mixed, mode="w")
    g.create_array("good", shape=(3,), dtype="u1")[:] = [1, 2, 3]
    bad = g.create_array("unknown_codec", shape=(3,), dtype="u1")
    doc = json.loads((mixed / "unknown_codec" / "zarr.json").read_text())
    doc["codecs"].append({"name": "example.not_a_codec", "configuration": {}})
    (mixed / "unknown_codec" / "zarr.json").write_text(json.dumps(doc))
    del bad
    (mixed / "broken").mkdir()
    (mixed / "broken" / "zarr.json").write_text("{not json")
    # a store root that is an array zarrfs cannot open
    root_bad = base / "rootbad.zarr"
    zarr.create_array(root_bad, shape=(3,), dtype="f4")[:] = [1, 2, 3]
    doc = json.loads((root_bad / "zarr.json").read_text())
    doc["codecs"].append({"name": "example.not_a_codec"})
    (root_bad / "zarr.json").write_text(json.dumps(doc))
    return {"zip": base / "x.zarr.zip", "plate": plate, "mixed": mixed, "rootbad": root_bad}


def test_zipped_folder(stores, mounter) -> None:
    m = mounter(stores["zip"], "ro")
    root = m.path
    assert _ls(root) == ["attributes.json", "group.nc", "info.json", "x.zarr"]
    assert json.loads((root / "info.json").read_text())["implicit"] is True
    got = np.fromfile(root / "x.zarr" / "a" / "data.raw", dtype="<i4").reshape(4, 3)
    assert (got == np.arange(12).reshape(4, 3)).all()
    got = np.fromfile(root / "x.zarr" / "sub" / "b" / "data.raw", dtype="<f8")
    assert got.tobytes() == np.linspace(0, 1, 5).astype("<f8").tobytes()
    _assert_same_tree(stores["zip"], root)
    assert "implicit group" in m.log()


def test_implicit_paths(stores, mounter) -> None:
    m = mounter(stores["plate"], "ro")
    assert _ls(m.path) == ["A", "B", "attributes.json", "group.nc", "zarr.json"]
    assert sorted(os.listdir(m.path / "A")) == [
        "1", "2", "attributes.json", "group.nc", "info.json"
    ]  # fmt: skip
    raw = (m.path / "A" / "2" / "0" / "data.raw").read_bytes()
    assert raw == np.array([[1, 2], [3, 4]], dtype="<u2").tobytes()
    doc = _assert_same_tree(stores["plate"], m.path)
    implicit = {n["path"] for n in doc["nodes"] if n.get("implicit")}
    assert implicit == {"/A", "/A/1", "/A/2", "/B", "/B/1"}
    # an implicit group has no document to edit
    with pytest.raises(OSError):
        (m.path / "A" / "attributes.json").write_text('{"x": 1}')


def test_skipped_nodes_keep_their_directory(stores, mounter) -> None:
    m = mounter(stores["mixed"], "ro")
    names = _ls(m.path)
    assert names == ["attributes.json", "broken", "good", "group.nc", "unknown_codec", "zarr.json"]
    d = m.path / "unknown_codec"
    assert sorted(os.listdir(d)) == ["ERROR.txt", "info.json", "zarr.json"]
    assert "example.not_a_codec" in (d / "ERROR.txt").read_text()
    stored = (stores["mixed"] / "unknown_codec" / "zarr.json").read_bytes()
    assert (d / "zarr.json").read_bytes() == stored
    assert "invalid JSON" in json.loads((m.path / "broken" / "info.json").read_text())["reason"]
    _assert_same_tree(stores["mixed"], m.path)


def test_root_array_zarrfs_cannot_open(stores, mounter) -> None:
    m = mounter(stores["rootbad"], "ro")
    assert _ls(m.path) == ["ERROR.txt", "info.json", "zarr.json"]
    assert (m.path / "zarr.json").read_bytes() == (stores["rootbad"] / "zarr.json").read_bytes()
    info = json.loads((m.path / "info.json").read_text())
    assert "example.not_a_codec" in info["reason"]
    log = m.log()
    assert "store root: not shown" in log and "example.not_a_codec" in log
    assert "no node metadata" not in log
    _assert_same_tree(stores["rootbad"], m.path)


def test_implicit_paths_through_consolidated_metadata(tmp_path: Path) -> None:
    """A store that cannot list (HTTP) finds implicit groups through ``.zmetadata``."""
    from tests.core.formats.formats_helpers import NonListable
    from zarrfs.core.hierarchy import Hierarchy
    from zarrfs.core.stores.local import LocalStore

    plate = tmp_path / "plate.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.open_group(plate, mode="w", zarr_format=2)
        for well in ("A/1", "B/2"):
            a = zarr.create_array(plate / well / "0", shape=(2,), dtype="u2", zarr_format=2)
            a[:] = [7, 8]
    # zarr-python 2's consolidate_metadata took every metadata key of the store, implicit
    # paths included (zarr-python 3 no longer walks them): written here as it did
    entries = {
        str(p.relative_to(plate)): json.loads(p.read_text())
        for p in sorted(plate.rglob(".z*"))
        if p.name in (".zgroup", ".zarray", ".zattrs")
    }
    (plate / ".zmetadata").write_text(
        json.dumps({"zarr_consolidated_format": 1, "metadata": entries})
    )
    h = Hierarchy(NonListable(LocalStore(plate, read_only=True)))
    assert [n.name for n in h.children("")] == ["A", "B"]
    assert h.node("A").format.name == "implicit"
    assert [n.path for n in h.children("A/1")] == ["A/1/0"]
    assert h.array("B/2/0").read(0, 4, "little") == np.array([7, 8], "<u2").tobytes()
