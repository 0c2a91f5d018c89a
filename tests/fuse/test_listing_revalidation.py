"""Close-to-open checks while a listing is prepared (``nodecalls.prepare_listing``).

- the metadata of an array read by the group listing that is being prepared is not checked
  against the store a second time when the array's own listing is prepared with it;
- an array read before that listing (an earlier walk) is checked, so a change made by another
  store client since then shows in the listing prepared ahead.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import zarr

from zarrfs.fuse import nodecalls
from zarrfs.views.tree import open_tree

ARRAYS = ("a", "b", "c")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    group = root.create_group("g")
    for name in ARRAYS:
        group.create_array(name, shape=(4,), chunks=(4,), dtype="<f4")[...] = 1
    return tmp_path / "s.zarr"


def _walk(root: Any) -> dict[str, nodecalls.Prelisted]:
    """What an ``opendir`` + ``readdir`` of ``g`` does: list it, then prepare its children
    (and the listings below them) with the time the listing started."""
    group = root.lookup("g")
    listed_at = time.monotonic()
    names = nodecalls.list_dir(group)
    _, ahead = nodecalls.prepare_listing(group, names, 0, len(names), listed_at)
    return {"/".join(p.below): p for p in ahead}


def _array_checks(calls: list[str]) -> list[str]:
    return [k for k in calls if k.startswith(tuple(f"g/{n}/" for n in ARRAYS))]


def test_arrays_read_by_the_listing_are_not_checked_again(
    store: Path, version_calls: list[str]
) -> None:
    root = open_tree(str(store))
    ahead = _walk(root)
    assert set(ARRAYS) <= set(ahead)  # each array's listing is prepared with the group's
    # the version of each array's document came with its read (``get_versioned``), and no
    # second check asked the store again
    assert _array_checks(version_calls) == []


def test_arrays_read_before_the_listing_are_checked_and_changes_show(
    store: Path, version_calls: list[str]
) -> None:
    root = open_tree(str(store))
    _walk(root)  # an earlier walk: the arrays' metadata is cached from here on
    doc = store / "g" / "b" / "zarr.json"
    meta = json.loads(doc.read_text())
    meta["shape"] = [8]  # another store client grows b
    doc.write_text(json.dumps(meta))
    version_calls.clear()
    ahead = _walk(root)
    assert sorted(_array_checks(version_calls)).count("g/b/zarr.json") >= 1
    assert {f"g/{n}/zarr.json" for n in ARRAYS} <= set(_array_checks(version_calls))
    b = ahead["b"]
    sizes = {name: st.size for _, name, _, st in b.prepared}
    assert sizes["data.raw"] == 8 * 4  # the prepared listing shows the new shape
    assert {name: st.size for _, name, _, st in ahead["a"].prepared}["data.raw"] == 4 * 4


def test_without_a_listing_time_every_array_is_checked(
    store: Path, version_calls: list[str]
) -> None:
    root = open_tree(str(store))
    group = root.lookup("g")
    names = nodecalls.list_dir(group)  # reads the arrays' metadata
    version_calls.clear()
    nodecalls.prepare_listing(group, names, 0, len(names))  # listed at an unknown time
    checked = _array_checks(version_calls)
    # the children were read before this call started: each is checked when listed ahead
    assert {f"g/{n}/zarr.json" for n in ARRAYS} <= set(checked)


def test_a_fault_in_one_view_does_not_hide_its_siblings(
    store: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A view whose rendering fails with an unexpected error (a fault of zarrfs, not a store
    or data error) is left out of the listing and logged with its trace; the array's other
    files are still listed."""
    from zarrfs.views import arrays

    def broken(*args: Any) -> int:
        raise OverflowError("a fault in a header")

    monkeypatch.setattr(arrays, "nifti_prefix_size", broken)
    root = open_tree(str(store))
    try:
        array = root.lookup("g").lookup("a")
        names = nodecalls.list_dir(array)
        assert {"data.nii", "data.raw"} <= set(names)
        listed = [name for _, name, _, _ in nodecalls.prepare_children(array, names, 0, len(names))]
        assert "data.raw" in listed and "zarr.json" in listed
        assert "data.nii" not in listed
        assert "a fault in a header" in caplog.text
    finally:
        root.close()
