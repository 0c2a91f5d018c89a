"""Writes through a real mount: ordinary tools write, the store is read back by zarr-python and
tensorstore and compared with a numpy model of the writes."""

from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

pytestmark = pytest.mark.timeout(300)

CHAINS = {
    "gzip": dict(compressors=[zarr.codecs.GzipCodec(level=1)]),
    "blosc-crc": dict(
        compressors=[zarr.codecs.BloscCodec(cname="zstd"), zarr.codecs.Crc32cCodec()]
    ),
    "sharded": dict(shards=(16, 32, 32), compressors=[zarr.codecs.BloscCodec(cname="lz4")]),
    "transpose": dict(
        filters=[zarr.codecs.TransposeCodec(order=[2, 0, 1])], compressors=[zarr.codecs.ZstdCodec()]
    ),
}
SHAPE, CHUNKS = (24, 40, 36), (8, 16, 16)


def make_store(root: Path, fill=0.0) -> dict[str, np.ndarray]:
    g = zarr.open_group(str(root), mode="w")
    models = {}
    rng = np.random.default_rng(1)
    for name, kw in CHAINS.items():
        a = g.create_array(name, shape=SHAPE, chunks=CHUNKS, dtype="<f4", fill_value=fill, **kw)
        data = rng.random(SHAPE, dtype="f4")
        a[:12] = data[:12]
        models[name] = a[...]
    return models


def read_back(root: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    z = zarr.open_array(str(root / name), mode="r")[...]
    t = (
        ts.open(
            {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root / name) + "/"}},
            open=True,
        )
        .result()
        .read()
        .result()
    )
    return z, np.asarray(t)


def assert_store_equals(root: Path, name: str, model: np.ndarray) -> None:
    z, t = read_back(root, name)
    assert z.shape == model.shape and t.shape == model.shape
    assert z.tobytes() == model.tobytes(), f"{name}: zarr-python disagrees with the model"
    assert t.tobytes() == model.tobytes(), f"{name}: tensorstore disagrees with the model"


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "w.zarr"
    return root, make_store(root)


@pytest.mark.parametrize("name", list(CHAINS))
def test_pwrite_any_offset_then_unmount(store, mounter, name):
    root, models = store
    model = models[name].copy()
    flat = model.reshape(-1).view(np.uint8)
    m = mounter(root, "writeback=0")
    raw = m.path / name / "data.raw"
    rng = np.random.default_rng(5)
    fd = os.open(raw, os.O_RDWR)
    try:
        for _ in range(60):
            off = int(rng.integers(0, flat.size - 1))
            n = int(rng.integers(1, min(70000, flat.size - off)))
            data = rng.integers(0, 255, n, dtype=np.uint8)
            data[: n - n % 4].view("<f4")[np.isnan(data[: n - n % 4].view("<f4"))] = 0
            assert os.pwrite(fd, data.tobytes(), off) == n
            flat[off : off + n] = data
        # read-your-writes before any flush
        assert os.pread(fd, flat.size, 0) == flat.tobytes()
        os.fsync(fd)
    finally:
        os.close(fd)
    # a whole chunk set to the fill value is deleted from the store
    zero = np.zeros(CHUNKS, "<f4")
    m_chunk = m.path / name / "chunks"
    if name != "sharded":
        (m_chunk / "2.0.0").write_bytes(zero.tobytes())
        model[16:24, 0:16, 0:16] = 0
    assert m.unmount() == 0
    assert_store_equals(root, name, model)
    if name != "sharded":
        assert not (root / name / "c" / "2" / "0" / "0").exists()


def test_cp_tofile_and_shell_redirect_overwrite_in_place(store, mounter, tmp_path):
    root, models = store
    m = mounter(root, "writeback=0")
    new = np.random.default_rng(2).random(SHAPE, dtype="f4")
    src = tmp_path / "new.raw"
    new.tofile(src)
    subprocess.run(["cp", str(src), str(m.path / "gzip" / "data.raw")], check=True)
    new.tofile(m.path / "blosc-crc" / "data.raw")  # numpy opens with O_TRUNC
    subprocess.run(["sh", "-c", f"cat {src} > {m.path}/sharded/data.raw"], check=True)
    for name in ("gzip", "blosc-crc", "sharded"):
        assert os.stat(m.path / name / "data.raw").st_size == new.nbytes
        assert (m.path / name / "data.raw").read_bytes() == new.tobytes()
    # the data part of data.npy: np.save of an equal-shaped array rewrites the same header
    np.save(m.path / "transpose" / "data.npy", new)
    assert np.load(m.path / "transpose" / "data.npy").tobytes() == new.tobytes()
    assert m.unmount() == 0
    for name in CHAINS:
        assert_store_equals(root, name, new)


