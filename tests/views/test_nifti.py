"""``data.nii`` read by nibabel.

Tier 1 writes ``header + data.raw bytes`` (the file the mount serves) for every NIfTI data
type x shapes 1-D..5-D and 7-D x both byte orders and loads it with nibabel. Tier 2 drives the
tree without a kernel (presence, OME-NGFF affine, NIfTI-Zarr headers, renders following a
metadata edit). Tier 3 mounts stores written by zarr-python (edge and missing chunks) and reads
``data.nii`` with nibabel: shape, affine, values, NIfTI-2 for a long axis, writes through the
data region read back by zarr-python, header writes refused.
"""

from __future__ import annotations

import base64
import errno
import io
import json
import os
from math import prod

import nibabel as nib
import niizarr
import numpy as np
import pytest
import zarr
from view_samples import sample

from zarrfs.core.errors import InvalidWriteError, NodeNotFound
from zarrfs.views import nifti
from zarrfs.views.headers import view_dtype
from zarrfs.views.tree import open_tree

pytestmark = pytest.mark.timeout(300)

NIFTI_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                "uint64", "float32", "float64", "complex64", "complex128"]  # fmt: skip
ABSENT_DTYPES = ["float16", "V3"]
SHAPES = [(7,), (3, 5), (2, 3, 5), (1, 4, 1), (2, 2, 3, 5), (2, 1, 2, 3, 5), (2, 1, 2, 1, 3, 1, 2)]
ORDERS = ["little", "big"]


def load(data: bytes) -> nib.Nifti1Image:
    """nibabel's image of a complete single-file NIfTI-1 or NIfTI-2 byte string."""
    size = int.from_bytes(data[:4], "little")
    two = 540 in (size, int.from_bytes(data[:4], "big"))
    klass = nib.Nifti2Image if two else nib.Nifti1Image
    return klass.from_bytes(data)


def check_image(data: bytes, a: np.ndarray, order: str) -> nib.Nifti1Image:
    """nibabel reads ``data`` as exactly ``a`` (x fastest), in the mount's byte order."""
    img = load(data)
    hdr = img.header
    offset = int(np.frombuffer(data[108:112], "<f4" if order == "little" else ">f4")[0])
    if isinstance(hdr, nib.Nifti2Header):
        offset = int(np.frombuffer(data[168:176], "<i8" if order == "little" else ">i8")[0])
    assert offset % 16 == 0 and len(data) == offset + a.nbytes
    assert hdr.endianness == ("<" if order == "little" else ">")
    assert img.shape == tuple(reversed(a.shape))
    got = np.asarray(img.dataobj.get_unscaled())
    exp = a.view(np.uint8) if a.dtype.kind == "b" else a
    assert got.dtype.newbyteorder("=") == exp.dtype.newbyteorder("=")
    assert np.array_equal(got.transpose(), exp)
    return img


# ----------------------------------------------------------------------------- tier 1


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", NIFTI_DTYPES + ABSENT_DTYPES)
def test_every_type_and_rank_reads_back_in_nibabel(dtype, order) -> None:
    for shape in SHAPES:
        a = sample(dtype, shape)
        head = nifti.nifti_header(a.dtype, a.shape, order)
        if dtype in ABSENT_DTYPES:
            assert head is None
            continue
        assert head is not None and len(head) == 352 == nifti.plain_prefix_size(shape)
        img = check_image(head + a.astype(view_dtype(a.dtype, order)).tobytes(), a, order)
        assert img.header["qform_code"] == img.header["sform_code"] == 0


def test_rank_and_size_limits() -> None:
    i2 = np.dtype("i2")
    assert nifti.nifti_header(i2, (), "little") is None
    assert nifti.nifti_header(i2, (2,) * 8, "little") is None
    assert nifti.nifti_header(i2, (3, 0, 2), "little") is None
    one = nifti.nifti_header(i2, (3, 32767), "little")
    two = nifti.nifti_header(i2, (1, 32768), "big")
    assert one is not None and len(one) == 352 and one[344:347] == b"n+1"
    assert two is not None and len(two) == 544 and two[4:7] == b"n+2"
    assert nifti.plain_prefix_size((1, 32768)) == 544
    a = np.zeros((1, 32768), ">i2")
    a[0, -1] = -3
    img = check_image(two + a.tobytes(), a, "big")
    assert img.header.sizeof_hdr == 540


