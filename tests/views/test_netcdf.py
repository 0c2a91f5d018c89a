"""``<group>/group.nc`` read by the real netCDF and HDF5 readers.

Tier 1 drives the virtual tree without a kernel: the file's bytes are read through the view and
written to a scratch file, then opened by h5py, netCDF4-python (netCDF-C) and ``ncdump``:
dimensions, attributes, fill values, excluded arrays, the metadata cost of a 10 GiB group.
Tier 2 mounts stores written by xarray (v2 and v3, both mount byte orders) and by zarr-python,
and compares ``xr.open_dataset(MNT/group.nc)`` with ``xr.open_zarr(store)`` variable by
variable, plus ``ncdump``/``h5dump`` values, netCDF4-python and h5py against zarr-python.

The readers are test requirements (``scripts/setup.sh --test``: netcdf-bin, hdf5-tools,
octave-netcdf): a missing one fails, never skips.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import tracemalloc
from pathlib import Path
from typing import Any

import h5py
import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from zarrfs.core.errors import CorruptDataError, ReadOnlyError
from zarrfs.views import netcdf
from zarrfs.views.tree import open_tree

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def read_view(store: Path | str, group: str = "", **options: Any) -> bytes:
    """The whole ``group.nc`` of ``group`` read through the tree (no kernel)."""
    opts = type("Opts", (), options)() if options else None
    root = open_tree(str(store), opts)
    try:
        node: Any = root
        for part in [p for p in group.split("/") if p]:
            node = node.lookup(part)
        f = node.lookup("group.nc")
        assert f is not None
        size = f.stat().size
        h = f.open(write=False, truncate=False)
        data = b"".join(bytes(h.read(o, 1 << 20)) for o in range(0, size, 1 << 20))
        assert len(data) == size
        return data
    finally:
        root.close()


def as_file(tmp_path: Path, data: bytes, name: str = "g.nc") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def ncdump(*args: str) -> str:
    return subprocess.run(["ncdump", *args], capture_output=True, text=True, check=True).stdout


def h5dump(*args: str) -> str:
    return subprocess.run(["h5dump", *args], capture_output=True, text=True, check=True).stdout


def xarray_dataset(order: str) -> xr.Dataset:
    """Coordinates, CF attributes, several dtypes, a time axis, one element missing."""
    rng = np.random.default_rng(7)
    e = ">" if order == "big" else "<"
    temp = rng.random((4, 3, 5)).astype(f"{e}f4")
    temp[0, 0, 0] = np.nan
    ds = xr.Dataset(
        {
            "temp": (("time", "lat", "lon"), temp, {"units": "K", "long_name": "air temperature"}),
            "packed": (
                ("lat", "lon"),
                np.arange(15, dtype=f"{e}i2").reshape(3, 5),
                {"scale_factor": 0.5, "add_offset": 10.0, "grid_mapping": "crs"},
            ),
            "crs": ((), np.int32(0), {"grid_mapping_name": "latitude_longitude"}),
            "mask": (("lat",), np.array([True, False, True])),
            "big": (("lon",), np.arange(5, dtype="u8") * 2**40),
            "tiny": (("lon",), np.arange(-2, 3, dtype="i1")),
        },
        coords={
            "time": pd.date_range("2000-01-01", periods=4),
            "lat": ("lat", np.array([10.0, 20.0, 30.0]), {"units": "degrees_north"}),
            "lon": ("lon", np.arange(5, dtype=f"{e}f8") * 0.5, {"units": "degrees_east"}),
        },
        attrs={"title": "demo", "Conventions": "CF-1.8", "version": 3, "levels": [1, 2, 3]},
    )
    return ds


# ----------------------------------------------------------------------------- tier 1


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    """A zarr-python v3 group: shared, conflicting and missing dimension names, excluded
    types, attributes of every JSON kind, a sub-group."""
    root = zarr.open_group(tmp_path / "plain.zarr", mode="w", zarr_format=3)
    root.attrs.update({"title": "plain", "n": 7, "flags": [True, False], "mixed": [1, "a"]})
    a = root.create_array("a", shape=(3, 4), dtype="i4", dimension_names=["y", "x"], fill_value=-1)
    a[:] = np.arange(12).reshape(3, 4)
    a.attrs.update({"units": "m", "scale": 2.5, "names": ["p", "q"], "meta": {"k": None}})
    b = root.create_array("b", shape=(5,), dtype="f8", dimension_names=["x"])
    b[:] = np.linspace(0, 1, 5)
    c = root.create_array("c", shape=(2, 2), dtype="u2")
    c[:] = [[1, 2], [3, 65535]]
    root.create_array("h", shape=(2,), dtype="f2", dimension_names=["y2"])
    root.create_array("z", shape=(2,), dtype="c16", dimension_names=["y2"])
    sub = root.create_group("sub")
    s = sub.create_array("s", shape=(3,), dtype="i8", dimension_names=["y"])
    s[:] = [7, 8, 9]
    return tmp_path / "plain.zarr"


def test_dimensions_attributes_and_exclusions(plain: Path, tmp_path: Path) -> None:
    path = as_file(tmp_path, read_view(plain))
    with netCDF4.Dataset(path) as nc:
        nc.set_auto_mask(False)
        dims = {name: len(d) for name, d in nc.dimensions.items()}
        assert dims == {"y": 3, "x": 4, "b_x": 5, "c_dim0": 2, "c_dim1": 2}
        assert nc["a"].dimensions == ("y", "x")
        assert nc["b"].dimensions == ("b_x",)  # x is 4 long (a); b's x is 5
        assert nc["c"].dimensions == ("c_dim0", "c_dim1")
        np.testing.assert_array_equal(nc["a"][:], np.arange(12).reshape(3, 4))
        np.testing.assert_array_equal(nc["b"][:], np.linspace(0, 1, 5))
        np.testing.assert_array_equal(nc["c"][:], [[1, 2], [3, 65535]])
        attrs = {k: nc["a"].getncattr(k) for k in nc["a"].ncattrs()}
        assert attrs["units"] == "m" and attrs["scale"] == 2.5
        assert list(attrs["names"]) == ["p", "q"]
        assert json.loads(attrs["meta"]) == {"k": None}
        assert "_FillValue" not in attrs  # v3 without a _FillValue attribute: nothing masked
        glob = {k: nc.getncattr(k) for k in nc.ncattrs()}
        assert glob["title"] == "plain" and glob["n"] == 7
        assert list(glob["flags"]) == [1, 0]
        assert json.loads(glob["mixed"]) == [1, "a"]
        excluded = list(glob[netcdf.EXCLUDED_ATTR])
        assert any(line.startswith("h: ") and "16-bit float" in line for line in excluded)
        assert any(line.startswith("z: ") and "complex" in line for line in excluded)
        assert set(nc.variables) == {"a", "b", "c"}
        assert not nc.groups  # sub-groups have their own file
    with h5py.File(path) as f:  # the Zarr fill value is the HDF5 fill value
        assert f["a"].fillvalue == -1
        assert f["a"].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
    header = ncdump("-h", str(path))
    assert "int a(y, x)" in header and "double b(b_x)" in header
    sub = as_file(tmp_path, read_view(plain, "sub"), "sub.nc")
    with netCDF4.Dataset(sub) as nc:
        assert set(nc.variables) == {"s"}
        np.testing.assert_array_equal(nc["s"][:], [7, 8, 9])


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("order", ["little", "big"])
def test_xarray_reads_what_open_zarr_reads(tmp_path: Path, fmt: int, order: str) -> None:
    store = tmp_path / "x.zarr"
    xarray_dataset(order).to_zarr(store, zarr_format=fmt, consolidated=False)
    path = as_file(tmp_path, read_view(store, byte_order=order))
    expected = xr.open_zarr(store, consolidated=False).load()
    for engine in ("netcdf4", "h5netcdf"):
        with xr.open_dataset(path, engine=engine) as got:
            xr.testing.assert_identical(got.load(), expected)
    with h5py.File(path) as f:  # each dataset declares the mount's byte order
        assert f["temp"].dtype.byteorder == (">" if order == "big" else "<")


@pytest.mark.parametrize("fmt", [2, 3])
def test_zarr_python_groups_read_as_open_zarr_reads_them(tmp_path: Path, fmt: int) -> None:
    """Written by zarr-python directly: fill values (v2: the missing value; v3: storage only),
    explicit byte orders, dimension names from ``_ARRAY_DIMENSIONS`` / ``dimension_names``."""
    store = tmp_path / "z.zarr"
    root = zarr.open_group(store, mode="w", zarr_format=fmt)
    root.attrs.update({"source": "zarr-python", "count": 2})
    specs = [("depth", ">f8", ["z"], np.nan), ("level", "<i4", ["z", "x"], 0),
             ("x", "<f4", ["x"], 0.0), ("flag", "u1", ["x"], 255)]  # fmt: skip
    rng = np.random.default_rng(3)
    for name, dtype, dims, fill in specs:
        shape = tuple(4 if d == "z" else 6 for d in dims)
        kw: dict[str, Any] = {"dimension_names": dims} if fmt == 3 else {}
        a = root.create_array(name, shape=shape, dtype=dtype, fill_value=fill, chunks=shape, **kw)
        if fmt == 2:
            a.attrs["_ARRAY_DIMENSIONS"] = dims
        a.attrs["units"] = "m"
        data = (rng.random(shape) * 10).astype(dtype)
        data.flat[0] = fill  # the fill value as data: masked for v2, a value for v3
        a[...] = data
    path = as_file(tmp_path, read_view(store))
    expected = xr.open_zarr(store, consolidated=False).load()
    with xr.open_dataset(path) as got:
        xr.testing.assert_identical(got.load(), expected)
    with netCDF4.Dataset(path) as nc:
        assert ("_FillValue" in nc["level"].ncattrs()) == (fmt == 2)
        assert nc["depth"].dtype.byteorder in "<>=|"


def test_a_10_gib_group_costs_its_metadata_only(tmp_path: Path) -> None:
    root = zarr.open_group(tmp_path / "big.zarr", mode="w", zarr_format=3)
    root.create_array("time", shape=(1024,), dtype="f8", dimension_names=["time"])
    for i in range(99):
        arr = root.create_array(
            f"v{i:02d}", shape=(1024, 1024, 26), dtype="f4", chunks=(64, 256, 26),
            dimension_names=["time", "y", "x"], fill_value=float("nan"),
        )  # fmt: skip
        arr.attrs.update({"units": "K", "long_name": f"variable {i}", "valid_range": [0, 400]})
    tree = open_tree(str(tmp_path / "big.zarr"))
    try:
        f = tree.lookup("group.nc")
        assert f is not None
        tracemalloc.start()
        try:
            _, layout = f.layout()  # type: ignore[attr-defined]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert layout.size > 10 * 2**30
        assert sum(e.stop - e.start for e in layout.extents) == 99 * 1024 * 1024 * 26 * 4 + 8192
        assert layout.metadata_bytes < 1 << 20
        assert peak < 50 << 20
        # the header is what ncdump -h reads: the file with its data ranges left as holes
        sparse = tmp_path / "big.nc"
        with open(sparse, "wb") as out:
            out.truncate(layout.size)
            for offset, data in layout.segments:
                out.seek(offset)
                out.write(data)
        header = ncdump("-h", str(sparse))
        assert "float v98(time, y, x)" in header and "time = 1024 ;" in header
        h = f.open(write=False, truncate=False)
        e = layout.extents[-1]
        assert np.isnan(np.frombuffer(bytes(h.read(e.start, 16)), "<f4")).all()
    finally:
        tree.close()


def test_read_only_and_rerendered_after_a_resize(plain: Path) -> None:
    tree = open_tree(str(plain))
    try:
        f = tree.lookup("group.nc")
        assert f is not None
        with pytest.raises(ReadOnlyError):
            f.open(write=True, truncate=False)
        before = f.stat().size
        arr = tree.ctx.hierarchy.array("b")
        arr.resize((50,))
        _, layout = f.layout()  # type: ignore[attr-defined]
        assert layout.size > before
        assert [e.stop - e.start for e in layout.extents if e.path == "b"] == [400]
    finally:
        tree.close()


def write_v3(store: Path, path: str, doc: dict[str, Any]) -> None:
    """A node's zarr.json written directly (fast for groups of thousands of arrays)."""
    (store / path).mkdir(parents=True, exist_ok=True)
    (store / path / "zarr.json").write_text(json.dumps({"zarr_format": 3, **doc}))