def test_truncate_and_growth_resize_axis0(store, mounter):
    root, models = store
    m = mounter(root, "writeback=0")
    raw = m.path / "gzip" / "data.raw"
    row = 40 * 36 * 4
    os.truncate(raw, 10 * row)  # shrink to 10 rows
    assert os.stat(raw).st_size == 10 * row
    with open(raw, "r+b") as f:  # write past the end: grows to 30 rows, gap = fill
        f.seek(29 * row)
        f.write(np.full(40 * 36, 7, "<f4").tobytes())
    for bad in (10 * row + 4, 1):
        with pytest.raises(OSError) as err:
            os.truncate(raw, bad)
        assert err.value.errno == errno.EINVAL
    assert m.unmount() == 0
    model = np.zeros((30, 40, 36), "f4")
    model[:10] = models["gzip"][:10]
    model[29] = 7
    assert_store_equals(root, "gzip", model)
    assert json.loads((root / "gzip" / "zarr.json").read_text())["shape"] == [30, 40, 36]


def test_mmap_writes_persist(store, mounter):
    root, models = store
    m = mounter(root, "writeback=0")
    raw = m.path / "sharded" / "data.raw"
    mm = np.memmap(raw, dtype="<f4", mode="r+", shape=SHAPE)
    mm[3:5, 10:30, 5:9] = 42.5
    mm.flush()
    del mm
    with open(raw, "r+b") as f:
        with mmap.mmap(f.fileno(), 0) as mp:
            mp[0:4] = np.float32(-1.25).tobytes()
            mp.flush()
    model = models["sharded"].copy()
    model[3:5, 10:30, 5:9] = 42.5
    model[0, 0, 0] = -1.25
    assert m.unmount() == 0
    assert_store_equals(root, "sharded", model)


@pytest.mark.skipif(shutil.which("vim.tiny") is None, reason="vim.tiny is not installed")
def test_metadata_edit_with_vim(store, mounter):
    """vim writes a swap file and renames its new file over the view; the edit is taken."""
    root, _ = store
    m = mounter(root, "writeback=0")
    d = m.path / "gzip"
    (d / "attributes.json").write_text('{"units": "degC"}')
    vim = ["vim.tiny", "-E", "-s", "-n", "-c", "%s/degC/kelvin/", "-c", "wq"]
    subprocess.run([*vim, str(d / "attributes.json")], check=True, timeout=30)
    assert json.loads((d / "attributes.json").read_text()) == {"units": "kelvin"}
    assert not [n for n in os.listdir(d) if n.endswith((".swp", "~"))]


