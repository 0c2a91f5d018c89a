"""A metadata edit and a resize of the same array never cross: each is a read-modify-write of
the array's metadata document, and one written over the other would undo it (an attribute edit
writing back the shape from before a resize hides the rows the resize added, and their chunks
would come back, as old data, when the array grows again)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import zarr

from zarrfs.core.hierarchy import Hierarchy
from zarrfs.core.stores.local import LocalStore
from zarrfs.views.editing import commit_metadata
from zarrfs.views.tree import MountContext


class HeldMetadataWrites(LocalStore):
    """The first write of ``a/zarr.json`` after ``hold`` is set waits until ``release``."""

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.hold = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()

    def set(self, key, value, *args, **kwargs):  # type: ignore[no-untyped-def]
        if key == "a/zarr.json" and self.hold.is_set() and not self.holding.is_set():
            self.holding.set()
            assert self.release.wait(30), "the test never released the write"
        return super().set(key, value, *args, **kwargs)


def test_an_attribute_edit_waits_for_a_resize_in_progress(tmp_path: Path) -> None:
    z = zarr.create_array(str(tmp_path / "s"), name="a", shape=(10, 4), chunks=(4, 4), dtype="u1")
    z[...] = 7
    store = HeldMetadataWrites(tmp_path / "s")
    h = Hierarchy(store)
    ctx = MountContext(hierarchy=h)
    arr = h.array("a")
    store.hold.set()
    resizer = threading.Thread(target=arr.resize, args=((20, 4),))
    resizer.start()
    assert store.holding.wait(30)  # the resize is storing the new shape
    editor = threading.Thread(
        target=commit_metadata, args=(ctx, "a", "attributes.json", b'{"k": 1}')
    )
    editor.start()
    time.sleep(0.3)  # an edit that did not wait for the resize would be done by now
    store.release.set()
    resizer.join(30)
    editor.join(30)
    doc = json.loads((tmp_path / "s" / "a" / "zarr.json").read_text())
    assert doc["shape"] == [20, 4], "the attribute edit wrote back the shape from before"
    assert doc["attributes"] == {"k": 1}, "the resize wrote back the attributes from before"
    assert h.array("a").shape == (20, 4)
    back = zarr.open_array(str(tmp_path / "s" / "a"), mode="r")[...]
    assert np.array_equal(back[:10], np.full((10, 4), 7)) and not back[10:].any()


def test_a_resize_through_an_array_opened_before_an_edit_keeps_the_edit(tmp_path: Path) -> None:
    """A writer growing ``data.raw`` holds the array object it opened; an attribute edit
    committed between its open and its resize is kept (the resize stores the shape on top
    of the node's document as it is now, not the one the object was opened with)."""
    z = zarr.create_array(str(tmp_path / "s"), name="a", shape=(10, 4), chunks=(4, 4), dtype="u1")
    z[...] = 7
    h = Hierarchy(LocalStore(str(tmp_path / "s")))
    ctx = MountContext(hierarchy=h)
    arr = h.array("a")
    doc = json.loads((tmp_path / "s" / "a" / "zarr.json").read_text())
    doc["attributes"] = {"k": 2}
    doc["dimension_names"] = ["t", "x"]
    commit_metadata(ctx, "a", "zarr.json", json.dumps(doc).encode())
    arr.resize((12, 4))
    doc = json.loads((tmp_path / "s" / "a" / "zarr.json").read_text())
    assert doc["shape"] == [12, 4]
    assert doc["attributes"] == {"k": 2} and doc["dimension_names"] == ["t", "x"]
    assert h.array("a").shape == (12, 4)