def array_doc(shape: list[int], dtype: str, dims: list[str | None], attrs: Any) -> dict[str, Any]:
    return {
        "node_type": "array", "shape": shape, "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shape or []}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": False if dtype == "bool" else 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": dims, "attributes": attrs,
    }  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
def test_size_is_known_before_rendering(tmp_path: Path, seed: int) -> None:
    """``stat`` gives the size from metadata alone; the rendered file fits in it (zero padding
    after HDF5's end of allocation) whatever the mix of arrays, dimensions and attributes."""
    rng = np.random.default_rng(seed)
    store = tmp_path / "s.zarr"
    values: list[Any] = [1, 2.5, "text", "x" * 5000, list(range(3000)), ["ab"] * 40, {"k": [1]},
                         None, True, [1.5, 2], [True, False]]  # fmt: skip
    write_v3(store, "", {"node_type": "group", "attributes": {"title": "t" * 300}})
    n = int(rng.choice([1, 20, 200]))
    for i in range(n):
        ndim = int(rng.integers(0, 4))
        shape = [int(x) for x in rng.integers(1, 6, ndim)]
        dims = [rng.choice(["t", "y", "x", None]) for _ in range(ndim)]
        attrs = {f"a{j}": values[int(rng.integers(len(values)))] for j in range(rng.integers(0, 8))}
        dtype = str(rng.choice(["int8", "uint16", "float32", "float64", "bool", "int64"]))
        write_v3(store, f"v{i}", array_doc(shape, dtype, dims, attrs))
    tree = open_tree(str(store))
    try:
        f = tree.lookup("group.nc")
        size = f.stat().size
        assert not tree.ctx.group_files._entries  # stat rendered nothing
        _, layout = f.layout()
        assert layout.size == size and layout.eoa <= size
        with netCDF4.Dataset("g.nc", memory=read_view(store)) as nc:
            assert len(nc.variables) == n
    finally:
        tree.close()


