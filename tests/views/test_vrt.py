"""``data.vrt`` read by GDAL (``gdalinfo -json -checksum`` and the system GDAL bindings).

Tier 1 writes ``data.raw`` + the VRT for every GDAL data type x 2-D/3-D shapes x both byte
orders and checks GDAL's checksum of each band against the checksum GDAL computes for the same
values held in memory (MEM driver), and the values themselves. Tier 2 checks the georeferencing
conventions without GDAL (pure functions). Tier 3 mounts a store holding each convention (one
array written by GDAL's own Zarr driver) and checks geotransform, CRS and checksums through
the mount.

GDAL is a test requirement (``scripts/setup.sh --test`` installs gdal-bin and python3-gdal).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr
from view_samples import sample

from zarrfs.views import vrt
from zarrfs.views.georef import georeference, regular_step
from zarrfs.views.headers import view_dtype
from zarrfs.views.tree import open_tree

pytestmark = pytest.mark.timeout(300)

VRT_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float32", "float64", "complex64", "complex128"]  # fmt: skip
GDAL_TYPE = {"bool": "Byte", "uint8": "Byte", "int8": "Int8", "int16": "Int16",
             "uint16": "UInt16", "int32": "Int32", "uint32": "UInt32", "int64": "Int64",
             "uint64": "UInt64", "float32": "Float32", "float64": "Float64",
             "complex64": "CFloat32", "complex128": "CFloat64"}  # fmt: skip
SHAPES = [(3, 5), (2, 3, 5), (1, 4, 1), (3, 1, 7)]
ORDERS = ["little", "big"]

GDAL_CHECK = r"""
import json, subprocess, sys
import numpy as np
from osgeo import gdal, osr
gdal.UseExceptions()
out = {"version": gdal.VersionInfo("RELEASE_NAME")}
for case in json.load(sys.stdin):
    r = {}
    proc = subprocess.run(["gdalinfo", "-json", "-checksum", case["vrt"]],
                          capture_output=True, text=True)
    r["rc"], r["stderr"] = proc.returncode, proc.stderr
    if proc.returncode == 0:
        info = json.loads(proc.stdout)
        r["size"] = info["size"]
        r["bands"] = [[b["type"], b["checksum"]] for b in info["bands"]]
        r["geotransform"] = info.get("geoTransform")
        wkt = info.get("coordinateSystem", {}).get("wkt")
        r["has_srs"] = bool(wkt)
        if wkt and case.get("srs"):
            got, exp = osr.SpatialReference(), osr.SpatialReference()
            got.SetFromUserInput(wkt)
            exp.SetFromUserInput(case["srs"])
            r["srs_same"] = bool(got.IsSame(exp))
        a = np.load(case["npy"])
        ds = gdal.Open(case["vrt"])
        r["values_equal"] = bool(np.array_equal(ds.ReadAsArray().reshape(a.shape), a))
        mem = gdal.GetDriverByName("MEM").Create(
            "", a.shape[2], a.shape[1], a.shape[0], gdal.GetDataTypeByName(case["type"]))
        for i in range(a.shape[0]):
            mem.GetRasterBand(i + 1).WriteArray(a[i])
        r["expected"] = [mem.GetRasterBand(i + 1).Checksum() for i in range(a.shape[0])]
    out[case["vrt"]] = r
