"""The bench's read measurements, a part of ``bench.Bench``: the plain file ``src.raw`` read
cold and warm (``raw_reference``, once per run: the rates rows 1, 2 and 10 compare with, and
the CPU capacity); per variant the sequential reads and the daemon's peak RSS (rows 1, 2, 5:
``sequential``), the random 4 KiB reads (row 3: ``random_reads``), the TIFF view (row 8:
``tiff_read``), ``group.nc`` through netCDF4-python (row 9: ``netcdf_read``), and the ceiling
of a cold read here (row 10: ``ceiling``, from ``bench_ceiling``). Row 1's ``cat`` notes also
say where one more cold read waits (``bench_stalls``).

Invariants: ``raw_reference`` runs before the rows that compare with the plain file, and
``ceiling`` after ``sequential`` of the same variant (it reports row 1's rates); a row that
reads the whole array through the mount compares the bytes with the plain file's and says so
in its notes, never raising; the ceiling is used only where its serving pass loaded no unit.
Imports only ``bench_machine``, ``bench_data``, ``bench_report``, ``bench_base``,
``bench_stalls`` and ``bench_ceiling`` / ``floorfs`` among the bench's modules.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import tifffile
from bench_base import BenchBase
from bench_ceiling import decode_all, fill_backwards, memory_copy, parallel_capacity
from bench_data import ARRAY, read_all_ts, read_all_zarr, ts_open, zarr_open
from bench_machine import (
    MiB,
    Mount,
    PeakRss,
    cat_file,
    cat_files,
    log,
    pct,
    rotated_rounds,
    sh,
    timed,
)
from bench_report import (
    CEILING_TARGET,
    Row,
    fromfile_target,
    mibps,
    rounds_note,
    unbounded_parts,
    within_ceiling,
)
from bench_stalls import analyse, describe, disk_of, timed_pieces
from floorfs import children_cpu, proc_cpu, proc_times


class ReadsMixin(BenchBase):
    """Rows 1, 2, 3, 5 (reads), 8, 9 and 10, and the plain-file reference."""

    # -- plain raw file reference (once)
    def raw_reference(self) -> None:
        src = self.base / "src.raw"
        cold, warm, np_cold = [], [], []
        for _ in range(self.args.repeat):
            self.cold()
            cold.append(cat_file(src))
            warm.append(cat_file(src))
            self.cold()
            np_cold.append(timed(lambda: np.fromfile(src, dtype="<f4"))[0])
        self.raw_cold_mibps = mibps(self.cfg.nbytes, median(cold))
        self.raw_warm_mibps = mibps(self.cfg.nbytes, median(warm))
        self.raw_np_mibps = mibps(self.cfg.nbytes, median(np_cold))
        self.gate.settle()
        self.capacity = parallel_capacity(self.args.python, os.cpu_count() or 1)
        self.gate.take()
        log(f"plain raw file: cold {self.raw_cold_mibps:.0f} MiB/s, warm {self.raw_warm_mibps:.0f}")

    # -- 1, 2, 5: sequential reads and peak RSS
    def sequential(self, v: str, store: Path) -> None:
        n, reps = self.cfg.nbytes, self.args.repeat
        src = np.fromfile(self.base / "src.raw", dtype="<f4")
        keys = ("cat", "warm", "np", "zp", "zp2", "ts", "ts2", "plain_cat", "plain_np")
        t: dict[str, list[float]] = {k: [] for k in keys}
        warm_served: list[float] = []
        decoded: list[int] = []  # chunks (inner chunks) the daemon decoded for each cold cat
        cpu: dict[str, list[float]] = {"daemon": [], "daemon_sys": [], "cat": []}
        state = {"peak": 0, "identical": True}

        def zarrfs_cat() -> None:
            self.cold()
            with self.mount(store) as m:
                assert m.pid is not None
                rss = PeakRss(m.pid)
                (user0, sys0), kids0 = proc_times(m.pid), children_cpu()
                t["cat"].append(cat_file(m.mnt / ARRAY / "data.raw"))
                user1, sys1 = proc_times(m.pid)
                cpu["daemon"].append(user1 + sys1 - user0 - sys0)
                cpu["daemon_sys"].append(sys1 - sys0)
                cpu["cat"].append(children_cpu() - kids0)
                counts = m.stats()["arrays"].get(ARRAY, {})
                decoded.append(counts.get("chunks_decoded", 0))
                before = counts.get("bytes_served", 0)
                t["warm"].append(cat_file(m.mnt / ARRAY / "data.raw"))
                after = m.stats()["arrays"].get(ARRAY, {}).get("bytes_served", 0)
                warm_served.append((after - before) / MiB)
                state["peak"] = max(state["peak"], rss.stop())

        def zarrfs_np() -> None:
            self.cold()
            with self.mount(store) as m:
                assert m.pid is not None
                rss = PeakRss(m.pid)
                secs, got = timed(lambda: np.fromfile(m.mnt / ARRAY / "data.raw", dtype="<f4"))
                t["np"].append(secs)
                state["peak"] = max(state["peak"], rss.stop())
            state["identical"] = state["identical"] and bool(np.array_equal(got, src))

        def zarr_python() -> None:
            self.cold()
            a = zarr_open(store)
            t["zp"].append(timed(partial(read_all_zarr, a))[0])
            t["zp2"].append(timed(partial(read_all_zarr, a))[0])

        def tensorstore() -> None:
            self.cold()
            ts_arr = ts_open(store)
            t["ts"].append(timed(partial(read_all_ts, ts_arr))[0])
            t["ts2"].append(timed(partial(read_all_ts, ts_arr))[0])

        def plain_file() -> None:
            # the plain file of the same bytes read cold the same two ways, in the same rounds
            # (reported beside the run's reference, which the targets use): a cold read of one
            # file here moves by a factor of two to four within minutes (the host's disk and
            # the memory it gives back to this VM), so the row's notes show both
            self.cold()
            t["plain_cat"].append(cat_file(self.base / "src.raw"))
            self.cold()
            t["plain_np"].append(timed(lambda: np.fromfile(self.base / "src.raw", dtype="<f4"))[0])

        # each round starts with another reader: the first measurement after a cache drop can
        # meet slower memory (this VM hands freed memory back to its host, which backs it
        # again on the next touch), and no reader should always be the one that meets it
        rotated_rounds([zarrfs_cat, zarrfs_np, zarr_python, tensorstore, plain_file], reps)
        peak, identical = state["peak"], state["identical"]
        # one more cold read, untimed for the rows: where it waits (scripts/bench_stalls.py)
        self.cold()
        with self.mount(store) as m:
            stalls = analyse(*timed_pieces(m.mnt / ARRAY / "data.raw", disk_of(store)))
        rate = {k: mibps(n, median(secs)) for k, secs in t.items()}
        wall = median(t["cat"])
        busy = (median(cpu["daemon"]) + median(cpu["cat"])) / wall
        cpu_note = (
            f"CPU during cat: daemon {median(cpu['daemon']):.2f} s + cat "
            f"{median(cpu['cat']):.2f} s in {wall:.2f} s ({busy:.1f} of {os.cpu_count()} cores); "
            f"chunks decoded per cat {', '.join(map(str, decoded))} (a chunk decoded twice was "
            "evicted before it was served)"
        )
        rep_note = f"median of {reps}" if reps > 1 else ""
        self.seq_rates[v] = {k: rate[k] for k in ("cat", "np", "zp", "ts")}
        for label, key in (("cat", "cat"), ("numpy.fromfile", "np")):
            r = Row(f"1. seq read cold, {label} (MiB/s)", v, rate[key], rate["zp"], rate["ts"],
                    "≥ 1.0× best peer")  # fmt: skip
            r.met = (r.ratio or 0) >= 1.0
            # the plain file of the same bytes, read cold the same way (cat, numpy.fromfile):
            # the run's reference; the same reads in this row's rounds are in the notes
            plain = self.raw_cold_mibps if key == "cat" else self.raw_np_mibps
            again = rate["plain_cat"] if key == "cat" else rate["plain_np"]
            notes = [rep_note]
            if v == "bytes":
                r.target += f" and ≥ 0.8× the plain file read the same way ({plain:.0f})"
                r.met = r.met and rate[key] / plain >= 0.8
            if key == "np":
                r.target, r.met = fromfile_target(r.target, r.met, rate[key], r.best_peer, plain)
            notes.append(
                f"{rate[key] / plain:.2f}× the plain file read the same way; that file read so "
                f"in this row's rounds: {again:.0f} MiB/s ({rate[key] / again:.2f}×)"
            )
            if key == "cat":
                peers = {"zarr-python": t["zp"], "tensorstore": t["ts"]}
                notes += [
                    cpu_note,
                    rounds_note(n, t["cat"], cpu["daemon"], cpu["daemon_sys"], peers),
                    describe(stalls),
                ]
            else:
                notes.append(
                    "bytes identical to src.raw" if identical else "**bytes DIFFER from src.raw**"
                )
            r.notes = "; ".join(x for x in notes if x)
            self.add(r)
        to_raw = rate["warm"] / self.raw_warm_mibps
        self.add(Row(
            "2. seq re-read warm, cat (MiB/s)", v, rate["warm"], rate["zp2"], rate["ts2"],
            f"≥ 0.5× plain raw page-cache read ({self.raw_warm_mibps:.0f})", to_raw >= 0.5,
            f"{to_raw:.2f}× plain raw; 2nd cat on the same mount (the daemon served "
            f"{median(warm_served):.0f} of {n / MiB:.0f} MiB, the rest came from the kernel "
            "page cache); zarr-python/tensorstore: "
            "2nd read (page cache warm, no chunk cache)" + (f"; {rep_note}" if rep_note else ""),
        ))  # fmt: skip
        self.add(self._rss_row("5. daemon peak RSS, seq read (MiB)", v, peak))

    # -- 8: the TIFF view against data.raw
    def tiff_read(self, v: str, store: Path) -> None:
        t: dict[str, list[float]] = {"tif": [], "raw": []}
        src = np.fromfile(self.base / "src.raw", dtype="<f4").reshape(self.cfg.shape)
        identical = True
        for _ in range(self.args.repeat):
            for key in ("raw", "tif"):
                self.cold()
                with self.mount(store) as m:
                    path = m.mnt / ARRAY / f"data.{key}"
                    if key == "tif":
                        secs, got = timed(lambda p=path: tifffile.imread(p))
                    else:
                        secs, got = timed(lambda p=path: np.fromfile(p, dtype="<f4"))
                    t[key].append(secs)
                identical = identical and bool(np.array_equal(got.reshape(src.shape), src))
                del got
        rate = {k: mibps(self.cfg.nbytes, median(secs)) for k, secs in t.items()}
        ratio = rate["tif"] / rate["raw"]
        self.add(Row(
            "8. seq read cold, tifffile.imread data.tif (MiB/s)", v, rate["tif"], None, None,
            "≥ 0.9× numpy.fromfile of data.raw (same run)", ratio >= 0.9,
            f"data.raw {rate['raw']:.0f} MiB/s, {ratio:.2f}×"
            + (f"; median of {self.args.repeat}" if self.args.repeat > 1 else "")
            + ("; values identical to src.raw" if identical else "; **values DIFFER**"),
        ))  # fmt: skip

    # -- 3: random 4 KiB reads
    def random_reads(self, v: str, store: Path) -> None:
        n, count = self.cfg.nbytes, self.args.random_reads
        rng = np.random.default_rng(7)
        sets = [rng.integers(0, n // 4096, count) * 4096 for _ in range(3)]
        self.cold()
        zf, served = [], []
        with self.mount(store) as m:
            # cold; warm (new open, new offsets); then the kernel page cache dropped (the
            # daemon's chunk cache stays) and read-ahead off, so every pread reaches the daemon
            for k, offs in enumerate(sets):
                if k == 2:
                    self.cold()
                before = m.stats()["arrays"].get(ARRAY, {}).get("bytes_served", 0)
                zf.append(self._pread_latencies(m.mnt / ARRAY / "data.raw", offs, k == 2))
                after = m.stats()["arrays"].get(ARRAY, {}).get("bytes_served", 0)
                served.append((after - before) / MiB)
        zp_n = min(count, self.args.zp_samples)
        self.cold()
        a = zarr_open(store)
        zp = [self._element_latencies(lambda i: a[i], offs[:zp_n]) for offs in sets[:2]]
        self.cold()
        t = ts_open(store, self.cache_bytes)
        ts_ = [self._element_latencies(lambda i: t[i].read().result(), offs) for offs in sets[:2]]
        base_note = f"zarr-python n={zp_n} (no chunk cache); zarrfs/tensorstore n={count}"
        cases = (("cold", 0), ("warm", 1), ("daemon-warm, page cache dropped, FADV_RANDOM", 2))
        for phase, k in cases:
            for q in (50, 99):
                zp_q = pct(zp[k], q) if k < 2 else None
                ts_q = pct(ts_[k], q) if k < 2 else None
                r = Row(f"3. random 4K pread {phase} p{q} (µs)", v, pct(zf[k], q), zp_q, ts_q,
                        notes=base_note if k < 2 else "", higher=False)  # fmt: skip
                if q == 50 and k == 0:
                    r.target, r.met = "≤ zarr-python p50", r.zarrfs <= r.zarr_python  # type: ignore[operator]
                elif q == 50:
                    r.target, r.met = "≤ 100 µs", r.zarrfs <= 100  # type: ignore[operator]
                if q == 50:
                    r.notes = "; ".join(x for x in (r.notes, (
                        f"the daemon served {served[k]:.1f} MiB for these "
                        f"{count * 4096 / MiB:.0f} MiB of preads (the rest: kernel page cache)"
                    )) if x)  # fmt: skip
                if k == 1:
                    r.notes += "; warm = same mount, new open(), new offsets"
                if k == 2 and q == 50:
                    r.notes += (
                        "; same mount after drop_caches (the daemon's chunk cache stays), new "
                        "open() with read-ahead off: each pread is one 4 KiB FUSE read "
                        "(compare zarr-python/tensorstore in the warm rows)"
                    )
                self.add(r)

    def _element_latencies(self, read: Callable[[Any], Any], offsets: np.ndarray) -> np.ndarray:
        idx = np.stack(np.unravel_index(offsets // 4, self.cfg.shape), axis=1).tolist()
        out = np.empty(len(idx))
        clock = time.perf_counter_ns
        for k, i in enumerate(idx):
            key = tuple(i)
            t0 = clock()
            read(key)
            out[k] = clock() - t0
        return out / 1000

    # -- 9: group.nc read with netCDF4-python vs the same array's data.raw
    def netcdf_read(self, v: str, store: Path) -> None:
        import netCDF4

        t_nc: list[float] = []
        t_raw: list[float] = []
        t_header: list[float] = []
        t_open: list[float] = []
        same = True
        for _ in range(self.args.repeat):
            self.cold()
            with self.mount(store) as m:
                path = m.mnt / "group.nc"
                t_header.append(timed(lambda p=path: sh(f"ncdump -h '{p}' > /dev/null"))[0])
            self.cold()
            with self.mount(store) as m:
                # as a user would: `ls` first (which starts the daemon's one-time import of
                # h5py, ~0.3 s, in the background: ncdump -h above includes it), then open (which
                # renders the file) + read, counted like numpy.fromfile's open + read
                os.listdir(m.mnt)
                time.sleep(1.0)
                opened, d = timed(lambda p=m.mnt / "group.nc": netCDF4.Dataset(p))
                try:
                    d.set_auto_maskandscale(False)
                    secs, got = timed(lambda d=d: np.asarray(d[ARRAY][:]))
                finally:
                    d.close()
                t_open.append(opened)
                t_nc.append(opened + secs)
            self.cold()
            with self.mount(store) as m:
                secs, raw = timed(lambda: np.fromfile(m.mnt / ARRAY / "data.raw", dtype="<f4"))
                t_raw.append(secs)
            same = same and bool(np.array_equal(got.reshape(-1), raw))
            del got, raw
        nc_rate = mibps(self.cfg.nbytes, median(t_nc))
        raw_rate = mibps(self.cfg.nbytes, median(t_raw))
        ratio = nc_rate / raw_rate
        notes = [
            f"data.raw numpy.fromfile, same run: {raw_rate:.0f} MiB/s ({ratio:.2f}×)",
            f"ncdump -h, cold mount: {median(t_header) * 1000:.0f} ms",
            f"of which netCDF4.Dataset() open: {median(t_open) * 1000:.0f} ms",
            "bytes identical to data.raw" if same else "**bytes DIFFER from data.raw**",
        ]
        if self.args.repeat > 1:
            notes.append(f"median of {self.args.repeat}")
        self.add(Row(
            "9. group.nc: one variable, netCDF4-python, cold (MiB/s)", v, nc_rate, None, None,
            "≥ 0.8× data.raw read (same bytes)", ratio >= 0.8 and same, "; ".join(notes),
        ))  # fmt: skip

    # -- 10: what a cold sequential read can reach here (decode alone, serving alone, both)
    def ceiling(self, v: str, store: Path) -> None:
        notes: list[str] = []
        if v == "bytes":  # read straight from its chunk files: no decoded units to time
            (ceiling, parts), clean = self._bytes_ceiling(store, notes), True
        else:
            ceiling, clean, parts = self._decoded_ceiling(store, notes)
        seq = self.seq_rates.get(v, {})
        r = Row("10. cold read ceiling on this machine (MiB/s)", v, seq.get("cat"),
                seq.get("zp"), seq.get("ts"), CEILING_TARGET)  # fmt: skip
        unbounded = unbounded_parts(parts, self.cfg.nbytes, r.best_peer)
        clean = clean and not unbounded
        notes += unbounded
        notes.insert(0, f"ceiling {ceiling:.0f} MiB/s")
        if r.zarrfs is not None:
            to_ceiling = r.zarrfs / ceiling
            notes.insert(1, f"zarrfs cold cat (row 1) = {to_ceiling:.2f}× the ceiling")
            r.met = (r.ratio or 0) >= 1.0 or (
                clean and within_ceiling(r.zarrfs, r.best_peer, ceiling)
            )
        if self.args.repeat > 1:  # a ceiling is an upper bound: no slowed pass may lower it
            notes.append(f"each part the fastest of {self.args.repeat}")
        r.notes = "; ".join(notes)
        self.add(r)

    def _decoded_ceiling(
        self, store: Path, notes: list[str]
    ) -> tuple[float, bool, dict[str, float]]:
        """The ceiling of a cold read of an array served from decoded units (MiB/s), its parts
        added to ``notes``, whether it may be used (its serving pass loaded no unit) and the
        seconds of its storage and decode parts (``bench_report.unbounded_parts``)."""
        n, reps = self.cfg.nbytes, self.args.repeat
        read_t, read_cpu, stored_note, _ = self._storage_pass(store)
        mem = memory_copy(store)
        t: dict[str, list[float]] = {"decode": [], "serve": []}
        cpu: dict[str, list[float]] = {"decode": [], "serve": []}
        clean = True
        path = ARRAY + "/data.raw"
        # a chunk cache that holds every decoded unit, and the mount's other options
        opts = f"cache_size={max(2 * n, 1 << 30) // MiB}M,nodirect_reads" + (
            f",{self.args.mount_options}" if self.args.mount_options else ""
        )
        for _ in range(reps):
            self.gate.settle()
            run = decode_all(mem, ARRAY)
            t["decode"].append(run.seconds)
            cpu["decode"].append(run.cpu)
            with Mount(self.args.python, store, self.mnt, opts) as m:
                assert m.pid is not None
                fill_backwards(m.mnt / path)  # every unit decoded into the daemon's cache
                self.cold()  # the kernel's page cache only: the daemon keeps its cache
                misses = m.stats()["arrays"].get(ARRAY, {}).get("cache_misses", 0)
                cpu0, kids0 = proc_cpu(m.pid), children_cpu()
                t["serve"].append(cat_file(m.mnt / path))
                cpu["serve"].append(proc_cpu(m.pid) - cpu0 + children_cpu() - kids0)
                after = m.stats()["arrays"].get(ARRAY, {}).get("cache_misses", 0)
                clean = clean and after == misses
        dec, srv = min(t["decode"]), min(t["serve"])
        dec_cpu, srv_cpu = min(cpu["decode"]), min(cpu["serve"])
        cores = os.cpu_count() or 1
        # all three overlapped perfectly on these cores: none alone can be beaten, nor the CPU
        # seconds of all three spread over every core
        cpu_all = read_cpu + dec_cpu + srv_cpu
        both = max(read_t, dec, srv, cpu_all / cores)
        notes += [
            stored_note,
            f"decode alone {mibps(n, dec):.0f} MiB/s ({dec_cpu:.2f} s CPU; zarrfs' engine, "
            f"{cores} threads, store in memory)",
            f"serving alone {mibps(n, srv):.0f} MiB/s ({srv_cpu:.2f} s CPU, daemon + cat; every "
            "unit in the daemon's cache, page cache dropped)"
            + ("" if clean else " **the daemon loaded units: not clean, no ceiling used**"),
            f"all three = max(storage, decode, serve, CPU of the three / {cores} cores) = "
            f"{both:.2f} s",
        ]
        if self.capacity[0]:
            notes.append(
                f"these {cores} CPUs do {self.capacity[0]:.2f} CPUs' worth of CPU-bound work at "
                f"once (header); CPU of the three / {self.capacity[0]:.2f} = "
                f"{cpu_all / self.capacity[0]:.2f} s"
            )
        return mibps(n, both), clean, {"storage": read_t, "decode": dec}

    def _storage_pass(self, store: Path) -> tuple[float, float, str, list[Path]]:
        """The storage part of a cold read's ceiling: the array's chunk files read cold by one
        ``cat`` (page cache dropped before each of ``--repeat`` runs); returns the fewest
        seconds, the fewest CPU seconds of ``cat`` (with the kernel's work of reading, done in
        its context), a note and the files. A cold read through the mount reads the same files."""
        files = sorted((p for p in (store / ARRAY).rglob("*") if p.is_file()), key=str)
        chunk_files = [p for p in files if p.name not in ("zarr.json", ".zarray", ".zattrs")]
        t_files, cpu_files = [], []
        for _ in range(self.args.repeat):
            self.cold()
            kids0 = children_cpu()
            t_files.append(timed(partial(cat_files, chunk_files))[0])
            cpu_files.append(children_cpu() - kids0)
        stored = sum(p.stat().st_size for p in chunk_files)
        read_t, read_cpu = min(t_files), min(cpu_files)
        note = (
            f"storage: its {len(chunk_files)} chunk files ({stored / MiB:.0f} MiB) read cold "
            f"with one `cat` {mibps(stored, read_t):.0f} MiB/s ({read_t:.2f} s, {read_cpu:.2f} s "
            f"CPU; one plain file of {self.cfg.nbytes / MiB:.0f} MiB: "
            f"{self.raw_cold_mibps:.0f} MiB/s)"
        )
        return read_t, read_cpu, note, chunk_files

    def _bytes_ceiling(self, store: Path, notes: list[str]) -> tuple[float, dict[str, float]]:
        """The ceiling of a cold read of a ``bytes`` array (MiB/s) and its storage pass's
        seconds (``{"storage": s}``), its parts added to ``notes``. Its cold reads take the
        chunk files' bytes straight from the files (direct reads), not from decoded units, so
        the part that serves is timed on that path: the chunk files in the page cache (read by
        ``cat`` just before), ``data.raw``'s own page cache empty (a fresh mount); the part
        that reads is the chunk files read cold with one ``cat`` (``_storage_pass``); both
        overlapped perfectly is the longer of the two, or their CPU seconds spread over every
        core."""
        n = self.cfg.nbytes
        read_t, read_cpu, stored_note, chunk_files = self._storage_pass(store)
        t_serve, cpu_serve = [], []
        for _ in range(self.args.repeat):
            self.gate.settle()
            with self.mount(store) as m:
                assert m.pid is not None
                # into the page cache just before the timed read: this VM's kernel pages out
                # file pages it sees idle (DAMON), the storage pass's among them
                cat_files(chunk_files)
                cpu0, kids0 = proc_cpu(m.pid), children_cpu()
                t_serve.append(cat_file(m.mnt / ARRAY / "data.raw"))
                cpu_serve.append(proc_cpu(m.pid) - cpu0 + children_cpu() - kids0)
        serve_t, serve_cpu = min(t_serve), min(cpu_serve)
        cores = os.cpu_count() or 1
        cpu_both = read_cpu + serve_cpu
        both = max(read_t, serve_t, cpu_both / cores)
        notes.append(
            f"{stored_note}; serving them from the page cache (fresh mount, the chunk files "
            f"read before) {mibps(n, serve_t):.0f} MiB/s ({serve_cpu:.2f} s CPU, "
            f"daemon + cat); both = max(storage, serve, CPU of both / {cores} cores) = "
            f"{both:.2f} s"
        )
        return mibps(n, both), {"storage": read_t}