def test_metadata_edits_with_editors(store, mounter):
    root, _ = store
    m = mounter(root, "writeback=0")
    d = m.path / "gzip"
    (d / "attributes.json").write_text('{"units": "K", "n": 1}')
    subprocess.run(["sed", "-i", 's/"K"/"degC"/', str(d / "attributes.json")], check=True)
    subprocess.run(
        [
            "sh",
            "-c",
            f"jq '.n = 2' {d}/attributes.json > {d}/tmp.json"
            f" && mv {d}/tmp.json {d}/attributes.json",
        ],
        check=True,
    )
    assert json.loads((d / "attributes.json").read_text()) == {"units": "degC", "n": 2}
    assert not [n for n in os.listdir(d) if n.startswith("tmp")]
    # refused edits: invalid JSON, data type change; a log line says why; nothing changes
    with pytest.raises(OSError) as err:
        with open(d / "attributes.json", "w") as f:
            f.write("{broken")
    assert err.value.errno == errno.EINVAL
    doc = json.loads((d / "zarr.json").read_text())
    doc["data_type"] = "float64"
    with pytest.raises(OSError) as err:
        with open(d / "zarr.json", "w") as f:
            f.write(json.dumps(doc))
    assert err.value.errno == errno.EINVAL
    assert "re-encoding" in m.log()
    # a shape change through zarr.json resizes
    doc = json.loads((d / "zarr.json").read_text())
    doc["shape"] = [12, 40, 36]
    (d / "zarr.json").write_text(json.dumps(doc, indent=2))
    assert os.stat(d / "data.raw").st_size == 12 * 40 * 36 * 4
    # deleting views is refused
    with pytest.raises(OSError) as err:
        os.unlink(d / "data.raw")
    assert err.value.errno == errno.EPERM
    # mkdir makes a group; an array zarr.json written into it makes an array
    os.mkdir(m.path / "newgroup")
    os.mkdir(m.path / "newgroup" / "arr")
    arr_doc = json.loads((d / "zarr.json").read_text())
    arr_doc["shape"] = [4, 5, 6]
    arr_doc["attributes"] = {}
    (m.path / "newgroup" / "arr" / "zarr.json").write_text(json.dumps(arr_doc))
    new = np.arange(120, dtype="<f4").reshape(4, 5, 6)
    with open(m.path / "newgroup" / "arr" / "data.raw", "r+b") as f:
        f.write(new.tobytes())
    assert m.unmount() == 0
    assert zarr.open_array(str(root / "gzip")).attrs["units"] == "degC"
    assert zarr.open_array(str(root / "gzip")).shape == (12, 40, 36)
    assert zarr.open_array(str(root / "gzip")).dtype == np.float32
    assert (zarr.open_array(str(root / "newgroup" / "arr"))[...] == new).all()


def test_read_only_mount_gives_erofs(store, mounter):
    root, _ = store
    m = mounter(root, "ro")
    for target in ("gzip/data.raw", "gzip/attributes.json", "gzip/chunks/0.0.0"):
        with pytest.raises(OSError) as err:
            open(m.path / target, "r+b")
        assert err.value.errno == errno.EROFS
    with pytest.raises(OSError) as err:
        os.mkdir(m.path / "x")
    assert err.value.errno == errno.EROFS


def test_close_to_open_sees_other_writers(store, mounter):
    root, models = store
    m = mounter(root)
    raw = m.path / "gzip" / "data.raw"
    assert raw.read_bytes() == models["gzip"].tobytes()
    z = zarr.open_array(str(root / "gzip"), mode="r+")
    z.resize((20, 40, 36))
    z[0] = 5.0
    # open() revalidates the metadata: the new shape and the new chunk contents are seen
    data = raw.read_bytes()
    assert len(data) == 20 * 40 * 36 * 4
    assert (
        np.frombuffer(data, "<f4").reshape(20, 40, 36)[0].tolist()
        == np.full((40, 36), 5.0).tolist()
    )


def hold_a_write_across(root, m, change, then=None) -> np.ndarray:
    """Write row 0 of ``gzip`` through the mount (held in memory: ``writeback=0``), let
    another process ``change`` the array, open ``data.npy`` (close-to-open revalidation),
    call ``then(fd, model)``, and close; returns the model of what was written."""
    model = zarr.open_array(str(root / "gzip"))[...]
    fd = os.open(m.path / "gzip" / "data.raw", os.O_RDWR)
    try:
        model[0] = 5.0
        os.pwrite(fd, model[0].tobytes(), 0)
        change(zarr.open_array(str(root / "gzip"), mode="r+"))
        time.sleep(1.1)  # past the attribute timeout: the next open asks the daemon
        with open(m.path / "gzip" / "data.npy", "rb") as f:  # open: close-to-open check
            f.read(16)
        if then is not None:
            then(fd, model)
    finally:
        os.close(fd)
    return model


def test_writes_held_in_memory_survive_a_metadata_change_by_another_process(store, mounter):
    """Another process changes the array's metadata (an attribute) while the mount holds
    writes not yet stored; a view opened then revalidates the node. The writes stay the
    array's: what ``close`` stored is all of them (before, the array object holding them was
    dropped, and ``close`` returned 0 over data that was never stored)."""
    root, _ = store
    m = mounter(root, "writeback=0")  # nothing stored behind the test's back

    def write_row_1(fd: int, model: np.ndarray) -> None:
        model[1] = 6.0
        os.pwrite(fd, model[1].tobytes(), model[0].nbytes)

    def add_attribute(other) -> None:
        other.attrs["by"] = "another process"

    model = hold_a_write_across(root, m, add_attribute, write_row_1)
    assert (m.path / "gzip" / "data.raw").read_bytes() == model.tobytes()
    assert m.unmount() == 0
    assert_store_equals(root, "gzip", model)
    assert zarr.open_array(str(root / "gzip")).attrs["by"] == "another process"


