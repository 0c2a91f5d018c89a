"""The bench's other measurements, a part of ``bench.Bench``: the bytes fetched for one 4 KiB
read of the sharded array (row 6: ``shard_fetch``, cross-checked with strace when installed),
the listing of a hierarchy of small arrays against the pyfuse3 floor (row 7: ``listing``,
``scripts/listing_floor.py``), and py-spy profiles of the daemon (``profile``: untimed passes,
summarised in the report).

Invariants: a tracer (strace, py-spy) runs only for the block of its measurement and is
stopped by ``traced``; the listing's zarrfs walks and the floor's alternate round by round,
each on a fresh mount after dropped caches; a profile adds no row. Imports only
``bench_machine``, ``bench_data``, ``bench_report`` and ``bench_base`` among the bench's
modules.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from statistics import median

import numpy as np
from bench_base import BenchBase
from bench_data import (
    ARRAY,
    ByteCounter,
    ensure_listing,
    ts_bytes_read,
    ts_open,
    zarr_counting_array,
)
from bench_machine import cat_file, drop_caches, log, sh, timed, traced
from bench_report import Row, sum_pread


class MiscMixin(BenchBase):
    """Row 6 (sharded), row 7 (listing) and the daemon's profiles."""

    # -- 6: bytes fetched for one 4 KiB read of the sharded array
    def shard_fetch(self, v: str, store: Path) -> None:
        cfg = self.cfg
        z, y = min(cfg.shape[0] - 1, cfg.inner[0] + 8), cfg.inner[1] + 8
        off = (z * cfg.shape[1] + y) * cfg.shape[2] * 4
        expected_4k, shards_4k, inner_4k = self._expected_fetch(store, off, 4096)
        self.cold()
        strace_bytes: int | None = None
        with self.mount(store) as m:
            before = m.stats()["arrays"].get(ARRAY, {})
            tracer = shutil.which("strace")
            trace_file = self.base / "strace-shard.txt"
            cmd = [tracer or "true", "-f", "-qq", "-p", str(m.pid), "-e", "trace=pread64",
                   "-o", str(trace_file)]  # fmt: skip
            with traced(cmd, ready_wait=1.0 if tracer else 0):
                fd = os.open(m.mnt / ARRAY / "data.raw", os.O_RDONLY)
                try:
                    os.pread(fd, 4096, off)
                finally:
                    os.close(fd)
                time.sleep(0.5)  # let any read-ahead the daemon started finish
            after = m.stats()["arrays"].get(ARRAY, {})
            if tracer and trace_file.exists():
                strace_bytes = sum_pread(trace_file)
        fetched = after.get("bytes_fetched", 0) - before.get("bytes_fetched", 0)
        served = after.get("bytes_served", 0) - before.get("bytes_served", 0)
        expected_req, shards_req, inner_req = self._expected_fetch(store, off, max(served, 4096))
        # the same elements through zarr-python (counting store) and tensorstore (its metrics)
        rows = max(1, 1024 // cfg.shape[2])
        sel = (z, slice(y, y + rows), slice(0, min(1024, cfg.shape[2])))
        self.cold()
        a = zarr_counting_array(store)
        ByteCounter.total = 0
        a[sel]
        zp_bytes = ByteCounter.total
        self.cold()
        t = ts_open(store)
        b0 = ts_bytes_read()
        t[sel].read().result()
        ts_bytes = ts_bytes_read() - b0
        notes = (
            f"4 KiB at offset {off} touches {shards_4k} shard(s), {inner_4k} inner chunk(s); "
            f"kernel asked zarrfs for {served} B"
        )
        if served > 4096:
            notes += (
                f" (read-ahead: index+inner chunks for that range = {expected_req} B, "
                f"{inner_req} inner chunks)"
            )
        if strace_bytes is not None:
            notes += f"; strace: daemon pread64 total {strace_bytes} B"
        self.add(Row(
            "6. bytes fetched, one 4 KiB read (B)", v, fetched, zp_bytes, ts_bytes,
            f"≤ shard index(es) + touched inner chunk(s) = {expected_4k}", fetched <= expected_4k,
            notes,
        ))  # fmt: skip

    def _expected_fetch(self, store: Path, offset: int, size: int) -> tuple[int, int, int]:
        """(index bytes of the touched shards + stored bytes of the touched inner chunks,
        number of shards, number of inner chunks) for the flat byte range."""
        cfg = self.cfg
        meta = json.loads((store / ARRAY / "zarr.json").read_text())
        sharding = meta["codecs"][0]["configuration"]
        has_crc = any(c["name"] == "crc32c" for c in sharding["index_codecs"])
        per_shard = tuple(s // i for s, i in zip(cfg.shards, cfg.inner, strict=True))
        n_inner = int(np.prod(per_shard))
        index_size = n_inner * 16 + (4 if has_crc else 0)
        e0, e1 = offset // 4, min(cfg.nbytes, offset + size + 3) // 4
        touched: set[tuple[int, ...]] = set()
        row_len = cfg.shape[2]
        for row in range(e0 // row_len, (e1 - 1) // row_len + 1):
            zz, yy = divmod(row, cfg.shape[1])
            x0 = max(e0, row * row_len) - row * row_len
            x1 = min(e1, (row + 1) * row_len) - row * row_len
            for cx in range(x0 // cfg.inner[2], (x1 - 1) // cfg.inner[2] + 1):
                touched.add((zz // cfg.inner[0], yy // cfg.inner[1], cx))
        shards: dict[tuple[int, ...], np.ndarray] = {}
        total = 0
        for c in sorted(touched):
            s = tuple(ci // p for ci, p in zip(c, per_shard, strict=True))
            if s not in shards:
                key = store / ARRAY / "c" / "/".join(map(str, s))
                with open(key, "rb") as f:
                    f.seek(-index_size, os.SEEK_END)
                    raw = f.read(index_size)
                shards[s] = np.frombuffer(raw[: n_inner * 16], "<u8").reshape(*per_shard, 2)
                total += index_size
            local = tuple(ci % p for ci, p in zip(c, per_shard, strict=True))
            total += int(shards[s][local][1])
        return total, len(shards), len(touched)

    # -- 7: listing
    def listing(self) -> None:
        """Cold walks of zarrfs and walks of the pyfuse3 floor, interleaved round by round
        (``--repeat`` rounds; medians), so both columns of the ratio see the same machine."""
        path = self.base.parent / "listing.zarr"
        g, per = self.args.listing_groups, self.args.listing_arrays
        ensure_listing(path, g, per)
        floor_script = Path(__file__).parent / "listing_floor.py"
        t: dict[str, list[float]] = {k: [] for k in ("find", "ls", "ro1", "ro2")}
        floors: dict[str, list[float]] = {"find_s": [], "ls_lR_s": []}
        for _ in range(self.args.repeat):
            self.cold()
            with self.mount(path) as m:
                secs, out = timed(lambda: sh(f"find '{m.mnt}' | wc -l"))
            t["find"].append(secs)
            entries = int(out.stdout.strip())
            self.cold()
            with self.mount(path) as m:
                t["ls"].append(timed(lambda: sh(f"ls -lR '{m.mnt}' > /dev/null"))[0])
            # a read-only mount walked twice: the second walk is answered by the kernel's caches
            self.cold()
            ro = self.mount(path)
            ro.options += ",ro"
            with ro as m:
                t["ro1"].append(timed(lambda: sh(f"find '{m.mnt}' > /dev/null"))[0])
                t["ro2"].append(timed(lambda: sh(f"find '{m.mnt}' > /dev/null"))[0])
            # the same walks over an in-memory pyfuse3 file system of the same shape: the
            # floor, each walk on a fresh mount after dropped caches, as zarrfs's
            for walk, key in (("find", "find_s"), ("ls", "ls_lR_s")):
                self.cold()
                floor_run = json.loads(
                    sh(f"'{self.args.python}' '{floor_script}' --groups {g} --arrays {per} "
                       f"--walk {walk}").stdout
                )  # fmt: skip
                floors[key].append(floor_run[key])
        import zarr

        self.cold()
        t_zp, members = timed(
            lambda: list(zarr.open_group(str(path), mode="r").members(max_depth=None))
        )
        floor = {key: median(values) for key, values in floors.items()}
        t_find, t_ls = median(t["find"]), median(t["ls"])
        t_ro_first, t_ro_again = median(t["ro1"]), median(t["ro2"])
        rounds = (
            f"median of {self.args.repeat} rounds, each a zarrfs walk then the floor's"
            if self.args.repeat > 1
            else ""
        )
        label = f"{g * per:,} arrays"
        for name, secs, note in (
            ("find MNT | wc -l", t_find, f"{entries:,} entries"),
            ("ls -lR MNT", t_ls, ""),
        ):
            key = "find_s" if name.startswith("find") else "ls_lR_s"
            floor_note = (
                f"pyfuse3 floor (in-memory file system of the same shape answering in the event "
                f"loop, scripts/listing_floor.py, a fresh mount after dropped caches): "
                f"{floor[key]:.2f} s"
            )
            note = "; ".join(x for x in (note, floor_note) if x)
            target = f"≤ 1.5× the pyfuse3 floor ({1.5 * floor[key]:.2f} s)"
            r = Row(f"7. list {label}: {name} (s)", "hierarchy", secs, t_zp, None, target,
                    fmt="{:.2f}", higher=False)  # fmt: skip
            r.met = secs <= 1.5 * floor[key]
            r.notes = "; ".join(
                x
                for x in (
                    note,
                    f"zarr-python members(max_depth=None): {len(members):,} nodes",
                    "cold: fresh mount, dropped caches",
                    rounds,
                )
                if x  # fmt: skip
            )
            self.add(r)
        r = Row(f"7. list {label}: second find on an -o ro mount (s)", "hierarchy", t_ro_again,
                None, None, "≤ 0.5 s (the kernel's caches)", fmt="{:.2f}",
                higher=False)  # fmt: skip
        r.met = t_ro_again <= 0.5
        r.notes = "; ".join(
            x for x in (f"the first find on that mount (cold): {t_ro_first:.2f} s", rounds) if x
        )
        self.add(r)

    # -- py-spy profiles (extra untimed passes)
    def profile(self, v: str, store: Path) -> None:
        spy = shutil.which("py-spy") or str(Path(self.args.python).parent / "py-spy")
        if not os.path.exists(spy):
            log("py-spy not found: no profile")
            return
        outdir = self.base / "profiles"
        outdir.mkdir(exist_ok=True)
        rng = np.random.default_rng(11)
        offsets = rng.integers(0, self.cfg.nbytes // 4096, self.args.random_reads) * 4096
        for phase in ("seq", "random"):
            out = outdir / f"{v}-{phase}.txt"
            out.unlink(missing_ok=True)
            drop_caches()
            with self.mount(store) as m:
                cmd = [spy, "record", "-p", str(m.pid), "-o", str(out), "--format", "raw",
                       "-r", str(self.args.profile_rate), "--nonblocking"]  # fmt: skip
                with traced(cmd):
                    if phase == "seq":
                        cat_file(m.mnt / ARRAY / "data.raw")
                    else:
                        self._pread_latencies(m.mnt / ARRAY / "data.raw", offsets)
                        drop_caches()
                        self._pread_latencies(m.mnt / ARRAY / "data.raw", offsets[::-1], True)
            if out.exists():
                self.profiles.append((v, phase, out))