def ome_attrs(
    scales: dict[str, list[float]], translation: list[float] | None = None, rank: int = 4
) -> dict:
    """OME-NGFF 0.4 multiscales over (t, z, y, x) (the last ``rank`` of them); the multiscale
    level scales axis 0 by 2."""
    axes = [{"name": "t", "type": "time", "unit": "millisecond"},
            {"name": "z", "type": "space", "unit": "micrometer"},
            {"name": "y", "type": "space", "unit": "micrometer"},
            {"name": "x", "type": "space", "unit": "micrometer"}][4 - rank :]  # fmt: skip
    datasets = []
    for path, scale in scales.items():
        ct: list[dict] = [{"type": "scale", "scale": scale}]
        if translation is not None:
            ct.append({"type": "translation", "translation": translation})
        datasets.append({"path": path, "coordinateTransformations": ct})
    outer = [{"type": "scale", "scale": [2.0] + [1.0] * (rank - 1)}]
    ms = {"version": "0.4", "axes": axes, "datasets": datasets, "coordinateTransformations": outer}
    return {"multiscales": [ms]}


def test_ome_ngff_voxel_sizes_units_and_affine() -> None:
    attrs = ome_attrs({"0": [1.5, 0.5, 0.25, 0.125]}, [0, 10, 20, 30])
    axes = nifti.ome_axes(attrs, "0", 4)
    assert axes is not None and [a.scale for a in axes] == [3.0, 0.5, 0.25, 0.125]
    a = sample("uint16", (2, 3, 4, 5))
    head = nifti.nifti_header(a.dtype, a.shape, "little", axes)
    img = check_image(head + a.tobytes(), a, "little")
    exp = np.diag([0.125, 0.25, 0.5, 1.0])
    exp[:3, 3] = [30, 20, 10]
    assert np.allclose(img.affine, exp) and np.allclose(
        img.header.get_zooms(), [0.125, 0.25, 0.5, 3.0]
    )
    assert img.header.get_xyzt_units() == ("micron", "msec")
    assert img.header["qform_code"] == img.header["sform_code"] == 2
    # a dataset the group does not list, or malformed transformations: no OME geometry
    assert nifti.ome_axes(attrs, "1", 4) is None
    flat = nifti.ome_axes(ome_attrs({"0": [1.0, 0.0, 1.0, 1.0]}), "0", 4)
    img = check_image(nifti.nifti_header(a.dtype, a.shape, "big", flat) + a.astype(">u2").tobytes(),
                      a, "big")  # fmt: skip
    assert img.header["sform_code"] == 0
    bad = ome_attrs({"0": [1.0, 2.0]})
    assert nifti.ome_axes(bad, "0", 4) is None


def test_ome_metadata_that_cannot_apply_gives_no_geometry() -> None:
    """Group attributes are free-form: values no transformation can hold leave the header
    without OME geometry instead of failing it (which failed ``ls`` of the group's arrays)."""
    huge = ome_attrs({"0": [1.0, 10**400, 1.0, 1.0]})  # JSON may spell such an integer
    assert nifti.ome_axes(huge, "0", 4) is None
    shifted = ome_attrs({"0": [1.0, 1.0, 1.0, 1.0]}, [0, -(10**400), 0, 0])
    assert nifti.ome_axes(shifted, "0", 4) is None
    for datasets in (5, None, True):
        odd = ome_attrs({"0": [1.0] * 4})
        odd["multiscales"][0]["datasets"] = datasets
        assert nifti.ome_axes(odd, "0", 4) is None


