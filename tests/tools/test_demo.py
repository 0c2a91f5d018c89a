"""``zarrfs demo`` and a new user's first contact: the transcript runs to its end, an optional
program that is missing is named in one line, and no dependency's warning reaches the terminal."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zarrfs.tools import demo

#: what a warning or a traceback looks like on a terminal
NOISE = re.compile(r"Traceback|Warning:|warnings\.warn", re.IGNORECASE)


@pytest.mark.timeout(180)
def test_demo_runs_to_its_end_without_noise(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "zarrfs", "demo", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=170,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert not NOISE.search(out), out
    assert "# data.raw is byte-identical to the array written" in out
    assert out.rstrip().endswith("# demo finished: mounted, read with ordinary tools, unmounted")
    assert not os.path.ismount(tmp_path / "mnt")


@pytest.mark.timeout(180)
def test_demo_skips_a_missing_program_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_which = shutil.which
    monkeypatch.setattr(
        demo.shutil, "which", lambda name, *a, **k: None if name == "getfattr" else real_which(name)
    )
    try:
        rc = demo.main(["--dir", str(tmp_path)])
    finally:
        if os.path.ismount(tmp_path / "mnt"):
            subprocess.run(["fusermount3", "-u", "-z", str(tmp_path / "mnt")], check=False)
    out = capsys.readouterr().out
    assert rc == 0
    lines = [ln for ln in out.splitlines() if "getfattr" in ln]
    assert lines[1] == "# getfattr is not installed (Debian package attr): skipped", lines
    assert len(lines) == 2, lines  # the command as typed, and the one line saying why
    assert "# demo finished" in out


def test_no_crc32c_notice_without_google_crc32c(tmp_path: Path) -> None:
    """On a machine without google-crc32c (the runtime install), numcodecs announces at import
    that it prefers it; zarrfs' commands must not pass that on to the user."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        # a None entry makes find_spec answer None and import fail, as when not installed
        "import sys\nsys.modules['google_crc32c'] = None\n"
    )
    store = tmp_path / "s.zarr"
    demo.build_store(store)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(hide), *sys.path])))
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('google_crc32c'))"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert probe.stdout.strip() == "None", probe  # hidden, so the test can fail
    res = subprocess.run(
        [sys.executable, "-m", "zarrfs", "info", str(store)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert "temperature" in res.stdout


@pytest.mark.timeout(180)
def test_demo_unmounts_when_its_reader_goes_away(tmp_path: Path) -> None:
    """``zarrfs demo | head``: the demo's output pipe closes mid-way; the mount still goes."""
    demo_cmd = [sys.executable, "-m", "zarrfs", "demo", "--dir", str(tmp_path)]
    proc = subprocess.Popen(demo_cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    for _ in range(40):  # read past the mount (the info tree and the mount come first)
        if b"findmnt" in proc.stdout.readline():
            break
    proc.stdout.close()
    proc.wait(170)
    assert (tmp_path / "mnt").is_dir()
    assert not os.path.ismount(tmp_path / "mnt")
