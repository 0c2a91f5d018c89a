"""What a listing of many arrays shares between them, and what it must not share.

- equal ``zarr.json`` documents parse to one metadata object (``parse_v3``), a failing one is
  never kept;
- a generated header is rendered once per distinct input (data type, shape, dimension names,
  byte order), so arrays alike share it, and arrays that differ in any input do not;
- the view memo drops its oldest entries, not all of them, when it is full;
- children are read one after the other from a quick store, concurrently from a slow one.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
import pytest
import zarr

from zarrfs.core.errors import MetadataError
from zarrfs.core.hierarchy import Hierarchy
from zarrfs.core.metadata import v3
from zarrfs.core.metadata.v3 import parse_v3
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.wrapper import StoreWrapper
from zarrfs.views import tree
from zarrfs.views.tree import open_tree

DOC = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [4],
    "data_type": "float32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0.0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    "attributes": {},
}


def _raw(**changes: Any) -> bytes:
    return json.dumps({**DOC, **changes}).encode()


# -- parse_v3 keeps parsed documents by their bytes


def test_equal_documents_parse_to_one_object() -> None:
    a = parse_v3(_raw(attributes={"k": 1}))
    b = parse_v3(bytearray(_raw(attributes={"k": 1})))  # any buffer of the same bytes
    c = parse_v3(_raw(attributes={"k": 2}))
    assert a is b
    assert c is not a and c.attributes == {"k": 2}
    assert a.to_bytes() == _raw(attributes={"k": 1})


def test_a_failing_document_fails_every_time() -> None:
    bad = _raw(shape=[-1])
    for _ in range(2):
        with pytest.raises(MetadataError):
            parse_v3(bad)
    assert bad not in v3._parsed


def test_kept_documents_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(v3, "_parsed", {})
    monkeypatch.setattr(v3, "_parsed_bytes", 0)
    monkeypatch.setattr(v3, "PARSED_KEPT", 3)
    docs = [_raw(attributes={"i": i}) for i in range(5)]
    first = [parse_v3(d) for d in docs]
    assert list(v3._parsed) == docs[2:]  # the oldest dropped first
    assert parse_v3(docs[4]) is first[4]
    assert parse_v3(docs[0]) is not first[0]  # parsed again, equal
    assert parse_v3(docs[0]) == first[0]


def test_kept_documents_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(v3, "_parsed", {})
    monkeypatch.setattr(v3, "_parsed_bytes", 0)
    docs = [_raw(attributes={"i": i, "pad": "x" * 1000}) for i in range(6)]
    monkeypatch.setattr(v3, "PARSED_TOTAL_BYTES", 3 * len(docs[0]) + 10)
    for d in docs:
        parse_v3(d)
    assert list(v3._parsed) == docs[3:]  # the oldest dropped first
    assert v3._parsed_bytes == sum(len(d) for d in docs[3:])


def test_large_documents_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(v3, "_parsed", {})
    monkeypatch.setattr(v3, "_parsed_bytes", 0)
    big = _raw(attributes={"pad": "x" * (v3.PARSED_MAX_BYTES + 1)})
    assert parse_v3(big) is not parse_v3(big)
    assert v3._parsed == {}


# -- headers rendered once per distinct input


@pytest.fixture
def alike(tmp_path: Any) -> str:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    for name in ("a", "b"):
        root.create_array(name, shape=(3, 4), chunks=(3, 4), dtype="<u2")[...] = 1
    root.create_array(
        "named", shape=(3, 4), chunks=(3, 4), dtype="<u2", dimension_names=["y", "x"]
    )[...] = 1
    root.create_array("wider", shape=(3, 5), chunks=(3, 5), dtype="<u2")[...] = 1
    root.create_array("other", shape=(3, 4), chunks=(3, 4), dtype="<i2")[...] = 1
    return str(tmp_path / "s.zarr")


def _content(d: Any, name: str) -> bytes:
    handle = d.lookup(name).open(write=False, truncate=False)
    try:
        return bytes(handle.read(0, 1 << 16))
    finally:
        handle.release()


def test_arrays_alike_share_a_header_and_others_do_not(
    alike: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zarrfs.views import arrays, legacy

    rendered: list[tuple[str, tuple[int, ...]]] = []
    real = legacy.array_header

    def counting(name: str, arr: Any, byte_order: str) -> bytes | None:
        rendered.append((name, arr.shape))
        return real(name, arr, byte_order)

    monkeypatch.setattr(arrays, "array_header", counting)  # where the views call it
    root = open_tree(alike)
    try:
        dirs = {n: root.lookup(n) for n in ("a", "b", "named", "wider", "other")}
        headers = {n: {h: _content(d, h) for h in legacy.HEADER_VIEWS} for n, d in dirs.items()}
        for n, d in dirs.items():
            assert set(legacy.HEADER_VIEWS) <= set(d.names()), n
            arr = d.array()
            for h in legacy.HEADER_VIEWS:  # each file is what a fresh rendering gives
                assert headers[n][h] == real(h, arr, "little"), (n, h)
        per_name = {h: sum(1 for r in rendered if r[0] == h) for h in legacy.HEADER_VIEWS}
        # a and b alike: one rendering; named, wider and other: one each
        assert per_name == {h: 4 for h in legacy.HEADER_VIEWS}
        assert headers["a"] == headers["b"]
        assert headers["named"]["data.nhdr"] != headers["a"]["data.nhdr"]  # axis labels
        assert headers["wider"]["data.mhd"] != headers["a"]["data.mhd"]
        assert headers["other"]["data.mhd"] != headers["a"]["data.mhd"]
    finally:
        root.close()


def test_arrays_alike_share_a_tiff_layout_unless_ome_names_them(
    alike: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zarrfs.views import tiff

    laid: list[tuple[str, str]] = []
    real = tiff.tiff_layout

    def counting(name: str, arr: Any, byte_order: str, ngff: Any) -> Any:
        laid.append((name, arr.path))
        return real(name, arr, byte_order, ngff)

    g = zarr.open_group(alike, mode="a").create_group("img")
    g.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
            "datasets": [
                {"path": p, "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}
                for p in ("0", "1")
            ],
        }
    ]
    for p in ("0", "1"):
        g.create_array(p, shape=(3, 4), chunks=(3, 4), dtype="<u2")[...] = 1
    monkeypatch.setattr(tiff, "tiff_layout", counting)
    root = open_tree(alike)
    try:
        img = root.lookup("img")
        dirs = {n: root.lookup(n) for n in ("a", "b", "named")}
        dirs.update({f"img/{p}": img.lookup(p) for p in ("0", "1")})
        for n, d in dirs.items():
            arr = d.array()
            ngff = tiff.ngff_of(root.ctx, arr.path)[0]
            assert (ngff is not None) is n.startswith("img/")
            for view in tiff.TIFF_VIEWS:
                assert view in d.names(), (n, view)
                fresh = real(view, arr, "little", ngff)
                assert d.lookup(view).stat().size == fresh.size, (n, view)
                assert _content(d, view)[: len(fresh.head)] == fresh.head, (n, view)
        for view in tiff.TIFF_VIEWS:
            paths = sorted(p for v, p in laid if v == view)
            # a and b share one layout; named, img/0 and img/1 get their own
            assert paths in (["a", "img/0", "img/1", "named"], ["b", "img/0", "img/1", "named"])
    finally:
        root.close()


# -- the view memo


def test_a_full_memo_drops_its_oldest_half(alike: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tree, "MEMO_ENTRIES", 10)
    root = open_tree(alike)
    try:
        ctx = root.ctx
        ctx._memo.clear()
        computed: list[int] = []

        def put(i: int) -> int:
            return int(ctx.memo(("k", i), lambda: computed.append(i) or i))

        for i in range(12):
            put(i)
        assert len(ctx._memo) <= 11 and ("k", 11) in ctx._memo and ("k", 0) not in ctx._memo
        computed.clear()
        assert [put(i) for i in range(6, 12)] == list(range(6, 12))
        assert computed == []  # the newest entries survived the trim
    finally:
        root.close()


# -- children read one after the other, or concurrently once the store shows latency


class _Slow(StoreWrapper):
    def __init__(self, inner: Any, seconds: float) -> None:
        super().__init__(inner)
        self.seconds = seconds
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def get(self, key: str, byte_range: Any = None) -> bytes | None:
        with self._lock:
            self.threads.add(threading.current_thread().name)
        time.sleep(self.seconds)
        return super().get(key, byte_range)


@pytest.fixture
def many(tmp_path: Any) -> str:
    root = zarr.open_group(str(tmp_path / "m.zarr"), mode="w")
    for i in range(12):
        root.create_array(f"a{i:02d}", shape=(2,), chunks=(2,), dtype="u1")
    return str(tmp_path / "m.zarr")


@pytest.mark.parametrize("seconds, concurrent", [(0.0, False), (0.01, True)])
def test_children_are_read_concurrently_only_from_a_slow_store(
    many: str, seconds: float, concurrent: bool
) -> None:
    store = _Slow(LocalStore(many), seconds)
    h = Hierarchy(store)
    h.node("")
    store.threads.clear()
    try:
        children = h.children("")
        assert [c.name for c in children] == [f"a{i:02d}" for i in range(12)]
        assert all(np.dtype("u1") == c.metadata.dtype for c in children)
        assert (len(store.threads) > 1) is concurrent, store.threads
    finally:
        h.engine.close()