def nifti_zarr_header(shape_xyz: tuple[int, ...]) -> tuple[bytes, np.ndarray]:
    """A header as a NIfTI file of that shape carries (rotated affine, description, intent)."""
    affine = np.array([[0.0, -0.8, 0.0, 12.0], [0.9, 0.0, 0.0, -4.0],
                       [0.0, 0.0, 1.1, 7.5], [0, 0, 0, 1]])  # fmt: skip
    img = nib.Nifti1Image(np.zeros(shape_xyz, np.float32), affine)
    img.header["descrip"] = b"nifti-zarr level 0"
    img.header.set_intent("estimate", name="T1")
    img.header.set_xyzt_units("mm", "sec")
    img.header.extensions.append(nib.nifti1.Nifti1Extension("comment", b"kept"))
    buf = io.BytesIO()
    img.header["vox_offset"] = 352 + img.header.extensions.get_sizeondisk()
    img.header.write_to(buf)
    return buf.getvalue(), affine


def test_nifti_zarr_header_is_served_and_scaled_per_level() -> None:
    raw, affine = nifti_zarr_header((6, 4, 2))
    stored = nifti.parse_stored_header(raw)
    assert stored is not None
    attrs = ome_attrs({"0": [1, 1.1, 0.9, 0.8], "1": [1, 2.2, 1.8, 1.6]})
    a0 = nifti.ome_axes(attrs, "0", 4)
    a1 = nifti.ome_axes(attrs, "1", 4)
    for order in ORDERS:
        a = sample("int16", (1, 2, 4, 6))
        head = nifti.nifti_header(a.dtype, a.shape, order, a0, stored, a0)
        img = check_image(head + a.astype(view_dtype(a.dtype, order)).tobytes(), a, order)
        assert np.allclose(img.affine, affine, atol=1e-6)
        assert img.header["descrip"] == b"nifti-zarr level 0"
        assert img.header.get_intent()[0] == "estimate" and img.header["intent_name"] == b"T1"
        assert [e.get_content() for e in img.header.extensions] == [b"kept"]
        half = nifti.nifti_header(a.dtype, (1, 1, 2, 3), order, a1, stored, a0)
        b = sample("int16", (1, 1, 2, 3))
        img1 = check_image(half + b.astype(view_dtype(b.dtype, order)).tobytes(), b, order)
        assert np.allclose(img1.affine[:3, :3], affine[:3, :3] * 2, atol=1e-6)
        assert np.allclose(img1.affine[:3, 3], affine[:3, 3], atol=1e-5)
    assert nifti.parse_stored_header(b"\0" * 348) is None
    b64 = {"nifti": {"base64": base64.b64encode(raw).decode()}}
    assert nifti.stored_header_bytes(b64) == raw
    assert nifti.stored_header_bytes({"nifti": {"base64": "!!"}}) is None


# ----------------------------------------------------------------------------- tier 2


class Opts:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def read_all(f) -> bytes:
    h = f.open(write=False, truncate=False)
    try:
        return bytes(h.read(0, f.stat().size + 10))
    finally:
        h.release()


