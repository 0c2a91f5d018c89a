"""The bench's write measurements, a part of ``bench.Bench``: the full overwrite against the
peers and the daemon's peak RSS during it (rows 4, 5: ``overwrite``), where the overwrite's
time goes (``_overwrite_split``), the pyfuse3 write floor (``write_floor``,
``scripts/write_floor.py``) and the overwrite's ceiling here (``_overwrite_ceiling``, from
``bench_ceiling.encode_all`` and the floor's transport).

Invariants: every engine writes ``src.raw``'s bytes (read from the page cache) over the whole
array and ends with ``sync``, so the stores keep the same data for the rows after; the write
floor is measured at most once per run and its row added then; the disk is left out of the
ceiling. Imports only ``bench_machine``, ``bench_data``, ``bench_report``, ``bench_base`` and
``bench_ceiling`` / ``floorfs`` among the bench's modules.
"""

from __future__ import annotations

import json
import os
import time
from functools import partial
from pathlib import Path
from statistics import median

import numpy as np
from bench_base import BenchBase
from bench_ceiling import encode_all, memory_copy
from bench_data import ARRAY, ts_open, write_ts, zarr_open
from bench_machine import MiB, PeakRss, cat_file, rotated_rounds, sh, timed_then_sync
from bench_report import CEILING_TARGET, Row, mibps, unbounded_parts, within_ceiling
from floorfs import proc_cpu


