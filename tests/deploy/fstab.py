"""``mount -t fuse.zarrfs`` for the deployment tests, always with this checkout's zarrfs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

INSTALLED = Path("/usr/local/bin/zarrfs")
THIS_ZARRFS = Path(sys.executable).parent / "zarrfs"


def mount_fstab(
    source: str, mnt: Path, options: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """``mount -t fuse.zarrfs SOURCE MNT -o OPTIONS``, or mount.fuse3 with this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ZARRFS_"))}
    if INSTALLED.exists() and os.path.realpath(INSTALLED) == os.path.realpath(THIS_ZARRFS):
        command = ["mount", "-t", "fuse.zarrfs", source, str(mnt), "-o", options]
    else:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        if not (bin_dir / "zarrfs").exists():
            (bin_dir / "zarrfs").symlink_to(THIS_ZARRFS)
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        command = ["mount.fuse3", source, str(mnt), "-t", "zarrfs", "-o", options]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
