"""``zarrfs stats``: reads ``.zarrfs/stats.json`` of a mount (a fake tree here, no FUSE)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zarrfs.tools import stats

DOC: dict[str, Any] = {
    "store": "file:///data/ocean.zarr",
    "uptime_s": 3723.5,
    "chunk_cache": {
        "hits": 90,
        "misses": 10,
        "evictions": 2,
        "rejected": 0,
        "entries": 8,
        "bytes": 32 << 20,
        "capacity": 512 << 20,
    },
    "index_cache": {
        "hits": 5,
        "misses": 1,
        "evictions": 0,
        "rejected": 0,
        "entries": 1,
        "bytes": 1024,
        "capacity": 32 << 20,
    },
    "buffers": {
        "idle_bytes": 48 << 20,
        "limit": 64 << 20,
        "blocks_created": 31,
        "blocks_reused": 1033,
    },
    "dirty_arrays": ["temp"],
    "skipped_nodes": {"bad": "bad/zarr.json: invalid JSON"},
    "total": {
        "cache_hits": 300,
        "cache_misses": 100,
        "bytes_fetched": 1 << 30,
        "chunks_decoded": 100,
        "bytes_served": 2 << 30,
        "bytes_written": 0,
        "read_errors": 3,
    },
    "arrays": {
        "temp": {
            "cache_hits": 200,
            "cache_misses": 50,
            "bytes_fetched": 512 << 20,
            "bytes_served": 1 << 30,
        },
        "sub/salt": {
            "cache_hits": 100,
            "cache_misses": 50,
            "bytes_fetched": 512 << 20,
            "chunks_decoded": 50,
            "bytes_served": 1 << 30,
            "bytes_written": 4096,
        },
    },
}


def fake_mount(root: Path, content: bytes) -> Path:
    (root / ".zarrfs").mkdir(parents=True)
    (root / ".zarrfs" / "stats.json").write_bytes(content)
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = stats.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mnt = fake_mount(tmp_path / "mnt", json.dumps(DOC, indent=2).encode())
    rc, out, err = run(capsys, str(mnt))
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert "store           file:///data/ocean.zarr" in lines
    assert "uptime          1h 02m 03s" in lines
    assert "cache           hits 300  misses 100  hit rate 75.0%" in lines
    assert (
        "chunk cache     8 entries, 32.0 MiB of 512.0 MiB; hits 90  misses 10  hit rate 90.0%; "
        "2 evictions" in lines
    )
    assert "buffers         48.0 MiB idle of 64.0 MiB; 31 blocks made, 1,033 reused" in lines
    assert not any(line.startswith("buffers  ") and "{" in line for line in lines)
    assert "fetched         1.0 GiB" in lines
    assert "chunks decoded  100" in lines
    assert "served          2.0 GiB" in lines
    assert "written         0 B" in lines
    assert "read_errors     3" in lines  # a counter the tool does not know is still shown
    assert "dirty arrays    /temp" in lines
    assert "  /bad: bad/zarr.json: invalid JSON" in lines
    table = lines[lines.index("per array:") + 1 :]
    assert table[0].split() == [
        "array",
        "hits",
        "misses",
        "hit",
        "rate",
        "fetched",
        "chunks",
        "decoded",
        "served",
        "written",
    ]
    assert table[1].split() == [
        "/sub/salt",
        "100",
        "50",
        "66.7%",
        "512.0",
        "MiB",
        "50",
        "1.0",
        "GiB",
        "4.0",
        "KiB",
    ]
    assert table[2].split() == [
        "/temp",
        "200",
        "50",
        "80.0%",
        "512.0",
        "MiB",
        "0",
        "1.0",
        "GiB",
        "0",
        "B",
    ]


def test_json_prints_the_raw_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.dumps(DOC).encode()
    mnt = fake_mount(tmp_path / "mnt", raw)
    rc, out, err = run(capsys, str(mnt), "--json")
    assert rc == 0 and err == ""
    assert out == raw.decode() + "\n"
    assert json.loads(out) == DOC


def test_empty_counters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mnt = fake_mount(tmp_path / "mnt", b'{"store": "memory://x", "total": {}, "arrays": {}}')
    rc, out, _ = run(capsys, str(mnt))
    assert rc == 0
    assert "cache           hits 0  misses 0  hit rate -" in out
    assert "dirty arrays    none" in out
    assert "per array:" not in out


def test_document_of_a_real_mount_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The summary reads what the mount's control directory actually writes."""
    from zarrfs.core.hierarchy import Hierarchy, create_array
    from zarrfs.core.stores.memory import MemoryStore
    from zarrfs.views.tree import ControlDir, MountContext

    store = MemoryStore()
    arr = create_array(
        store,
        "",
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": [8],
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
            "chunk_key_encoding": {"name": "default"},
            "fill_value": 0,
            "codecs": [{"name": "bytes"}],
        },
    )
    arr.write(0, bytes(range(1, 9)))
    arr.flush()
    hierarchy = Hierarchy(store, arr.engine)
    try:
        assert hierarchy.array("").read(0, 8) == bytes(range(1, 9))
        raw = ControlDir(MountContext(hierarchy))._stats()
    finally:
        arr.engine.close()
    mnt = fake_mount(tmp_path / "mnt", raw)
    rc, out, _ = run(capsys, str(mnt))
    assert rc == 0
    doc = json.loads(raw)
    total = doc["total"]
    hits, misses = total.get("cache_hits", 0), total.get("cache_misses", 0)
    assert f"cache           hits {hits}  misses {misses}  hit rate " in out
    assert "written         8 B" in out
    assert "served          8 B" in out
    assert out.splitlines()[-1].split()[0] == "/"  # the root array's row in the table


# ----------------------------------------------------------------------------- errors


def test_not_a_mount(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, str(tmp_path))
    assert rc == 1 and out == ""
    assert err == (
        f"zarrfs stats: error: {tmp_path} is not a zarrfs mount (no .zarrfs/stats.json in it; "
        "give the mount point itself)\n"
    )


def test_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, str(tmp_path / "nope"))
    assert rc == 1 and out == ""
    assert err == f"zarrfs stats: error: {tmp_path / 'nope'}: no such directory\n"


def test_a_file_is_not_a_mount(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    rc, _, err = run(capsys, str(tmp_path / "f"))
    assert rc == 1
    assert err.startswith("zarrfs stats: error: ") and "Traceback" not in err


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_unreadable_document(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mnt = fake_mount(tmp_path / "mnt", content)
    for argv in ([str(mnt)], [str(mnt), "--json"]):
        rc, out, err = run(capsys, *argv)
        assert rc == 1 and out == ""
        assert err.startswith("zarrfs stats: error: ") and err.count("\n") == 1
        assert "is it a zarrfs mount?" not in err and "a zarrfs mount?" in err


@pytest.mark.parametrize("argv", [[], ["a", "b"], ["--nope", "a"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert "usage: zarrfs stats" in err