def test_tree_presence_info_and_renders_following_edits(tmp_path) -> None:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    specs = {"img": ("int16", (2, 3, 5)), "half": ("float16", (3, 5)), "scalar": ("float32", ()),
             "empty": ("uint8", (0, 5)), "r8": ("uint8", (2,) * 8)}  # fmt: skip
    for name, (dtype, shape) in specs.items():
        a = root.create_array(
            name, shape=shape, dtype=dtype, chunks=tuple(max(n, 1) for n in shape)
        )
        if prod(shape) and dtype != "float16":
            a[...] = sample(dtype, shape)
    t = open_tree(str(tmp_path / "s.zarr"), Opts(read_only=False, writeback=0))
    try:
        for name in specs:
            d = t.lookup(name)
            info = json.loads(read_all(d.lookup("info.json")))
            assert ("data.nii" in d.names()) == (name == "img") == ("data.nii" in info["views"])
            assert (d.lookup("data.nii") is None) == (name != "img")
        f = t.lookup("img").lookup("data.nii")
        before = load(read_all(f))
        assert before.header["sform_code"] == 0
        # a group metadata edit (OME-NGFF scales) renders the header anew
        g = zarr.open_group(str(tmp_path / "s.zarr"), mode="a")
        g.attrs.put(ome_attrs({"img": [1.5, 2.0, 0.5]}, rank=3))
        t.refresh()  # close-to-open: what a lookup in the group does
        after = load(read_all(t.lookup("img").lookup("data.nii")))
        assert np.allclose(np.diag(after.affine)[:3], [0.5, 2.0, 3.0])
        # a resize renders anew; an array NIfTI cannot describe has none
        raw = t.lookup("img").lookup("data.raw")
        raw.truncate(4 * 3 * 5 * 2)
        assert load(read_all(f)).shape == (5, 3, 4)
        raw.truncate(0)
        with pytest.raises(NodeNotFound):
            f.stat()
        # header bytes are generated: rewriting them with other bytes is refused
        raw.truncate(2 * 3 * 5 * 2)
        h = f.open(write=True, truncate=False)
        with pytest.raises(InvalidWriteError, match="generated header"):
            h.write(0, b"\x01")
        size = f.stat().size
        with pytest.raises(InvalidWriteError, match="fixed-size"):
            h.write(size - 1, b"\x00\x00\x00")  # past the end: data.nii never grows
        with pytest.raises(InvalidWriteError):
            f.truncate(size + 60)  # nor resizes the array
        f.truncate(size)  # the size it has: O_TRUNC-style no-op
        head = read_all(f)[:352]
        assert h.write(0, head + b"\x07\x00") == 354  # identical header + data: accepted
        h.release()
        assert zarr.open_array(str(tmp_path / "s.zarr/img"))[0, 0, 0] == 7
    finally:
        t.close()
    t = open_tree(str(tmp_path / "s.zarr"), Opts(read_only=True, views=["data.raw"]))
    try:
        assert t.lookup("img").lookup("data.nii") is None
    finally:
        t.close()
    # data.vrt points at data.raw: not shown without it; data.nii is self-contained
    t = open_tree(str(tmp_path / "s.zarr"), Opts(read_only=True, views=["data.nii", "data.vrt"]))
    try:
        assert t.lookup("img").names()[:3] == ["attributes.json", "chunks", "data.nii"]
        assert t.lookup("img").lookup("data.vrt") is None
    finally:
        t.close()


# ----------------------------------------------------------------------------- tier 3


@pytest.mark.parametrize("order", ORDERS)
def test_real_mount_nibabel_reads_data_nii(tmp_path, mounter, order) -> None:
    store = tmp_path / "m.zarr"
    root = zarr.open_group(str(store), mode="w")
    expected = {}
    layouts = {(7,): (3,), (5, 6): (2, 4), (3, 4, 5): (2, 3, 2), (2, 3, 4, 5): (1, 2, 3, 2),
               (2, 1, 3, 4, 5): (1, 1, 2, 3, 3)}  # fmt: skip
    for i, dtype in enumerate(NIFTI_DTYPES):
        shape = list(layouts)[i % len(layouts)]
        a = root.create_array(f"a{i}", shape=shape, chunks=layouts[shape], dtype=dtype,
                              fill_value=1, compressors=zarr.codecs.ZstdCodec())  # fmt: skip
        a[: max(1, shape[0] - 1)] = sample(dtype, shape)[
            : max(1, shape[0] - 1)
        ]  # last rows missing
        expected[f"a{i}"] = a[...]
    # an OME-NGFF image: the affine of each level from its scales and translation
    img = zarr.open_group(str(store / "ome"), mode="w")
    img.attrs.put(ome_attrs({"0": [1, 0.5, 0.25, 0.125], "1": [1, 1.0, 0.5, 0.25]},
                            [0, 1.0, 2.0, 3.0]))  # fmt: skip
    for level, shape in (("0", (2, 4, 6, 8)), ("1", (2, 2, 3, 4))):
        a = img.create_array(level, shape=shape, chunks=(1, 2, 2, 3), dtype="float32")
        a[...] = sample("float32", shape)
    m = mounter(store, "ro", f"byte_order={order}")
    for name, a in expected.items():
        data = (m.path / name / "data.nii").read_bytes()
        check_image(data, a, order)
        fd = os.open(m.path / name / "data.nii", os.O_RDONLY | os.O_DIRECT)
        try:  # past the page cache, in odd pieces that straddle the header's end
            got = b"".join(os.pread(fd, 300, off) for off in range(0, len(data), 300))
        finally:
            os.close(fd)
        assert got == data
    for level, s in (("0", 1.0), ("1", 2.0)):
        data = (m.path / "ome" / level / "data.nii").read_bytes()
        got = check_image(data, zarr.open_array(str(store / "ome" / level))[...], order)
        exp = np.diag([0.125 * s, 0.25 * s, 0.5 * s, 1.0])
        exp[:3, 3] = [3.0, 2.0, 1.0]
        assert np.allclose(got.affine, exp)
        assert np.isclose(got.header.get_zooms()[3], 2.0)  # the multiscale-level time scale
    info = json.loads((m.path / "a0" / "info.json").read_text())
    assert "data.nii" in info["views"] and "data.nii" in os.listdir(m.path / "a0")


