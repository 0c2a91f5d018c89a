"""Real mounts of stores written by zarr-python and tensorstore, read with ordinary tools.

The interop corpus (every core codec chain incl. sharding x every data type, edge and missing
chunks; see tests/interop/corpus.py) is mounted read-only once, little- and big-endian; every
array's data.raw, data.npy and chunks/ files are compared with the numpy model, and a sample is
read with cat, dd, cmp, numpy.fromfile and numpy.memmap.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from math import prod
from pathlib import Path

import numpy as np
import pytest
from interop.corpus import CASES, Corpus, assert_same_bytes, build_corpus, ordered_bytes

pytestmark = pytest.mark.timeout(600)

GROUP = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'


@pytest.fixture(scope="module")
def mounted_corpus(tmp_path_factory, module_mounter):
    root = tmp_path_factory.mktemp("corpus")
    corpus = build_corpus(root)
    # the writers do not all create the intermediate groups: add them so the tree is explicit
    for case in CASES:
        parts = case.path.split("/")
        for i in range(len(parts)):
            p = root.joinpath(*parts[:i], "zarr.json")
            if not p.exists():
                p.write_bytes(GROUP)
    little = module_mounter(root, "ro", name="little")
    big = module_mounter(root, "ro", "byte_order=big", name="big")
    return corpus, little.path, big.path


def _ids():
    return [c.id for c in CASES]


@pytest.mark.parametrize("case_id", _ids())
def test_every_view_of_every_array(mounted_corpus, case_id):
    corpus, little, big = mounted_corpus
    arr = corpus.arrays[case_id]
    case, expected = arr.case, arr.expected
    d = little / case.path
    itemsize = expected.dtype.itemsize
    raw = (d / "data.raw").read_bytes()
    assert_same_bytes(raw, ordered_bytes(expected, "little"), itemsize, f"{case_id} data.raw")
    assert os.stat(d / "data.raw").st_size == expected.nbytes
    npy = np.load(d / "data.npy", mmap_mode="r")
    assert npy.shape == expected.shape
    assert npy.tobytes() == ordered_bytes(expected, "little")
    braw = (big / case.path / "data.raw").read_bytes()
    assert_same_bytes(braw, ordered_bytes(expected, "big"), itemsize, f"{case_id} big data.raw")
    info = json.loads((d / "info.json").read_text())
    assert info["shape"] == list(expected.shape)
    # chunks/: every chunk file, in-bounds part equals the model; the file has full chunk shape
    chunk_shape = tuple(info["chunk_file_shape"])
    grid = tuple(info["grid_shape"])
    names = sorted(os.listdir(d / "chunks"))
    assert len(names) == prod(grid)
    for idx in np.ndindex(*grid) if grid else [()]:
        name = ".".join(map(str, idx)) if idx else "0"
        data = (d / "chunks" / name).read_bytes()
        assert len(data) == prod(chunk_shape) * itemsize
        chunk = np.frombuffer(data, dtype=expected.dtype.newbyteorder("<")).reshape(chunk_shape)
        region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunk_shape))
        want = expected[region]
        got = chunk[tuple(slice(0, n) for n in want.shape)]
        assert got.tobytes() == ordered_bytes(want, "little"), f"{case_id} chunk {name}"


def _sample(corpus: Corpus, n: int) -> list[str]:
    rng = random.Random(7)
    ids = [c.id for c in CASES if c.shape_case.name == "3d"]
    return rng.sample(ids, n)


def test_ordinary_tools_read_the_same_bytes(mounted_corpus, tmp_path):
    corpus, little, _ = mounted_corpus
    for case_id in _sample(corpus, 12):
        arr = corpus.arrays[case_id]
        raw = little / arr.case.path / "data.raw"
        want = tmp_path / "want.raw"
        want.write_bytes(ordered_bytes(arr.expected, "little"))
        assert subprocess.run(["cmp", str(want), str(raw)]).returncode == 0, case_id
        cat = subprocess.run(["cat", str(raw)], capture_output=True, check=True).stdout
        assert cat == want.read_bytes()
        # dd at an odd offset and length, through the page cache and with O_DIRECT
        for flags in ([], ["iflag=direct"]):
            dd = subprocess.run(
                ["dd", f"if={raw}", "bs=1", "skip=13", "count=101", "status=none", *flags],
                capture_output=True,
                check=True,
            ).stdout
            assert dd == want.read_bytes()[13:114], (case_id, flags)
        dt = arr.expected.dtype.newbyteorder("<")
        fromfile = np.fromfile(raw, dtype=dt).reshape(arr.expected.shape)
        assert fromfile.tobytes() == want.read_bytes()
        mm = np.memmap(raw, dtype=dt, mode="r", shape=arr.expected.shape)
        assert mm.tobytes() == want.read_bytes()
        del mm


def test_random_preads_at_any_offset(mounted_corpus):
    corpus, little, _ = mounted_corpus
    rng = random.Random(11)
    for case_id in _sample(corpus, 20):
        arr = corpus.arrays[case_id]
        want = ordered_bytes(arr.expected, "little")
        for flags in (os.O_RDONLY, os.O_RDONLY | os.O_DIRECT):
            fd = os.open(little / arr.case.path / "data.raw", flags)
            try:
                for _ in range(25):
                    off = rng.randrange(0, len(want) + 5)
                    n = rng.randrange(0, 300)
                    assert os.pread(fd, n, off) == want[off : off + n], (case_id, off, n)
            finally:
                os.close(fd)


HEADERS = ("data.hdr", "data.mhd", "data.nhdr")


def test_tree_and_xattrs(mounted_corpus):
    corpus, little, _ = mounted_corpus
    case = next(c for c in CASES if c.shape_case.name == "3d" and c.chain.name == "shard-end")
    d = little / case.path
    assert sorted(os.listdir(d)) == sorted(
        ["attributes.json", "chunks", "data.npy", "data.raw", "info.json", "zarr.json"]
        + [
            v
            for v in (*HEADERS, "data.nii", "data.vrt", "data.tif", "data.btf")
            if (d / v).exists()
        ]  # fmt: skip
    )
    xattrs = {k: os.getxattr(d / "data.raw", k).decode() for k in os.listxattr(d / "data.raw")}
    assert json.loads(xattrs["user.zarr.shape"]) == [7, 13, 5]
    assert xattrs["user.zarr.byte_order"] == "little"
    st = os.stat(d / "data.raw")
    info = json.loads((d / "info.json").read_text())
    assert info["shard_shape"] == [6, 8, 5]
    assert st.st_blocks == -(-info["stored_bytes"] // 512)
    assert (d / "zarr.json").read_bytes() == (
        Path(corpus.root) / case.path / "zarr.json"
    ).read_bytes()
    served = len((d / "data.raw").read_bytes())
    stats = json.loads((little / ".zarrfs" / "stats.json").read_text())
    assert stats["arrays"][case.path]["bytes_served"] >= served
    with pytest.raises(OSError) as err:
        (d / "data.raw").open("r+b")
    assert err.value.errno == 30  # EROFS