def test_metadata_grows_linearly_with_arrays_sharing_dimensions(tmp_path: Path) -> None:
    """Attaching 1,000 variables to the same dimension scales must not rewrite the scales'
    REFERENCE_LIST once per variable (that grows the file quadratically)."""
    store = tmp_path / "s.zarr"
    write_v3(store, "", {"node_type": "group", "attributes": {}})
    for i in range(1000):
        write_v3(store, f"a{i:04d}", array_doc([3, 2], "float32", ["x", "y"], {}))
    tree = open_tree(str(store))
    try:
        _, layout = tree.lookup("group.nc").layout()
        assert layout.metadata_bytes < 1000 * 1024
    finally:
        tree.close()
    with h5py.File(io.BytesIO(read_view(store))) as f:
        refs = f["x"].attrs["REFERENCE_LIST"]
        assert len(refs) == 1000 and {int(r[1]) for r in refs} == {0}
        assert f[refs[999][0]].name == "/a0999"
        assert h5py.h5ds.is_attached(f["a0500"].id, f["y"].id, 1)


def test_views_option_child_named_group_nc_and_corrupt_chunks(tmp_path: Path) -> None:
    store = tmp_path / "c.zarr"
    root = zarr.open_group(store, mode="w", zarr_format=3)
    a = root.create_array("a", shape=(8,), dtype="<i4", chunks=(4,), compressors=None)
    a[:] = np.arange(8)
    root.create_group("sub").create_array("group.nc", shape=(2,), dtype="u1")
    opts = type("Opts", (), {"views": ("data.raw",)})()
    tree = open_tree(str(store), opts)
    try:  # -o views= without group.nc: no file anywhere
        assert "group.nc" not in tree.names() and tree.lookup("group.nc") is None
    finally:
        tree.close()
    tree = open_tree(str(store))
    try:
        sub = tree.lookup("sub")
        assert sub.lookup("group.nc").is_dir  # a child node of that name wins
        (store / "a" / "c" / "1").write_bytes(b"\x00" * 3)  # a chunk of the wrong size
        f = tree.lookup("group.nc")
        h = f.open(write=False, truncate=False)
        e = h.layout.extents[0]
        assert np.frombuffer(bytes(h.read(e.start, 16)), "<i4").tolist() == [0, 1, 2, 3]
        with pytest.raises(CorruptDataError):  # EIO for the bytes of a bad chunk, never zeros
            h.read(e.start + 16, 16)
    finally:
        tree.close()


