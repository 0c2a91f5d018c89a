"""``zarrfs completion bash|zsh`` and the ``zarrfs(1)`` page, both generated from the parsers.

The bash function is run for real (COMP_WORDS/COMP_CWORD set as bash sets them); the zsh
script is loaded by zsh with compinit. The committed docs/zarrfs.1 must be the page
``python -m zarrfs.manpage`` generates now (regenerate it when an option or a help text
changes), and man(1) must render it without a warning.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zarrfs.fuse.options import OPTION_DOCS
from zarrfs.manpage import render
from zarrfs.reference import commands

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "zarrfs.1"
ZARRFS = [sys.executable, "-m", "zarrfs"]


@functools.cache
def script(shell: str) -> str:
    result = subprocess.run([*ZARRFS, "completion", shell], capture_output=True, text=True,
                            cwd=REPO, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def bash_complete(tmp_path: Path, *words: str) -> list[str]:
    """What the completion offers with the cursor at the end of the last word."""
    source = tmp_path / "zarrfs.bash"
    source.write_text(script("bash"))
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"source {source}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
        '_zarrfs; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(["bash", "-c", program], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line]


def test_bash_registers_the_completion() -> None:
    result = subprocess.run(
        ["bash", "-c", f"source <({' '.join(ZARRFS)} completion bash); complete -p zarrfs"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "complete -F _zarrfs zarrfs"


def test_bash_completes_commands_options_and_mount_options(tmp_path: Path) -> None:
    (tmp_path / "store.zarr").mkdir()
    assert bash_complete(tmp_path, "zarrfs", "")[:7] == [c.name for c in commands()]
    assert bash_complete(tmp_path, "zarrfs", "um") == ["umount"]
    assert bash_complete(tmp_path, "zarrfs", "mount", "--f") == ["--foreground"]
    assert bash_complete(tmp_path, "zarrfs", "umount", "--") == ["--help", "--lazy", "--timeout"]
    assert bash_complete(tmp_path, "zarrfs", "check", "-") == [
        "-h", "--help", "-j", "--jobs", "-q", "--quiet"]  # fmt: skip
    assert bash_complete(tmp_path, "zarrfs", "completion", "") == ["bash", "zsh"]
    assert bash_complete(tmp_path, "zarrfs", "mount", "st") == ["store.zarr"]
    assert bash_complete(tmp_path, "zarrfs", "mount", "-o", "ro,allow_") == ["ro,allow_other"]
    assert bash_complete(tmp_path, "zarrfs", "mount", "-o", "cache") == ["cache_size="]
    every = bash_complete(tmp_path, "zarrfs", "mount", "-o", "")
    expected = {"env." if n.startswith("env.") else n + ("=" if v else "")
                for n, (v, _) in OPTION_DOCS.items()}  # fmt: skip
    assert set(every) == expected


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh (scripts/setup.sh --test)")
def test_zsh_loads_the_completion(tmp_path: Path) -> None:
    source = tmp_path / "_zarrfs"
    source.write_text(script("zsh"))
    syntax = subprocess.run(["zsh", "-n", str(source)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    program = (
        f"autoload -U compinit; compinit -u -D; source {source}; print -r -- $_comps[zarrfs]; "
        "functions _zarrfs_mount_options"
    )
    result = subprocess.run(["zsh", "-c", program], capture_output=True, text=True,
                            env={**os.environ, "HOME": str(tmp_path)}, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, _, body = result.stdout.partition("\n")
    assert first == "_zarrfs"
    for name in OPTION_DOCS:
        assert f"'{name}[" in body, name


def zsh_complete(tmp_path: Path, line: str) -> str:
    """The last line a terminal shows after typing ``line`` and TAB in zsh."""
    functions = tmp_path / "functions"
    functions.mkdir(exist_ok=True)
    (functions / "_zarrfs").write_text(script("zsh"))  # as scripts/setup.sh installs it
    env = {**os.environ, "HOME": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    result = subprocess.run(
        ["zsh", "-f", str(REPO / "tests" / "tools" / "zsh_complete.zsh"), line, str(functions)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    shown = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b[=>]|\x07", "", result.stdout)
    text: list[str] = []
    for char in shown.replace("\r", "\n"):  # a backspace takes back the character before it
        if char == "\b":
            if text and text[-1] != "\n":
                text.pop()
        else:
            text.append(char)
    return "\n".join(ln.rstrip() for ln in "".join(text).splitlines() if ln.strip())


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh (scripts/setup.sh --test)")
def test_zsh_completes_from_fpath(tmp_path: Path) -> None:
    assert zsh_complete(tmp_path, "zarrfs um").endswith(">zarrfs umount")
    assert zsh_complete(tmp_path, "zarrfs umount --t").endswith(">zarrfs umount --timeout")
    shown = zsh_complete(tmp_path, "zarrfs mount -o ro,allow_")
    assert shown.endswith(">zarrfs mount -o ro,allow_other,"), shown
    assert zsh_complete(tmp_path, "zarrfs mount -o cache_s").endswith("-o cache_size=")
    assert "bash  zsh" in zsh_complete(tmp_path, "zarrfs completion ")


def test_the_committed_man_page_is_current() -> None:
    assert PAGE.read_text() == render(), (
        "docs/zarrfs.1 is out of date: python -m zarrfs.manpage > docs/zarrfs.1"
    )


@pytest.mark.skipif(shutil.which("man") is None, reason="needs man-db (scripts/setup.sh --test)")
def test_man_renders_the_page_without_warnings() -> None:
    result = subprocess.run(
        ["man", "--warnings", "-l", str(PAGE)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat"},
    )  # fmt: skip
    assert result.returncode == 0 and result.stderr == "", result.stderr
    text = result.stdout
    for needed in ("ZARRFS(1)", "SYNOPSIS", "MOUNT OPTIONS", "EXIT STATUS", "zarrfs.mounted"):
        assert needed in text, needed
    for command in commands():
        assert f"zarrfs {command.name}" in text
    for name in OPTION_DOCS:
        assert name in text, name
