"""The virtual tree driven directly (no kernel): names, reads, edits, scratch files."""

import io
import json

import numpy as np
import pytest
import zarr

from zarrfs.core.errors import MetadataError, NotPermittedError, ReadOnlyError
from zarrfs.views.tree import open_tree


class Opts:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.fixture
def store_dir(tmp_path):
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", attributes={"title": "t"})
    a = root.create_array(
        "temp",
        shape=(5, 6),
        chunks=(2, 4),
        dtype="<i4",
        fill_value=7,
        compressors=zarr.codecs.GzipCodec(),
        dimension_names=["y", "x"],
    )
    a[:4, :] = np.arange(24).reshape(4, 6)
    sub = root.create_group("sub")
    sub.create_array("s", shape=(8,), chunks=(4,), shards=(8,), dtype="f8", fill_value=0)[:] = (
        np.arange(8.0)
    )
    return tmp_path / "s.zarr"


def walk(d, path=""):
    out = []
    for n in d.names():
        node = d.lookup(n)
        assert node is not None, (path, n)
        out.append(f"{path}/{n}")
        if node.is_dir and n != "chunks":
            out.extend(walk(node, f"{path}/{n}"))
    return out


def read_all(f):
    h = f.open(write=False, truncate=False)
    try:
        return h.read(0, f.stat().size + 10)
    finally:
        h.release()


def test_tree_names_and_reads(store_dir):
    root = open_tree(str(store_dir), Opts(read_only=True))
    try:
        paths = walk(root)
        assert "/temp/data.raw" in paths and "/sub/s/data.npy" in paths
        assert "/.zarrfs/stats.json" in paths and "/zarr.json" in paths
        temp = root.lookup("temp")
        raw = read_all(temp.lookup("data.raw"))
        exp = zarr.open_array(str(store_dir / "temp"))[...]
        assert raw == exp.astype("<i4").tobytes()
        npy = np.load(io.BytesIO(read_all(temp.lookup("data.npy"))))
        assert (npy == exp).all()
        info = json.loads(read_all(temp.lookup("info.json")))
        assert info["shape"] == [5, 6] and info["dimension_names"] == ["y", "x"]
        assert temp.lookup("chunks").names()[:] == [f"{i}.{j}" for i in range(3) for j in range(2)]
        chunk = read_all(temp.lookup("chunks").lookup("2.1"))
        assert np.frombuffer(chunk, "<i4").reshape(2, 4)[0, :2].tolist() == [7, 7]
        assert json.loads(read_all(temp.lookup("attributes.json"))) == {}
        assert temp.lookup("data.raw").xattrs()["user.zarr.shape"] == b"[5, 6]"
        with pytest.raises(ReadOnlyError):
            temp.lookup("data.raw").open(write=True, truncate=False)
    finally:
        root.close()


def test_edit_attributes_scratch_rename_and_refusals(store_dir):
    root = open_tree(str(store_dir), Opts(read_only=False, writeback=0))
    try:
        temp = root.lookup("temp")
        h = temp.lookup("attributes.json").open(write=True, truncate=True)
        h.write(0, b'{"units": "K"}')
        h.release()
        assert zarr.open_array(str(store_dir / "temp")).attrs["units"] == "K"
        # sed -i style: scratch file renamed over the view
        tmp = temp.create("sedXYZ")
        th = tmp.open(write=True, truncate=False)
        th.write(0, b'{"units": "C"}')
        th.release()
        assert "sedXYZ" in temp.names()
        temp.rename("sedXYZ", temp, "attributes.json")
        assert "sedXYZ" not in temp.names()
        assert zarr.open_array(str(store_dir / "temp")).attrs["units"] == "C"
        # invalid edits are refused and change nothing
        zj = temp.lookup("zarr.json")
        doc = json.loads(read_all(zj))
        doc["data_type"] = "float64"
        h = zj.open(write=True, truncate=True)
        h.write(0, json.dumps(doc).encode())
        with pytest.raises(MetadataError):
            h.release()
        h = zj.open(write=True, truncate=True)
        h.write(0, b"{not json")
        with pytest.raises(MetadataError):
            h.flush()
        assert zarr.open_array(str(store_dir / "temp")).dtype == np.dtype("i4")
        with pytest.raises(NotPermittedError):
            temp.unlink("data.raw")
        # shape change through zarr.json resizes
        doc = json.loads(read_all(zj))
        doc["shape"] = [3, 6]
        h = zj.open(write=True, truncate=True)
        h.write(0, json.dumps(doc).encode())
        h.release()
        z = zarr.open_array(str(store_dir / "temp"))
        assert z.shape == (3, 6)
        assert (z[...] == np.arange(18).reshape(3, 6)).all()
        # mkdir makes a group
        g = root.mkdir("newgroup")
        assert zarr.open_group(str(store_dir / "newgroup")).attrs.asdict() == {}
        assert "zarr.json" in g.names()
    finally:
        root.close()


def test_write_data_raw_and_grow(store_dir):
    root = open_tree(str(store_dir), Opts(read_only=False, writeback=0))
    try:
        f = root.lookup("temp").lookup("data.raw")
        h = f.open(write=True, truncate=True)
        h.write(4 * 6 * 5, np.full(6, 99, "<i4").tobytes())  # row 5: grows axis 0
        h.write(2, b"\x01\x02")
        h.release()
        z = zarr.open_array(str(store_dir / "temp"))
        assert z.shape == (6, 6)
        assert z[5].tolist() == [99] * 6
        exp0 = int.from_bytes((0).to_bytes(4, "little")[:2] + b"\x01\x02", "little")
        assert z[0, 0] == exp0
        f.truncate(2 * 24)
        assert zarr.open_array(str(store_dir / "temp")).shape == (2, 6)
    finally:
        root.close()


def test_variable_length_array_is_listed_with_an_explanation(tmp_path):
    import warnings

    g = zarr.open_group(str(tmp_path / "v2.zarr"), mode="w", zarr_format=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = zarr.create_array(
            store=str(tmp_path / "v2.zarr" / "s"), shape=(3,), chunks=(2,), dtype=str, zarr_format=2
        )
        s[:] = ["a", "bb", "ccc"]
    g.create_array("n", shape=(3,), chunks=(2,), dtype="i4")[:] = [1, 2, 3]
    root = open_tree(str(tmp_path / "v2.zarr"), Opts(read_only=True))
    try:
        assert {"n", "s"} <= set(root.names())
        s_dir = root.lookup("s")
        assert "data.raw" not in s_dir.names() and s_dir.lookup("data.raw") is None
        assert {"info.json", ".zarray"} <= set(s_dir.names())
        info = json.loads(read_all(s_dir.lookup("info.json")))
        assert info["views"] == ["data.txt", "data.json"] and info["variable_length"] is True
        assert read_all(s_dir.lookup("data.txt")) == b"a\nbb\nccc\n"
        assert json.loads(read_all(s_dir.lookup(".zarray")))["dtype"] == "|O"
        assert read_all(root.lookup("n").lookup("data.raw")) == np.array([1, 2, 3], "<i4").tobytes()
    finally:
        root.close()
