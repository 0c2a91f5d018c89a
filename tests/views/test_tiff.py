"""``data.tif`` and ``data.btf`` read through a real mount by the real readers.

- tifffile: values of every page against zarr-python, ImageJ and shaped metadata, BigTIFF.
- libtiff's ``tiffinfo`` (Debian ``libtiff-tools``): every directory, no error or warning.
- Pillow: 2-D 8, 16 and 32-bit pages.
- GDAL (``gdalinfo -checksum``, and the system GDAL bindings for the values of the first and
  last page).
- ImageJ (Debian ``libij-java``, headless under Xvfb): hyperstack dimensions and pixel values.
- OME-XML of an OME-Zarr image written by ome-zarr-py, validated against the OME schema by
  ome-types.
- Sparse arrays just under and just over 4 GiB.

One store holds an array for every (TIFF data type, shape 1-D .. 5-D) with edge chunks and
missing chunks; it is mounted once per byte order. The readers are test requirements
(``scripts/setup.sh --test``): a missing one fails, never skips.
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

import numpy as np
import ome_types
import pytest
import tifffile
import zarr
from ome_zarr.writer import write_image
from PIL import Image
from view_samples import sample

from zarrfs.views.tiff import layout_for
from zarrfs.views.tiffmeta import ngff_image, tiff_meta
from zarrfs.views.tree import open_tree

pytestmark = pytest.mark.timeout(600)

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]  # fmt: skip
SHAPES = {"1d": (7,), "2d": (5, 6), "3d": (3, 5, 6), "4d": (2, 3, 5, 6), "5d": (2, 1, 2, 5, 6)}
IJ_JAR = Path("/usr/share/java/ij.jar")


def tiffinfo_clean(path: Path, *args: str) -> str:
    assert shutil.which("tiffinfo"), "tiffinfo is a test requirement (libtiff-tools)"
    out = subprocess.run(["tiffinfo", *args, str(path)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0 and out.stderr == "", (path, out.stderr)
    return out.stdout


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """A store with one array per (dtype, shape): edge chunks, the first chunk missing."""
    path = tmp_path_factory.mktemp("tiff") / "t.zarr"
    root = zarr.open_group(str(path), mode="w")
    expected = {}
    for dtype in DTYPES:
        for sname, shape in SHAPES.items():
            chunks = tuple(max(1, (n + 1) // 2) for n in shape)  # uneven: edge chunks
            fill = 0 if dtype == "bool" else 1
            a = root.create_array(f"{dtype}_{sname}", shape=shape, chunks=chunks, dtype=dtype,
                                  fill_value=fill)  # fmt: skip
            data = sample(dtype, shape)
            first = tuple(slice(0, c) for c in chunks)
            data[first] = fill  # that chunk stays missing: reads as the fill value
            mask = np.ones(shape, bool)
            mask[first] = False
            a[...] = np.where(mask, data, fill)
            expected[a.basename] = a[...]
    root.create_array("empty", shape=(0, 5), dtype="u1")
    root.create_array("scalar", shape=(), dtype="f4")
    return path, expected


@pytest.fixture(scope="module", params=["little", "big"])
def mounted(request, table, module_mounter):
    path, expected = table
    m = module_mounter(path, "ro", f"byte_order={request.param}", name=f"mnt-{request.param}")
    return m.path, expected, request.param


def test_present_exactly_where_tiff_describes_the_array(mounted) -> None:
    mnt, expected, _ = mounted
    for name in expected:
        assert {"data.tif", "data.btf"} <= set(os.listdir(mnt / name)), name
        info = json.loads((mnt / name / "info.json").read_text())
        assert info["views"][-2:] == ["data.tif", "data.btf"]
    for name in ("empty", "scalar"):
        assert not {"data.tif", "data.btf"} & set(os.listdir(mnt / name))
        assert not (mnt / name / "data.tif").exists()


def test_tifffile_reads_every_array_exactly(mounted) -> None:
    mnt, expected, order = mounted
    for name, a in expected.items():
        raw = (mnt / name / "data.raw").read_bytes()
        for view in ("data.tif", "data.btf"):
            p = mnt / name / view
            with tifffile.TiffFile(p) as t:
                assert t.is_bigtiff == (view == "data.btf")
                assert t.byteorder == ("<" if order == "little" else ">")
                got = t.asarray()
                assert len(t.pages) == max(1, int(np.prod(a.shape[:-2])))
                page = t.pages[0]
                # the data region is data.raw, unchanged, at the first strip
                start = page.dataoffsets[0]
                assert p.read_bytes()[start : start + len(raw)] == raw
            want = a.view(np.uint8) if a.dtype == bool else a
            assert got.shape == a.shape, (name, view, got.shape)
            assert np.array_equal(got, want), (name, view)


def test_libtiff_reads_every_directory_without_warnings(mounted) -> None:
    mnt, expected, _ = mounted
    for name, a in expected.items():
        for view in ("data.tif", "data.btf"):
            out = tiffinfo_clean(mnt / name / view)
            assert out.count("TIFF Directory at offset") == max(1, int(np.prod(a.shape[:-2])))
            dump = subprocess.run(["tiffdump", str(mnt / name / view)], capture_output=True,
                                  text=True, timeout=60)  # fmt: skip
            assert dump.returncode == 0 and dump.stderr == "", dump.stderr


def test_pillow_reads_2d_pages(mounted) -> None:
    mnt, expected, _ = mounted
    for dtype in ("uint8", "uint16", "int32", "float32"):
        a = expected[f"{dtype}_2d"]
        with Image.open(mnt / f"{dtype}_2d" / "data.tif") as im:
            assert im.size == (a.shape[1], a.shape[0])
            assert np.array_equal(np.asarray(im), a), dtype


GDAL_READ = r"""
import json, sys
from osgeo import gdal
gdal.UseExceptions()
out = {}
for path, pages in json.load(sys.stdin):
    got = []
    for k in sorted({0, pages - 1}):
        ds = gdal.Open(path if pages == 1 else f"GTIFF_DIR:{k + 1}:{path}")
        got.append([ds.RasterXSize, ds.RasterYSize, ds.RasterCount,
                    ds.GetRasterBand(1).ReadAsArray().ravel().tolist()])
    out[path] = got
