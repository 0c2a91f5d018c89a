"""What the command line offers, read from the parsers themselves.

The man page (``zarrfs.manpage``) and the shell completion scripts
(``zarrfs.tools.completion``) are generated from this, and this is read from the argparse
parsers of ``zarrfs.cli`` and of each helper (``build_parser()`` in ``zarrfs.tools.<name>``)
plus the ``-o`` option table (``zarrfs.fuse.options.OPTION_DOCS``): one description of each
command, argument and option, so the page and the completion cannot drift from the code.

Invariants: commands come in the order ``zarrfs --help`` lists them; hidden arguments
(``help=argparse.SUPPRESS``) are left out; ``-h/--help`` is listed once per command.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from zarrfs import cli
from zarrfs.fuse.options import OPTION_DOCS


@dataclass(frozen=True)
class Option:
    """One optional argument: its flags, its value's name (None for a switch), its help."""

    flags: tuple[str, ...]
    metavar: str | None
    help: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Positional:
    metavar: str
    help: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    description: str
    usage: str
    positionals: tuple[Positional, ...]
    options: tuple[Option, ...]


def _options_of(
    parser: argparse.ArgumentParser,
) -> tuple[tuple[Positional, ...], tuple[Option, ...]]:
    positionals: list[Positional] = []
    options: list[Option] = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        choices = tuple(str(c) for c in action.choices) if action.choices else ()
        if not action.option_strings:
            name = action.metavar or action.dest.upper()
            name = name if isinstance(name, str) else " ".join(name)
            positionals.append(Positional(name, action.help or "", choices))
            continue
        metavar: str | None = None
        if action.nargs != 0:
            raw = action.metavar or action.dest.upper()
            metavar = raw if isinstance(raw, str) else " ".join(raw)
        options.append(Option(tuple(action.option_strings), metavar, action.help or "", choices))
    return tuple(positionals), tuple(options)


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().split()).removeprefix("usage: ")


def _command(name: str, summary: str, parser: argparse.ArgumentParser) -> Command:
    positionals, options = _options_of(parser)
    return Command(
        name, summary, parser.description or summary, _usage(parser), positionals, options
    )


def top_level() -> Command:
    """``zarrfs`` itself: its description and global options."""
    return _command("zarrfs", "", cli.build_parser())


def commands() -> list[Command]:
    """Every ``zarrfs`` command, with its arguments, in ``zarrfs --help`` order."""
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {a.dest: a.help or "" for a in subparsers._choices_actions}
    found = []
    for name, sub in subparsers.choices.items():
        if name in cli.TOOLS:
            sub = importlib.import_module(f"zarrfs.tools.{name}").build_parser()
        found.append(_command(name, summaries.get(name, ""), sub))
    return found


def mount_options() -> list[tuple[str, str, str]]:
    """``(name, value name or "", description)`` of every ``-o`` option."""
    return [(name, value, text) for name, (value, text) in OPTION_DOCS.items()]
