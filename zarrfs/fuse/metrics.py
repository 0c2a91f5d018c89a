"""``-o metrics=ADDR:PORT``: the mount's counters in the Prometheus text format (opt-in).

Off by default: nothing listens unless the option is given, and then only on that address
(``127.0.0.1:9464`` for the local host, ``0.0.0.0:9464`` only when asked). ``GET /metrics``
answers with the text exposition format 0.0.4 (``text/plain; version=0.0.4``), any other path
with 404. Written without a client library: the format is a few lines per metric.

What is exported:

- every integer counter of ``/.zarrfs/stats.json``'s ``total`` as ``zarrfs_<name>_total``, and
  per array as ``zarrfs_array_<name>_total{array="PATH"}``;
- the caches (``zarrfs_chunk_cache_*``, ``zarrfs_index_cache_*``): hits, misses, evictions as
  counters, entries, bytes and capacity as gauges;
- the block pool (``zarrfs_buffer_blocks_created_total``, ``zarrfs_buffer_blocks_reused_total``
  counters, ``zarrfs_buffer_idle_bytes`` and ``zarrfs_buffer_idle_limit_bytes`` gauges);
- unflushed data: ``zarrfs_dirty_bytes``, ``zarrfs_dirty_objects``, ``zarrfs_writes_in_flight``,
  ``zarrfs_oldest_dirty_age_seconds``; ``zarrfs_uptime_seconds``; ``zarrfs_skipped_nodes``;
- ``zarrfs_operation_duration_seconds{op="read"}``: a histogram of how long each kind of FUSE
  request took in the daemon, and ``zarrfs_operation_errors_total{op, errno}``.

Invariants: ``OperationLatency.record`` is called from the event loop, ``snapshot`` from the
server thread; one lock keeps a snapshot's buckets, sum and count consistent. The server never
raises into the daemon: a failure to build the page is a 500 and a log line.
"""

from __future__ import annotations

import bisect
import errno
import json
import logging
import math
import re
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from zarrfs.views.base import VDir, VFile, VNode

log = logging.getLogger(__name__)

#: upper bounds (seconds) of the latency buckets: 50 us .. 60 s
BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME_SAFE = re.compile(r"[^a-zA-Z0-9_]")


class OperationLatency:
    """Per-operation latency histograms and error counts of the FUSE requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: op -> [count per bucket (non-cumulative, +Inf last), sum]
        self._hist: dict[str, tuple[list[int], list[float]]] = {}
        self._errors: dict[tuple[str, str], int] = {}

    def record(self, op: str, seconds: float, error: int | None = None) -> None:
        index = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            entry = self._hist.get(op)
            if entry is None:
                entry = self._hist[op] = ([0] * (len(BUCKETS) + 1), [0.0])
            entry[0][index] += 1
            entry[1][0] += seconds
            if error is not None:
                key = (op, errno.errorcode.get(error, str(error)))
                self._errors[key] = self._errors.get(key, 0) + 1

    def snapshot(self) -> tuple[dict[str, tuple[list[int], float]], dict[tuple[str, str], int]]:
        with self._lock:
            hist = {op: (list(counts), total[0]) for op, (counts, total) in self._hist.items()}
            return hist, dict(self._errors)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    return "+Inf" if math.isinf(value) else repr(float(value))


def _metric_name(name: str) -> str:
    return _NAME_SAFE.sub("_", name)


class _Page:
    """Prometheus text lines, one HELP/TYPE header per metric family."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        text = ",".join(f'{k}="{_label(v)}"' for k, v in (labels or {}).items())
        self.lines.append(
            f"{name}{{{text}}} {_number(value)}" if text else f"{name} {_number(value)}"
        )

    def one(self, name: str, kind: str, help_text: str, value: Any) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            self.family(name, kind, help_text)
            self.sample(name, value)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _ints(counters: Any) -> dict[str, int]:
    if not isinstance(counters, Mapping):
        return {}
    return {k: v for k, v in counters.items() if isinstance(v, int) and not isinstance(v, bool)}


_CACHE_COUNTERS = ("hits", "misses", "evictions", "rejected")
_CACHE_GAUGES = {"entries": "entries", "bytes": "bytes", "capacity": "capacity_bytes"}
_DIRTY = (
    ("bytes", "zarrfs_dirty_bytes", "Bytes written through the mount and not stored yet."),
    ("objects", "zarrfs_dirty_objects", "Stored objects (chunks or shards) with unstored data."),
    ("writes_in_flight", "zarrfs_writes_in_flight", "Objects being encoded and stored now."),
    ("oldest_age_s", "zarrfs_oldest_dirty_age_seconds", "Age of the oldest unstored write."),
)

