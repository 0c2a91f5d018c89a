"""The bench's results and its report: rows, the rules their targets follow, the report's
header lines.

- ``Row`` (one measurement and its ratio against the best peer), ``markdown_table``, ``mibps``,
  ``rounds_note`` (each round's figures of a cold read);
- the ceiling rule: ``CEILING_SHARE``, ``CEILING_TARGET``, ``within_ceiling``,
  ``slower_than_peer`` / ``unbounded_parts``, ``fromfile_target``;
- the header: ``probe_summary``, ``environment``; the profiles: ``summarize_profile``
  (``IDLE_LEAVES``); strace logs: ``sum_pread``.

Invariants: bookkeeping only: nothing here mounts, drops caches or times anything
(``environment`` only asks git and the system); a ratio is always zarrfs over the best peer,
the best being the higher for throughputs and the lower for latencies and times
(``Row.higher``); a ceiling meets a row only where it is below the best peer and none of its
parts alone (storage, decoding, encoding) took longer than the best peer's whole run. Imports only
``bench_machine`` and ``bench_data`` among the bench modules.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import numpy as np
from bench_data import Config
from bench_machine import PROBE_SLOW, REPO, LoadSample, MiB, sh

# --------------------------------------------------------------------------- results


@dataclass
class Row:
    measurement: str
    variant: str
    zarrfs: float | None
    zarr_python: float | None = None
    tensorstore: float | None = None
    target: str = ""
    met: bool | None = None
    notes: str = ""
    fmt: str = "{:.0f}"
    #: throughputs: higher is better; latencies and listing times: lower is better
    higher: bool = True
    #: the machine was busy (others' CPU) before at least one of this row's measurements
    busy: bool = False

    @property
    def best_peer(self) -> float | None:
        peers = [p for p in (self.zarr_python, self.tensorstore) if p is not None and p == p]
        if not peers:
            return None
        return max(peers) if self.higher else min(peers)

    @property
    def ratio(self) -> float | None:
        """zarrfs / the best of zarr-python and tensorstore (for both directions)."""
        best = self.best_peer
        if self.zarrfs is None or not best:
            return None
        return self.zarrfs / best

    def cells(self) -> list[str]:
        def f(v: float | None) -> str:
            return "—" if v is None or v != v else self.fmt.format(v)

        ratio = "—" if self.ratio is None else f"{self.ratio:.2f}×"
        met = {None: "—", True: "yes", False: "**no**"}[self.met]
        if self.busy:
            met += " (busy)"
        cells = [
            self.measurement, self.variant, f(self.zarrfs), f(self.zarr_python),
            f(self.tensorstore), ratio, self.target, met, self.notes,
        ]  # fmt: skip
        return [c.replace("|", "\\|") for c in cells]


HEADER = [
    "measurement", "variant", "zarrfs", "zarr-python", "tensorstore",
    "ratio (zarrfs / best peer)", "target", "met?", "notes",
]  # fmt: skip


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def mibps(nbytes: int, seconds: float) -> float:
    return nbytes / MiB / seconds


def sum_pread(trace_file: Path) -> int:
    """Bytes returned by every pread64 in an strace log (whole or ``<... resumed>`` lines)."""
    total = 0
    for line in trace_file.read_text().splitlines():
        if "pread64" not in line or "unfinished" in line:
            continue
        result = re.search(r"= (\d+)$", line.rstrip())
        if result:
            total += int(result.group(1))
    return total


#: leaf frames that mean "waiting for work" (py-spy does not always see these threads as idle)
IDLE_LEAVES = (
    "EpollIOManager.get_events (trio/_core/_io_epoll.py)",  # the trio loop in epoll_wait
    "WorkerThread._work (trio/_core/_thread_cache.py)",  # a trio worker waiting for a job
    "_worker (concurrent/futures/thread.py)",  # an executor thread waiting on its queue
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
)


def summarize_profile(path: Path, top: int) -> str:
    """Top functions by self samples (leaf frame) and by inclusive samples (zarrfs frames),
    as shares of the busy samples (idle waits counted apart)."""
    self_t: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = idle = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = []
        for fr in stack.split(";"):
            name, _, loc = fr.partition(" (")
            frames.append(f"{name} ({loc.rsplit(':', 1)[0]})" if loc else name)
        if frames[-1] in IDLE_LEAVES:
            idle += n
            continue
        total += n
        self_t[frames[-1]] += n
        for fr in set(frames):
            if "zarrfs/" in fr:
                incl[fr] += n
    if not total:
        return "(no samples)"
    lines = [
        f"{total} busy samples ({idle} more were threads waiting for work: epoll, idle workers)."
        " Self time:",
        "",
    ]
    lines += [f"- {100 * c / total:5.1f}%  `{f}`" for f, c in self_t.most_common(top)]
    lines += ["", "Inclusive time, zarrfs functions:", ""]
    lines += [f"- {100 * c / total:5.1f}%  `{f}`" for f, c in incl.most_common(top)]
    return "\n".join(lines)


#: the issue's ceiling rule: where what the machine allows here is below the best peer,
#: this share of that ceiling meets a row
CEILING_SHARE = 0.9
CEILING_TARGET = "≥ 1.0× best peer, or ≥ 0.9× the ceiling where the ceiling is below it"


def within_ceiling(rate: float, best_peer: float | None, ceiling: float) -> bool:
    """True if ``ceiling`` is below the best peer and ``rate`` reaches ``CEILING_SHARE`` of it."""
    return best_peer is not None and ceiling < best_peer and rate >= CEILING_SHARE * ceiling


#: why a ceiling part slower than the best peer's whole measurement bounds nothing, by part
NOT_A_BOUND = {
    "storage": "a pass the host slowed (the peer read the same chunk files from the same disk)",
    "decode": "zarrfs' own decoding is slower than the peer, not this machine's cores",
    "encode": "zarrfs' own encoding is slower than the peer, not this machine's cores",
}


def slower_than_peer(seconds: float, nbytes: int, best_peer: float | None) -> bool:
    """True if one part of a ceiling, alone, took longer than the best peer's whole
    measurement of the same ``nbytes`` (at ``best_peer`` MiB/s). Such a part is no bound this
    machine sets (``NOT_A_BOUND``): a storage pass slower than a peer's whole cold read of the
    same chunk files was slowed by the host, and zarrfs' own decoding or encoding slower than
    a peer's whole read or overwrite is zarrfs' codec path, not the machine's cores. A ceiling
    with such a part meets no row."""
    return best_peer is not None and best_peer > 0 and seconds * best_peer * MiB > nbytes


def unbounded_parts(parts: dict[str, float], nbytes: int, best_peer: float | None) -> list[str]:
    """The notes for each part of a ceiling (name -> seconds) that ``slower_than_peer``
    rejects; empty if the ceiling may be used."""
    return [
        f"**its {name} alone ({secs:.2f} s) took longer than the best peer's whole run: "
        f"{NOT_A_BOUND[name]}; no ceiling used**"
        for name, secs in parts.items()
        if slower_than_peer(secs, nbytes, best_peer)
    ]


def fromfile_target(
    target: str, met: bool | None, rate: float, best_peer: float | None, plain: float
) -> tuple[str, bool | None]:
    """Row 1's ``numpy.fromfile`` target with its ceiling: one ``read()`` of the whole file into
    fresh memory is bound by the reader itself (its page faults), so a plain file of the same
    bytes read cold the same way, when slower than the best peer, is the ceiling, and ≥ 0.9×
    of it meets the row (the issue's ceiling rule)."""
    if best_peer is None or plain >= best_peer:
        return target, met
    target += f", or ≥ 0.9× the plain file read the same way ({plain:.0f}) where it is below"
    return target, bool(met) or within_ceiling(rate, best_peer, plain)


def rounds_note(
    nbytes: int,
    zarrfs: list[float],
    daemon_cpu: list[float],
    daemon_sys: list[float],
    peers: dict[str, list[float]],
) -> str:
    """Each round's figures of a cold read, in the order the rounds ran: the median a row
    reports can hide one round's slow read (the host slows this VM unseen by its load), and
    the daemon's CPU beside zarrfs' rate tells a slower daemon from a slower disk; its kernel
    part tells time in the daemon's own code from time in the kernel's copies and faults.
    ``zarrfs``, ``daemon_cpu`` and ``daemon_sys``: zarrfs' seconds, its daemon's CPU seconds
    and their system part per round; ``peers`` maps a peer's name to its seconds per round."""
    ours = [
        f"{mibps(nbytes, s):.0f} ({c:.2f} s daemon CPU, {k:.2f} s of it system)"
        for s, c, k in zip(zarrfs, daemon_cpu, daemon_sys, strict=True)
    ]
    parts = [f"zarrfs cat {', '.join(ours)}"]
    parts += [
        f"{name} {', '.join(f'{mibps(nbytes, s):.0f}' for s in t)}" for name, t in peers.items()
    ]
    return "each round, MiB/s: " + "; ".join(parts)


def probe_summary(samples: list[LoadSample]) -> str:
    """The report's lines on the CPU and memory probes over the whole run."""
    probes = sorted(x.probe_ms for x in samples)
    if not probes:
        return "- CPU probe: not run"
    fresh = sorted(x.memory_mibps for x in samples)
    waits = [x.probe_waited for x in samples if x.probe_waited > 0.1]
    slow = sum(x.probe_slow for x in samples)
    return (
        f"- CPU probe before each measurement (zlib level 1 over 4 MiB, CPU time; a busy host "
        f"slows this VM's CPUs unseen by its load): {probes[0]:.0f} / {median(probes):.0f} / "
        f"{probes[-1]:.0f} ms (min / median / max of {len(probes)}); each row gives the range "
        f"before its runs; a probe over {PROBE_SLOW}× the fastest was taken again until it was "
        f"not: {len(waits)} measurement(s) waited for it ({sum(waits):.1f} s in all), {slow} "
        "started with it still slow\n"
        f"- memory probe before each measurement (64 MiB of fresh memory faulted in, one write "
        f"per page; the host backs the memory this VM gave back again on first touch): "
        f"{fresh[0]:.0f} / {median(fresh):.0f} / {fresh[-1]:.0f} MiB/s (min / median / max); "
        "each row gives the range before its runs"
    )


def environment(args: argparse.Namespace, cfg: Config, load_start: str) -> str:
    from importlib.metadata import version

    import tensorstore  # noqa: F401
    import zarr

    try:
        rev = sh(f"git -C '{REPO}' rev-parse --short HEAD").stdout.strip()
        dirty = sh(f"git -C '{REPO}' status --porcelain -- zarrfs").stdout.strip()
        rev += " (+ uncommitted changes in zarrfs/)" if dirty else ""
    except Exception:
        rev = "?"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return "\n".join([
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}; host: "
        f"{platform.node()}, {os.cpu_count()} CPUs, {mem:.1f} GiB RAM, Linux {platform.release()}",
        f"- zarrfs {rev}; zarr-python {zarr.__version__}; tensorstore {version('tensorstore')}; "
        f"numpy {np.__version__}; numcodecs {version('numcodecs')}; "
        f"Python {platform.python_version()}",
        f"- data: float32 {cfg.shape} = {cfg.nbytes / MiB:.0f} MiB, chunks {cfg.chunks}; sharded: "
        f"shards {cfg.shards} of inner chunks {cfg.inner} (blosc lz4)",
        f"- mount options: -o cache_size={args.cache_size}"
        + (f",{args.mount_options}" if args.mount_options else "")
        + f"; tensorstore random reads use cache_pool total_bytes_limit = {args.cache_size}",
        f"- load average (1/5/15 min) at the start: {load_start}, at the end: {load} "
        "(other work on the machine adds noise)",
        "- cold = `drop_caches` + fresh mount / freshly opened array; throughputs in MiB/s "
        "(higher is better), latencies in µs and listing in s (lower is better)",
    ])  # fmt: skip
