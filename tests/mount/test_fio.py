"""fio verify workloads against data.raw of a compressed and a sharded array, persistence
through unmount/remount, and crash consistency (SIGKILL of the daemon during fsync'd writes).

Recipes: ../shared/TESTING.md §1.2 (files of fixed size: no create, no fallocate, no unlink).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import force_unmount

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        shutil.which("fio") is None, reason="fio is installed by scripts/setup.sh --test"
    ),
]

SHAPE, CHUNKS = (32, 256, 256), (8, 64, 64)  # 8 MiB of float32, 64 KiB chunks


def make_store(root: Path) -> None:
    g = zarr.open_group(str(root), mode="w")
    g.create_array(
        "gzip",
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="<f4",
        compressors=[zarr.codecs.GzipCodec(level=1), zarr.codecs.Crc32cCodec()],
    )
    g.create_array(
        "sharded",
        shape=SHAPE,
        chunks=CHUNKS,
        shards=(16, 128, 128),
        dtype="<f4",
        compressors=[zarr.codecs.BloscCodec(cname="lz4")],
    )


def fio(
    cwd: Path, filename: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    cmd = [
        "fio",
        "--name=v",
        f"--filename={filename}",
        "--allow_file_create=0",
        "--fallocate=none",
        "--randseed=42",
        "--verify_fatal=1",
        "--verify_dump=0",
        *args,
    ]
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    if check and res.returncode != 0:
        raise AssertionError(
            f"fio failed ({res.returncode}): {' '.join(cmd)}\n{res.stdout}\n{res.stderr}"
        )
    return res


def decodes_everywhere(root: Path, name: str) -> np.ndarray:
    """Every stored object decodes: zarr-python reads the whole array and zarrfs check passes."""
    data = zarr.open_array(str(root / name), mode="r")[...]
    res = subprocess.run(
        [sys.executable, "-m", "zarrfs", "check", str(root)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return data


WORKLOADS = {
    "randwrite-crc32c": [
        "--ioengine=psync",
        "--rw=randwrite",
        "--bs=4k",
        "--io_size=4m",
        "--verify=crc32c",
        "--verify_backlog=64",
    ],
    "randrw-unaligned-md5": [
        "--ioengine=psync",
        "--rw=randrw",
        "--rwmixread=30",
        "--bsrange=512-128k",
        "--verify=md5",
        "--verify_backlog=32",
        "--io_size=6m",
    ],
    "direct-unaligned": [
        "--ioengine=psync",
        "--direct=1",
        "--rw=randwrite",
        "--bsrange=1k-100k",
        "--bs_unaligned=1",
        "--verify=crc32c",
        "--io_size=4m",
    ],
    "mmap": ["--ioengine=mmap", "--rw=randwrite", "--bs=4k", "--verify=crc32c", "--io_size=2m"],
    "pattern-offset": [
        "--ioengine=psync",
        "--rw=randwrite",
        "--bs=4k",
        "--verify=pattern",
        "--verify_pattern=%o",
        "--io_size=2m",
    ],
}


@pytest.mark.parametrize("array", ["gzip", "sharded"])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_fio_verify(tmp_path, mounter, array, workload):
    root = tmp_path / "s.zarr"
    make_store(root)
    m = mounter(root, "writeback=1")
    fio(tmp_path, m.path / array / "data.raw", *WORKLOADS[workload])
    assert m.unmount() == 0
    decodes_everywhere(root, array)


@pytest.mark.parametrize("array", ["gzip", "sharded"])
def test_fio_persists_through_remount(tmp_path, mounter, array):
    root = tmp_path / "s.zarr"
    make_store(root)
    job = [
        "--ioengine=psync",
        "--rw=randwrite",
        "--bs=4k",
        "--verify=crc32c",
        "--randseed=11",
        "--io_size=4m",
    ]
    m = mounter(root, name="m1")
    fio(tmp_path, m.path / array / "data.raw", *job, "--do_verify=0")
    assert m.unmount() == 0
    subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=False)
    m2 = mounter(root, name="m2")
    fio(tmp_path, m2.path / array / "data.raw", *job, "--verify_only")
    assert m2.unmount() == 0
    decodes_everywhere(root, array)


@pytest.mark.parametrize("array", ["gzip", "sharded"])
def test_kill_9_during_fsynced_writes(tmp_path, mounter, array):
    # O_SYNC writes (--sync=1): write() returns only after the kernel's fsync, so every write fio
    # counts as done is durable. (With --fsync=1 fio counts a write done before its fsync, and a
    # kill between the two legitimately loses that block.)
    root = tmp_path / "s.zarr"
    make_store(root)
    job = [
        "--ioengine=psync",
        "--rw=randwrite",
        "--bs=4k",
        "--verify=crc32c",
        "--randseed=23",
        "--io_size=64m",
        "--sync=1",
        "--rate=2m",
    ]
    m = mounter(root, name="m1")
    res = fio(
        tmp_path,
        m.path / array / "data.raw",
        *job,
        "--do_verify=0",
        "--verify_state_save=1",
        "--trigger-timeout=3",
        f"--trigger=kill -9 {m.pid}",
        check=False,
    )
    m.proc.wait(30)
    assert m.proc.returncode == -9
    force_unmount(m)
    states = list(tmp_path.glob("*verify.state"))
    assert states, res.stdout + res.stderr
    # every stored object still decodes
    decodes_everywhere(root, array)
    m2 = mounter(root, name="m2")
    # every fsync'd block is there
    fio(tmp_path, m2.path / array / "data.raw", *job[:-2], "--verify_only", "--verify_state_load=1")
    assert m2.unmount() == 0
