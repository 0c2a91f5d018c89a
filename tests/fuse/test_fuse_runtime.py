"""Process tuning the daemon applies at start (``zarrfs.fuse.runtime``)."""

from __future__ import annotations

import subprocess
import sys


def test_tune_malloc_turns_off_numpy_huge_pages() -> None:
    # in a fresh interpreter: the setting is process-wide
    code = (
        "from numpy._core.multiarray import _set_madvise_hugepage as s\n"
        "s(True)\n"
        "from zarrfs.fuse import runtime\n"
        "runtime.tune_malloc()\n"
        "print(s(True))\n"  # returns the setting it replaces
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
