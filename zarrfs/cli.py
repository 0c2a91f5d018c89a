"""The ``zarrfs`` command line (DESIGN §3).

    zarrfs mount STORE MOUNTPOINT [-o OPT[,OPT...]] [-f|--foreground] [--systemd]
    zarrfs STORE MOUNTPOINT [-o OPTS]        the form mount.fuse3 runs for fstab type fuse.zarrfs
    zarrfs umount [--lazy] [--timeout SECONDS] MOUNTPOINT
    zarrfs info|demo|check|stats|completion ARGS...   helpers, each in zarrfs.tools.<name>

``mount`` returns once the mount answers. Without ``-f`` the daemon runs detached (its log goes
to the runtime directory, see ``zarrfs.fuse.runtime``); ``--systemd`` implies ``-f`` and tells
systemd READY=1 when the mount is live (use ``Type=notify``). ``umount`` returns once the daemon
has flushed and exited; it then says on stderr what the daemon could not store (exit status 1)
and names the scratch files (memory only) it dropped.

Exit codes:
    0    success: the mount is live / unmounted and the daemon exited / the helper succeeded
    1    failure: the store cannot be opened, the mount point is missing, not a directory or
         already mounted, the kernel refused the mount, the final flush failed, the unmount was
         refused (busy) or the daemon did not exit in time; a helper that is not installed
    2    usage: bad arguments, an unknown or malformed ``-o`` option
    130  interrupted while waiting for the mount

Messages go to stderr as ``zarrfs: <what went wrong>``, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from zarrfs import __version__

#: the helpers, each in ``zarrfs.tools.<name>``, with the one line ``zarrfs --help`` shows
TOOLS = {
    "info": "show a store's tree: shapes, data types, codecs, sizes",
    "demo": "mount a bundled sample store and use it with ordinary tools",
    "check": "decode every chunk, verify checksums (exit 1 on damage)",
    "stats": "show a live mount's counters (cache, bytes, errors)",
    "completion": "print a bash or zsh completion script (zarrfs completion bash)",
}
COMMANDS = ("mount", "umount", *TOOLS)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``zarrfs``, ``mount`` and ``umount`` (the helpers have their own)."""
    parser = argparse.ArgumentParser(
        prog="zarrfs",
        description="Mount any Zarr store and show every array as plain files.",
        epilog="Also: zarrfs STORE MOUNTPOINT -o OPTS (mount.fuse3 form); "
        f"zarrfs {{{','.join(TOOLS)}}} --help for the helpers.",
    )
    parser.add_argument("--version", action="version", version=f"zarrfs {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    mount = commands.add_parser("mount", help="mount a store (returns once the mount is live)")
    mount.add_argument("store", metavar="STORE", help="path or URL of the Zarr store")
    mount.add_argument(
        "mountpoint", metavar="MOUNTPOINT",
        help="an existing directory, or /dev/fd/N (a /dev/fuse descriptor mounted by another "
        "process)",
    )  # fmt: skip
    mount.add_argument(
        "-o", dest="options", action="append", default=[], metavar="OPT[,OPT...]",
        help="mount options (ro, allow_other, uid=, umask=, cache_size=, byte_order=, ...)",
    )  # fmt: skip
    mount.add_argument(
        "-f", "--foreground", action="store_true", help="serve in this process (no daemon)"
    )
    mount.add_argument(
        "--systemd", action="store_true", help="run as a Type=notify service (implies -f)"
    )
    mount.add_argument("--status-fd", type=int, help=argparse.SUPPRESS)

    umount = commands.add_parser("umount", help="unmount and wait until the daemon has exited")
    umount.add_argument("mountpoint", metavar="MOUNTPOINT", help="where the store is mounted")
    umount.add_argument(
        "-z", "--lazy", action="store_true", help="detach now even if files are still open"
    )
    umount.add_argument(
        "--timeout", type=float, default=120.0, metavar="SECONDS",
        help="how long to wait for the daemon to flush and exit (default 120)",
    )  # fmt: skip
    for name in TOOLS:
        commands.add_parser(name, help=TOOLS[name], add_help=False)
    return parser


def _store_url(store: str) -> str:
    """URLs stay as given; a plain path becomes absolute (the daemon runs in ``/``)."""
    return store if "://" in store else os.path.abspath(store)


def _mount(args: argparse.Namespace) -> int:
    from zarrfs.fuse import daemon
    from zarrfs.fuse.credentials import split_environment
    from zarrfs.fuse.options import OptionError, parse_options
    from zarrfs.fuse.runtime import setup_logging

    try:
        options = parse_options(args.options)
    except OptionError as exc:
        print(f"zarrfs: {exc}", file=sys.stderr)
        return 2
    url = _store_url(args.store)
    mountpoint = os.path.abspath(args.mountpoint)
    if args.foreground or args.systemd or args.status_fd is not None:
        setup_logging(options.log_level)
        return daemon.run(
            url,
            mountpoint,
            options,
            daemon.default_tree_factory(),
            status_fd=args.status_fd,
            systemd=args.systemd,
        )
    # env.NAME=VALUE options reach the daemon through its environment, never its argv (ps)
    kept, environment = split_environment(args.options)
    child = ["mount", url, mountpoint, "--foreground"]
    for option_string in kept:
        child += ["-o", option_string]
    return daemon.spawn(child, mountpoint, environment)


def _umount(args: argparse.Namespace) -> int:
    from zarrfs.fuse import daemon

    return daemon.unmount(args.mountpoint, lazy=args.lazy, timeout=args.timeout)


def _tool(name: str, argv: list[str]) -> int:
    module_name = f"zarrfs.tools.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name not in ("zarrfs.tools", module_name):
            raise
        print(
            f"zarrfs: the {name!r} command is not available in this installation "
            f"({module_name} is missing)",
            file=sys.stderr,
        )
        return 1
    return int(module.main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``zarrfs`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in TOOLS:
        return _tool(argv[0], argv[1:])
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "mount")  # mount.fuse3 runs `zarrfs STORE MOUNTPOINT -o OPTS`
    args = build_parser().parse_args(argv)  # exits 2 on a usage error
    try:
        if args.command == "mount":
            return _mount(args)
        return _umount(args)
    except KeyboardInterrupt:
        return 130