def test_names_that_are_not_utf8_leave_out_only_their_array(tmp_path: Path) -> None:
    """netCDF names are UTF-8: an array whose directory name is not (a store's file name
    decoded with surrogate escapes), or a dimension name with a lone surrogate (JSON allows
    one), is left out or renamed with the reason; the rest of the file reads."""
    store = tmp_path / "u.zarr"
    root = zarr.open_group(store, mode="w", zarr_format=3)
    a = root.create_array("a", shape=(3,), dtype="<i2", chunks=(3,), compressors=None)
    a[:] = [1, 2, 3]
    named = root.create_array("d", shape=(2,), dtype="u1", dimension_names=["ok"])
    named[:] = [4, 5]
    doc = json.loads((store / "d" / "zarr.json").read_text())
    doc["dimension_names"] = ["bad\udcff"]  # json.dumps spells it as the escape \udcff
    (store / "d" / "zarr.json").write_text(json.dumps(doc))
    shutil.copytree(store / "a", os.fsdecode(bytes(store) + b"/bad\xffname"))
    path = as_file(tmp_path, read_view(store))
    with netCDF4.Dataset(path) as nc:
        assert set(nc.variables) == {"a", "d"}
        np.testing.assert_array_equal(nc["a"][:], [1, 2, 3])
        assert nc["d"].dimensions == ("d_dim0",)  # its own dimension, not the bad name
        excluded = nc.getncattr(netcdf.EXCLUDED_ATTR)  # (one line: a string)
        assert excluded == "bad\\udcffname: its name is not UTF-8 text, which netCDF names are"


