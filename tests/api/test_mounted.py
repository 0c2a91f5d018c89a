"""``zarrfs.mounted`` from a plain Python process and from a Jupyter kernel (real mounts).

Each test makes a small zarr-python array, uses the mount the context manager yields and checks
the store with zarr-python afterwards. ``writeback=0`` turns the background flush off, so data
left dirty at the end of a block reaches the store only through the flush on exit.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrfs
from zarrfs.api import option_strings
from zarrfs.fuse.runtime import mount_info

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")


def make_store(tmp_path: Path) -> tuple[Path, np.ndarray]:
    store = tmp_path / "store.zarr"
    expected = np.arange(32 * 24, dtype="<i4").reshape(32, 24)
    arr = zarr.create_array(store, shape=expected.shape, chunks=(8, 8), dtype="<i4")
    arr[:] = expected
    return store, expected


def test_read_write_and_exit_waits_for_the_flush(tmp_path: Path) -> None:
    store, expected = make_store(tmp_path)
    with zarrfs.mounted(store, writeback=0) as path:
        assert mount_info(path) is not None
        assert np.array_equal(np.load(f"{path}/data.npy"), expected)
        # still open, with dirty data, when the block ends
        held = open(f"{path}/data.raw", "r+b", buffering=0)
        held.seek(4 * 24 * 3)
        held.write(np.full(24, -7, dtype="<i4").tobytes())
        assert zarr.open_array(store)[3, 0] == expected[3, 0]  # not yet stored
    try:
        held.close()
    except OSError:
        pass  # the mount went away under the open file
    assert mount_info(path) is None
    assert not os.path.exists(path)  # the temporary mountpoint is removed
    expected[3] = -7
    assert np.array_equal(zarr.open_array(store)[:], expected)


def test_given_mountpoint_and_options(tmp_path: Path) -> None:
    store, expected = make_store(tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    views = ("data.raw", "data.npy")
    with zarrfs.mounted(store, mnt, ro=True, views=views, cache_size="8M") as path:
        assert path == str(mnt)
        assert sorted(os.listdir(path)) == [
            ".zarrfs", "attributes.json", "chunks", "data.npy", "data.raw", "info.json", "zarr.json"
        ]  # fmt: skip
        assert np.fromfile(f"{path}/data.raw", dtype="<i4").tobytes() == expected.tobytes()
        with pytest.raises(OSError):
            open(f"{path}/data.raw", "r+b")
    assert mount_info(str(mnt)) is None and mnt.is_dir()


def test_a_failing_store_raises_the_daemons_message(tmp_path: Path) -> None:
    with pytest.raises(zarrfs.MountError, match=r"cannot open .*missing\.zarr.*does not exist"):
        with zarrfs.mounted(tmp_path / "missing.zarr"):
            pytest.fail("the block must not run")


def test_a_bad_option_raises_before_any_daemon(tmp_path: Path) -> None:
    store, _ = make_store(tmp_path)
    with pytest.raises(zarrfs.OptionError, match="cache_sise"):
        with zarrfs.mounted(store, cache_sise="1M"):
            pytest.fail("the block must not run")


def test_a_flush_that_fails_at_exit_raises(tmp_path: Path) -> None:
    store, _ = make_store(tmp_path)
    with pytest.raises(zarrfs.MountError, match="may not have been stored") as caught:
        with zarrfs.mounted(store, writeback=0) as path:
            held = open(f"{path}/data.raw", "r+b", buffering=0)
            held.write(b"\x01" * 64)
            # the chunk's directory becomes a file: storing chunk c/0/0 must fail
            for chunk in sorted((store / "c").rglob("*"), reverse=True):
                chunk.unlink() if chunk.is_file() else chunk.rmdir()
            (store / "c").rmdir()
            (store / "c").write_bytes(b"")
    assert "flush" in str(caught.value)
    assert mount_info(path) is None
    try:
        held.close()
    except OSError:
        pass


NOTEBOOK_CELL = """
import numpy as np, zarrfs
with zarrfs.mounted({store!r}, writeback=0) as path:
    before = np.load(path + "/data.npy")
    with open(path + "/data.raw", "r+b") as f:
        f.write(np.full(24, 99, dtype="<i4").tobytes())
    after = np.fromfile(path + "/data.raw", dtype="<i4")
print(int(before.sum()), int(after[:24].sum()))
"""


def test_from_a_jupyter_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernel's connection file and IPython's profile go to this test's directory
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    store, expected = make_store(tmp_path)
    cell = nbformat.v4.new_code_cell(textwrap.dedent(NOTEBOOK_CELL.format(store=str(store))))
    notebook = nbformat.v4.new_notebook(cells=[cell])
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    outputs = notebook.cells[0].outputs
    assert [o.get("output_type") for o in outputs] == ["stream"], outputs
    assert outputs[0]["text"].split() == [str(int(expected.sum())), str(99 * 24)]
    expected[0] = 99
    assert np.array_equal(zarr.open_array(store)[:], expected)


def test_keyword_options_become_o_options() -> None:
    assert option_strings(
        {"ro": True, "rw": False, "uid": None, "cache_size": "64M", "views": ("data.raw", "x")}
    ) == ["ro", "cache_size=64M", "views=data.raw:x"]
