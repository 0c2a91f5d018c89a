"""``-o`` option parsing into MountOptions, and the libfuse option set built from it."""

from __future__ import annotations

import sys

import pytest

from zarrfs.fuse.daemon import kernel_options
from zarrfs.fuse.options import MountOptions, OptionError, parse_options, parse_size


def test_defaults() -> None:
    options = parse_options([])
    assert options == MountOptions()
    assert not options.ro and options.uid is None and options.umask == 0
    assert options.byte_order == "little" and options.threads >= 1 and options.timeout > 0


def test_mount_conventions_and_last_wins() -> None:
    options = parse_options(["ro,allow_other", "default_permissions,uid=12,gid=34,umask=027"])
    assert options.ro and options.read_only and options.allow_other
    assert options.default_permissions
    assert (options.uid, options.gid, options.umask) == (12, 34, 0o027)
    assert not parse_options(["ro", "rw"]).ro


def test_user_and_group_names() -> None:
    options = parse_options(["uid=root,gid=root"])
    assert (options.uid, options.gid) == (0, 0)
    with pytest.raises(OptionError, match="no such user"):
        parse_options(["uid=no-such-user-zarrfs"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("512K", 512 << 10), ("64M", 64 << 20), ("2g", 2 << 30),
     ("1.5G", 3 << 29), ("8MiB", 8 << 20), ("1T", 1 << 40), ("3KB", 3 << 10)],
)  # fmt: skip
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected
    assert parse_options([f"cache_size={text}"]).cache_size == expected


def test_zarrfs_options() -> None:
    options = parse_options(
        [
            "byte_order=big,prefetch=16M,threads=4,attr_timeout=2.5,writeback=0.5",
            "log_level=DEBUG,views=raw:npy,endpoint=http://127.0.0.1:9000,anon",
            "disk_cache=/var/cache/z,disk_cache_size=1G,timeout=3",
        ]
    )
    assert options.byte_order == "big" and options.prefetch == 16 << 20
    assert (options.threads, options.attr_timeout, options.writeback) == (4, 2.5, 0.5)
    assert options.log_level == "debug" and options.views == ("raw", "npy")
    assert options.store_options == {
        "endpoint": "http://127.0.0.1:9000",
        "anon": True,
        "disk_cache": "/var/cache/z",
        "disk_cache_size": 1 << 30,
    }
    assert parse_options(["store_timeout=7.5"]).store_options == {"timeout": 7.5}
    assert parse_options(["rw"]).store_options == {}
    assert (options.disk_cache, options.disk_cache_size, options.timeout) == (
        "/var/cache/z",
        1 << 30,
        3.0,
    )
    assert parse_options(["byte_order=native"]).byte_order == sys.byteorder


def test_generic_options_are_accepted_and_ignored() -> None:
    generic = "_netdev,nofail,noauto,auto,x-systemd.automount,x-systemd.idle-timeout=60,dev,"
    generic += "nodev,suid,nosuid,exec,noexec,user,users,defaults,noatime,comment=systemd.x,"
    generic += "sync,dirsync,mand,silent,iversion,nosymfollow"
    options = parse_options([generic])
    assert options.ignored == tuple(generic.split(","))
    assert options == MountOptions(ignored=options.ignored)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus", "unknown mount option: 'bogus'"),
        ("ro=1", "takes no value"),
        ("uid", "needs a value"),
        ("umask=8", "octal"),
        ("threads=0", ">= 1"),
        ("timeout=0", "> 0"),
        ("attr_timeout=-1", ">= 0"),
        ("byte_order=middle", "little, big or native"),
        ("log_level=loud", "log_level"),
        ("cache_size=lots", "not a size"),
        ("views=", "at least one"),
    ],
)
def test_errors_name_the_option(text: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options([text])


def test_kernel_options() -> None:
    assert kernel_options(MountOptions(), "s3://b/x.zarr") == {
        "fsname=s3://b/x.zarr",
        "subtype=zarrfs",
    }
    chosen = kernel_options(
        parse_options(["ro,allow_other,default_permissions,auto_unmount"]), "/data/a,b.zarr"
    )
    assert chosen == {
        "fsname=/data/a\\,b.zarr",
        "subtype=zarrfs",
        "ro",
        "allow_other",
        "default_permissions",
        "auto_unmount",
    }


def test_every_option_is_documented_once() -> None:
    """The man page and the shell completion read OPTION_DOCS: it covers exactly the options."""
    from zarrfs.fuse.options import OPTION_DOCS, accepted_option_names

    assert set(OPTION_DOCS) == accepted_option_names()
    for name, (value, text) in OPTION_DOCS.items():
        assert text and not text.endswith("."), name
        item = name.replace("env.NAME", "env.X")
        if value:  # documented as name=VALUE: refused without a value
            with pytest.raises(OptionError, match="needs a value"):
                parse_options([item])
        else:  # a flag: refused with one
            with pytest.raises(OptionError, match="takes no value"):
                parse_options([f"{item}=1"])