# ----------------------------------------------------------------------------- tier 2


def test_real_mount_readers(tmp_path: Path, mounter: Any) -> None:
    v2 = tmp_path / "v2.zarr"
    xarray_dataset("little").to_zarr(v2, zarr_format=2, consolidated=False)
    v3 = tmp_path / "v3.zarr"
    ds = xarray_dataset("big")
    ds.to_zarr(v3, zarr_format=3, consolidated=False)
    zarr.open_group(v3, mode="a").create_group("nested").create_array(
        "w", shape=(4,), dtype=">u4", dimension_names=["time"]
    )[:] = [1, 2, 3, 4]
    for store, order in ((v2, "little"), (v3, "big")):
        m = mounter(store, f"byte_order={order}", "ro", name=f"m-{store.stem}")
        nc = m.path / "group.nc"
        with xr.open_dataset(nc) as got:
            xr.testing.assert_identical(got.load(), xr.open_zarr(store, consolidated=False).load())
        header = ncdump("-h", str(nc))
        assert "float temp(time, lat, lon)" in header and 'temp:units = "K"' in header
        assert "short packed(lat, lon)" in header and "packed:scale_factor = 0.5" in header
        values = ncdump("-v", "packed,lat", str(nc))
        assert "10, 11, 12, 13, 14 ;" in values and "lat = 10, 20, 30 ;" in values
        assert "DATASET" in h5dump("-H", str(nc))
        dumped = h5dump("-d", "/packed", "-w", "0", str(nc))
        assert "(2,0): 10, 11, 12, 13, 14" in dumped
        src = zarr.open_group(store, mode="r")
        with netCDF4.Dataset(nc) as d:
            d.set_auto_maskandscale(False)
            for name in ("temp", "packed", "big", "tiny", "lat", "lon", "time"):
                np.testing.assert_array_equal(d[name][:], src[name][:])
        with h5py.File(nc) as f:
            np.testing.assert_array_equal(f["temp"][:], src["temp"][:])
            np.testing.assert_array_equal(f["mask"][:], src["mask"][:].astype("i1"))
        with pytest.raises(OSError) as err:
            open(nc, "r+b")
        assert err.value.errno == errno.EROFS
        # Octave's ncread (netCDF-C, MATLAB's API): column-major, so the C-order values, with
        # scale_factor and add_offset applied as MATLAB's ncread does
        script = f"pkg load netcdf; x = ncread('{nc}', 'packed'); printf('%g,', x);"
        out = subprocess.run(
            ["octave-cli", "--no-gui", "--eval", script], capture_output=True, text=True
        ).stdout
        assert out == "".join(f"{10 + v / 2:g}," for v in range(15)), out
    nested = m.path / "nested" / "group.nc"
    with netCDF4.Dataset(nested) as d:
        assert list(d.variables) == ["w"] and d["w"].dimensions == ("time",)
        np.testing.assert_array_equal(d["w"][:], [1, 2, 3, 4])


