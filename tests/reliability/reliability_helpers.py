"""Helpers of the reliability tests: the fault plan, daemon memory, errno capture, zarr.json.

``FaultPlan`` writes the JSON plan ``faulty_daemon.py`` obeys and reads back its call log.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FAULTY_DAEMON = [sys.executable, str(HERE / "faulty_daemon.py")]


class FaultPlan:
    """The plan file and call log of one faulty mount."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "fault-plan.json"
        self.log_path = directory / "fault-calls.log"
        self.listable = True
        self.write([])

    @property
    def env(self) -> dict[str, str]:
        return {
            "ZARRFS_FAULT_PLAN": str(self.path),
            "ZARRFS_FAULT_LOG": str(self.log_path),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
            ),
        }

    def write(self, rules: list[dict[str, Any]], listable: bool | None = None) -> None:
        if listable is not None:
            self.listable = listable
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps({"listable": self.listable, "rules": rules}))
        os.replace(scratch, self.path)

    def clear(self) -> None:
        self.write([])

    def calls(self) -> list[tuple[str, str, str]]:
        try:
            text = self.log_path.read_text()
        except FileNotFoundError:
            return []
        return [tuple(line.split("\t")) for line in text.splitlines() if line.count("\t") == 2]  # type: ignore[misc]

    def fired(self, op: str | None = None) -> list[tuple[str, str, str]]:
        """Calls where a rule fired (optionally only for ``op``)."""
        return [c for c in self.calls() if c[2] != "-" and (op is None or c[0] == op)]

    def reset_log(self) -> None:
        self.log_path.write_text("")


def faulty_url(store_dir: Path) -> str:
    return "faulty://" + str(Path(store_dir).resolve())


def proc_status(pid: int) -> dict[str, int]:
    """VmHWM, VmRSS ... of ``pid`` in bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[name] = int(parts[0]) * 1024
    return out


def errno_of(fn: Callable[[], Any]) -> int:
    """The errno ``fn()`` fails with (0 if it succeeds)."""
    try:
        fn()
    except OSError as exc:
        return exc.errno or -1
    return 0


def pread(path: Path, offset: int, size: int, direct: bool = True) -> bytes:
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def write_array(
    root: Path,
    path: str,
    data: np.ndarray[Any, Any],
    chunks: tuple[int, ...],
    codecs: list[dict[str, Any]] | None = None,
    fill_value: Any = 0,
) -> None:
    """Write a v3 array with zarrfs' own core (so any registered codec can be used in
    ``codecs``); ``x_faulty`` codecs are written as identity, as the faulty daemon reads them."""
    from zarrfs.core.hierarchy import create_array
    from zarrfs.core.stores.local import LocalStore

    docs = codecs or [{"name": "bytes", "configuration": {"endian": "little"}}]
    # the test process does not know x_faulty: create with it removed, then patch the document
    plain = [c for c in docs if c.get("name") != "x_faulty"]
    store = LocalStore(root, create=True)
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(data.shape),
        "data_type": str(data.dtype.name),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_value,
        "codecs": plain,
        "attributes": {},
    }
    try:
        arr = create_array(store, path, doc)
        arr.write(0, np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes())
        arr.flush()
    finally:
        # closed here, not when garbage collection finds it: the store holds a descriptor of
        # its root, whose close later would be activity in a directory a test watches
        store.close()
    if plain != docs:
        meta = root / path / "zarr.json"
        stored = json.loads(meta.read_text())
        stored["codecs"] = docs
        meta.write_text(json.dumps(stored, indent=2))


def write_group(root: Path, path: str = "") -> None:
    target = root / path / "zarr.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative path -> bytes)."""
    out: dict[str, bytes] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            full = Path(dirpath) / name
            if full.is_file() and not full.is_symlink():
                out[str(full.relative_to(root))] = full.read_bytes()
    return out


def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


EIO = errno.EIO
