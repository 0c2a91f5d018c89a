"""Read-your-writes under churn: a seeded random sequence of pread, pwrite, mmap reads and
writes, fsync, reopen and remount against data.raw of compressed and sharded arrays, compared
after every step with an in-memory model; buffered and O_DIRECT.

On failure the message gives the seed and the command that replays exactly that run:
    ZARRFS_CHURN_SEED=<seed> .venv/bin/python -m pytest tests/mount/test_churn.py -k '<case>'
"""

from __future__ import annotations

import mmap
import os
import random

import numpy as np
import pytest
import zarr

pytestmark = pytest.mark.timeout(600)

SHAPE, CHUNKS = (20, 30, 40), (7, 8, 16)
ARRAYS = {
    "zstd": dict(compressors=[zarr.codecs.ZstdCodec(level=1)]),
    "sharded": dict(
        shards=(14, 16, 32),
        compressors=[zarr.codecs.BloscCodec(cname="lz4"), zarr.codecs.Crc32cCodec()],
    ),
}
STEPS = int(os.environ.get("ZARRFS_CHURN_STEPS", "250"))


def seeds() -> list[int]:
    fixed = os.environ.get("ZARRFS_CHURN_SEED")
    return [int(fixed)] if fixed else [1, 2]


class Churn:
    def __init__(self, mounter, root, name, direct, seed):
        self.mounter, self.root, self.name, self.direct = mounter, root, name, direct
        self.rng = random.Random(seed)
        self.mounts = 0
        self.model = bytearray((root / "model.bin").read_bytes())
        self.log: list[str] = []
        self.remount()

    def remount(self):
        if self.mounts:
            self.close()
            assert self.m.unmount() == 0
        self.mounts += 1
        self.m = self.mounter(self.root / "s.zarr", "writeback=0.5", name=f"mnt{self.mounts}")
        self.path = self.m.path / self.name / "data.raw"
        self.open()

    def open(self):
        flags = os.O_RDWR | (os.O_DIRECT if self.direct else 0)
        self.fd = os.open(self.path, flags)

    def close(self):
        os.close(self.fd)

    def span(self, maximum=50_000):
        off = self.rng.randrange(0, len(self.model))
        return off, self.rng.randrange(1, min(maximum, len(self.model) - off) + 1)

    def check(self, got: bytes, off: int, what: str):
        want = bytes(self.model[off : off + len(got)])
        if got != want:
            at = next(i for i in range(len(got)) if got[i] != want[i])
            raise AssertionError(f"{what}: mismatch at byte {off + at} after steps {self.log[-5:]}")

    def step(self):
        op = self.rng.choices(
            ["pread", "pwrite", "mmap_read", "mmap_write", "fsync", "reopen", "remount"],
            weights=[30, 30, 8, 8, 8, 6, 2],
        )[0]
        self.log.append(op)
        if op == "pread":
            off, n = self.span()
            self.check(os.pread(self.fd, n, off), off, "pread")
        elif op == "pwrite":
            off, n = self.span()
            data = self.rng.randbytes(n)
            assert os.pwrite(self.fd, data, off) == n
            self.model[off : off + n] = data
        elif op in ("mmap_read", "mmap_write"):
            with open(self.path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mp:
                off, n = self.span(20_000)
                if op == "mmap_read":
                    self.check(mp[off : off + n], off, "mmap read")
                else:
                    data = self.rng.randbytes(n)
                    mp[off : off + n] = data
                    mp.flush()
                    self.model[off : off + n] = data
        elif op == "fsync":
            os.fsync(self.fd)
        elif op == "reopen":
            self.close()
            self.open()
        else:
            self.remount()

    def finish(self):
        self.check(os.pread(self.fd, len(self.model), 0), 0, "final read")
        self.close()
        assert self.m.unmount() == 0
        z = zarr.open_array(str(self.root / "s.zarr" / self.name), mode="r")[...]
        self.check(z.astype("<f4").tobytes(), 0, "zarr-python read of the store")


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "odirect"])
@pytest.mark.parametrize("name", list(ARRAYS))
def test_churn(tmp_path, mounter, name, direct, seed):
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    a = g.create_array(name, shape=SHAPE, chunks=CHUNKS, dtype="<f4", fill_value=0, **ARRAYS[name])
    data = np.random.default_rng(seed).random(SHAPE, dtype="f4")
    a[:10] = data[:10]
    (tmp_path / "model.bin").write_bytes(a[...].astype("<f4").tobytes())
    churn = Churn(mounter, tmp_path, name, direct, seed)
    case = f"{name} and {'odirect' if direct else 'buffered'} and {seed}"
    try:
        for _ in range(STEPS):
            churn.step()
        churn.finish()
    except AssertionError as exc:
        raise AssertionError(
            f"churn failed (seed {seed}): {exc}\nreplay: ZARRFS_CHURN_SEED={seed} "
            f".venv/bin/python -m pytest tests/mount/test_churn.py -k '{case}'"
        ) from None
