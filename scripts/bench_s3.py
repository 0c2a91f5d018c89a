#!/usr/bin/env python3
"""Throughput of a full read of a compressed array from a loopback S3 server (moto, in its own
process): through a zarrfs mount (``data.raw``), through the zarrfs core without FUSE, and with
zarr-python's own store class (``zarr.storage.ObjectStore`` over obstore's ``S3Store``), all in
the same run against the same objects.

    .venv/bin/python scripts/bench_s3.py [--mib 64] [--chunk 512] [--repeat 3]

Every trial starts cold (a fresh mount, a fresh store and caches). The array is float32,
blosc(lz4, shuffle) compressed, C order; the numbers are decoded MiB per second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from remote.motoserver import CREDENTIALS, MotoProcess, upload_tree  # noqa: E402


def make_array(path: Path, mib: int, chunk: int) -> np.ndarray:
    import zarr
    from zarr.codecs import BloscCodec

    side = int((mib * (1 << 20) // 4) ** 0.5)
    y, x = np.mgrid[0:side, 0:side].astype("float32")
    rng = np.random.default_rng(0)
    data = (np.sin(x / 50) * np.cos(y / 70) * 100 + rng.normal(0, 1, (side, side))).astype("f4")
    group = zarr.open_group(store=str(path), mode="w", zarr_format=3)
    array = group.create_array(
        "data",
        shape=data.shape,
        chunks=(chunk, chunk),
        dtype="float32",
        compressors=BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
    )
    array[...] = data
    return data


def is_mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def read_through_mount(url: str, endpoint: str, mnt: Path, nbytes: int) -> bytes:
    mnt.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "zarrfs", "mount", url, str(mnt), "-f", "-o",
           f"ro,endpoint={endpoint},log_level=warning"]  # fmt: skip
    proc = subprocess.Popen(cmd, env={**os.environ, **CREDENTIALS})
    try:
        deadline = time.monotonic() + 60
        while not is_mounted(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("zarrfs did not mount")
            time.sleep(0.05)
        out = bytearray(nbytes)
        view = memoryview(out)
        with open(mnt / "data" / "data.raw", "rb", buffering=0) as f:
            got = 0
            while got < nbytes:
                n = f.readinto(view[got : got + (16 << 20)])
                if not n:
                    break
                got += n
        return bytes(out[:got])
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def read_core(url: str, endpoint: str) -> bytes:
    from zarrfs.core.hierarchy import Hierarchy
    from zarrfs.core.stores.registry import open_store

    store = open_store(url, read_only=True, endpoint=endpoint)
    try:
        array = Hierarchy(store).array("data")
        return array.read(0, array.nbytes)
    finally:
        store.close()


def read_zarr_python(bucket: str, prefix: str, endpoint: str) -> np.ndarray:
    import zarr
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    backend = S3Store(
        bucket,
        prefix=prefix,
        endpoint=endpoint,
        access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region=CREDENTIALS["AWS_REGION"],
        client_options={"allow_http": True},
    )
    group = zarr.open_group(store=ObjectStore(backend, read_only=True), mode="r")
    return group["data"][...]


def timed(label: str, repeat: int, nbytes: int, run: Callable[[], object],
          check: Callable[[object], bool]) -> list[float]:  # fmt: skip
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - started
        if not check(result):
            raise SystemExit(f"{label}: wrong data")
        rates.append(nbytes / (1 << 20) / elapsed)
    print(f"{label:<34} best {max(rates):7.1f} MiB/s   median {statistics.median(rates):7.1f}"
          f" MiB/s   ({', '.join(f'{r:.0f}' for r in rates)})", flush=True)  # fmt: skip
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="decoded array size (MiB)")
    parser.add_argument("--chunk", type=int, default=512, help="chunk edge (elements)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(CREDENTIALS)
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-") as tmp, MotoProcess() as moto:
        work = Path(tmp)
        data = make_array(work / "local.zarr", args.mib, args.chunk)
        expected = data.tobytes()
        nbytes = len(expected)
        bucket = moto.new_bucket("bench")
        upload_tree(moto.client(), bucket, "store.zarr", work / "local.zarr")
        stored = sum(p.stat().st_size for p in (work / "local.zarr").rglob("*") if p.is_file())
        url = f"s3://{bucket}/store.zarr"
        print(f"array {data.shape} float32 = {nbytes / (1 << 20):.0f} MiB decoded, "
              f"{stored / (1 << 20):.1f} MiB stored in {args.chunk}x{args.chunk} chunks; "
              f"moto at {moto.endpoint}; {os.cpu_count()} CPUs", flush=True)  # fmt: skip
        timed("zarrfs mount, read data.raw", args.repeat, nbytes,
              lambda: read_through_mount(url, moto.endpoint, work / "mnt", nbytes),
              lambda got: got == expected)  # fmt: skip
        timed("zarrfs core, ZarrArray.read", args.repeat, nbytes,
              lambda: read_core(url, moto.endpoint), lambda got: got == expected)  # fmt: skip
        timed("zarr-python ObjectStore(S3Store)", args.repeat, nbytes,
              lambda: read_zarr_python(bucket, "store.zarr", moto.endpoint),
              lambda got: np.array_equal(got, data))  # fmt: skip


if __name__ == "__main__":
    main()
