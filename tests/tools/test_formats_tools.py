"""info and check find the chunks of arrays in every format (draft chunks live under data/root)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core" / "formats"))

from spec_generators import entry_point, write_array  # noqa: E402

from zarrfs.core.stores.memory import MemoryStore  # noqa: E402
from zarrfs.tools import check, info  # noqa: E402


def test_draft_store_chunks_are_counted_and_checked(capsys):
    store = MemoryStore.named("tools-draft")
    entry_point(store)
    write_array(store, "grid/a", np.arange(60, dtype="<i4").reshape(6, 10), (3, 5), data_type="<i4")
    assert info.main(["memory://tools-draft", "--json"]) == 0
    nodes = {n["path"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert nodes["/grid/a"]["stored_chunks"] == 4 and nodes["/grid/a"]["stored_bytes"] > 0
    assert check.main(["memory://tools-draft", "--quiet"]) == 0
    key = "data/root/grid/a/c1/1"
    store.set(key, b"garbage")
    assert check.main(["memory://tools-draft", "--quiet"]) == 1
    assert key in capsys.readouterr().out
    MemoryStore.forget("tools-draft")
