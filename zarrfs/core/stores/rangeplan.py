"""Range planning for remote reads: the requests of one key merged into few fetches, and each
request's bytes cut back out of what was fetched.

Spec: Zarr v3 core, "Stores" (``get_partial_values``); RFC 9110 §14 byte ranges. Pure code, no I/O.

Invariants:
- ``KeyPlan(ranges, gap).parts`` covers every request: a whole-object request makes the single
  part ``None``; otherwise the ``ByteRange`` requests, sorted, are merged while the next starts
  within ``gap`` bytes of the end of the current span (open-ended ones extend it to the end),
  and every ``SuffixRange`` is served by one part, the longest suffix asked for.
- ``KeyPlan.slices(fetched)`` gives, for each request in order, exactly what the store contract
  says a single ``get`` would give, provided each part's bytes are what the server sent for it
  (ranges clipped at the end of the object, as HTTP does); a missing part gives None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zarrfs.core.stores.base import ByteRange, RangeRequest, SuffixRange, slice_range

_END = float("inf")


@dataclass(frozen=True)
class Fetched:
    """One object or range read: its bytes (None: missing) and the version they belong to."""

    data: bytes | None
    etag: str | None = None
    generation: str | None = None
    #: the whole object's size, when the answer said it
    size: int | None = None

    @property
    def whole(self) -> bool:
        """True if ``data`` is the entire object (a range that happened to cover it counts)."""
        return self.data is not None and self.size == len(self.data)


def obstore_range(rng: RangeRequest) -> Any:
    """The obstore ``GetOptions.range`` for a non-empty range request."""
    if isinstance(rng, SuffixRange):
        return {"suffix": rng.length}
    if not isinstance(rng, ByteRange):
        raise TypeError(f"not a range request: {rng!r}")
    if rng.length is None:
        return {"offset": rng.start}
    return (rng.start, rng.start + rng.length)


def is_empty(rng: RangeRequest) -> bool:
    """True for a request of zero bytes (its answer needs only to know whether the key exists)."""
    if isinstance(rng, ByteRange):
        return rng.length == 0
    return isinstance(rng, SuffixRange) and rng.length == 0


def consistent(parts: list[Fetched]) -> bool:
    """All parts of one key present and of one version, or all missing."""
    present = [p.data is not None for p in parts]
    if not all(present):
        return not any(present)
    return len({(p.etag, p.generation) for p in parts}) == 1


class KeyPlan:
    """The requests of one key: merged into ``parts``, served back by ``slices``."""

    def __init__(self, ranges: list[RangeRequest], gap: int) -> None:
        self.ranges = list(ranges)
        self.parts: list[RangeRequest] = []
        #: for each request, the index of the part that serves it
        self.owner: list[int] = []
        if any(r is None for r in self.ranges):
            self.parts = [None]
            self.owner = [0] * len(self.ranges)
            return
        spans: list[list[float]] = []
        byte_ranges = [r for r in self.ranges if isinstance(r, ByteRange)]
        for r in sorted(byte_ranges, key=lambda r: r.start):
            end = _END if r.length is None else r.start + r.length
            if spans and r.start <= spans[-1][1] + gap:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([r.start, end])
        for start, end in spans:
            self.parts.append(ByteRange(int(start), None if end == _END else int(end - start)))
        suffixes = [r.length for r in self.ranges if isinstance(r, SuffixRange)]
        if suffixes:
            self.parts.append(SuffixRange(max(suffixes)))
        for request in self.ranges:
            if isinstance(request, ByteRange):
                self.owner.append(_span_of(spans, request))
            else:
                self.owner.append(len(spans))  # the suffix part

    def slices(self, fetched: list[Fetched]) -> list[bytes | None]:
        """Each request's bytes from the parts' fetched bytes (in ``parts`` order)."""
        out: list[bytes | None] = []
        for r, owner in zip(self.ranges, self.owner, strict=True):
            part, got = self.parts[owner], fetched[owner].data
            if got is None:
                out.append(None)
            elif part is None:
                out.append(slice_range(got, r))
            elif isinstance(r, SuffixRange):
                out.append(got[len(got) - min(r.length, len(got)) :] if r.length else b"")
            else:
                assert isinstance(r, ByteRange) and isinstance(part, ByteRange)
                lo = r.start - part.start
                out.append(got[lo:] if r.length is None else got[lo : lo + r.length])
        return out


def _span_of(spans: list[list[float]], r: ByteRange) -> int:
    end = _END if r.length is None else r.start + r.length
    for i, (start, stop) in enumerate(spans):
        if start <= r.start and end <= stop:
            return i
    raise AssertionError(f"no span holds {r}")  # unreachable: spans cover every range