def test_real_mount_nifti_zarr_nifti2_writes_and_refused_header(tmp_path, mounter) -> None:
    store = tmp_path / "w.zarr"
    root = zarr.open_group(str(store), mode="w")
    # NIfTI-Zarr 1.0: the header is a 'nifti' array of bytes beside the levels
    g = root.create_group("mri")
    g.attrs.put(ome_attrs({"0": [1, 1.1, 0.9, 0.8]}))
    raw, affine = nifti_zarr_header((6, 4, 2))
    hdr = g.create_array("nifti", shape=(len(raw),), chunks=(len(raw),), dtype="uint8")
    hdr[...] = np.frombuffer(raw, np.uint8)
    vol = g.create_array("0", shape=(1, 2, 4, 6), chunks=(1, 1, 3, 4), dtype="float32")
    vol[...] = sample("float32", (1, 2, 4, 6))
    # a sparse array with an axis beyond NIfTI-1's 16-bit dims: NIfTI-2
    long = root.create_array("long", shape=(3, 70000), chunks=(1, 8192), dtype="uint8",
                             fill_value=0)  # fmt: skip
    long[2, -2:] = [9, 10]
    w = root.create_array("w", shape=(3, 7, 6), chunks=(2, 4, 4), dtype="int32", fill_value=-1)
    w[0] = sample("int32", (7, 6))
    m = mounter(store, "rw", "byte_order=big")
    data = (m.path / "mri" / "0" / "data.nii").read_bytes()
    img = check_image(data, vol[...], "big")
    assert np.allclose(img.affine, affine, atol=1e-6)
    assert img.header["descrip"] == b"nifti-zarr level 0"
    img2 = load((m.path / "long" / "data.nii").read_bytes())
    assert isinstance(img2.header, nib.Nifti2Header) and img2.shape == (70000, 3)
    assert np.asarray(img2.dataobj)[-2:, 2].tolist() == [9, 10]
    assert not np.asarray(img2.dataobj)[:-2].any()
    # writes into the data region re-encode chunks; header bytes are refused
    path = m.path / "w" / "data.nii"
    head = 352
    fd = os.open(path, os.O_RDWR)
    try:
        new = (np.arange(7 * 6).reshape(7, 6) * 3).astype(">i4")
        assert os.pwrite(fd, new.tobytes(), head + 2 * 7 * 6 * 4) == new.nbytes
        with pytest.raises(OSError) as exc:
            os.pwrite(fd, b"n+2\0", 344)
        assert exc.value.errno == errno.EINVAL
        os.fsync(fd)
    finally:
        os.close(fd)
    again = zarr.open_array(str(store / "w"))
    assert np.array_equal(again[2], new) and np.array_equal(again[0], sample("int32", (7, 6)))
    assert (again[1] == -1).all()
    assert "generated header and cannot change" in m.log()
    assert check_image(path.read_bytes(), again[...], "big").shape == (6, 7, 3)


