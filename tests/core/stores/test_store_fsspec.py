"""The fsspec-backed store (optional extra) runs the store contract on fsspec's memory
filesystem, reached through the registry's ``fsspec+PROTO://`` form."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from test_store_contract import WritableStoreContract

from zarrfs.core.errors import UnsupportedError
from zarrfs.core.hierarchy import create_array, open_array
from zarrfs.core.stores.base import Store
from zarrfs.core.stores.fsspecstore import FsspecStore
from zarrfs.core.stores.registry import open_store

_ids = itertools.count()


class TestFsspecMemoryStore(WritableStoreContract):
    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        store = open_store(f"fsspec+memory://contract{next(_ids)}/root")
        assert isinstance(store, FsspecStore)
        for key, value in contents.items():
            store.set(key, value)
        return store


def test_arrays_round_trip_through_an_fsspec_store():
    store = open_store(f"fsspec+memory://arrays{next(_ids)}/data.zarr")
    doc = {
        "zarr_format": 3, "node_type": "array", "shape": [10, 6], "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip"}],
    }  # fmt: skip
    arr = create_array(store, "a", doc)
    data = np.arange(60, dtype="<i2").reshape(10, 6)
    arr.write(0, data.tobytes())
    arr.flush()
    assert open_array(store, "a").read(0, 120) == data.tobytes()
    assert "a/c/2/1" in set(store.list_prefix("a/"))


def test_unknown_scheme_without_fsspec_support_is_refused():
    with pytest.raises(UnsupportedError, match="unknown scheme"):
        open_store("nosuchproto://x/y")
