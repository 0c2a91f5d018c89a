"""``zarrfs demo``: build a small sample store, mount it, use it with ordinary tools, unmount.

The sample store (written by zarrfs' own engine) holds a group with four arrays, each with a
different codec chain: blosc/zstd, gzip + crc32c, sharding with an inner blosc/lz4 chain, and
transpose + zstd. Every command the demo runs is printed with its output, so the transcript
shows what a user would type.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ARRAYS: dict[str, dict[str, Any]] = {
    "temperature": dict(
        shape=[24, 180, 360],
        chunks=[8, 90, 90],
        dtype="float32",
        fill=-9999.0,
        codecs=[
            {"name": "bytes", "configuration": {"endian": "little"}},
            {
                "name": "blosc",
                "configuration": {
                    "cname": "zstd",
                    "clevel": 3,
                    "shuffle": "shuffle",
                    "typesize": 4,
                    "blocksize": 0,
                },
            },
        ],
        dims=["time", "lat", "lon"],
    ),
    "salinity": dict(
        shape=[64, 256],
        chunks=[16, 128],
        dtype="float64",
        fill="NaN",
        codecs=[
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "gzip", "configuration": {"level": 1}},
            {"name": "crc32c"},
        ],
        dims=["depth", "station"],
    ),
    "mask": dict(
        shape=[256, 256],
        chunks=[128, 128],
        dtype="uint8",
        fill=0,
        codecs=[
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [32, 32],
                    "codecs": [
                        {"name": "bytes"},
                        {
                            "name": "blosc",
                            "configuration": {
                                "cname": "lz4",
                                "clevel": 5,
                                "shuffle": "noshuffle",
                                "typesize": 1,
                                "blocksize": 0,
                            },
                        },
                    ],
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                    "index_location": "end",
                },
            }
        ],
        dims=None,
    ),
    "labels": dict(
        shape=[100, 60],
        chunks=[32, 32],
        dtype="int16",
        fill=0,
        codecs=[
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "big"}},
            {"name": "zstd", "configuration": {"level": 3, "checksum": True}},
        ],
        dims=["y", "x"],
    ),
}


def sample_data(name: str) -> np.ndarray:
    spec = ARRAYS[name]
    shape = tuple(spec["shape"])
    idx = np.indices(shape, dtype=np.float64)
    if name == "temperature":
        t, lat, lon = idx
        return (15 + 10 * np.cos(np.radians(lat - 90)) + np.sin(lon / 20 + t / 4)).astype("f4")
    if name == "salinity":
        d, s = idx
        return 35 + d / 64 + np.sin(s / 10)
    if name == "mask":
        y, x = idx
        return ((y - 128) ** 2 + (x - 128) ** 2 < 90**2).astype("u1")
    y, x = idx
    return ((y // 10) * 10 + x // 10).astype("i2")


def build_store(path: Path) -> None:
    """Write the sample store at ``path`` with zarrfs' own engine."""
    from zarrfs.core.hierarchy import Hierarchy, create_array
    from zarrfs.core.metadata.v3 import parse_v3
    from zarrfs.core.stores.local import LocalStore

    path.mkdir(parents=True, exist_ok=True)
    store = LocalStore(path)
    group = (
        b'{\n  "zarr_format": 3,\n  "node_type": "group",\n'
        b'  "attributes": {"title": "zarrfs demo ocean"}\n}'
    )
    Hierarchy(store).save_metadata("", parse_v3(group))
    for name, spec in ARRAYS.items():
        doc = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": spec["shape"],
            "data_type": spec["dtype"],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": spec["chunks"]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": spec["fill"],
            "codecs": spec["codecs"],
            "attributes": {},
        }
        if spec["dims"]:
            doc["dimension_names"] = spec["dims"]
        arr = create_array(store, name, doc)
        arr.write(0, sample_data(name).astype(arr.dtype.newbyteorder("<")).tobytes())
        arr.flush()


#: the Debian package that provides each optional program the demo runs
PACKAGES = {"getfattr": "attr", "findmnt": "util-linux", "od": "coreutils", "cmp": "diffutils"}


def run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess[str] | None:
    """Run ``cmd`` and print it with its output, as a transcript. A program that is not
    installed is reported in one line and skipped (``None``); the demo goes on."""
    print(f"$ {shlex.join(cmd)}", flush=True)
    if shutil.which(cmd[0]) is None:
        pkg = PACKAGES.get(cmd[0])
        hint = f" (Debian package {pkg})" if pkg else ""
        print(f"# {cmd[0]} is not installed{hint}: skipped", flush=True)
        return None
    res = subprocess.run(cmd, text=True, capture_output=True)
    out = (res.stdout + res.stderr).rstrip()
    if out:
        print(out, flush=True)
    if check and res.returncode != 0:
        raise SystemExit(f"demo: command failed with exit status {res.returncode}")
    return res


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zarrfs demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="work directory (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="zarrfs-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    store, mnt = work / "ocean.zarr", work / "mnt"
    if store.exists():
        shutil.rmtree(store)
    mnt.mkdir(exist_ok=True)
    zarrfs = [sys.executable, "-m", "zarrfs"]
    print(f"# building a sample store at {store}", flush=True)
    build_store(store)
    run([*zarrfs, "info", str(store)])
    run([*zarrfs, "mount", str(store), str(mnt)])
    try:
        run(["findmnt", "-n", "-o", "TARGET,SOURCE,FSTYPE,OPTIONS", str(mnt)], check=False)
        run(["ls", "-l", str(mnt), str(mnt / "temperature")])
        run(["du", "-sh", "--apparent-size", str(mnt / "temperature" / "data.raw")])
        run(["du", "-sh", str(mnt / "temperature" / "data.raw")])
        run(["cat", str(mnt / "temperature" / "info.json")])
        run(["od", "-A", "d", "-t", "f4", "-N", "16", str(mnt / "temperature" / "data.raw")])
        run(["getfattr", "-d", str(mnt / "temperature" / "data.raw")], check=False)
        run(["ls", str(mnt / "mask" / "chunks")])
        code = (
            "import numpy as np, sys\n"
            "a = np.load(sys.argv[1] + '/temperature/data.npy', mmap_mode='r')\n"
            "print('data.npy', a.shape, a.dtype, 'temperature[0, 45, :4] =', a[0, 45, :4])\n"
            "m = np.fromfile(sys.argv[1] + '/mask/data.raw', dtype='u1').reshape(256, 256)\n"
            "print('mask pixels set:', int(m.sum()))\n"
        )
        run([sys.executable, "-c", code, str(mnt)])
        expected = work / "temperature.expected.raw"
        sample_data("temperature").astype("<f4").tofile(expected)
        run(["cmp", str(expected), str(mnt / "temperature" / "data.raw")])
        print("# data.raw is byte-identical to the array written", flush=True)
        run(["sh", "-c", f'echo \'{{"units": "degC"}}\' > {mnt}/temperature/attributes.json'])
        run(["cat", str(mnt / "temperature" / "attributes.json")])
        run(["cat", str(mnt / ".zarrfs" / "stats.json")])
    finally:
        try:
            run([*zarrfs, "umount", str(mnt)], check=False)
        except OSError:  # the terminal went away (``zarrfs demo | head``): unmount all the same
            subprocess.run([*zarrfs, "umount", str(mnt)], capture_output=True)
    if not args.keep and not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    print("# demo finished: mounted, read with ordinary tools, unmounted", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