print(json.dumps(out))
"""


def test_gdal_reads_first_and_last_page(mounted) -> None:
    mnt, expected, _ = mounted
    todo, want = [], {}
    for dtype in ("uint8", "int16", "uint16", "int32", "uint32", "float32", "float64"):
        for sname in ("2d", "3d", "5d"):
            a = expected[f"{dtype}_{sname}"]
            planes = a.reshape(-1, *a.shape[-2:])
            for view in ("data.tif", "data.btf"):
                p = str(mnt / f"{dtype}_{sname}" / view)
                todo.append((p, len(planes)))
                want[p] = [planes[0], planes[-1]] if len(planes) > 1 else [planes[0]]
                check = subprocess.run(["gdalinfo", "-checksum", p], capture_output=True,
                                       text=True, timeout=60)  # fmt: skip
                assert check.returncode == 0 and "Checksum=" in check.stdout, check.stderr
                assert "Warning" not in check.stderr and "ERROR" not in check.stderr, p
    proc = subprocess.run(["/usr/bin/python3", "-c", GDAL_READ], input=json.dumps(todo),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for p, pages in json.loads(proc.stdout).items():
        for (w, h, bands, values), plane in zip(pages, want[p], strict=True):
            assert (w, h, bands) == (plane.shape[1], plane.shape[0], 1)
            assert np.array_equal(np.array(values, plane.dtype), plane.ravel()), p


def test_writes_go_to_the_array_and_header_writes_are_refused(tmp_path, mounter) -> None:
    store = tmp_path / "w.zarr"
    a = zarr.create_array(str(store), shape=(4, 6, 8), chunks=(2, 3, 3), dtype="uint16",
                          fill_value=0, dimension_names=["z", "y", "x"])  # fmt: skip
    a[1] = 5
    m = mounter(store, "rw", "byte_order=big")
    p = m.path / "data.tif"
    with tifffile.TiffFile(p) as t:
        start = t.pages[0].dataoffsets[0]
        size = p.stat().st_size
    fd = os.open(p, os.O_RDWR)
    try:
        # a row of plane 2 written through the TIFF view, in the mount's byte order
        row = np.arange(100, 108, dtype=">u2").tobytes()
        assert os.pwrite(fd, row, start + (2 * 48 + 8) * 2) == len(row)
        head = os.pread(fd, 8, 0)
        assert os.pwrite(fd, head, 0) == 8  # identical header bytes: accepted
        with pytest.raises(OSError) as err:
            os.pwrite(fd, b"II*\x00", 0)
        assert err.value.errno == errno.EINVAL
        with pytest.raises(OSError) as err:  # the last IFD
            os.pwrite(fd, b"\xff" * 4, size - 4)
        assert err.value.errno == errno.EINVAL
        os.fsync(fd)
    finally:
        os.close(fd)
    # a whole-file rewrite (cp of an equal file with new pixel values) is accepted
    body = bytearray(p.read_bytes())
    body[start : start + 2] = np.array([4242], ">u2").tobytes()
    with open(p, "r+b") as f:
        assert f.write(body) == len(body)
    assert "TIFF header or directory bytes" in m.log()
    got = zarr.open_array(str(store))[...]
    assert np.array_equal(got[2, 1], np.arange(100, 108)) and got[1].min() == 5
    assert got[0, 0, 0] == 4242
    assert (m.path / "data.tif").stat().st_size == size
    with tifffile.TiffFile(p) as t:
        assert np.array_equal(t.asarray(), got)


# ----------------------------------------------------------------------------- ImageJ


IJ_MACRO = r"""
lines = split(File.openAsString(getArgument()), "\n");
for (i = 0; i < lines.length; i++) {
    if (lengthOf(lines[i]) == 0) continue;
    f = split(lines[i], "\t");
    open(f[0]);
    getDimensions(w, h, c, z, t);
    s = "CASE " + w + " " + h + " " + c + " " + z + " " + t + " " + Stack.isHyperstack + ":";
    for (k = 1; k <= nSlices; k++) {
        setSlice(k);
        s = s + " " + getPixel(0, 0) + " " + getPixel(w - 1, h - 1);
    }
    print(s);
    close();
}
"""


def imagej_open(tmp: Path, paths: list[Path]) -> list[tuple[list[int], list[float]]]:
    """ImageJ's File > Open of each path -> ([w, h, c, z, t, hyperstack], corner pixels)."""
    assert IJ_JAR.exists(), "ImageJ is a test requirement (scripts/setup.sh --test: libij-java)"
    (tmp / "open.ijm").write_text(IJ_MACRO)
    (tmp / "cases.txt").write_text("\n".join(str(p) for p in paths))
    env = {**os.environ, "HOME": str(tmp)}
    out = subprocess.run(
        ["xvfb-run", "-a", "java", "-jar", str(IJ_JAR), "-batch", str(tmp / "open.ijm"),
         str(tmp / "cases.txt")],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    rows = [x for x in out.stdout.splitlines() if x.startswith("CASE ")]
    assert len(rows) == len(paths), out.stdout + out.stderr
    result = []
    for row in rows:
        head, values = row.split(":", 1)
        result.append(([int(v) for v in head.split()[1:]], [float(v) for v in values.split()]))
    return result


def corners(a: np.ndarray) -> list[float]:
    """(first, last) pixel of every plane, planes in ImageJ's order (channel fastest)."""
    planes = a.reshape(-1, *a.shape[-2:])
    return [float(v) for p in planes for v in (p[0, 0], p[-1, -1])]


def test_imagej_opens_hyperstacks_with_the_right_dimensions(tmp_path, mounter) -> None:
    store = tmp_path / "ij.zarr"
    root = zarr.open_group(str(store), mode="w")
    cases = {  # name: (dtype, shape, dimension names)
        "tzc": ("uint16", (2, 3, 4, 5, 6), ["t", "z", "c", "y", "x"]),
        "zc": ("float32", (3, 2, 5, 6), ["Z", "Channel", "y", "x"]),
        "tc1": ("uint8", (3, 2, 1, 5, 6), ["time", "c", "z", "y", "x"]),  # z of size 1
        "cz": ("uint16", (2, 3, 5, 6), ["c", "z", "y", "x"]),  # not ImageJ's order
        "plain": ("uint16", (4, 5, 6), None),
    }
    expected = {}
    for name, (dtype, shape, names) in cases.items():
        a = root.create_array(name, shape=shape, chunks=shape, dtype=dtype, dimension_names=names)
        a[...] = (np.arange(np.prod(shape)) % 251).reshape(shape).astype(dtype)
        expected[name] = a[...]
    little = mounter(store, "ro")
    big = mounter(store, "ro", "byte_order=big", name="big")  # MM files: ImageJ swaps
    paths = [m.path / n / "data.tif" for m in (little, big) for n in cases]
    got = imagej_open(tmp_path, paths)
    dims = {
        "tzc": [6, 5, 4, 3, 2, 1],
        "zc": [6, 5, 2, 3, 1, 1],
        "tc1": [6, 5, 2, 1, 3, 1],
        "cz": [6, 5, 1, 6, 1, 0],  # a plain stack of the 6 planes in the array's order
        "plain": [6, 5, 1, 4, 1, 0],
    }
    for (size, values), name in zip(got, [*cases, *cases], strict=True):
        assert size == dims[name], (name, size)
        assert values == corners(expected[name]), name
    with tifffile.TiffFile(big.path / "tzc" / "data.tif") as t:
        assert t.is_imagej and t.series[0].axes == "TZCYX"
        assert t.imagej_metadata["channels"] == 4 and t.imagej_metadata["frames"] == 2


# ----------------------------------------------------------------------------- OME-Zarr


def write_ome_image(group: zarr.Group, shape: tuple[int, ...]) -> np.ndarray:
    """An OME-NGFF image written by ome-zarr-py (one resolution level, "s0")."""
    data = (np.arange(np.prod(shape)) % 250).astype("uint16").reshape(shape)
    write_image(
        data, group, scale_factors=(), axes="tczyx",
        scale={"t": 2.0, "c": 1.0, "z": 0.5, "y": 0.25, "x": 0.25},
        axes_units={"t": "second", "z": "micrometer", "y": "micrometer", "x": "micrometer"},
        storage_options={"chunks": (1, 1, 1, 8, 8)},
    )  # fmt: skip
    attrs = group.attrs.asdict()
    channels = [{"label": f"ch{i}\u00e9"} for i in range(shape[1])]
    attrs["ome"]["omero"] = {"channels": channels}  # "é": OME-XML is ASCII with references
    group.attrs.update(attrs)
    return data


def test_ome_zarr_image_opens_with_its_axes_and_ome_xml(tmp_path, mounter) -> None:
    store = tmp_path / "ome.zarr"
    root = zarr.open_group(str(store), mode="w")
    images = {"tcyx": (3, 2, 1, 16, 20), "tzyx": (2, 1, 4, 16, 20), "tczyx": (3, 2, 4, 16, 20)}
    data = {name: write_ome_image(root.create_group(name), shape) for name, shape in images.items()}
    m = mounter(store, "ro")
    for name, a in data.items():
        for view in ("data.tif", "data.btf"):
            p = m.path / name / "s0" / view
            tiffinfo_clean(p)
            with tifffile.TiffFile(p) as t:
                assert np.array_equal(t.series[0].asarray().reshape(a.shape), a)
                if view == "data.tif" and name != "tczyx":
                    continue  # the ImageJ description (checked below); OME-XML is in data.btf
                assert t.is_ome
                ome = ome_types.from_xml(t.ome_metadata, validate=True)  # the OME schema
            px = ome.images[0].pixels
            assert (px.size_t, px.size_c, px.size_z, px.size_y, px.size_x) == a.shape
            assert px.dimension_order.value == "XYZCT"  # z fastest: the array's C order
            assert (px.physical_size_x, px.physical_size_z, px.time_increment) == (0.25, 0.5, 2)
            assert px.physical_size_x_unit.value == "µm"
            assert [c.name for c in px.channels] == [f"ch{i}é" for i in range(a.shape[1])]
    for name in ("tcyx", "tzyx"):
        with tifffile.TiffFile(m.path / name / "s0" / "data.tif") as t:
            ij = t.imagej_metadata
            assert ij["unit"] == "micron" and ij["finterval"] == 2.0 and ij["spacing"] == 0.5
            assert t.pages[0].get_resolution() == (4.0, 4.0)  # pixels per micron
    paths = [m.path / name / "s0" / "data.tif" for name in images]
    got = imagej_open(tmp_path, paths)
    assert got[0][0] == [20, 16, 2, 1, 3, 1]  # channels, slices, frames; a hyperstack
    assert got[1][0] == [20, 16, 1, 4, 2, 1]
    # channel before z is not ImageJ's plane order: ImageJ opens the 24 planes as a stack
    assert got[2][0] == [20, 16, 1, 24, 1, 0]
    for (_, values), a in zip(got, data.values(), strict=True):
        assert values == corners(a)


# ----------------------------------------------------------------------------- 4 GiB


def test_sparse_arrays_around_4_gib(tmp_path, mounter) -> None:
    """Just under 4 GiB data.tif is classic TIFF with every IFD; just over it is ImageJ's
    one-IFD form. data.btf has every IFD in both. Only the last plane is stored."""
    store = tmp_path / "big.zarr"
    root = zarr.open_group(str(store), mode="w")
    last = (np.arange(1 << 20) % 253).astype("uint8").reshape(1024, 1024)
    for name, n in (("under", 4095), ("over", 4097)):
        a = root.create_array(name, shape=(n, 1024, 1024), chunks=(1, 1024, 1024), dtype="u1",
                              fill_value=0)  # fmt: skip
        a[-1] = last
    m = mounter(store, "ro")
    under, over = m.path / "under" / "data.tif", m.path / "over" / "data.tif"
    assert under.stat().st_size < 2**32 < over.stat().st_size
    assert tiffinfo_clean(under).count("TIFF Directory at offset") == 4095
    with tifffile.TiffFile(under) as t:
        assert len(t.pages) == 4095 and not t.is_imagej
        assert np.array_equal(t.pages[-1].asarray(), last)
        assert not t.pages[0].asarray().any()
    assert tiffinfo_clean(over).count("TIFF Directory at offset") == 1
    with tifffile.TiffFile(over) as t:
        assert t.is_imagej and t.imagej_metadata["images"] == 4097
        assert t.series[0].shape == (4097, 1024, 1024)
    mapped = tifffile.memmap(over, mode="r")  # the ImageJ series, contiguous past 4 GiB
    try:
        assert mapped.shape == (4097, 1024, 1024) and np.array_equal(mapped[-1], last)
    finally:
        del mapped
    for name, n in (("under", 4095), ("over", 4097)):
        btf = m.path / name / "data.btf"
        assert tiffinfo_clean(btf).count("TIFF Directory at offset") == n
        with tifffile.TiffFile(btf) as t:
            assert t.is_bigtiff and np.array_equal(t.pages[-1].asarray(), last)


# ----------------------------------------------------------------------------- the tree


class Opts:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def read_view(root, path: str, name: str) -> bytes:
    f = root.lookup(path).lookup(name)
    h = f.open(write=False, truncate=False)
    try:
        return bytes(h.read(0, f.stat().size))
    finally:
        h.release()


def test_a_long_stack_costs_one_template_and_layouts_follow_the_array(tmp_path) -> None:
    store = tmp_path / "s.zarr"
    a = zarr.create_array(str(store / "stack"), shape=(100_000, 2, 3), chunks=(5000, 2, 3),
                          dtype="u1", fill_value=3)  # fmt: skip
    a[-1] = np.arange(6).reshape(2, 3)
    root = open_tree(str(store), Opts(writeback=0))
    try:
        arr = root.ctx.hierarchy.array("stack")
        tracemalloc.start()
        layout = layout_for(root.ctx, "data.tif", arr)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert layout is not None and layout.pages == 100_000
        # one IFD template, not 100,000 rendered directories (about 16 MB)
        assert peak < 1 << 20 and len(layout.head) + len(layout.template) < 8192
        assert layout_for(root.ctx, "data.tif", arr) is layout  # once per array state
        body = read_view(root, "stack", "data.tif")
        with tifffile.TiffFile(io.BytesIO(body)) as t:
            assert len(t.pages) == 100_000
            assert np.array_equal(t.pages[-1].asarray(), a[-1])
            assert np.array_equal(t.pages[-2].asarray(), a[-2])
        # a resize through data.raw renders anew: the TIFF views follow the new shape
        raw = root.lookup("stack").lookup("data.raw")
        raw.truncate(5 * 6)
        body = read_view(root, "stack", "data.tif")
        with tifffile.TiffFile(io.BytesIO(body)) as t:
            assert len(t.pages) == 5 and np.array_equal(t.asarray(), np.full((5, 2, 3), 3))
    finally:
        root.close()


def test_views_option_selects_the_tiff_views(tmp_path) -> None:
    store = tmp_path / "s.zarr"
    zarr.create_array(str(store / "img"), shape=(4, 5), dtype="u2", fill_value=0)
    root = open_tree(str(store), Opts(views=("data.raw", "data.btf"), writeback=0))
    try:
        d = root.lookup("img")
        assert [n for n in d.names() if n.startswith("data.")] == ["data.btf", "data.raw"]
        assert d.lookup("data.tif") is None
        with tifffile.TiffFile(io.BytesIO(read_view(root, "img", "data.btf"))) as t:
            assert t.is_bigtiff and t.asarray().shape == (4, 5)
    finally:
        root.close()


@pytest.mark.parametrize(
    ("axes", "shape"),
    [("tczyx", (2, 3, 4, 5, 6)), ("czyx", (3, 4, 5, 6)), ("cyx", (2, 5, 6)), ("zyx", (4, 5, 6)),
     ("tyx", (3, 5, 6)), ("tzcyx", (2, 3, 4, 5, 6))],
)  # fmt: skip
def test_ome_xml_of_ngff_0_4_axes_is_valid_and_states_the_order(axes, shape) -> None:
    units = {"x": "micrometer", "y": "micrometer", "z": "furlong", "t": "millisecond"}
    attrs = {"multiscales": [{  # OME-NGFF 0.4: multiscales at the top of the attributes
        "version": "0.4",
        "axes": [{"name": a, "type": {"t": "time", "c": "channel"}.get(a, "space"),
                  **({"unit": units[a]} if a in units else {})} for a in axes],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1.5] * len(axes)}]}],
    }]}  # fmt: skip
    ngff = ngff_image(attrs, "0")
    meta = tiff_meta("u2", shape, None, ngff, "img")
    assert meta.ome is not None
    px = ome_types.from_xml(meta.ome, validate=True).images[0].pixels
    sizes = dict(zip(axes.upper(), shape, strict=True))
    assert [px.size_x, px.size_y, px.size_z, px.size_c, px.size_t] == [
        sizes.get(k, 1) for k in "XYZCT"]  # fmt: skip
    # DimensionOrder: X, Y, then the array's leading axes fastest first (absent axes, of size
    # 1, may stand anywhere)
    lead = axes.upper()[:-2]
    order = px.dimension_order.value
    assert order[:2] == "XY" and [k for k in order[2:] if k in lead] == list(reversed(lead))
    assert px.physical_size_x == 1.5 and px.physical_size_z is None  # unknown unit: left out
    if "t" in axes:
        assert px.time_increment == 1.5 and px.time_increment_unit.value == "ms"
    # ImageJ gets a hyperstack only where the axes run in its plane order (t, z, c)
    assert (meta.imagej is not None) == (axes in ("tzcyx", "cyx", "zyx", "tyx"))


def test_ngff_metadata_that_cannot_apply_is_not_used() -> None:
    """Scales past float's range, a ``datasets`` that is no list, axes that are not the
    array's: the TIFF view is described without them, never refused."""
    axes = [{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"]
    ms = {
        "version": "0.4",
        "axes": axes,
        "datasets": [
            {
                "path": "0",
                "coordinateTransformations": [{"type": "scale", "scale": [1, 10**400, 1]}],
            }
        ],
    }
    ngff = ngff_image({"multiscales": [ms]}, "0")
    assert ngff is not None and ngff.scale is None
    assert ngff_image({"multiscales": [{**ms, "datasets": 5}]}, "0") is None
    fine = ngff_image({"multiscales": [{**ms, "datasets": [{"path": "0"}]}]}, "0")
    # an entry of three axes for an array of four, named by its dimension names
    meta = tiff_meta("u2", (2, 3, 4, 5), ["t", "z", "y", "x"], fine, "img")
    assert meta.ome is None and meta.imagej is not None
