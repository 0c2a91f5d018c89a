"""Legacy-tool views read by the real tools.

- ENVI ``data.hdr``: GDAL (``gdalinfo`` and the system ``python3`` GDAL bindings, in a subprocess).
- MetaImage ``data.mhd``: SimpleITK.
- NRRD ``data.nhdr``: pynrrd and teem's ``unu`` (the format's reference implementation).
- ``data.npy``: numpy (``np.load``, memory-mapped).
- ``info.json`` "imagej": ImageJ's own File > Import > Raw, run as a macro under Xvfb.

Tier 1 writes ``data.raw`` plus the headers from ``zarrfs.views.legacy`` into one directory per
case of a table (shapes 1-D..6-D x every data type x little/big endian) and reads every case with
every reader (the subprocess readers run once per table). Tier 2 drives the virtual tree without
a kernel: which views exist, ``info.json`` "views", byte order, ``-o views=``, headers following
a resize. Tier 3 mounts a store for real and opens the views with the same readers.

The readers are test requirements (``scripts/setup.sh --test``): a missing one fails, never skips.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from math import prod
from pathlib import Path

import nrrd
import numpy as np
import pytest
import SimpleITK as sitk
import zarr
from view_samples import sample

from zarrfs.core.errors import NodeNotFound, ReadOnlyError
from zarrfs.views import legacy
from zarrfs.views.headers import npy_header, view_dtype
from zarrfs.views.tree import open_tree

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128", "V3"]  # fmt: skip
SHAPES = [(7,), (3, 5), (2, 3, 5), (1, 4, 1), (2, 2, 3, 5), (2, 1, 2, 3, 5)]
ORDERS = ["little", "big"]
NUMERIC = [d for d in DTYPES if d not in ("float16", "V3")]
ENVI_TYPES = [d for d in NUMERIC if d != "int8"]
IMAGEJ_TYPES = ["bool", "uint8", "int16", "uint16", "int32", "uint32", "float32", "float64"]
GDAL_TYPE = {"bool": "Byte", "uint8": "Byte", "int16": "Int16", "uint16": "UInt16",
             "int32": "Int32", "uint32": "UInt32", "int64": "Int64", "uint64": "UInt64",
             "float32": "Float32", "float64": "Float64", "complex64": "CFloat32",
             "complex128": "CFloat64"}  # fmt: skip


# ----------------------------------------------------------------------------- helpers


def as_components(a: np.ndarray) -> np.ndarray:
    """What a reader without bool or complex types returns: bytes 0/1, (real, imag) pairs."""
    if a.dtype.kind == "b":
        return a.view(np.uint8)
    if a.dtype.kind == "c":
        return a.view(np.dtype(f"f{a.dtype.itemsize // 2}")).reshape(*a.shape, 2)
    return a


def dims(shape: tuple[int, ...]) -> list[str]:
    return [f"d{i}" for i in range(len(shape))]


def served(a: np.ndarray, order: str) -> bytes:
    return a.astype(view_dtype(a.dtype, order)).tobytes()


def write_case(d: Path, a: np.ndarray, order: str) -> dict[str, bytes | None]:
    """``data.raw`` + every header that exists for ``a`` in directory ``d``."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "data.raw").write_bytes(served(a, order))
    headers = {
        "data.hdr": legacy.envi_header(a.dtype, a.shape, order, dims(a.shape)),
        "data.mhd": legacy.metaimage_header(a.dtype, a.shape, order),
        "data.nhdr": legacy.nrrd_header(a.dtype, a.shape, order, dims(a.shape)),
    }
    for name, text in headers.items():
        if text is not None:
            (d / name).write_bytes(text)
    return headers


