"""Secrets for the daemon's environment: ``-o credentials=FILE`` and ``-o env.NAME=VALUE``.

fstab lines and mount units run ``zarrfs`` without an environment, so a store's credentials
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``GOOGLE_*``, ``AZURE_*``) come either from
a credentials file or from ``env.`` options. Both end up in the daemon's own environment, where
the store clients read them.

Invariants:
- a credentials file is used only if it is a regular file owned by root (or by the user the
  daemon runs as) that others cannot read or write and its group cannot write (``chmod 600`` or
  ``640``); anything else is refused before the store is opened;
- its lines are ``NAME=VALUE`` (``export NAME=VALUE`` and quoted values accepted; ``#``
  comments and blank lines skipped), as in a systemd ``EnvironmentFile``;
- ``env.`` options are applied after the file (they win);
- no secret is written to a log, an error message, or the argv of a process zarrfs starts: the
  detached daemon gets ``env.`` values through its environment (``split_environment``) and
  reads the file itself, so ``ps`` shows the file's path and no value.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Iterable, MutableMapping

from zarrfs.fuse.options import MountOptions, OptionError, is_env_option

_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


class CredentialsError(OptionError):
    """The credentials file is missing, unsafe or malformed (the message never shows a value)."""


def check_credentials_file(path: str, euid: int | None = None) -> os.stat_result:
    """The file's stat; ``CredentialsError`` unless it is safe to take secrets from."""
    euid = os.geteuid() if euid is None else euid
    try:
        st = os.stat(path)
    except OSError as exc:
        raise CredentialsError(f"credentials file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise CredentialsError(f"credentials file {path} is not a regular file")
    if st.st_uid not in (0, euid):
        raise CredentialsError(
            f"refusing credentials file {path}: owned by uid {st.st_uid}, not by root"
        )
    if st.st_mode & 0o027:
        raise CredentialsError(
            f"refusing credentials file {path}: mode {stat.S_IMODE(st.st_mode):04o} lets other "
            "users read or change it (chmod 600 it)"
        )
    return st


def _value(text: str) -> str:
    text = text.strip()
    if text[:1] in ("'", '"'):
        parts = shlex.split(text)
        if len(parts) != 1:
            raise ValueError
        return parts[0]
    return text


def read_credentials_file(path: str, euid: int | None = None) -> dict[str, str]:
    """The ``NAME=VALUE`` pairs of a checked credentials file."""
    check_credentials_file(path, euid)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"credentials file {path}: cannot read it ({exc})") from None
    found: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        try:
            if match is None:
                raise ValueError
            found[match.group(1)] = _value(match.group(2))
        except ValueError:
            raise CredentialsError(
                f"credentials file {path}, line {number}: not NAME=VALUE"
            ) from None
    return found


def apply_environment(
    options: MountOptions, environ: MutableMapping[str, str] | None = None
) -> list[str]:
    """Put the credentials file's and the ``env.`` options' variables into ``environ``
    (``os.environ``); returns the names set (for a log line: names only)."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    if options.credentials is not None:
        values.update(read_credentials_file(options.credentials))
    values.update(options.environment)
    environ.update(values)
    return sorted(values)


def split_environment(option_strings: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """``-o`` strings without their ``env.`` items, and those items as variables: what a child
    daemon gets in its argv and in its environment."""
    kept: list[str] = []
    variables: dict[str, str] = {}
    for option_string in option_strings:
        items = []
        for item in option_string.split(","):
            if is_env_option(item):
                name, _, value = item.strip()[len("env.") :].partition("=")
                variables[name] = value
            else:
                items.append(item)
        if any(item.strip() for item in items):
            kept.append(",".join(items))
    return kept, variables