def test_writes_through_data_raw_show_in_group_nc(tmp_path: Path, mounter: Any) -> None:
    """The kernel's cached pages of group.nc are dropped when an array changed (its cache
    token follows the arrays' data), and a resize re-renders the file at the next open."""
    store = tmp_path / "w.zarr"
    root = zarr.open_group(store, mode="w", zarr_format=3)
    a = root.create_array("a", shape=(4, 3), dtype="<i2", dimension_names=["t", "x"])
    a[...] = 1
    m = mounter(store, "rw", "writeback=0", name="w")
    nc = m.path / "group.nc"
    with netCDF4.Dataset(nc) as d:
        assert (d["a"][:] == 1).all()
    (m.path / "a" / "data.raw").write_bytes(np.full((4, 3), 7, "<i2").tobytes())
    with netCDF4.Dataset(nc) as d:
        assert (d["a"][:] == 7).all()
    with open(m.path / "a" / "data.raw", "ab") as f:  # grows axis 0 by two rows
        f.write(np.full((2, 3), 9, "<i2").tobytes())
    with netCDF4.Dataset(nc) as d:
        assert d.dimensions["t"].size == 6
        np.testing.assert_array_equal(d["a"][4:], np.full((2, 3), 9))


def test_ncdump_header_reads_no_array_data(tmp_path: Path, mounter: Any) -> None:
    """The metadata lies before every data extent: ``ncdump -h`` of a group of 100 arrays
    of 1 MiB loads no more array data than the kernel's read-ahead past the metadata (4 MiB:
    32 chunks of 128 KiB), not a read-ahead window per variable."""
    store = tmp_path / "s.zarr"
    write_v3(store, "", {"node_type": "group", "attributes": {"title": "many"}})
    for i in range(100):
        doc = array_doc([64, 4096], "float32", ["y", "x"], {"units": "K", "i": i})
        doc["chunk_grid"]["configuration"]["chunk_shape"] = [8, 4096]
        write_v3(store, f"v{i:03d}", doc)
    m = mounter(store, "ro", "readahead=4M", name="many")
    header = ncdump("-h", str(m.path / "group.nc"))
    assert header.count("float v") == 100
    stats = json.loads((m.path / ".zarrfs" / "stats.json").read_text())
    assert stats["chunk_cache"]["misses"] <= 40, stats["chunk_cache"]
