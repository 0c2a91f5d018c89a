"""``-o`` mount options -> ``MountOptions`` (DESIGN §3 "Command line").

``MountOptions`` is the one record of how a mount was asked to behave. The FUSE layer reads the
mount-convention fields (ro, allow_other, uid, ...); the tree builder (``zarrfs.views.tree``)
reads the zarrfs fields (cache_size, byte_order, views, endpoint, ...). A zarrfs field left at
``None`` means "the tree builder's default".

Invariants:
- parsing is pure: the same strings give the same options (no store or kernel access, except
  resolving user and group names for ``uid=``/``gid=``);
- later options win (``-o ro -o rw`` is read-write), as with mount(8);
- an unknown option or a malformed value raises ``OptionError`` naming it; generic mount(8)
  options (``_netdev``, ``nofail``, ``x-systemd.*``, ``nosuid``, ...) are accepted and recorded
  in ``ignored`` so fstab entries written for any filesystem work;
- sizes accept a binary suffix: ``512K``, ``64M``, ``2G``, ``1T`` (also ``KiB``/``KB`` forms);
- ``byte_order=native`` is resolved here, so consumers only ever see ``little`` or ``big``.

``views=`` lists view names separated by ``:`` (the comma separates options): ``views=raw:npy``.

Secrets: ``env.NAME=VALUE`` sets an environment variable of the daemon (the AWS_*, GOOGLE_*,
AZURE_* variables the stores read) and ``credentials=PATH`` names a file of ``NAME=VALUE``
lines read by the daemon (``zarrfs.fuse.credentials``), the two ways an fstab line or a mount
unit, which have no environment, can configure a store. Their values are kept out of
``MountOptions``' repr and out of every error message.
"""

from __future__ import annotations

import grp
import pwd
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from zarrfs.core.errors import ZarrFSError

#: options mount(8), mount.fuse3 and systemd pass that make no difference to zarrfs
GENERIC_OPTIONS = frozenset(
    {
        "_netdev", "nofail", "noauto", "auto", "dev", "nodev", "suid", "nosuid", "exec",
        "noexec", "user", "users", "nouser", "owner", "group", "defaults", "async",
        "atime", "noatime", "relatime", "norelatime", "strictatime", "nostrictatime",
        "diratime", "nodiratime", "lazytime", "nolazytime", "sync", "dirsync", "mand",
        "nomand", "silent", "loud", "iversion", "noiversion", "symfollow", "nosymfollow",
    }
)  # fmt: skip
#: prefixes of generic options: ``x-systemd.automount``, ``x-gvfs-show``, ``comment=...``
GENERIC_PREFIXES = ("x-", "comment=")

LOG_LEVELS = ("debug", "info", "warning", "error")
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class OptionError(ZarrFSError):
    """A ``-o`` option is unknown or has a malformed value (the CLI exits 2)."""


@dataclass(frozen=True)
class MountOptions:
    """Everything ``-o`` can say about a mount; defaults are those of a plain ``zarrfs mount``."""

    # mount conventions (the FUSE layer)
    ro: bool = False
    allow_other: bool = False
    default_permissions: bool = False
    auto_unmount: bool = False
    #: owner reported for every node; None: the user who mounted
    uid: int | None = None
    gid: int | None = None
    #: permission bits cleared from every mode
    umask: int = 0
    #: kernel attribute/entry cache seconds; None: ``operations.DEFAULT_TIMEOUTS``
    attr_timeout: float | None = None
    #: worker threads for blocking node calls (the offload capacity)
    threads: int = 16
    #: seconds a data request may take before it fails with EIO (flushes get 10x)
    timeout: float = 60.0
    log_level: str = "info"
    # zarrfs (the tree builder); None: its default
    cache_size: int | None = None
    byte_order: str = "little"
    #: bytes read ahead on sequential reads
    prefetch: int | None = None
    #: the kernel's read-ahead window for this mount (bytes; also its largest read requests)
    readahead: int = 4 << 20
    #: directory stores: read the metadata below listed directories ahead (a helper process)
    readahead_listing: bool = True
    #: large or sequential reads of plain-bytes chunks come from the files (core/direct.py)
    direct_reads: bool = True
    #: seconds dirty data may wait before a background flush
    writeback: float | None = None
    views: tuple[str, ...] | None = None
    endpoint: str | None = None
    anon: bool = False
    disk_cache: str | None = None
    disk_cache_size: int | None = None
    #: remote stores: total seconds one store request may take, retries included (None: 30)
    store_timeout: float | None = None
    #: ``credentials=``: a root-owned file of NAME=VALUE lines for the daemon's environment
    credentials: str | None = None
    #: ``metrics=ADDR:PORT``: serve Prometheus metrics there (None: no endpoint)
    metrics: tuple[str, int] | None = None
    #: ``env.NAME=VALUE`` options, in the order given (values are secrets: never shown)
    environment: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    #: generic options that were accepted and ignored, in the order given
    ignored: tuple[str, ...] = field(default=())

    @property
    def read_only(self) -> bool:
        """Alias of ``ro`` (the name the store and engine use)."""
        return self.ro

    @property
    def store_options(self) -> dict[str, Any]:
        """Keyword options for ``open_store`` given on the command line (only those set)."""
        found: dict[str, Any] = {}
        if self.endpoint is not None:
            found["endpoint"] = self.endpoint
        if self.anon:
            found["anon"] = True
        if self.disk_cache is not None:
            found["disk_cache"] = self.disk_cache
        if self.disk_cache_size is not None:
            found["disk_cache_size"] = self.disk_cache_size
        if self.store_timeout is not None:
            found["timeout"] = self.store_timeout
        return found