def test_writes_held_in_memory_are_stored_before_a_resize_by_another_process(store, mounter):
    """Another process resizes the array while the mount holds writes not yet stored: the
    mount stores them before it takes the new shape, so none is lost."""
    root, _ = store
    m = mounter(root, "writeback=0")
    model = hold_a_write_across(root, m, lambda other: other.resize((30, *SHAPE[1:])))
    grown = np.zeros((30, *SHAPE[1:]), dtype="<f4")
    grown[: SHAPE[0]] = model
    assert (m.path / "gzip" / "data.raw").read_bytes() == grown.tobytes()
    assert m.unmount() == 0
    assert_store_equals(root, "gzip", grown)


TRUNCATE_ROUNDS = 200
WRITER = """
import os, sys, numpy as np
raw, stop, row = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = 0
fd = os.open(raw, os.O_RDWR)
try:
    while not os.path.exists(stop):
        os.pwrite(fd, np.full(row // 4, n, dtype="<f4").tobytes(), (n % 4) * row)
        os.fsync(fd)
        n += 1
finally:
    os.close(fd)
print(n)
"""
TRUNCATER = """
import os, sys
raw, rows, row, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for n in range(rounds):
    os.truncate(raw, (rows // 2 + n % 3) * row)
    os.truncate(raw, rows * row)
"""


@pytest.mark.parametrize("name", ["gzip", "sharded"])
def test_truncate_while_another_process_writes_and_fsyncs(mounter, tmp_path, name):
    """``truncate`` of data.raw to fewer rows and back, 200 rounds, while another process
    writes and fsyncs in a loop: resize and flush take the array's locks in one order, so
    neither process hangs (they used to deadlock within a few rounds)."""
    root = tmp_path / "store"
    make_store(root)
    m = mounter(root, "writeback=0.05")
    raw = m.path / name / "data.raw"
    row = SHAPE[1] * SHAPE[2] * 4
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(raw), str(stop), str(row)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    truncater = subprocess.Popen(
        [sys.executable, "-c", TRUNCATER, str(raw), str(SHAPE[0]), str(row), str(TRUNCATE_ROUNDS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        try:
            _, err = truncater.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            pytest.fail("truncate hung while another process wrote and fsynced (deadlock)")
        assert truncater.returncode == 0, err.decode()
        stop.touch()
        try:
            out, err = writer.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the writer's fsync hung after the truncates ended (deadlock)")
        assert writer.returncode == 0, err.decode()
        writes = int(out)
    finally:
        for p in (writer, truncater):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert writes > 0
    assert m.unmount() == 0
    got = zarr.open_array(str(root / name), mode="r")[...]
    assert got.shape == SHAPE
    # the writer's last value of each of its rows; the rows cut off and grown back are fill
    for r in range(min(4, writes)):
        last = max(n for n in range(writes) if n % 4 == r)
        assert (got[r] == last).all()
    assert (got[SHAPE[0] // 2 :] == 0).all()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs under the store")
def test_a_full_disk_is_enospc_from_fsync_and_close(tmp_path, mounter):
    """A directory store on a file system that fills up: ``dd``'s ``fsync`` and ``close`` say
    ENOSPC ("No space left on device"), as NFS reports it at close, not a bare EIO."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3M", "tmpfs", str(disk)], check=True)
    try:
        g = zarr.open_group(str(disk / "store"), mode="w")
        g.create_array("a", shape=(8 << 20,), dtype="u1", chunks=(1 << 20,), compressors=None)
        m = mounter(disk / "store")
        result = subprocess.run(
            ["dd", "if=/dev/urandom", f"of={m.path / 'a' / 'data.raw'}", "bs=1M", "count=8",
             "conv=notrunc,fsync"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode != 0
        assert "No space left on device" in result.stderr, result.stderr
        assert "Input/output error" not in result.stderr, result.stderr
        m.unmount()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