#: the block pool (stats.json ``buffers``): key, metric, type, help
_POOL = (
    ("blocks_created", "zarrfs_buffer_blocks_created_total", "counter",
     "Chunk-sized buffer blocks mapped fresh."),
    ("blocks_reused", "zarrfs_buffer_blocks_reused_total", "counter",
     "Chunk-sized buffer blocks taken again instead of fresh memory."),
    ("idle_bytes", "zarrfs_buffer_idle_bytes", "gauge", "Bytes of idle blocks kept for reuse."),
    ("limit", "zarrfs_buffer_idle_limit_bytes", "gauge", "The most idle blocks may take."),
)  # fmt: skip


def _stats_metrics(page: _Page, doc: Mapping[str, Any]) -> None:
    page.one("zarrfs_uptime_seconds", "gauge", "Seconds since the mount started.",
             doc.get("uptime_s"))  # fmt: skip
    total = _ints(doc.get("total"))
    arrays = doc.get("arrays")
    per_array = {p: _ints(c) for p, c in arrays.items()} if isinstance(arrays, Mapping) else {}
    for name in sorted(total):
        metric = f"zarrfs_{_metric_name(name)}_total"
        page.family(metric, "counter", f"{name} of the whole mount (stats.json total).")
        page.sample(metric, total[name])
    for name in sorted({n for c in per_array.values() for n in c}):
        metric = f"zarrfs_array_{_metric_name(name)}_total"
        page.family(metric, "counter", f"{name} per array (stats.json arrays).")
        for path, counters in sorted(per_array.items()):
            if name in counters:
                page.sample(metric, counters[name], {"array": "/" + path})
    for cache in ("chunk_cache", "index_cache"):
        values = _ints(doc.get(cache))
        for key in sorted(values):
            if key in _CACHE_COUNTERS:
                page.one(f"zarrfs_{cache}_{key}_total", "counter", f"{cache} {key}.", values[key])
            else:
                metric = f"zarrfs_{cache}_{_CACHE_GAUGES.get(key, key)}"
                page.one(metric, "gauge", f"{cache} {key}.", values[key])
    pool = _ints(doc.get("buffers"))
    for key, metric, kind, help_text in _POOL:
        if key in pool:
            page.one(metric, kind, help_text, pool[key])
    dirty = doc.get("dirty")
    for key, metric, help_text in _DIRTY:
        page.one(metric, "gauge", help_text, dirty.get(key) if isinstance(dirty, Mapping) else None)
    skipped = doc.get("skipped_nodes")
    if isinstance(skipped, Mapping):
        page.one("zarrfs_skipped_nodes", "gauge", "Nodes the mount cannot show.", len(skipped))


def _latency_metrics(page: _Page, latency: OperationLatency) -> None:
    hist, errors = latency.snapshot()
    name = "zarrfs_operation_duration_seconds"
    page.family(name, "histogram", "Time the daemon took to answer FUSE requests, per operation.")
    for op in sorted(hist):
        counts, total = hist[op]
        running = 0
        for bound, count in zip((*BUCKETS, math.inf), counts):
            running += count
            page.sample(f"{name}_bucket", running, {"op": op, "le": _number(bound)})
        page.sample(f"{name}_sum", total, {"op": op})
        page.sample(f"{name}_count", running, {"op": op})
    page.family("zarrfs_operation_errors_total", "counter",
                "FUSE requests answered with an error, per operation and errno.")  # fmt: skip
    for (op, code), count in sorted(errors.items()):
        page.sample("zarrfs_operation_errors_total", count, {"op": op, "errno": code})


def render(doc: Mapping[str, Any], latency: OperationLatency | None) -> str:
    """The exposition text for one stats document and the latency histograms."""
    page = _Page()
    _stats_metrics(page, doc)
    if latency is not None:
        _latency_metrics(page, latency)
    return page.text()


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """``GET /metrics`` on one address, served from a daemon thread."""

    def __init__(
        self,
        address: tuple[str, int],
        stats: Callable[[], bytes],
        latency: OperationLatency | None,
    ) -> None:
        """Binds at once: an address in use or not local raises OSError before the mount."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                try:
                    body = owner.page().encode()
                except Exception:
                    log.exception("building the metrics page failed")
                    self.send_error(500)
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("metrics: " + format, *args)

        host, port = address
        server_class = _V6Server if ":" in host else ThreadingHTTPServer
        self._server = server_class((host, port), Handler)
        self._server.daemon_threads = True
        self._stats = stats
        self._latency = latency
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="zarrfs-metrics", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def page(self) -> str:
        return render(json.loads(self._stats()), self._latency)

    def start(self) -> None:
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", *self.address)

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def read_tree_file(root: VDir, *names: str) -> bytes:
    """The whole content of the file at ``names`` below ``root`` (``b"{}"`` if it is missing)."""
    node: VNode | None = root
    for name in names:
        node = node.lookup(name) if isinstance(node, VDir) else None
    if not isinstance(node, VFile):
        return b"{}"
    handle = node.open(False, False)
    pieces: list[bytes] = []
    offset = 0
    try:
        while piece := bytes(handle.read(offset, 1 << 20)):
            pieces.append(piece)
            offset += len(piece)
    finally:
        handle.release()
    return b"".join(pieces)
