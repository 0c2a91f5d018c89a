"""The pyfuse3 that ``scripts/setup.sh`` builds carries every patch in ``scripts/``.

Each patch sets a module constant that zarrfs (or these tests) can check; a pyfuse3 that did
not come from ``scripts/setup.sh`` (a released wheel) is skipped: zarrfs works with it, as the
README's "Dependencies" says, without what the patches give.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"

#: each patch of scripts/ and the constant it adds to pyfuse3
MARKERS = {
    "readdir-inode": "READDIR_TOKEN_INODE",
    "max-background": "MAX_BACKGROUND",
    "nogil-io": "NOGIL_IO",
}


def _setup_version() -> str:
    m = re.search(r"^patched=(\S+)$", (SCRIPTS / "setup.sh").read_text(), re.MULTILINE)
    assert m, "scripts/setup.sh names the pyfuse3 version it builds"
    return m.group(1)


def test_every_patch_of_scripts_has_its_marker() -> None:
    patches = {p.name[len("pyfuse3-") : -len(".patch")] for p in SCRIPTS.glob("pyfuse3-*.patch")}
    assert patches == set(MARKERS)
    setup = (SCRIPTS / "setup.sh").read_text()
    loop = re.search(r"for name in ([^;]+); do", setup)
    assert loop and set(loop.group(1).split()) == patches, "setup.sh applies every patch"
    for name, marker in MARKERS.items():
        text = (SCRIPTS / f"pyfuse3-{name}.patch").read_text()
        assert f"+{marker} = True" in text


def test_the_installed_pyfuse3_is_the_setup_build_with_every_patch() -> None:
    import pyfuse3

    version = importlib.metadata.version("pyfuse3")
    if "+zarrfs" not in version:
        pytest.skip(f"pyfuse3 {version} was not built by scripts/setup.sh")
    assert version == _setup_version(), "scripts/setup.sh was not run since its patches changed"
    missing = [marker for marker in MARKERS.values() if not getattr(pyfuse3, marker, False)]
    assert not missing