GDAL_READ = r"""
import json, sys
import numpy as np
from osgeo import gdal
gdal.UseExceptions()
out = {"version": gdal.VersionInfo("RELEASE_NAME")}
job = json.load(sys.stdin)
for i, path in enumerate(job["dirs"]):
    try:
        ds = gdal.Open(path + "/data.raw")
    except RuntimeError as exc:
        out[path] = {"error": str(exc)}
        continue
    out[path] = {
        "driver": ds.GetDriver().ShortName,
        "size": [ds.RasterCount, ds.RasterYSize, ds.RasterXSize],
        "type": gdal.GetDataTypeName(ds.GetRasterBand(1).DataType),
        "band_names": [ds.GetRasterBand(i + 1).GetDescription() for i in range(ds.RasterCount)],
    }
    out[path]["npy"] = f"{job['out']}/{i}.npy"
    np.save(out[path]["npy"], ds.ReadAsArray())
    ds = None
print(json.dumps(out))
"""


def gdal_read(dirs: list[Path], out: Path) -> dict:
    """Open ``<dir>/data.raw`` with the system GDAL bindings; each array is saved in ``out``
    (its path is the result's "npy")."""
    out.mkdir(parents=True, exist_ok=True)
    job = {"dirs": [str(d) for d in dirs], "out": str(out)}
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", GDAL_READ], input=json.dumps(job),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def gdal_version(info: dict) -> tuple[int, int]:
    major, minor = info["version"].split(".")[:2]
    return int(major), int(minor)


def check_gdal(info: dict, a: np.ndarray, version: tuple[int, int], axis0: str = "d0") -> None:
    if a.dtype.kind in "iu" and a.dtype.itemsize == 8 and version < (3, 8):
        # ENVI codes 14/15 are read from GDAL 3.8 on; older GDAL parses the header and refuses
        # only the data type
        assert "data_type" in info["error"], info
        return
    assert "error" not in info, info
    bands, lines, samples = (1, *a.shape) if a.ndim == 2 else a.shape
    assert info["driver"] == "ENVI" and info["size"] == [bands, lines, samples]
    assert info["type"] == GDAL_TYPE[a.dtype.name]
    if a.ndim == 3:
        assert info["band_names"] == [f"{axis0} {i}" for i in range(bands)]
    got = np.load(info["npy"])
    exp = as_components(a) if a.dtype.kind == "b" else a
    assert got.dtype == exp.dtype.newbyteorder("=") and np.array_equal(got.reshape(a.shape), exp)


def check_itk(path: Path, a: np.ndarray) -> None:
    exp = as_components(a)
    if 2 <= a.ndim <= 5:
        img = sitk.ReadImage(str(path))
        got = sitk.GetArrayFromImage(img)
        assert got.dtype == exp.dtype.newbyteorder("=") and np.array_equal(got, exp)
        return
    # SimpleITK's wheels read 2-D..5-D pixel data; ITK's MetaIO parses any rank up to 10
    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    reader.ReadImageInformation()
    assert reader.GetDimension() == a.ndim and reader.GetSize() == tuple(reversed(a.shape))
    assert reader.GetNumberOfComponents() == (2 if a.dtype.kind == "c" else 1)


def check_pynrrd(path: Path, a: np.ndarray) -> None:
    got, header = nrrd.read(str(path), index_order="C")
    exp = as_components(a)
    assert got.shape == exp.shape and np.array_equal(got, exp)
    labels = [*reversed(dims(a.shape))]
    assert header["labels"] == (["", *labels] if a.dtype.kind == "c" else labels)
    if a.dtype.kind == "c":
        assert list(header["kinds"]) == ["complex"] + ["domain"] * a.ndim


def unu() -> str:
    path = shutil.which("teem-unu") or shutil.which("unu")
    assert path, "teem's unu is a test requirement (scripts/setup.sh --test installs teem-apps)"
    return path