class WritesMixin(BenchBase):
    """Rows 4 and 5 (overwrite), the overwrite's ceiling and the pyfuse3 write floor."""

    # -- 4, 5: full overwrite
    def overwrite(self, v: str, store: Path) -> None:
        n, src, reps = self.cfg.nbytes, self.base / "src.raw", self.args.repeat
        x = np.fromfile(src, dtype="<f4").reshape(self.cfg.shape)
        t: dict[str, list[float]] = {"zf": [], "zp": [], "ts": []}
        state = {"peak": 0, "checked": False, "identical": True}

        def zarrfs_dd() -> None:
            self.cold()
            cat_file(src)  # the source comes from the page cache for every engine
            with self.mount(store) as m:
                assert m.pid is not None
                rss = PeakRss(m.pid)
                dd = f"dd if='{src}' of='{m.mnt / ARRAY / 'data.raw'}' bs=1M conv=notrunc,fsync"
                t["zf"].append(timed_then_sync(partial(sh, dd + " status=none")))
                state["peak"] = max(state["peak"], rss.stop())
            if not state["checked"]:
                state["checked"] = True
                state["identical"] = bool(np.array_equal(zarr_open(store)[...], x))

        def zarr_python() -> None:
            self.cold()
            a = zarr_open(store, mode="r+")
            t["zp"].append(timed_then_sync(partial(a.__setitem__, Ellipsis, x)))

        def tensorstore() -> None:
            self.cold()
            ts_arr = ts_open(store)
            t["ts"].append(timed_then_sync(partial(write_ts, ts_arr, x)))

        rotated_rounds([zarrfs_dd, zarr_python, tensorstore], reps)
        peak, identical = state["peak"], state["identical"]
        split = self._overwrite_split(store, src)
        rate = {k: mibps(n, median(secs)) for k, secs in t.items()}
        floor = self.write_floor()
        r = Row("4. full overwrite (MiB/s)", v, rate["zf"], rate["zp"], rate["ts"],
                "≥ 1.0× best peer")  # fmt: skip
        r.met = (r.ratio or 0) >= 1.0
        r.notes = "; ".join(
            x
            for x in (
                "dd bs=1M conv=notrunc,fsync; all three + sync",
                f"pyfuse3 write floors: one real file {floor['file']:.0f} MiB/s, a buffer "
                f"(transport alone) {floor['memory']:.0f} MiB/s",
                "zarr-python reads back src.raw" if identical else "**read-back DIFFERS**",
                split,
                f"median of {reps}" if reps > 1 else "",
            )
            if x
        )
        self.add(r)
        self.add(self._rss_row("5. daemon peak RSS, overwrite (MiB)", v, peak))
        self._overwrite_ceiling(v, store, src, r)

    def _overwrite_ceiling(self, v: str, store: Path, src: Path, row: Row) -> None:
        """What a full overwrite can reach here (``bench_ceiling``): zarrfs' encode of every
        unit alone (from memory, into memory, one thread per CPU), the FUSE transport alone
        (the pyfuse3 write floor into a buffer), both overlapped perfectly: the longer of the
        two, and their CPU seconds spread over every core. The disk is left out."""
        reps = self.args.repeat
        mem = memory_copy(store)
        data = src.read_bytes()
        runs = []
        for _ in range(reps):
            self.gate.settle()
            runs.append(encode_all(mem, ARRAY, data))
        del data, mem
        # a ceiling is an upper bound: each part the fastest of its runs
        enc, enc_cpu = min(x.seconds for x in runs), min(x.cpu for x in runs)
        floor = self.write_floor()
        n, cores = self.cfg.nbytes, os.cpu_count() or 1
        fuse_s, fuse_cpu = n / MiB / floor["memory_best"], floor["memory_cpu_best"]
        both = max(enc, fuse_s, (enc_cpu + fuse_cpu) / cores)
        ceiling = mibps(n, both)
        r = Row("4. full overwrite: ceiling here (MiB/s)", v, row.zarrfs, row.zarr_python,
                row.tensorstore, CEILING_TARGET)  # fmt: skip
        to_ceiling = (row.zarrfs or 0.0) / ceiling
        unbounded = unbounded_parts({"encode": enc}, n, r.best_peer)
        r.met = (r.ratio or 0) >= 1.0 or (
            not unbounded and within_ceiling(row.zarrfs or 0.0, r.best_peer, ceiling)
        )
        r.notes = "; ".join(
            x
            for x in (
                f"ceiling {ceiling:.0f} MiB/s",
                f"zarrfs overwrite (row 4) = {to_ceiling:.2f}× the ceiling",
                f"encode alone {mibps(n, enc):.0f} MiB/s ({enc_cpu:.2f} s CPU; zarrfs' engine, "
                f"{cores} threads, store in memory)",
                f"the FUSE transport alone (write floor into a buffer) {floor['memory_best']:.0f} "
                f"MiB/s ({fuse_cpu:.2f} s CPU, the floor's server + dd)",
                f"both = max(encode, transport, CPU of both / {cores} cores) = {both:.2f} s",
                "the disk left out",
                f"each part the fastest of {reps}" if reps > 1 else "",
                *unbounded,
            )
            if x
        )
        self.add(r)

    def write_floor(self) -> dict[str, float]:
        """The pyfuse3 write floor (``scripts/write_floor.py``), measured once per run and
        reported as its own row: the same ``dd`` + ``sync`` into a pyfuse3 file system that
        stores each write in one real file as it comes (``file``; on the store's disk, fsynced
        on ``fsync``) or copies it into a buffer (``memory``). Medians of ``--repeat``, and
        for the ceilings the fastest ``memory`` run (``memory_best``) and its least CPU
        (``memory_cpu_best``)."""
        if self._write_floor is not None:
            return self._write_floor
        script = Path(__file__).parent / "write_floor.py"
        src = self.base / "src.raw"
        runs: dict[str, list[float]] = {"file": [], "memory": []}
        cpu: list[float] = []
        for _ in range(self.args.repeat):
            for kind in runs:
                self.cold()
                out = sh(f"'{self.args.python}' '{script}' '{src}' --kind {kind} "
                         f"--dir '{self.base}'").stdout  # fmt: skip
                runs[kind].append(json.loads(out)["mib_s"])
                if kind == "memory":
                    cpu.append(json.loads(out)["cpu_s"])
        self._write_floor = {k: median(v) for k, v in runs.items()}
        # for the overwrite ceilings, an upper bound: the fastest run and the least CPU
        self._write_floor["memory_best"] = max(runs["memory"])
        self._write_floor["memory_cpu_best"] = min(cpu)
        r = Row("4. full overwrite: pyfuse3 write floor (MiB/s)", "—", self._write_floor["file"])
        r.notes = "; ".join(
            x
            for x in (
                "scripts/write_floor.py: the same dd + sync into a pyfuse3 file system that "
                "pwrites each 1 MiB write into one real file on the store's disk, fsync on fsync",
                f"into a preallocated buffer instead (no disk): {self._write_floor['memory']:.0f}",
                f"median of {self.args.repeat}" if self.args.repeat > 1 else "",
            )
            if x
        )
        self.add(r)
        return self._write_floor

    def _overwrite_split(self, store: Path, src: Path) -> str:
        """One more (untimed for the row) overwrite with 1 MiB ``write``s, then ``fsync``, then
        ``close``: where the time of the overwrite goes, and the daemon's CPU seconds. Its load
        sample goes to the overwrite row it explains."""
        self.cold()
        cat_file(src)
        with self.mount(store) as m, open(src, "rb") as f:
            assert m.pid is not None
            cpu0 = proc_cpu(m.pid)
            fd = os.open(m.mnt / ARRAY / "data.raw", os.O_WRONLY)
            try:
                t0 = time.perf_counter()
                while piece := f.read(MiB):
                    os.write(fd, piece)
                t1 = time.perf_counter()
                os.fsync(fd)
                t2 = time.perf_counter()
            finally:
                os.close(fd)
            t3 = time.perf_counter()
            cpu = proc_cpu(m.pid) - cpu0
        return (
            f"split (one more pass, 1 MiB writes): write {t1 - t0:.2f} s, fsync {t2 - t1:.2f} s, "
            f"close {t3 - t2:.2f} s; daemon CPU {cpu:.2f} s"
        )
