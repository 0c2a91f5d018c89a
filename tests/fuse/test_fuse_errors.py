"""The exception -> errno table and its rate-limited logging."""

from __future__ import annotations

import errno
import logging
import uuid

import pyfuse3
import pytest

from zarrfs.core import errors as core
from zarrfs.fuse.errors import errno_for, fuse_error


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (core.NodeNotFound("x"), errno.ENOENT),
        (core.MetadataError("x"), errno.EINVAL),
        (core.UnsupportedError("x"), errno.EINVAL),
        (core.CorruptDataError("x", key="k"), errno.EIO),
        (core.StoreError("x"), errno.EIO),
        (core.StoreTimeout("x"), errno.EIO),
        (core.ConflictError("x"), errno.EIO),
        (core.ReadOnlyError("x"), errno.EROFS),
        (core.NotPermittedError("x"), errno.EPERM),
        (core.InvalidWriteError("x"), errno.EINVAL),
        (core.MemoryLimitError("x"), errno.ENOMEM),
        (PermissionError("x"), errno.EACCES),
        (pyfuse3.FUSEError(errno.ENOTDIR), errno.ENOTDIR),
        (ValueError("a bug"), errno.EIO),
        (core.ZarrFSError("unclassified"), errno.EIO),
    ],
)
def test_table(exc: BaseException, code: int) -> None:
    assert errno_for(exc) == code
    translated = fuse_error(exc, "test")
    assert isinstance(translated, pyfuse3.FUSEError) and translated.errno == code


def _raised_from(cause: BaseException, outer: BaseException) -> BaseException:
    try:
        raise outer from cause
    except BaseException as exc:  # noqa: BLE001 - the chained exception is the point
        return exc


@pytest.mark.parametrize(
    ("cause", "code"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), errno.ENOSPC),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), errno.EDQUOT),
        (OSError(errno.EROFS, "Read-only file system"), errno.EROFS),
        (PermissionError(errno.EACCES, "Permission denied"), errno.EACCES),
        (OSError(errno.EIO, "I/O error"), errno.EIO),  # others stay EIO
        (OSError(errno.EMFILE, "Too many open files"), errno.EIO),
        (_raised_from(OSError(errno.ENOSPC, "full"), RuntimeError("wrapped")), errno.ENOSPC),
    ],
)
def test_store_errors_pass_on_what_the_file_system_said(cause, code) -> None:
    """A full disk under a directory store is ENOSPC from ``fsync``/``close``, not EIO."""
    exc = _raised_from(cause, core.StoreError("file:///s: 'a/c/0': the store's reason"))
    assert errno_for(exc) == code and fuse_error(exc, "test").errno == code
    timeout = _raised_from(cause, core.StoreTimeout("x"))
    assert errno_for(timeout) == code  # (a subclass: the same rule)


def test_corrupt_data_is_logged_once_per_key(caplog) -> None:
    key, other = f"a/c/{uuid.uuid4()}", f"a/c/{uuid.uuid4()}"
    with caplog.at_level(logging.INFO, logger="zarrfs.fuse.errors"):
        for _ in range(50):
            fuse_error(core.CorruptDataError("checksum mismatch", key=key), "read /a")
        fuse_error(core.CorruptDataError("bad index", key=other), "read /a")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2
    assert key in errors[0].getMessage() and other in errors[1].getMessage()


def test_store_errors_are_rate_limited_per_message(caplog) -> None:
    message = f"connection reset {uuid.uuid4()}"
    with caplog.at_level(logging.INFO, logger="zarrfs.fuse.errors"):
        for _ in range(20):
            fuse_error(core.StoreError(message), "read /x")
        fuse_error(core.StoreError(message + " again"), "read /x")
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]


def test_expected_conditions_are_not_logged(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="zarrfs.fuse.errors"):
        fuse_error(core.NodeNotFound("missing"), "lookup /missing")
        fuse_error(core.ReadOnlyError("ro"), "create /x")
    assert caplog.records == []


def _buggy(value: int) -> int:
    return 1 // value


def test_unexpected_exception_logs_traceback_once_per_site(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="zarrfs.fuse.errors"):
        for _ in range(10):
            try:
                _buggy(0)
            except ZeroDivisionError as exc:
                assert fuse_error(exc, "read /boom").errno == errno.EIO
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 1
    assert logged[0].exc_info is not None and "ZeroDivisionError" in logged[0].getMessage()
