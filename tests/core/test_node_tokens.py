"""A node's version token names the metadata bytes it was parsed from.

The token is what close-to-open checks compare (``Hierarchy.revalidate``). Taken from the same
open file the document was read from (``Store.get_versioned``), a document replaced right after
it was read leaves the old token, so the next check sees the change; a token taken by a second
``lstat`` after the read would name the new file and hide the change for good.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import zarr

from zarrfs.core.hierarchy import Hierarchy
from zarrfs.core.stores import local
from zarrfs.core.stores.local import LocalStore


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    root.create_array("x", shape=(4,), chunks=(4,), dtype="<f4")[...] = 1
    return tmp_path / "s.zarr"


def _replace_doc(doc: Path, shape: list[int]) -> None:
    meta = json.loads(doc.read_text())
    meta["shape"] = shape
    tmp = doc.with_name("zarr.json.new")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, doc)


def test_a_document_replaced_right_after_it_was_read_is_seen_by_the_next_check(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = store / "x" / "zarr.json"
    real = local.pread_all
    replaced: list[bool] = []

    def read_then_replace(fd: int, length: int, start: int) -> bytes:
        data = real(fd, length, start)
        if not replaced and b'"shape"' in data:  # another client replaces it now
            replaced.append(True)
            _replace_doc(doc, [8])
        return data

    monkeypatch.setattr(local, "pread_all", read_then_replace)
    h = Hierarchy(LocalStore(str(store)))
    assert h.node("x").metadata.shape == (4,)  # the bytes read before the replacement
    assert replaced
    assert h.revalidate("x") is True  # the token named those bytes: the change shows
    assert h.node("x").metadata.shape == (8,)
    assert h.revalidate("x") is False  # and then stays current


def test_reading_a_node_asks_the_store_for_no_separate_version(
    store: Path, version_calls: list[str]
) -> None:
    s = LocalStore(str(store))
    h = Hierarchy(s)
    node = h.node("x")
    assert version_calls == []  # the version came with the read
    version = s.version("x/zarr.json")
    assert node.token == (version,)
    version_calls.clear()
    assert h.revalidate("x") is False and version_calls == ["x/zarr.json"]  # a check asks, once
