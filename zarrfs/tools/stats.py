"""``zarrfs stats MOUNTPOINT [--json]``: the counters of a running mount, readable.

The mount publishes its counters as ``MOUNTPOINT/.zarrfs/stats.json`` (built by
``zarrfs.views.tree.ControlDir``): ``store``, ``uptime_s``, ``chunk_cache`` and ``index_cache``
(LRU ``hits``, ``misses``, ``evictions``, ``rejected``, ``entries``, ``bytes``, ``capacity``),
``buffers`` (the block pool, ``core/buffers.py``: ``idle_bytes`` kept for reuse of ``limit``,
``blocks_created``, ``blocks_reused``),
``dirty`` (``bytes``, ``objects`` and ``writes_in_flight`` not stored yet, ``oldest_age_s``),
``dirty_arrays``, ``skipped_nodes``, ``total`` and ``arrays`` (per array path) counters such as
``cache_hits``, ``cache_misses``, ``bytes_fetched``, ``chunks_decoded``, ``bytes_served``,
``bytes_written``, ``bytes_stored``.

Invariants:
- the tool only reads that one file; ``--json`` prints it as read (after checking it is JSON);
- a directory without ``.zarrfs/stats.json`` is not a zarrfs mount: one error line, exit 1;
- fields the summary does not know (newer mounts) are still printed, by name, so nothing the
  mount reports is hidden; missing fields read as zero or are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from zarrfs.core.errors import MetadataError, NodeNotFound, StoreError
from zarrfs.core.metadata.model import load_json_object
from zarrfs.tools import human_size, run_tool

STATS_FILE = os.path.join(".zarrfs", "stats.json")

#: counters shown in this order with these labels; "bytes" ones are shown as sizes
_COUNTERS: tuple[tuple[str, str], ...] = (
    ("bytes_fetched", "fetched"),
    ("bytes_decoded", "decoded"),
    ("chunks_decoded", "chunks decoded"),
    ("bytes_served", "served"),
    ("bytes_written", "written"),
    ("bytes_stored", "stored"),
)
_HIT_COUNTERS = ("cache_hits", "cache_misses")


def read_stats_bytes(mountpoint: str) -> bytes:
    """The raw ``stats.json`` of the zarrfs mount at ``mountpoint``."""
    if not os.path.isdir(mountpoint):
        raise NodeNotFound(f"{mountpoint}: no such directory")
    path = os.path.join(mountpoint, STATS_FILE)
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        raise NodeNotFound(
            f"{mountpoint} is not a zarrfs mount (no {STATS_FILE} in it; "
            "give the mount point itself)"
        ) from None
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None


def parse_stats(raw: bytes, mountpoint: str) -> dict[str, Any]:
    """The stats document; ``MetadataError`` if it is not one JSON object."""
    try:
        return load_json_object(raw, os.path.join(mountpoint, STATS_FILE))
    except MetadataError as exc:
        raise MetadataError(f"{exc} (is {mountpoint} a zarrfs mount?)") from None


def read_stats(mountpoint: str) -> dict[str, Any]:
    """The stats document of the zarrfs mount at ``mountpoint``."""
    return parse_stats(read_stats_bytes(mountpoint), mountpoint)


# ----------------------------------------------------------------------------- rendering


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def hit_rate(hits: int, misses: int) -> str:
    """``95.2%``, or ``-`` when nothing was looked up."""
    total = hits + misses
    return f"{100 * hits / total:.1f}%" if total else "-"


def _value(name: str, value: Any) -> str:
    if name.startswith("bytes") and isinstance(value, int):
        return human_size(value)
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "unknown"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    text = f"{hours}h {minutes:02d}m {s:02d}s" if hours or days else f"{minutes}m {s:02d}s"
    return f"{days}d {text}" if days else text


def _counter_line(counters: Mapping[str, Any]) -> str:
    hits, misses = _int(counters.get("cache_hits")), _int(counters.get("cache_misses"))
    return f"hits {hits:,}  misses {misses:,}  hit rate {hit_rate(hits, misses)}"


def _cache_line(cache: Mapping[str, Any]) -> str:
    hits, misses = _int(cache.get("hits")), _int(cache.get("misses"))
    return (
        f"{_int(cache.get('entries')):,} entries, {human_size(_int(cache.get('bytes')))} of "
        f"{human_size(_int(cache.get('capacity')))}; hits {hits:,}  misses {misses:,}  "
        f"hit rate {hit_rate(hits, misses)}; {_int(cache.get('evictions')):,} evictions"
    )


def _pool_line(pool: Mapping[str, Any]) -> str:
    """``48.0 MiB idle of 64.0 MiB; 31 blocks made, 33 reused``."""
    return (
        f"{human_size(_int(pool.get('idle_bytes')))} idle of "
        f"{human_size(_int(pool.get('limit')))}; {_int(pool.get('blocks_created')):,} blocks "
        f"made, {_int(pool.get('blocks_reused')):,} reused"
    )


def _dirty_line(state: Mapping[str, Any]) -> str:
    """``1.5 MiB in 3 objects (1 being written), oldest 2.4 s`` or ``nothing``."""
    objects = _int(state.get("objects"))
    if not objects:
        return "nothing"
    age = state.get("oldest_age_s")
    age_text = f", oldest {age:.1f} s" if isinstance(age, int | float) else ""
    return (
        f"{human_size(_int(state.get('bytes')))} in {objects:,} "
        f"object{'s' if objects != 1 else ''} ({_int(state.get('writes_in_flight')):,} being "
        f"written){age_text}"
    )


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  " + "  ".join(cells))
    return out


def render(doc: Mapping[str, Any]) -> str:
    """The readable summary of a stats document."""
    total = doc.get("total")
    total = total if isinstance(total, Mapping) else {}
    lines: list[tuple[str, str]] = [
        ("store", str(doc.get("store", "unknown"))),
        ("uptime", _duration(doc.get("uptime_s"))),
        ("cache", _counter_line(total)),
    ]
    for name in ("chunk_cache", "index_cache"):
        cache = doc.get(name)
        if isinstance(cache, Mapping):
            lines.append((name.replace("_", " "), _cache_line(cache)))
    pool = doc.get("buffers")
    if isinstance(pool, Mapping):
        lines.append(("buffers", _pool_line(pool)))
    known = {n for n, _ in _COUNTERS} | set(_HIT_COUNTERS)
    lines += [(label, _value(name, total[name])) for name, label in _COUNTERS if name in total]
    lines += [(name, _value(name, total[name])) for name in sorted(set(total) - known)]
    state = doc.get("dirty")
    if isinstance(state, Mapping):
        lines.append(("unstored", _dirty_line(state)))
    dirty = doc.get("dirty_arrays") or []
    lines.append(("dirty arrays", ", ".join("/" + str(p) for p in dirty) if dirty else "none"))
    for name in sorted(set(doc) - _KNOWN_TOP):
        lines.append((name, json.dumps(doc[name])))
    out = [f"{label:<15} {value}" for label, value in lines]
    skipped = doc.get("skipped_nodes") or {}
    if isinstance(skipped, Mapping) and skipped:
        out.append("skipped nodes:")
        out += [f"  /{path}: {reason}" for path, reason in sorted(skipped.items())]
    arrays = doc.get("arrays")
    if isinstance(arrays, Mapping) and arrays:
        out.append("per array:")
        out += _array_table(arrays)
    return "\n".join(out) + "\n"


_KNOWN_TOP = frozenset(
    {
        "store",
        "uptime_s",
        "total",
        "chunk_cache",
        "index_cache",
        "buffers",
        "dirty",
        "dirty_arrays",
        "skipped_nodes",
        "arrays",
    }
)


def _array_table(arrays: Mapping[str, Any]) -> list[str]:
    counters = [c if isinstance(c, Mapping) else {} for c in arrays.values()]
    columns = [n for n, _ in _COUNTERS if any(n in c for c in counters)]
    labels = dict(_COUNTERS)
    rows = [["array", "hits", "misses", "hit rate", *(labels[n] for n in columns)]]
    for path, c in sorted(zip(arrays, counters, strict=True)):
        hits, misses = _int(c.get("cache_hits")), _int(c.get("cache_misses"))
        rows.append(
            ["/" + str(path), f"{hits:,}", f"{misses:,}", hit_rate(hits, misses)]
            + [_value(n, c.get(n, 0)) for n in columns]
        )
    return _table(rows)


# ----------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zarrfs stats",
        description="Show the cache and traffic counters of a running zarrfs mount.",
    )
    parser.add_argument("mountpoint", metavar="MOUNTPOINT", help="where the store is mounted")
    parser.add_argument("--json", action="store_true", help="print the raw stats.json document")
    return parser


def _run(args: argparse.Namespace) -> int:
    raw = read_stats_bytes(args.mountpoint)
    doc = parse_stats(raw, args.mountpoint)  # validated even for --json
    if args.json:
        text = raw.decode("utf-8")
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        sys.stdout.write(render(doc))
    return 0


def main(argv: list[str]) -> int:
    """``zarrfs stats MOUNTPOINT [--json]``; returns the exit status."""
    return run_tool(build_parser(), argv, _run)