def parse_size(text: str) -> int:
    """``"64M"`` -> 67108864. Binary multiples; a plain number is bytes."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise OptionError(f"not a size: {text!r} (use e.g. 512K, 64M, 2G)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise OptionError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise OptionError(f"seconds must be >= 0: {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise OptionError("must be > 0")
    return value


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise OptionError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise OptionError(f"must be >= {minimum}: {text!r}")
        return value

    return parse


def _user(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise OptionError(f"no such user: {text!r}") from None


def _group(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise OptionError(f"no such group: {text!r}") from None


def _umask(text: str) -> int:
    try:
        value = int(text, 8)
    except ValueError:
        raise OptionError(f"not an octal mask: {text!r}") from None
    if not 0 <= value <= 0o777:
        raise OptionError(f"mask out of range 000..777: {text!r}")
    return value


def _byte_order(text: str) -> str:
    value = text.lower()
    if value == "native":
        return sys.byteorder
    if value not in ("little", "big"):
        raise OptionError(f"byte_order must be little, big or native, not {text!r}")
    return value


def _log_level(text: str) -> str:
    value = text.lower()
    if value not in LOG_LEVELS:
        raise OptionError(f"log_level must be one of {', '.join(LOG_LEVELS)}, not {text!r}")
    return value


def _views(text: str) -> tuple[str, ...]:
    names = tuple(name for name in text.split(":") if name)
    if not names:
        raise OptionError("views= needs at least one view name (separate names with ':')")
    return names


def _address(text: str) -> tuple[str, int]:
    """``127.0.0.1:9464``, ``[::1]:9464`` or ``localhost:9464`` -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OptionError(f"not an ADDRESS:PORT: {text!r} (e.g. 127.0.0.1:9464)")
    return host, int(port)


def _nonempty(text: str) -> str:
    if not text:
        raise OptionError("needs a value")
    return text


#: flag options: name -> (field, value)
_FLAGS: dict[str, tuple[str, bool]] = {
    "ro": ("ro", True),
    "rw": ("ro", False),
    "allow_other": ("allow_other", True),
    "default_permissions": ("default_permissions", True),
    "auto_unmount": ("auto_unmount", True),
    "anon": ("anon", True),
    "noreadahead_listing": ("readahead_listing", False),
    "nodirect_reads": ("direct_reads", False),
}

