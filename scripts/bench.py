#!/usr/bin/env python3
"""Side-by-side benchmark: a zarrfs mount vs zarr-python and tensorstore on the same data.

Run as root (it drops the page cache and mounts with FUSE) with the project's virtualenv:

    .venv/bin/python scripts/bench.py --small --out bench-small.md      # ~3-4 minutes on 2 cores
    .venv/bin/python scripts/bench.py --out bench.md                     # 512 MiB per variant

The profiles need py-spy in the virtualenv (``.venv/bin/pip install py-spy``); without it, or
with ``--skip profile``, the report has no profile section. strace, when installed, cross-checks
measurement 6.

Data: float32 (128, 1024, 1024) of smooth data with a little noise (``--small``: (32, 512, 512)),
chunks (64, 256, 256), stored as Zarr v3 under ``--workdir`` by zarr-python in four variants
(``bytes`` only; ``blosc`` zstd clevel 3 shuffle; ``gzip`` level 1; ``sharded``: shards
(128, 512, 512) of inner chunks (32, 128, 128), blosc lz4). Each store is one root group holding
the array ``x``, so the mount shows ``MNT/x/data.raw``. Stores and ``src.raw`` (the same bytes as
a plain file) are reused when already present.

Measurements, per variant (every "cold" one starts after ``drop_caches`` and on a fresh mount or a
freshly opened array):
1. full sequential read: ``cat data.raw > /dev/null`` and ``numpy.fromfile`` through the mount vs
   zarr-python ``a[...]`` and tensorstore ``read()`` (``--repeat`` times, median; 3 with
   ``--small``, where one read takes only tens of milliseconds);
2. second (warm) read vs a plain raw file read from the page cache;
3. random 4 KiB preads of ``data.raw``, cold and warm (p50/p99) vs single-element reads
   (zarr-python: no cache, so fewer samples; tensorstore: cache pool of ``--cache-size``), plus a
   pass after ``drop_caches`` (the daemon's chunk cache stays warm) with ``POSIX_FADV_RANDOM``,
   so every pread is one 4 KiB request answered by the daemon;
4. full overwrite (``dd ... conv=notrunc,fsync``) vs ``a[...] = x`` and ``write()``, each
   followed by ``sync`` so all three end with the data on disk;
   beside it (once per run) the pyfuse3 write floor (``scripts/write_floor.py``): the same
   ``dd`` + ``sync`` into a minimal pyfuse3 file system storing each write in one real file,
   or copying it into a buffer (the FUSE transport alone); the floors explain the row, the
   target stays the best peer (a naive file system is not a limit of the machine); and the
   ceiling of an overwrite here (``scripts/bench_ceiling.py``): zarrfs' own encode of every
   unit from memory, the transport alone, both overlapped perfectly, the disk left out; the
   overwrite is compared with it where it is below the best peer;
5. the daemon's peak RSS (VmRSS polled, and VmHWM) during 1 and 4, against ``-o cache_size``;
6. (sharded) bytes fetched from the store for one 4 KiB read, from ``/.zarrfs/stats.json``
   (cross-checked with strace when available) vs the shard index(es) + touched inner chunks;
8. TIFF view: a cold sequential read of ``data.tif`` with ``tifffile.imread`` against a cold
   ``numpy.fromfile`` of ``data.raw`` (same run, fresh mount each; target: within 10 %);
7. ``find MNT | wc -l`` and ``ls -lR MNT`` over 10,000 small arrays (1,000 with ``--small``, to
   stay within a few minutes) vs zarr-python ``members(max_depth=None)``;
9. ``group.nc``: the array read as a netCDF-4 variable with netCDF4-python (netCDF-C, libhdf5)
   vs ``numpy.fromfile`` of its ``data.raw``, each on a fresh mount after ``drop_caches``, in the
   same run (the bytes are compared); the open (which renders the file) is counted, and also
   shown apart with the time of ``ncdump -h`` on a cold mount.
10. the ceiling of a cold read on this machine (``scripts/bench_ceiling.py``): zarrfs' own decode
   of every chunk from memory, serving from a full chunk cache, and both overlapped perfectly
   (the longer of the two, or their CPU seconds spread over every core); the cold ``cat`` of 1
   is compared with it where it is below the best peer. A ``bytes`` array's cold reads come
   straight from its chunk files (direct reads, no decoded units), so its ceiling is of that
   path instead: the chunk files read cold by one ``cat``, serving ``data.raw`` from them with
   the chunk files in the page cache (a fresh mount), and both overlapped perfectly.
Rows 1 also compare with the plain file ``src.raw`` read cold the same way (``cat``,
``numpy.fromfile``): the ``bytes`` target is 0.8× of it. One ``read()`` of the whole file into
fresh memory (``numpy.fromfile``) is bound by the reader itself, so where the plain file read
that way is slower than the best peer, 0.9× of it meets the row (``fromfile_target``).
A py-spy profile of the daemon (extra, untimed passes) is summarised as the top functions.

Ratios compare zarrfs with the best of zarr-python and tensorstore; in rows 1 and 4 each of
the ``--repeat`` rounds starts with another engine (the first measurement after a cache drop
can meet slower memory: this VM hands freed memory back to its host). Every cold measurement
waits (up to ``--quiet-wait`` s) until other processes keep at most ``--busy-cpu`` of the CPUs
busy, and each row reports the load average and that figure; rows measured busy anyway are
flagged "(busy)" and counted in the report's header. A fixed CPU-bound task is timed before
each measurement too (``cpu_probe``): the host slows this VM's CPUs when it is busy, unseen by
the guest's load, and each row gives the range of that time before its runs; so does the rate
at which fresh memory is faulted in (``memory_probe``), which moves with the host too. The
CPU seconds of the daemon and of ``cat`` during the cold ``cat`` are reported with it (how
many of the cores a read used).

The code: this module holds the command line, ``main()`` (the order of the phases, the report)
and ``Bench``, assembled from the measurement families: ``bench_reads`` (the plain file, rows 1,
2, 3, 5, 8, 9, 10), ``bench_writes`` (rows 4, 5, the write floor and the overwrite's ceiling)
and ``bench_misc`` (rows 6, 7, the profiles), over ``bench_base`` (state shared by every row).
Below them: ``bench_machine`` (helpers, mounts, the load gate and probes), ``bench_data`` (the
data, the peers' engines) and ``bench_report`` (rows, target rules, the report's header);
``bench_ceiling``, ``floorfs``, ``write_floor.py`` and ``listing_floor.py`` measure ceilings
and floors; ``bench_stalls`` times one more cold read piece by piece (where it waits). The
names other code uses are re-exported here (``__all__``).

Invariants: the script never leaves a mount or a process behind (every mount is unmounted in a
``finally``/``atexit`` path: ``zarrfs umount``, then ``fusermount3 -u -z``, then the daemon's own
pid is signalled); it only ever signals processes it started (the daemons of its own mounts,
py-spy, strace). Timings are reported, never asserted. No bench module imports this one,
and the modules below it import only modules below themselves: no import cycles.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench_data import FULL, SMALL, VARIANTS, Config, create_kwargs, ensure_data
from bench_machine import (
    REPO,
    LoadGate,
    MiB,
    Mount,
    cleanup_all,
    cpu_busy,
    cpu_probe,
    drop_caches,
    log,
    memory_probe,
    on_signal,
    rotated_rounds,
)
from bench_misc import MiscMixin
from bench_reads import ReadsMixin
from bench_report import (
    Row,
    environment,
    fromfile_target,
    markdown_table,
    probe_summary,
    summarize_profile,
)
from bench_writes import WritesMixin

#: the names other code (the tests) uses from ``bench``; each is defined in the module it is
#: imported from above, where a test replacing one must replace it
__all__ = [
    "FULL",
    "REPO",
    "SMALL",
    "Bench",
    "Config",
    "LoadGate",
    "Mount",
    "Row",
    "cpu_busy",
    "cpu_probe",
    "drop_caches",
    "ensure_data",
    "fromfile_target",
    "main",
    "memory_probe",
    "probe_summary",
    "rotated_rounds",
]


class Bench(ReadsMixin, WritesMixin, MiscMixin):
    """The benchmark: ``bench_base.BenchBase``'s state with every measurement (``main`` calls
    them phase by phase)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/zarrfs-bench"))
    p.add_argument("--out", type=Path, help="write the markdown report here too")
    p.add_argument("--json", type=Path, help="write the rows as JSON here")
    p.add_argument(
        "--small", action="store_true", help="(32, 512, 512) instead of (128, 1024, 1024)"
    )
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    p.add_argument(
        "--skip",
        default="",
        help="phases to skip: seq,ceiling,random,tiff,overwrite,shard,netcdf,listing,profile",
    )
    p.add_argument("--cache-size", default="512M", help="-o cache_size= for every mount")
    p.add_argument("--mount-options", default="", help="extra -o options")
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="repetitions of each sequential measurement, median reported "
        "(default 3 with --small, else 1)",
    )
    p.add_argument("--random-reads", type=int, default=10_000)
    p.add_argument(
        "--zp-samples",
        type=int,
        default=None,
        help="zarr-python single-element reads per pass (default 100 small, 200 full)",
    )
    p.add_argument(
        "--listing-groups",
        type=int,
        default=None,
        help="groups in the listing hierarchy (default 100; 10 with --small)",
    )
    p.add_argument("--listing-arrays", type=int, default=100)
    p.add_argument("--profile-rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--profile-top", type=int, default=10)
    p.add_argument("--python", default=sys.executable, help="interpreter that runs zarrfs")
    p.add_argument(
        "--busy-cpu",
        type=float,
        default=0.25,
        help="before each measurement, wait while others keep more than this fraction of all "
        "CPUs busy; rows measured busy anyway are flagged (default 0.25)",
    )
    p.add_argument(
        "--quiet-wait", type=float, default=30.0, help="seconds to wait for quiet (default 30)"
    )
    args = p.parse_args(argv)  # fmt: skip
    if args.listing_groups is None:
        args.listing_groups = 10 if args.small else 100
    if args.repeat is None:
        args.repeat = 3 if args.small else 1
    if args.zp_samples is None:
        args.zp_samples = 100 if args.small else 200
    variants = [
        ("sharded" if v == "sharding_indexed" else v) for v in args.variants.split(",") if v
    ]
    for v in variants:
        create_kwargs(v, SMALL)  # validates the name
    skip = {s for s in args.skip.split(",") if s}
    cfg = SMALL if args.small else FULL
    if os.geteuid() != 0:
        log("WARNING: not root: the page cache cannot be dropped")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(cleanup_all)
    base = args.workdir / cfg.tag
    gate = LoadGate(args.busy_cpu, args.quiet_wait)
    bench = Bench(args, cfg, base, args.workdir / "mnt", gate=gate)
    started = time.monotonic()
    load_start = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    try:
        stores = ensure_data(cfg, base, variants)
        bench.raw_reference()
        for v in variants:
            log(f"== {v}")
            store = stores[v]
            if "seq" not in skip:
                bench.sequential(v, store)
            if "random" not in skip:
                bench.random_reads(v, store)
            if v == "sharded" and "shard" not in skip:
                bench.shard_fetch(v, store)
            if "ceiling" not in skip:
                bench.ceiling(v, store)
            if "tiff" not in skip:
                bench.tiff_read(v, store)
            if "overwrite" not in skip:
                bench.overwrite(v, store)
            if "netcdf" not in skip:
                bench.netcdf_read(v, store)
            if "profile" not in skip:
                bench.profile(v, store)
        if "listing" not in skip:
            log("== listing")
            bench.listing()
    finally:
        cleanup_all()
    elapsed = time.monotonic() - started
    report = [
        f"## zarrfs benchmark ({cfg.tag}: {cfg.nbytes / MiB:.0f} MiB per variant)",
        "",
        environment(args, cfg, load_start),
        f"- plain raw file `src.raw`: cold {bench.raw_cold_mibps:.0f} MiB/s (`cat`), "
        f"{bench.raw_np_mibps:.0f} MiB/s (`numpy.fromfile`), page cache "
        f"{bench.raw_warm_mibps:.0f} MiB/s; run took {elapsed:.0f} s",
        probe_summary(gate.all),
        f"- CPU capacity: {os.cpu_count()} CPU-bound processes at once do "
        f"{bench.capacity[0]:.2f} CPUs' worth of work (a loop of {bench.capacity[1]:.2f} s alone "
        f"took {bench.capacity[2]:.2f} s each when run together)",
        "",
        markdown_table(bench.rows),
    ]
    busy = [r for r in bench.rows if r.busy]
    if busy:
        report[4:4] = [
            f"- **{len(busy)} row(s) measured on a busy machine** (others kept more than "
            f"{args.busy_cpu:.0%} of the CPUs busy just before, even after waiting "
            f'{args.quiet_wait:.0f} s): marked "(busy)"; repeat them on a quiet machine'
        ]
    else:
        report[4:4] = [
            f"- every measurement started on a quiet machine (others ≤ {args.busy_cpu:.0%} of "
            "the CPUs over the second before it)"
        ]
    if bench.profiles:
        report += ["", "### py-spy profiles of the daemon (separate, untimed passes)"]
        for v, phase, path in bench.profiles:
            what = (
                "sequential cat"
                if phase == "seq"
                else ("random 4 KiB preads (cold pass, then drop_caches and a FADV_RANDOM pass)")
            )
            report += ["", f"#### {v}, {what} (`{path}`)", "",
                       summarize_profile(path, args.profile_top)]  # fmt: skip
    text = "\n".join(report) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(
            json.dumps([asdict(r) | {"ratio": r.ratio} for r in bench.rows], indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