def test_tree_serves_a_draft_nifti_zarr_base64_header(tmp_path) -> None:
    raw, affine = nifti_zarr_header((5, 3, 2))
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    attrs = ome_attrs({"0": [1, 1.1, 0.9, 0.8]})
    g.attrs.put(attrs | {"nifti": {"base64": base64.b64encode(raw).decode(), "magic": "n+1"}})
    a = g.create_array("0", shape=(1, 2, 3, 5), chunks=(1, 2, 2, 2), dtype="uint16")
    a[...] = sample("uint16", (1, 2, 3, 5))
    t = open_tree(str(tmp_path / "d.zarr"), Opts(read_only=True, byte_order="big"))
    try:
        img = check_image(read_all(t.lookup("0").lookup("data.nii")), a[...], "big")
        assert np.allclose(img.affine, affine, atol=1e-6)
        assert img.header.get_intent()[0] == "estimate"
    finally:
        t.close()


def test_real_mount_serves_the_header_of_a_niizarr_image(tmp_path, mounter) -> None:
    """A NIfTI file converted by the NIfTI-Zarr reference implementation (``niizarr``, the
    ``nifti-zarr`` package) comes back through the mount as the same NIfTI image."""
    affine = np.array([[0.0, -0.8, 0.0, 12.0], [0.9, 0.0, 0.0, -4.0],
                       [0.0, 0.0, 1.1, 7.5], [0, 0, 0, 1]])  # fmt: skip
    data = np.arange(40 * 36 * 20 * 2, dtype=np.float32).reshape(40, 36, 20, 2) - 7.25
    src = nib.Nifti1Image(data, affine)
    src.header["descrip"] = b"converted by niizarr"
    src.header.set_xyzt_units("mm", "sec")
    src.header["pixdim"][4] = 2.5
    nib.save(src, tmp_path / "in.nii")
    niizarr.nii2zarr(str(tmp_path / "in.nii"), str(tmp_path / "out.nii.zarr"), chunk=16,
                     nb_levels=2)  # fmt: skip
    m = mounter(tmp_path / "out.nii.zarr", "ro", "byte_order=big")
    img = load((m.path / "0" / "data.nii").read_bytes())
    assert img.shape == data.shape and np.array_equal(np.asarray(img.dataobj), data)
    assert np.allclose(img.affine, affine, atol=1e-6)
    assert img.header["descrip"] == b"converted by niizarr" and img.header.endianness == ">"
    assert np.allclose(img.header.get_zooms(), [0.9, 0.8, 1.1, 2.5])
    assert img.header.get_xyzt_units() == ("mm", "sec")
    # level 1: the level-0 transform rescaled by the OME-NGFF scales, as zarr2nii does
    ms = json.loads((tmp_path / "out.nii.zarr" / "zarr.json").read_text())["attributes"]["ome"]
    ds = ms["multiscales"][0]["datasets"]

    def phys(d: dict) -> np.ndarray:
        p = np.eye(4)
        p[[0, 1, 2], [0, 1, 2]] = d["coordinateTransformations"][0]["scale"][:0:-1]
        p[:3, 3] = d["coordinateTransformations"][1]["translation"][:0:-1]
        return p

    level1 = zarr.open_array(str(tmp_path / "out.nii.zarr" / "1"))[...]
    img1 = load((m.path / "1" / "data.nii").read_bytes())
    assert img1.shape == level1.shape[::-1]
    assert np.array_equal(np.asarray(img1.dataobj), level1.transpose())
    exp = affine @ np.linalg.inv(phys(ds[0])) @ phys(ds[1])
    assert np.allclose(img1.affine, exp, atol=1e-5)
    assert np.isclose(img1.header.get_zooms()[3], 2.5)