#: valued options: name -> parser (the field has the same name)
_VALUED: dict[str, Callable[[str], Any]] = {
    "uid": _user,
    "gid": _group,
    "umask": _umask,
    "attr_timeout": _seconds,
    "threads": _count(1),
    "timeout": _positive_seconds,
    "log_level": _log_level,
    "cache_size": parse_size,
    "byte_order": _byte_order,
    "prefetch": parse_size,
    "readahead": parse_size,
    "writeback": _seconds,
    "views": _views,
    "endpoint": _nonempty,
    "disk_cache": _nonempty,
    "disk_cache_size": parse_size,
    "store_timeout": _positive_seconds,
    "credentials": _nonempty,
    "metrics": _address,
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: the prefix of ``env.NAME=VALUE`` options
ENV_PREFIX = "env."


def is_env_option(item: str) -> bool:
    return item.strip().startswith(ENV_PREFIX)


def _env_item(item: str) -> tuple[str, str]:
    """``env.NAME=VALUE`` -> (NAME, VALUE); errors name the option but never show its value."""
    name, has_value, value = item[len(ENV_PREFIX) :].partition("=")
    if not has_value:
        raise OptionError(f"-o {ENV_PREFIX}{name} needs a value ({ENV_PREFIX}{name}=...)")
    if not _ENV_NAME.match(name):
        raise OptionError(f"-o {ENV_PREFIX}...: not an environment variable name: {name!r}")
    return name, value


#: every option as the man page and shell completion show it: name -> (value, description).
#: The one description of each option; ``tests/fuse/test_fuse_options.py`` checks it covers
#: exactly the options the parser accepts.
OPTION_DOCS: dict[str, tuple[str, str]] = {
    "ro": ("", "read-only mount: writes fail with EROFS and the store is never changed"),
    "rw": ("", "read-write mount (the default; undoes an earlier ro)"),
    "allow_other": ("", "let users other than the one who mounted use the mount"),
    "default_permissions": ("", "let the kernel check permissions against the modes shown"),
    "auto_unmount": ("", "unmount when the daemon dies"),
    "anon": ("", "object stores: send unsigned requests (public buckets)"),
    "uid": ("USER", "owner shown for every file (name or number; default: who mounted)"),
    "gid": ("GROUP", "group shown for every file (name or number; default: who mounted)"),
    "umask": ("OCTAL", "permission bits cleared from every mode, e.g. 022"),
    "attr_timeout": (
        "SECONDS",
        "how long the kernel may cache names and attributes (default 1; 60 with ro, where it "
        "also keeps directory listings that long: what other store clients change shows up "
        "within that time)",
    ),
    "threads": ("N", "worker threads for blocking store and codec calls (default 16)"),
    "timeout": ("SECONDS", "deadline of one data request before it fails with EIO (default 60)"),
    "log_level": ("LEVEL", "debug, info, warning or error (default info)"),
    "cache_size": (
        "SIZE",
        "memory for decoded chunks and unflushed writes (default 1G); a chunk over 64M "
        "that it cannot hold is refused (ENOMEM)",
    ),
    "byte_order": ("ORDER", "byte order of data.raw and the views: little, big or native"),
    "prefetch": ("SIZE", "bytes read ahead for sequential readers (default 64M)"),
    "readahead": ("SIZE", "the kernel's read-ahead window for the mount (default 4M)"),
    "noreadahead_listing": (
        "",
        "directory stores: do not read the metadata below a listed directory ahead in a "
        "helper process (tree walks on a cold page cache wait on the disk longer)",
    ),
    "nodirect_reads": (
        "",
        "load chunks of the bytes codec alone into the chunk cache for large and sequential "
        "reads too, instead of reading them from their files into each reply",
    ),
    "writeback": ("SECONDS", "delay before dirty data is stored in the background; 0: off"),
    "views": ("NAME:NAME...", "the array views to show, e.g. data.raw:data.npy"),
    "endpoint": ("URL", "object stores: the endpoint URL (S3-compatible servers)"),
    "disk_cache": ("DIR", "remote stores: keep fetched objects in this directory"),
    "disk_cache_size": ("SIZE", "remote stores: size limit of the disk cache"),
    "store_timeout": ("SECONDS", "remote stores: deadline of one store call, retries included"),
    "credentials": ("FILE", "NAME=VALUE lines for the daemon's environment (root's, mode 600)"),
    "metrics": ("ADDR:PORT", "serve Prometheus metrics on this address (off by default)"),
    f"{ENV_PREFIX}NAME": ("VALUE", "set the environment variable NAME of the daemon"),
}


def accepted_option_names() -> set[str]:
    """The names ``parse_options`` accepts besides generic ones (``env.NAME`` for env.*)."""
    return set(_FLAGS) | set(_VALUED) | {f"{ENV_PREFIX}NAME"}


def _is_generic(item: str) -> bool:
    return item in GENERIC_OPTIONS or item.startswith(GENERIC_PREFIXES)


def parse_options(option_strings: Iterable[str]) -> MountOptions:
    """Parse the values of every ``-o`` given (each a comma-separated list) into options."""
    changes: dict[str, Any] = {}
    ignored: list[str] = []
    environment: list[tuple[str, str]] = []
    for option_string in option_strings:
        for item in option_string.split(","):
            item = item.strip()
            if not item:
                continue
            if is_env_option(item):
                environment.append(_env_item(item))
                continue
            if _is_generic(item):
                ignored.append(item)
                continue
            name, has_value, value = item.partition("=")
            if name in _FLAGS and not has_value:
                field_name, flag = _FLAGS[name]
                changes[field_name] = flag
            elif name in _VALUED and has_value:
                try:
                    changes[name] = _VALUED[name](value)
                except OptionError as exc:
                    raise OptionError(f"-o {item}: {exc}") from None
            elif name in _VALUED:
                raise OptionError(f"-o {name} needs a value ({name}=...)")
            elif name in _FLAGS:
                raise OptionError(f"-o {name} takes no value")
            else:
                # the value is not shown: it may be a secret (a mistyped env.NAME=VALUE)
                shown = f"{name}=..." if has_value else name
                raise OptionError(f"unknown mount option: {shown!r}")
    return replace(
        MountOptions(), ignored=tuple(ignored), environment=tuple(environment), **changes
    )
