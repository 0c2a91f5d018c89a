"""Range planning of remote reads: merged parts cover every request, and slicing the parts
gives exactly what one ``get`` per request would (the store contract's clipping included)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.core.stores.base import ByteRange, RangeRequest, SuffixRange, slice_range
from zarrfs.core.stores.rangeplan import Fetched, KeyPlan, consistent, is_empty, obstore_range

OBJECT = bytes(range(256)) * 20  # 5120 bytes


def serve(plan: KeyPlan, data: bytes) -> list[bytes | None]:
    """What a server would send for each part, sliced back into the requests."""
    return plan.slices([Fetched(slice_range(data, part)) for part in plan.parts])


ranges = st.one_of(
    st.none(),
    st.builds(ByteRange, st.integers(0, 6000), st.none() | st.integers(0, 3000)),
    st.builds(SuffixRange, st.integers(0, 6000)),
)


@settings(max_examples=300, deadline=None)
@given(requests=st.lists(ranges, min_size=1, max_size=12), gap=st.integers(0, 2000))
def test_slices_agree_with_one_get_per_request(requests: list[RangeRequest], gap: int) -> None:
    plan = KeyPlan(requests, gap)
    assert serve(plan, OBJECT) == [slice_range(OBJECT, r) for r in requests]


def test_nearby_ranges_merge_and_suffixes_share_one_part() -> None:
    plan = KeyPlan(
        [ByteRange(0, 10), ByteRange(15, 5), ByteRange(100, 1), SuffixRange(4), SuffixRange(9)],
        gap=5,
    )
    assert plan.parts == [ByteRange(0, 20), ByteRange(100, 1), SuffixRange(9)]
    assert plan.owner == [0, 0, 1, 2, 2]


def test_open_ended_range_swallows_later_ones() -> None:
    plan = KeyPlan([ByteRange(50, 10), ByteRange(10), ByteRange(4000, 3)], gap=0)
    assert plan.parts == [ByteRange(10, None)]


def test_a_whole_request_makes_one_part() -> None:
    plan = KeyPlan([ByteRange(5, 5), None, SuffixRange(3)], gap=0)
    assert plan.parts == [None]
    assert serve(plan, b"0123456789abc") == [b"56789", b"0123456789abc", b"abc"]


def test_missing_object_gives_none_everywhere() -> None:
    plan = KeyPlan([ByteRange(0, 5), SuffixRange(3)], gap=0)
    assert plan.slices([Fetched(None) for _ in plan.parts]) == [None, None]


def test_consistency_of_parts() -> None:
    assert consistent([Fetched(b"a", "e1"), Fetched(b"b", "e1")])
    assert not consistent([Fetched(b"a", "e1"), Fetched(b"b", "e2")])
    assert not consistent([Fetched(b"a", "e1"), Fetched(None)])
    assert consistent([Fetched(None), Fetched(None)])
    assert not consistent([Fetched(b"a", "e1", "g1"), Fetched(b"b", "e1", "g2")])


@pytest.mark.parametrize(
    ("rng", "expected"),
    [
        (ByteRange(3, 4), (3, 7)),
        (ByteRange(3), {"offset": 3}),
        (SuffixRange(8), {"suffix": 8}),
    ],
)
def test_obstore_ranges(rng: RangeRequest, expected: object) -> None:
    assert obstore_range(rng) == expected


def test_empty_requests() -> None:
    assert is_empty(ByteRange(7, 0)) and is_empty(SuffixRange(0))
    assert not is_empty(None) and not is_empty(ByteRange(0)) and not is_empty(SuffixRange(1))