print(json.dumps(out))
"""


def gdal_check(cases: list[dict], tmp: Path) -> dict:
    """Run :data:`GDAL_CHECK` on ``cases`` ({vrt, values, type, srs?}) in the system Python."""
    tmp.mkdir(parents=True, exist_ok=True)
    jobs = []
    for i, case in enumerate(cases):
        a = case["values"]
        a = a.view(np.uint8) if a.dtype.kind == "b" else a
        a = a.reshape((1, *a.shape) if a.ndim == 2 else a.shape)
        np.save(tmp / f"{i}.npy", a.astype(a.dtype.newbyteorder("=")))
        jobs.append({"vrt": str(case["vrt"]), "npy": str(tmp / f"{i}.npy"),
                     "type": case["type"], "srs": case.get("srs")})  # fmt: skip
    proc = subprocess.run(["/usr/bin/python3", "-c", GDAL_CHECK], input=json.dumps(jobs),
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def gdal_version(out: dict) -> tuple[int, int]:
    major, minor = out["version"].split(".")[:2]
    return int(major), int(minor)


def check_band_values(r: dict, a: np.ndarray, gdal_type: str, version: tuple[int, int]) -> None:
    if gdal_type == "Int8" and version < (3, 7):
        # Int8 is a GDAL data type from 3.7 on; older GDAL refuses the band's type
        assert r["rc"] != 0 and "Int8" in r["stderr"], r
        return
    assert r["rc"] == 0 and r["stderr"] == "", r
    bands = 1 if a.ndim == 2 else a.shape[0]
    assert r["size"] == [a.shape[-1], a.shape[-2]]
    assert [t for t, _ in r["bands"]] == [gdal_type] * bands
    assert [c for _, c in r["bands"]] == r["expected"], r
    assert r["values_equal"]


# ----------------------------------------------------------------------------- tier 1


def test_every_type_shape_and_byte_order_checksums_in_gdal(tmp_path) -> None:
    cases = []
    for dtype in [*VRT_DTYPES, "float16", "V3"]:
        for order in ORDERS:
            for shape in SHAPES:
                dt = np.dtype(dtype)
                doc = vrt.vrt_document(dt, shape, order)
                if dtype in ("float16", "V3"):
                    assert doc is None
                    continue
                assert doc is not None
                d = tmp_path / f"{dtype}-{order}-{'x'.join(map(str, shape))}"
                d.mkdir()
                a = sample(dtype, shape)
                (d / "data.raw").write_bytes(a.astype(view_dtype(a.dtype, order)).tobytes())
                (d / "data.vrt").write_bytes(doc)
                cases.append({"vrt": d / "data.vrt", "values": a, "type": GDAL_TYPE[dtype]})
    out = gdal_check(cases, tmp_path / "npy")
    version = gdal_version(out)
    for case in cases:
        r = out[str(case["vrt"])]
        check_band_values(r, case["values"], case["type"], version)
        if r["rc"] == 0:
            assert r["geotransform"] is None and not r["has_srs"]


def test_what_a_vrt_cannot_describe() -> None:
    u1 = np.dtype("u1")
    assert vrt.vrt_document(u1, (5,), "little") is None
    assert vrt.vrt_document(u1, (2, 2, 2, 2), "little") is None
    assert vrt.vrt_document(u1, (0, 5), "little") is None
    assert vrt.vrt_document(u1, (vrt.MAX_BANDS + 1, 2, 2), "little") is None
    assert vrt.vrt_document(u1, (2, 2**31), "little") is None
    assert vrt.vrt_document(u1, (vrt.MAX_BANDS, 1, 1), "big") is not None


# ----------------------------------------------------------------------------- tier 2


def test_regular_spacing_is_exact() -> None:
    assert regular_step(np.linspace(-10.0, 10.0, 81)) == 0.25
    assert regular_step(np.arange(5.0, 5.0 + 0.1 * 37, 0.1)[:37]) is not None
    assert regular_step(np.arange(10, dtype=np.int32) * -30 + 900) == -30.0
    assert regular_step(np.linspace(0, 1, 11).astype(np.float32)) is not None
    bumped = np.linspace(-10.0, 10.0, 81)
    bumped[40] = np.nextafter(bumped[40], 1.0)
    assert regular_step(bumped) is None
    assert regular_step(np.array([1.0])) is None
    assert regular_step(np.array([0.0, 1.0, 3.0])) is None
    assert regular_step(np.array([1.0, 1.0, 1.0])) is None


def test_conventions_without_gdal() -> None:
    coords = {"x": np.array([0.5, 1.5, 2.5]), "y": np.array([9.0, 7.0])}
    read = coords.get

    def attrs_of(name):
        return {"crs_wkt": "WKT-TEXT"} if name == "crs" else None

    geo = georeference({"grid_mapping": "crs"}, {}, ["y", "x"], (2, 3), read, attrs_of)
    assert geo is not None and geo.srs == "WKT-TEXT" and geo.geotransform == (0, 1, 0, 10, 0, -2)
    geo = georeference({"grid_mapping": "crs: x y"}, {}, ["y", "x"], (2, 3), read, attrs_of)
    assert geo is not None and geo.source == "grid_mapping"
    # coordinates of another length, or other dimension names: SRS only
    geo = georeference({"grid_mapping": "crs"}, {}, ["y", "x"], (2, 4), read, attrs_of)
    assert geo is not None and geo.geotransform is None and geo.srs == "WKT-TEXT"
    geozarr = {"proj:code": "EPSG:4326", "spatial:dimensions": ["lat", "lon"],
               "spatial:transform": [0.5, 0, -180, 0, -0.5, 90]}  # fmt: skip
    geo = georeference(geozarr, {}, ["lat", "lon"], (360, 720), read, attrs_of)
    assert geo is not None and geo.geotransform == (-180, 0.5, 0, 90, 0, -0.5)
    node = geozarr | {"spatial:registration": "node"}
    geo = georeference(node, {}, ["lat", "lon"], (361, 721), read, attrs_of)
    assert geo is not None and geo.geotransform == (-180.25, 0.5, 0, 90.25, 0, -0.5)
    # spatial axes that are not the last two: the transform does not apply
    geo = georeference(geozarr, {}, ["lon", "lat"], (720, 360), read, attrs_of)
    assert geo is not None and geo.geotransform is None and geo.srs == "EPSG:4326"
    assert georeference({}, {}, ["y", "x"], (2, 3), read, attrs_of) is None
    projjson = {"_CRS": {"projjson": {"type": "GeographicCRS", "name": "x"}}}
    geo = georeference(projjson, {}, None, (2, 3), read, attrs_of)
    assert geo is not None and json.loads(geo.srs or "") == projjson["_CRS"]["projjson"]


def test_attributes_that_name_nothing_give_no_georeferencing() -> None:
    """Attributes are free-form: what cannot georeference is ignored, never an error."""
    none = {}.get
    for attrs in (
        {"grid_mapping": ":"},  # the extended form with no variable before the colon
        {"grid_mapping": "  : x y"},
        {"spatial:transform": [10**400, 0, 0, 0, 1, 0], "spatial:dimensions": ["y", "x"]},
        {"spatial:transform": [1, 0, -(10**400), 0, 1, 0], "spatial:dimensions": ["y", "x"]},
    ):
        assert georeference(attrs, {}, ["y", "x"], (2, 3), none, none) is None, attrs


def test_damaged_or_unreachable_neighbours_leave_the_vrt_unreferenced(tmp_path) -> None:
    """A grid-mapping variable whose metadata is broken, a coordinate array with a damaged
    chunk, a name that is no sibling ("..", "."): the VRT is rendered in pixel coordinates (as
    for a missing neighbour), not refused."""
    store = tmp_path / "n.zarr"
    root = zarr.open_group(str(store), mode="w")
    root.create_array("broken", shape=(3,), dtype="float64")
    y = root.create_array("y", shape=(2,), chunks=(2,), dtype="float64", compressors=None)
    x = root.create_array("x", shape=(3,), chunks=(3,), dtype="float64")
    y[...], x[...] = [5.0, 3.0], [10.0, 20.0, 30.0]
    cases = {
        "gm_broken": {"grid_mapping": "broken"},
        "gm_up": {"grid_mapping": ".."},
        "gm_here": {"grid_mapping": "."},
        "crs_damaged": {"_CRS": {"wkt": "EPSG:3857"}},  # y's chunk is damaged below
    }
    for name, attrs in cases.items():
        root.create_array(name, shape=(2, 3), dtype="int16", dimension_names=["y", "x"],
                          attributes=attrs)  # fmt: skip
    (store / "broken" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array"}')
    (store / "y" / "c" / "0").write_bytes(b"\x00" * 3)
    t = open_tree(str(store), Opts(read_only=True, writeback=0))
    try:
        for name in ("gm_broken", "gm_up", "gm_here"):
            doc = read_all(t.lookup(name).lookup("data.vrt"))
            assert doc == vrt.vrt_document(np.dtype("int16"), (2, 3), "little"), name
        doc = read_all(t.lookup("crs_damaged").lookup("data.vrt"))
        assert b"<SRS>EPSG:3857</SRS>" in doc and b"GeoTransform" not in doc
    finally:
        t.close()


# ----------------------------------------------------------------------------- tier 3

GDAL_WRITE = r"""
import sys
import numpy as np
from osgeo import gdal, osr
gdal.UseExceptions()
ds = gdal.GetDriverByName("MEM").Create("", 7, 5, 1, gdal.GDT_UInt16)
ds.SetGeoTransform([500000.0, 30.0, 0.0, 4100000.0, 0.0, -30.0])
srs = osr.SpatialReference()
srs.ImportFromEPSG(32633)
ds.SetProjection(srs.ExportToWkt())
ds.GetRasterBand(1).WriteArray(np.arange(35, dtype=np.uint16).reshape(5, 7) * 1000)
gdal.Translate(sys.argv[1], ds, format="Zarr", creationOptions=["BLOCKSIZE=3,4"])
"""


@pytest.mark.parametrize("order", ORDERS)
def test_real_mount_georeferencing_conventions(tmp_path, mounter, order) -> None:
    store = tmp_path / "geo.zarr"
    root = zarr.open_group(str(store), mode="w")
    gdal_made = subprocess.run(["/usr/bin/python3", "-c", GDAL_WRITE, str(store / "gdal")],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    assert gdal_made.returncode == 0, gdal_made.stderr
    crs_attr = json.loads((store / "gdal" / "gdal" / ".zattrs").read_text())["_CRS"]
    wkt, projjson = crs_attr["wkt"], crs_attr["projjson"]
    expect: dict[str, tuple] = {"gdal/gdal": ((500000, 30, 0, 4100000, 0, -30), wkt)}
    g = root.create_array("geozarr", shape=(6, 9), chunks=(4, 4), dtype="float32",
                          dimension_names=["lat", "lon"], fill_value=-9999.0,
                          attributes={"proj:code": "EPSG:4326",
                                      "spatial:dimensions": ["lat", "lon"],
                                      "spatial:transform": [0.5, 0, -10, 0, -0.25, 60]},
                          )  # fmt: skip
    g[:4] = sample("float32", (4, 9))  # the last chunk row stays missing
    expect["geozarr"] = ((-10.0, 0.5, 0, 60.0, 0, -0.25), "EPSG:4326")
    n = root.create_array("node", shape=(3, 4), chunks=(2, 3), dtype="int16",
                          dimension_names=["y", "x"],
                          attributes={"proj:wkt2": wkt, "spatial:dimensions": ["y", "x"],
                                      "spatial:registration": "node",
                                      "spatial:transform": [10, 0, 1e3, 0, -10, 2e3]})  # fmt: skip
    n[...] = sample("int16", (3, 4))
    expect["node"] = ((995, 10, 0, 2005, 0, -10), wkt)
    # CF: a 3-D variable with a grid mapping variable and regularly spaced coordinates
    cf = root.create_group("cf")
    crs = cf.create_array("crs", shape=(), dtype="int32", attributes={"crs_wkt": wkt})
    crs[...] = 0
    x = cf.create_array("x", shape=(6,), chunks=(4,), dtype="float64", dimension_names=["x"])
    x[...] = np.linspace(500015.0, 500165.0, 6)
    y = cf.create_array("y", shape=(5,), chunks=(5,), dtype="float64", dimension_names=["y"])
    y[...] = 4099985.0 - 30.0 * np.arange(5)
    t = cf.create_array(
        "t",
        shape=(3, 5, 6),
        chunks=(2, 2, 4),
        dtype="complex64",
        dimension_names=["time", "y", "x"],
        attributes={"grid_mapping": "crs"},
    )
    t[1:] = sample("complex64", (2, 5, 6))
    expect["cf/t"] = ((500000, 30, 0, 4100000, 0, -30), wkt)
    bent = cf.create_array("xb", shape=(6,), chunks=(6,), dtype="float64", dimension_names=["xb"])
    bent[...] = [0, 1, 2, 3, 4, 6]
    u = cf.create_array(
        "u",
        shape=(5, 6),
        chunks=(5, 6),
        dtype="uint8",
        dimension_names=["y", "xb"],
        attributes={"grid_mapping": "crs"},
    )
    u[...] = sample("uint8", (5, 6))
    expect["cf/u"] = (None, wkt)  # irregular x: the CRS but no geotransform
    pj = root.create_array("projjson", shape=(2, 3), chunks=(2, 2), dtype="float64",
                           dimension_names=["y", "x"],
                           attributes={"proj:projjson": projjson, "spatial:dimensions": ["y", "x"],
                                       "spatial:transform": [1, 0, 0, 0, -1, 2]})  # fmt: skip
    pj[...] = sample("float64", (2, 3))
    expect["projjson"] = ((0, 1, 0, 2, 0, -1), json.dumps(projjson))
    p = root.create_array("plain", shape=(4, 3), chunks=(3, 3), dtype="int64", fill_value=5)
    p[:3] = sample("int64", (3, 3))
    expect["plain"] = (None, None)

    m = mounter(store, "ro", f"byte_order={order}")
    cases = []
    for path, (_gt, srs) in expect.items():
        a = zarr.open_array(str(store / path))[...]
        cases.append({"vrt": m.path / path / "data.vrt", "values": a, "srs": srs,
                      "type": GDAL_TYPE[a.dtype.name]})  # fmt: skip
        info = json.loads((m.path / path / "info.json").read_text())
        assert "data.vrt" in info["views"]
    assert "data.vrt" not in os.listdir(m.path / "cf" / "x")  # 1-D: no VRT
    assert "data.vrt" in os.listdir(m.path / "cf" / "t")
    out = gdal_check(cases, tmp_path / "npy")
    version = gdal_version(out)
    for case, (path, (gt, srs)) in zip(cases, expect.items()):
        r = out[str(case["vrt"])]
        check_band_values(r, case["values"], case["type"], version)
        assert r["geotransform"] == (None if gt is None else [float(v) for v in gt]), path
        assert r["has_srs"] == (srs is not None), path
        if srs is not None:
            assert r["srs_same"], path
    text = (m.path / "plain" / "data.vrt").read_text()
    assert f"<ByteOrder>{'LSB' if order == 'little' else 'MSB'}</ByteOrder>" in text
    assert '<SourceFilename relativeToVRT="1">data.raw</SourceFilename>' in text


class Opts:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def read_all(f) -> bytes:
    h = f.open(write=False, truncate=False)
    try:
        return bytes(h.read(0, f.stat().size + 10))
    finally:
        h.release()


def test_tree_renders_anew_after_edits_and_holds_large_documents(tmp_path) -> None:
    store = tmp_path / "t.zarr"
    root = zarr.open_group(str(store), mode="w")
    big = root.create_array("big", shape=(2000, 2, 3), chunks=(500, 2, 3), dtype="uint8")
    img = root.create_array(
        "img",
        shape=(2, 3),
        chunks=(2, 3),
        dtype="int16",
        dimension_names=["y", "x"],
        attributes={"grid_mapping": "crs"},
    )
    crs = root.create_array("crs", shape=(), dtype="int32", attributes={"crs_wkt": "EPSG:3857"})
    x = root.create_array("x", shape=(3,), chunks=(3,), dtype="float64")
    y = root.create_array("y", shape=(2,), chunks=(2,), dtype="float64")
    x[...], y[...] = [10.0, 20.0, 30.0], [5.0, 3.0]
    t = open_tree(str(store), Opts(read_only=False, writeback=0))
    try:
        doc = read_all(t.lookup("big").lookup("data.vrt"))
        assert doc == vrt.vrt_document(big.dtype, big.shape, "little")
        assert len(doc) > 500_000 and doc.count(b"<VRTRasterBand") == 2000
        f = t.lookup("img").lookup("data.vrt")
        assert b"<GeoTransform>5, 10, 0, 6, 0, -2</GeoTransform>" in read_all(f)
        assert b"<SRS>EPSG:3857</SRS>" in read_all(f)
        # a coordinate array rewritten through the mount renders anew
        raw = t.lookup("x").lookup("data.raw")
        h = raw.open(write=True, truncate=False)
        h.write(0, np.array([100.0, 200.0, 300.0], "<f8").tobytes())
        h.release()
        assert b"<GeoTransform>50, 100, 0, 6, 0, -2</GeoTransform>" in read_all(f)
        # so does an edit of the grid-mapping variable's attributes (another client's)
        crs.attrs["crs_wkt"] = "EPSG:4326"
        t.lookup("crs").refresh()
        assert b"<SRS>EPSG:4326</SRS>" in read_all(f)
        # and a resize: the VRT follows, or goes when it can no longer describe the array
        t.lookup("big").lookup("data.raw").truncate(6 * 7)
        assert read_all(t.lookup("big").lookup("data.vrt")).count(b"<VRTRasterBand") == 7
        assert img is not None and crs is not None
    finally:
        t.close()


def test_real_mount_views_option_selects_the_format_views(tmp_path, mounter) -> None:
    store = tmp_path / "v.zarr"
    root = zarr.open_group(str(store), mode="w")
    root.create_array("img", shape=(3, 4), chunks=(2, 2), dtype="uint16")[...] = 7
    m = mounter(store, "ro", "views=data.nii:data.vrt")  # data.vrt needs data.raw: not shown
    assert [n for n in os.listdir(m.path / "img") if n.startswith("data.")] == ["data.nii"]
    assert json.loads((m.path / "img" / "info.json").read_text())["views"] == ["data.nii"]
    m2 = mounter(store, "ro", "views=data.raw:data.vrt", name="mnt2")
    assert sorted(n for n in os.listdir(m2.path / "img") if n.startswith("data.")) == [
        "data.raw", "data.vrt"]  # fmt: skip
    assert b'rasterXSize="4" rasterYSize="3"' in (m2.path / "img" / "data.vrt").read_bytes()