def check_teem(path: Path, a: np.ndarray) -> None:
    """teem re-saves the detached NRRD as one little-endian file; compare its header and data."""
    out = subprocess.run(
        [unu(), "save", "-f", "nrrd", "-e", "raw", "-en", "little", "-i", str(path), "-o", "-"],
        capture_output=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    head, data = out.stdout.split(b"\n\n", 1)
    fields = dict(line.split(": ", 1) for line in head.decode().splitlines()[1:] if ": " in line)
    exp = as_components(a)
    assert fields["sizes"].split() == [str(n) for n in reversed(exp.shape)]
    assert data == exp.astype(exp.dtype.newbyteorder("<")).tobytes()


# ----------------------------------------------------------------------------- tier 1: table


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """{(dtype, order, shape): (dir, array, headers)} plus one GDAL pass over the ENVI cases."""
    root = tmp_path_factory.mktemp("legacy")
    cases = {}
    for dtype in DTYPES:
        for order in ORDERS:
            for shape in SHAPES:
                a = sample(dtype, shape)
                d = root / f"{dtype}-{order}-{'x'.join(map(str, shape))}"
                cases[dtype, order, shape] = (d, a, write_case(d, a, order))
    envi = [c[0] for c in cases.values() if c[2]["data.hdr"] is not None]
    return cases, gdal_read(envi, root / "gdal")


def test_presence_follows_each_format(table) -> None:
    cases, _ = table
    for (dtype, _order, shape), (_d, _a, headers) in cases.items():
        assert (headers["data.hdr"] is not None) == (dtype in ENVI_TYPES and len(shape) in (2, 3))
        assert (headers["data.mhd"] is not None) == (dtype in NUMERIC), dtype
        assert (headers["data.nhdr"] is not None) == (dtype in NUMERIC), dtype
    for dtype in DTYPES:
        a = sample(dtype, (2, 3))
        assert (legacy.imagej_params(a.dtype, a.shape, "big") is not None) == (
            dtype in IMAGEJ_TYPES
        )
    # empty arrays and scalars are described by none; ranks past each format's limit neither
    for shape in [(), (0, 4), (3, 0, 2)]:
        f4 = np.dtype("f4")
        assert legacy.envi_header(f4, shape, "little") is None
        assert legacy.metaimage_header(f4, shape, "little") is None
        assert legacy.nrrd_header(f4, shape, "little") is None
        assert legacy.imagej_params(f4, shape, "little") is None
    assert legacy.metaimage_header(np.dtype("u1"), (1,) * 10, "little") is not None
    assert legacy.metaimage_header(np.dtype("u1"), (1,) * 11, "little") is None
    assert legacy.nrrd_header(np.dtype("u1"), (1,) * 16, "little") is not None
    assert legacy.nrrd_header(np.dtype("u1"), (1,) * 17, "little") is None
    assert legacy.nrrd_header(np.dtype("c8"), (1,) * 15, "little") is not None
    assert legacy.nrrd_header(np.dtype("c8"), (1,) * 16, "little") is None
    assert legacy.envi_header(np.dtype("u1"), (2**31, 1), "little") is None
    assert legacy.imagej_params(np.dtype("u1"), (2**16, 2**15), "little") is None


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", ENVI_TYPES)
def test_gdal_reads_envi(table, dtype, order) -> None:
    cases, results = table
    version = gdal_version(results)
    for shape in SHAPES:
        d, a, headers = cases[dtype, order, shape]
        if headers["data.hdr"] is not None:
            check_gdal(results[str(d)], a, version)


@pytest.mark.parametrize("order", ORDERS)
def test_gdalinfo_sees_envi(table, order) -> None:
    cases, _ = table
    d, _a, _h = cases["int16", order, (2, 3, 5)]
    out = subprocess.run(["gdalinfo", "-json", str(d / "data.raw")], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["driverShortName"] == "ENVI" and info["size"] == [5, 3]
    assert [b["type"] for b in info["bands"]] == ["Int16", "Int16"]
    assert [b["description"] for b in info["bands"]] == ["d0 0", "d0 1"]
    assert any(f.endswith("data.hdr") for f in info["files"])


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", NUMERIC)
def test_simpleitk_reads_metaimage(table, dtype, order) -> None:
    cases, _ = table
    for shape in SHAPES:
        d, a, _h = cases[dtype, order, shape]
        check_itk(d / "data.mhd", a)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", NUMERIC)
def test_pynrrd_and_teem_read_nrrd(table, dtype, order) -> None:
    cases, _ = table
    for shape in SHAPES:
        d, a, _h = cases[dtype, order, shape]
        check_pynrrd(d / "data.nhdr", a)
        check_teem(d / "data.nhdr", a)


NPY_DTYPES = [*DTYPES, "V16", "M8[10s]", "m8[ns]", "S5", "U3"]


@pytest.mark.parametrize("order", [*ORDERS, "native"])
@pytest.mark.parametrize("dtype", NPY_DTYPES)
def test_numpy_loads_npy_exactly(tmp_path, dtype, order) -> None:
    dt = np.dtype(dtype)
    for shape in [*SHAPES, (), (0, 4)]:
        n = prod(shape)
        a = np.frombuffer(bytes((5 * i + 3) % 256 for i in range(n * dt.itemsize)), dt)
        a = a.reshape(shape)
        if dt.kind in "MmSU":
            a = np.arange(n).astype(dt).reshape(shape)
        vd = view_dtype(dt, order)
        head = npy_header(vd, shape)
        assert len(head) % 64 == 0  # the data part is aligned for mmap
        path = tmp_path / "data.npy"
        path.write_bytes(head + served(a, order))
        for got in (np.load(path, mmap_mode="r"), np.load(io.BytesIO(path.read_bytes()))):
            assert got.dtype == vd and got.shape == shape
            assert got.tobytes() == served(a, order)


def test_header_text_follows_byte_order_and_names() -> None:
    i2, c8 = np.dtype("i2"), np.dtype("c8")
    big = legacy.envi_header(i2, (2, 3, 4), "big", ["band", "y", "x"]).decode()
    assert "byte order = 1\n" in big and "band names = {band 0, band 1}\n" in big
    native = 0 if sys.byteorder == "little" else 1
    assert f"byte order = {native}\n" in legacy.envi_header(i2, (3, 4), "native").decode()
    assert b"ElementByteOrderMSB = True\n" in legacy.metaimage_header(i2, (3, 4), "big")
    mhd = legacy.metaimage_header(c8, (3, 4), "little").decode()
    assert "ElementNumberOfChannels = 2\n" in mhd and "DimSize = 4 3\n" in mhd
    assert mhd.endswith("ElementDataFile = data.raw\n")
    assert b"endian: big\n" in legacy.nrrd_header(i2, (3, 4), "big")
    assert b"endian" not in legacy.nrrd_header(np.dtype("u1"), (3, 4), "big")
    # names a format cannot quote are left out; the header stays
    odd = legacy.nrrd_header(i2, (3, 4), "little", ['say "hi"', "x"])
    assert odd is not None and b"labels" not in odd
    assert b"band names" not in legacy.envi_header(i2, (2, 3, 4), "little", ["a,b", "y", "x"])
    assert b"band names" not in legacy.envi_header(i2, (2, 3, 4), "little", [None, "y", "x"])
    assert b'labels: "x" ""\n' in legacy.nrrd_header(i2, (3, 4), "little", [None, "x"])


# ----------------------------------------------------------------------------- ImageJ

IMAGEJ_MACRO = r"""
lines = split(File.openAsString(getArgument()), "\n");
for (i = 0; i < lines.length; i++) {
    f = split(lines[i], "\t");
    run("Raw...", "open=[" + f[0] + "] " + f[1]);
    s = "CASE " + i + " " + getWidth() + " " + getHeight() + " " + nSlices + ":";
    for (z = 1; z <= nSlices; z++) {
        setSlice(z);
        for (y = 0; y < getHeight(); y++)
            for (x = 0; x < getWidth(); x++)
                s = s + " " + d2s(calibrate(getPixel(x, y)), 4);
    }
    print(s);
    close();
}
"""


def imagej_options(p: dict) -> str:
    """The Import > Raw dialog filled in from ``info.json`` "imagej" (as a macro option string)."""
    opts = (
        f"image=[{p['image_type']}] width={p['width']} height={p['height']} "
        f"offset={p['offset']} number={p['number_of_images']} gap={p['gap_between_images']}"
    )
    return (
        opts
        + (" white" if p["white_is_zero"] else "")
        + (" little-endian" if p["little_endian"] else "")
    )


def imagej_read(tmp: Path, cases: list[tuple[Path, dict]]) -> list[tuple[list[int], np.ndarray]]:
    """Run ImageJ's Import > Raw on each (data file, params); -> (width, height, n), values."""
    jar = Path("/usr/share/java/ij.jar")
    assert jar.exists(), "ImageJ is a test requirement (scripts/setup.sh --test: libij-java)"
    assert shutil.which("xvfb-run"), "xvfb-run is a test requirement (scripts/setup.sh --test)"
    (tmp / "read.ijm").write_text(IMAGEJ_MACRO)
    (tmp / "cases.txt").write_text("\n".join(f"{p}\t{imagej_options(q)}" for p, q in cases))
    env = {**os.environ, "HOME": str(tmp)}  # ImageJ keeps its preferences under $HOME
    out = subprocess.run(
        ["xvfb-run", "-a", "java", "-Djava.awt.headless=false", "-jar", str(jar),
         "-batch", str(tmp / "read.ijm"), str(tmp / "cases.txt")],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    rows = [line for line in out.stdout.splitlines() if line.startswith("CASE ")]
    assert len(rows) == len(cases), out.stdout + out.stderr
    result = []
    for row in rows:
        size, values = row.split(":", 1)
        result.append(([int(v) for v in size.split()[2:]], np.array(values.split(), float)))
    return result


def test_imagej_imports_raw_with_info_params(table, tmp_path) -> None:
    cases, _ = table
    todo, expected = [], []
    for dtype in IMAGEJ_TYPES:
        for order in ORDERS:
            for shape in [(3, 5), (2, 3, 5)]:
                d, a, _h = cases[dtype, order, shape]
                p = legacy.imagej_params(a.dtype, a.shape, order)
                todo.append((d / "data.raw", p))
                expected.append(a)
    for (size, values), a in zip(imagej_read(tmp_path, todo), expected, strict=True):
        assert size == [a.shape[-1], a.shape[-2], a.shape[0] if a.ndim == 3 else 1]
        # ImageJ holds 32-bit integers and 64-bit reals as 32-bit floats
        exp = a.astype(np.float32) if a.dtype.itemsize >= 4 else a.astype(np.int64)
        assert np.array_equal(values, exp.ravel().astype(float)), (a.dtype, values)


# ----------------------------------------------------------------------------- tier 2: tree


def legacy_only(views: list[str]) -> list[str]:
    """The views this module is about (the whole-file formats have their own tests)."""
    return [v for v in views if v in ("data.raw", "data.npy", *legacy.HEADER_VIEWS)]


class Opts:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def read_all(f) -> bytes:
    h = f.open(write=False, truncate=False)
    try:
        return h.read(0, f.stat().size + 10)
    finally:
        h.release()


@pytest.fixture
def store(tmp_path) -> Path:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    specs = {
        "img": ("int16", (2, 3, 5), ["band", "y", "x"]),
        "vec": ("float64", (7,), None),
        "half": ("float16", (3, 5), None),
        "small": ("int8", (3, 5), None),
        "cplx": ("complex64", (3, 5), ["y", "x"]),
        "scalar": ("float32", (), None),
        "empty": ("uint8", (0, 5), None),
    }
    for name, (dtype, shape, names) in specs.items():
        chunks = tuple(max(n, 1) for n in shape)
        a = root.create_array(name, shape=shape, dtype=dtype, chunks=chunks, fill_value=0,
                              dimension_names=names)  # fmt: skip
        if prod(shape):
            a[...] = sample(dtype, shape)
    return tmp_path / "s.zarr"


PRESENT = {
    "img": ["data.hdr", "data.mhd", "data.nhdr"],
    "vec": ["data.mhd", "data.nhdr"],
    "half": [],
    "small": ["data.mhd", "data.nhdr"],
    "cplx": ["data.hdr", "data.mhd", "data.nhdr"],
    "scalar": [],
    "empty": [],
}


@pytest.mark.parametrize("order", ORDERS)
def test_tree_shows_exactly_the_headers_that_describe_each_array(store, order) -> None:
    root = open_tree(str(store), Opts(read_only=True, byte_order=order))
    try:
        for name, present in PRESENT.items():
            d = root.lookup(name)
            names = d.names()
            assert [n for n in names if n in legacy.HEADER_VIEWS] == present, name
            info = json.loads(read_all(d.lookup("info.json")))
            assert legacy_only(info["views"]) == ["data.raw", "data.npy", *present]
            assert set(info["views"]) <= set(names)
            arr = root.ctx.hierarchy.array(name)
            for view in legacy.HEADER_VIEWS:
                node = d.lookup(view)
                if view not in present:
                    assert node is None
                    continue
                assert read_all(node) == legacy.array_header(view, arr, order)
                with pytest.raises(ReadOnlyError):
                    node.open(write=True, truncate=False)
        img = json.loads(read_all(root.lookup("img").lookup("info.json")))
        assert img["imagej"] == legacy.imagej_params(np.dtype("i2"), (2, 3, 5), order)
        assert img["imagej"]["image_type"] == "16-bit Signed"
        assert img["imagej"]["little_endian"] == (order == "little")
        assert json.loads(read_all(root.lookup("vec").lookup("info.json")))["imagej"] is None
        hdr = read_all(root.lookup("img").lookup("data.hdr")).decode()
        assert f"byte order = {int(order == 'big')}\n" in hdr
        assert "band names = {band 0, band 1}" in hdr
    finally:
        root.close()


def test_views_option_and_missing_data_raw(store) -> None:
    root = open_tree(str(store), Opts(read_only=True, views=["data.raw", "data.mhd"]))
    try:
        d = root.lookup("img")
        assert [n for n in d.names() if n.startswith("data.")] == ["data.mhd", "data.raw"]
        assert d.lookup("data.hdr") is None and d.lookup("data.npy") is None
        assert json.loads(read_all(d.lookup("info.json")))["views"] == ["data.raw", "data.mhd"]
    finally:
        root.close()
    # headers point at data.raw: without it they are not shown
    root = open_tree(str(store), Opts(read_only=True, views=["data.npy", "data.hdr"]))
    try:
        d = root.lookup("img")
        assert d.lookup("data.hdr") is None
        assert json.loads(read_all(d.lookup("info.json")))["views"] == ["data.npy"]
    finally:
        root.close()


def test_headers_follow_a_resize(store) -> None:
    root = open_tree(str(store), Opts(read_only=False, writeback=0))
    try:
        d = root.lookup("img")
        hdr = d.lookup("data.hdr")
        raw = d.lookup("data.raw")
        raw.truncate(4 * 3 * 5 * 2)  # 4 bands
        assert "bands = 4\n" in read_all(hdr).decode()
        assert b"DimSize = 5 3 4\n" in read_all(d.lookup("data.mhd"))
        raw.truncate(0)  # an empty array has no header
        with pytest.raises(NodeNotFound):
            hdr.stat()
        assert d.lookup("data.hdr") is None and "data.hdr" not in d.names()
    finally:
        root.close()


# ----------------------------------------------------------------------------- tier 3: mount


def mapped_copy(path: Path) -> np.ndarray:
    """``np.load(path, mmap_mode="r")``, copied so the mapping (which keeps the mount busy) is
    gone when this returns."""
    mapped = np.load(path, mmap_mode="r")
    assert isinstance(mapped, np.memmap)
    return np.array(mapped)


def test_real_mount_views_open_in_the_legacy_tools(tmp_path, monkeypatch) -> None:
    store = tmp_path / "m.zarr"
    root = zarr.open_group(str(store), mode="w")
    temp = root.create_array("temp", shape=(4, 6, 8), chunks=(2, 3, 4), dtype="int16",
                             fill_value=-5, dimension_names=["time", "y", "x"],
                             compressors=zarr.codecs.GzipCodec())  # fmt: skip
    temp[:3] = sample("int16", (3, 6, 8))  # the last time step stays missing: fill value
    vol = root.create_array("vol", shape=(3, 4, 5, 6), chunks=(2, 2, 5, 3), dtype="float32")
    vol[...] = sample("float32", (3, 4, 5, 6))
    cplx = root.create_array("cplx", shape=(5, 6), chunks=(2, 4), dtype="complex128")
    cplx[...] = sample("complex128", (5, 6))
    expected = {k: zarr.open_array(str(store / k))[...] for k in ("temp", "vol", "cplx")}

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    run_dir = tmp_path / "run"
    monkeypatch.setenv("ZARRFS_RUNTIME_DIR", str(run_dir))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    zarrfs = [sys.executable, "-m", "zarrfs"]
    up = subprocess.run([*zarrfs, "mount", str(store), str(mnt), "-o", "ro,byte_order=big"],
                        capture_output=True, text=True, timeout=60, env=env, cwd=REPO)  # fmt: skip
    pids: list[int] = []
    try:
        pids = [int(p.read_text().split()[0]) for p in run_dir.glob("*.pid")]
        assert up.returncode == 0, up.stderr
        assert legacy_only(sorted(os.listdir(mnt / "temp"))) == [
            "data.hdr", "data.mhd", "data.nhdr", "data.npy", "data.raw"]  # fmt: skip
        assert "data.hdr" not in os.listdir(mnt / "vol")
        info = json.loads((mnt / "temp" / "info.json").read_text())
        assert legacy_only(info["views"]) == [
            "data.raw", "data.npy", "data.hdr", "data.mhd", "data.nhdr"]  # fmt: skip

        gd = gdal_read([mnt / "temp", mnt / "cplx"], tmp_path / "gdal")
        version = gdal_version(gd)
        check_gdal(gd[str(mnt / "temp")], expected["temp"], version, axis0="time")
        check_gdal(gd[str(mnt / "cplx")], expected["cplx"], version)
        for name, a in expected.items():
            check_itk(mnt / name / "data.mhd", a)
            got, _ = nrrd.read(str(mnt / name / "data.nhdr"), index_order="C")
            assert np.array_equal(got, as_components(a))
            check_teem(mnt / name / "data.nhdr", a)
            npy = mapped_copy(mnt / name / "data.npy")
            assert npy.dtype.byteorder == ">" and np.array_equal(npy, a)
        ((size, values),) = imagej_read(tmp_path, [(mnt / "temp" / "data.raw", info["imagej"])])
        assert size == [8, 6, 4] and np.array_equal(values, expected["temp"].ravel())
    finally:
        down = subprocess.run([*zarrfs, "umount", str(mnt)], capture_output=True, text=True,
                              timeout=60, env=env, cwd=REPO)  # fmt: skip
        if down.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, timeout=10)
        for pid in pids:  # the daemon this test started, should it outlive umount
            cmdline = Path(f"/proc/{pid}/cmdline")
            if cmdline.exists() and b"zarrfs" in cmdline.read_bytes():
                os.kill(pid, signal.SIGKILL)
    assert down.returncode == 0, down.stderr
    assert not os.path.ismount(mnt)
