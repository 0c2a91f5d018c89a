"""The ``zarrfs(1)`` man page, generated from the parsers and the ``-o`` option table.

    python -m zarrfs.manpage > docs/zarrfs.1        # regenerate the committed page
    man -l docs/zarrfs.1

Everything on the page comes from the code: the commands, their arguments and help from
``zarrfs.reference`` (argparse), the mount options from ``OPTION_DOCS``, the generic options from
``GENERIC_OPTIONS``, the exit statuses and the mount lifecycle from ``zarrfs.cli``'s docstring,
the Python API from ``zarrfs.api``. ``tests/tools/test_completion_manpage.py`` checks that the
committed page is the one this module generates, so it is current whenever the tests pass.

Invariants: the output is deterministic (no date; the version is in the footer) and valid roff
(every text line escaped: backslashes, leading dots and quotes, hyphens of options).
"""

from __future__ import annotations

import re
import sys
import textwrap

from zarrfs import __version__, api, cli
from zarrfs.fuse.options import GENERIC_OPTIONS, GENERIC_PREFIXES
from zarrfs.reference import Command, Option, commands, mount_options, top_level

_SEE_ALSO = (("mount.fuse3", 8), ("fusermount3", 1), ("fstab", 5), ("systemd.mount", 5))


def _text(text: str) -> str:
    """Plain text as roff: ``\\`` escaped, ``-`` as a hyphen-minus, no control line."""
    text = text.replace("\\", "\\e").replace("-", "\\-").replace("``", "")
    return "\\&" + text if text.startswith((".", "'")) else text


def _lines(text: str) -> list[str]:
    return [_text(line) if line.strip() else ".PP" for line in text.strip().splitlines()]


def _docstring_block(doc: str, heading: str) -> str:
    """The indented block that follows ``heading`` in a docstring."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == heading) + 1
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith(" "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block)).strip()


def _example(doc: str) -> str:
    """The first indented block of a docstring (its usage example)."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block)).strip()


def _paragraph_after(doc: str, prefix: str) -> str:
    for paragraph in re.split(r"\n\s*\n", doc):
        if paragraph.strip().startswith(prefix):
            return " ".join(paragraph.split())
    raise ValueError(f"no paragraph starting {prefix!r}")


def _option(option: Option) -> list[str]:
    flags = ", ".join(f"\\fB{_text(flag)}\\fR" for flag in option.flags)
    if option.metavar:
        flags += f" \\fI{_text(option.metavar)}\\fR"
    return [".TP", flags, _text(option.help or "")]


def _command(command: Command) -> list[str]:
    out = [f".SS {_text(command.name)}", f"\\fB{_text(command.usage)}\\fR", ".PP"]
    out.append(_text(command.description))
    for positional in command.positionals:
        help_text = positional.help or ""
        if positional.choices:
            help_text = f"{help_text} (one of {', '.join(positional.choices)})".strip()
        out += [".TP", f"\\fI{_text(positional.metavar)}\\fR", _text(help_text)]
    for option in command.options:
        out += _option(option)
    return out


def _exit_status() -> list[str]:
    out = []
    for line in _docstring_block(cli.__doc__ or "", "Exit codes:").splitlines():
        code, _, text = line.strip().partition(" ")
        if code.isdigit():
            out += [".TP", f"\\fB{code}\\fR", _text(text.strip())]
        elif out:
            out[-1] += " " + _text(line.strip())
    return out


def render() -> str:
    """The whole page, as roff."""
    top = top_level()
    cmds = commands()
    out = [
        f'.TH ZARRFS 1 "" "zarrfs {__version__}" "User Commands"',
        ".SH NAME",
        f"zarrfs \\- {_text(top.description[:1].lower() + top.description[1:].rstrip('.'))}",
        ".SH SYNOPSIS",
        ".nf",
    ]
    out += [_text(c.usage) for c in cmds]
    out += [
        _text("zarrfs STORE MOUNTPOINT -o OPTIONS"),
        ".fi",
        ".SH DESCRIPTION",
        _text(top.description),
        ".PP",
        _text(_paragraph_after(cli.__doc__ or "", "``mount`` returns")),
        ".PP",
        _text(
            "The form zarrfs STORE MOUNTPOINT -o OPTIONS is the one mount.fuse3(8) runs for an "
            "fstab(5) line of type fuse.zarrfs. A MOUNTPOINT of /dev/fd/N serves a /dev/fuse "
            "descriptor that a privileged process opened and mounted; the daemon then needs no "
            "privilege."
        ),
        ".SH COMMANDS",
    ]
    for command in cmds:
        out += _command(command)
    out += [".SH GLOBAL OPTIONS"]
    for option in top.options:
        out += _option(option)
    out += [".SH MOUNT OPTIONS", _text("Given as -o OPT[,OPT...]; later options win.")]
    for name, value, text in mount_options():
        head = f"\\fB{_text(name)}\\fR" + (f"=\\fI{_text(value)}\\fR" if value else "")
        out += [".TP", head, _text(text)]
    generic = ", ".join([*sorted(GENERIC_OPTIONS), *(f"{p}*" for p in GENERIC_PREFIXES)])
    out += [
        ".PP",
        _text(f"Accepted and ignored, so fstab lines written for any file system work: {generic}."),
        ".SH PYTHON",
        ".nf",
        *_lines(_example(api.__doc__ or "")),
        ".fi",
        ".PP",
        _text(" ".join((api.mounted.__doc__ or "").split())),
        ".SH FILES",
        ".TP",
        "\\fIMOUNTPOINT\\fB/.zarrfs/stats.json\\fR",
        _text("the counters of a live mount (zarrfs stats reads it)"),
        ".TP",
        "\\fB/run/zarrfs/\\fR, \\fB$XDG_RUNTIME_DIR/zarrfs/\\fR",
        _text("pid and log files of detached daemons ($ZARRFS_RUNTIME_DIR overrides)"),
        ".SH EXIT STATUS",
        *_exit_status(),
        ".SH SEE ALSO",
        ", ".join(f"\\fB{page}\\fR({section})" for page, section in _SEE_ALSO),
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
