"""Read-only store over a ``.zip`` archive (the layout zarr-python's ZipStore writes).

Spec: Zarr v3 core, "Stores" (readable and listable store); member names are the keys.

Invariants:
- The central directory is parsed once (``zipfile``) into a key index; member data is then read
  with ``os.pread`` on one descriptor, so concurrent reads need no lock and share no position.
- A member whose name is not a safe key (``..``, ``.`` or empty segments, absolute, backslash,
  NUL) is never served or listed; it is logged once when the archive is opened. Directory
  entries (names ending in ``/``) are not keys.
- Stored (uncompressed) members: a range read reads only the requested bytes; the member's data
  must lie inside the archive, so its size cannot lie beyond the file's.
- Compressed members (deflate, bzip2, lzma) are decompressed incrementally with an output bound:
  never more than the member's declared ``file_size`` (nor more than the range needs), and the
  compressed input is read in blocks. A read that would need more than ``max_member_size``
  decoded bytes is refused (``StoreError``) before any allocation. Data longer or shorter than
  declared, a CRC mismatch on a whole-member read, or a local header that disagrees with the
  central directory raise ``CorruptDataError``. So a lying header or a decompression bomb
  costs bounded memory.
- ``set``/``delete`` raise ``ReadOnlyError``.
"""

from __future__ import annotations

import bz2
import logging
import lzma
import os
import stat
import struct
import threading
import weakref
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from zarrfs.core.errors import CorruptDataError, StoreError
from zarrfs.core.stores.base import (
    RangeRequest,
    Store,
    check_key,
    check_prefix,
    resolve_range,
)

log = logging.getLogger(__name__)

#: default bound on one member's decoded size
DEFAULT_MAX_MEMBER_SIZE = 2 << 30
#: compressed bytes read per ``pread`` while decompressing
_BLOCK = 1 << 20

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_MAGIC = b"PK\x03\x04"
_FLAG_ENCRYPTED = 0x1


@dataclass(frozen=True)
class _Member:
    key: str
    method: int
    flags: int
    crc: int
    compress_size: int
    file_size: int
    header_offset: int
    raw_name: bytes


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...

    def decompress(self, data: bytes, max_length: int) -> bytes: ...

    @property
    def needs_input(self) -> bool: ...


class _Inflate:
    """Raw deflate with the same interface as the bz2/lzma decompressors."""

    def __init__(self) -> None:
        self._z = zlib.decompressobj(-zlib.MAX_WBITS)
        self._tail = b""
        self.eof = False

    @property
    def needs_input(self) -> bool:
        return not self._tail and not self.eof

    def decompress(self, data: bytes, max_length: int) -> bytes:
        out = self._z.decompress(self._tail + data, max_length)
        self._tail = self._z.unconsumed_tail
        self.eof = self._z.eof
        return out


def _zip_lzma(header: bytes) -> tuple[lzma.LZMADecompressor, int]:
    """Decompressor for a zip LZMA member from its first bytes; returns it and the header
    length (2-byte version, 2-byte properties size, then LZMA1 properties)."""
    if len(header) < 9:
        raise CorruptDataError("truncated LZMA header")
    (props_size,) = struct.unpack("<H", header[2:4])
    if props_size != 5:
        raise CorruptDataError(f"unexpected LZMA properties size {props_size}")
    first = header[4]
    if first >= 9 * 5 * 5:
        raise CorruptDataError("invalid LZMA properties")
    (dict_size,) = struct.unpack("<I", header[5:9])
    lc, rest = first % 9, first // 9
    lp, pb = rest % 5, rest // 5
    filters = [{"id": lzma.FILTER_LZMA1, "dict_size": dict_size, "lc": lc, "lp": lp, "pb": pb}]
    return lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=filters), 9


class ZipStore(Store):
    """A read-only, listable store over one zip archive."""

    listable = True
    writable = False

    def __init__(
        self, path: str | os.PathLike[str], *, max_member_size: int = DEFAULT_MAX_MEMBER_SIZE
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.url = "zip://" + self.path
        self.max_member_size = max_member_size
        self._lock = threading.Lock()
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreError(f"cannot open zip store {self.path}: {exc.strerror}") from exc
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                raise StoreError(f"zip store {self.path} is not a regular file")
            self._archive_size = st.st_size
            self._members = self._read_index()
        except BaseException:
            os.close(self._fd)
            raise
        self._dirs = _directory_index(self._members)
        # the descriptor is closed by close() or, failing that, when the store is collected
        self._finalizer = weakref.finalize(self, os.close, self._fd)

    def __repr__(self) -> str:
        return f"ZipStore({self.path!r})"

    def _read_index(self) -> dict[str, _Member]:
        try:
            with open(self._fd, "rb", closefd=False) as raw, zipfile.ZipFile(raw) as archive:
                infos = archive.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError) as e:
            raise CorruptDataError(f"{self.path} is not a readable zip archive: {e}") from e
        except OSError as exc:
            raise StoreError(f"cannot read zip store {self.path}: {exc.strerror}") from exc
        members: dict[str, _Member] = {}
        refused: list[str] = []
        for info in infos:
            name = info.orig_filename
            if name.endswith("/") and not info.file_size:
                continue  # a directory entry
            try:
                check_key(name)
            except StoreError:
                refused.append(name)
                continue
            if name in members:
                log.warning("zip store %s: duplicate member %r; the last one wins", self.path, name)
            members[name] = _Member(
                key=name,
                method=info.compress_type,
                flags=info.flag_bits,
                crc=info.CRC,
                compress_size=info.compress_size,
                file_size=info.file_size,
                header_offset=info.header_offset,
                raw_name=_encoded_name(info),
            )
        if refused:
            log.warning(
                "zip store %s: ignoring %d member(s) whose names are not safe keys: %s",
                self.path,
                len(refused),
                ", ".join(repr(n[:80]) for n in refused[:10]),
            )
        return members

    # -- reading members --------------------------------------------------------------------

    def _pread(self, length: int, offset: int) -> bytes:
        fd = self._fd
        if fd < 0:
            raise StoreError(f"zip store {self.path} is closed")
        try:
            data = os.pread(fd, length, offset)
            while len(data) < length:
                more = os.pread(fd, length - len(data), offset + len(data))
                if not more:
                    break
                data += more
        except OSError as exc:
            raise StoreError(f"{self.url}: read failed: {exc.strerror}") from exc
        return data

    def _data_offset(self, m: _Member) -> int:
        """Absolute offset of the member's data, after checking its local header."""
        header = self._pread(_LOCAL_HEADER.size, m.header_offset)
        if len(header) != _LOCAL_HEADER.size:
            raise CorruptDataError("local header past the end of the archive", m.key)
        fields = _LOCAL_HEADER.unpack(header)
        if fields[0] != _LOCAL_MAGIC:
            raise CorruptDataError("bad local header signature", m.key)
        name_len, extra_len = fields[10], fields[11]
        name = self._pread(name_len, m.header_offset + _LOCAL_HEADER.size)
        if name != m.raw_name:
            raise CorruptDataError("local header names a different member", m.key)
        start = m.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        if start + m.compress_size > self._archive_size:
            raise CorruptDataError("member data runs past the end of the archive", m.key)
        return start

    def _check_decoded_size(self, m: _Member, want: int) -> None:
        """Refuse to decompress more than ``max_member_size`` bytes of one member."""
        if want > self.max_member_size:
            raise StoreError(
                f"{self.url}: {m.key!r}: reading {want} of its declared {m.file_size} bytes "
                f"needs decompressing more than the {self.max_member_size}-byte limit"
            )

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        check_key(key)
        m = self._members.get(key)
        if m is None:
            return None
        if m.flags & _FLAG_ENCRYPTED:
            raise StoreError(f"{self.url}: {key!r} is encrypted")
        start, length = resolve_range(m.file_size, byte_range)
        whole = start == 0 and length == m.file_size
        data_start = self._data_offset(m)
        if m.method == zipfile.ZIP_STORED:
            if m.compress_size != m.file_size:
                raise CorruptDataError(
                    f"stored member sizes disagree ({m.compress_size} vs {m.file_size})", key
                )
            data = self._pread(length, data_start + start) if length else b""
            if len(data) != length:
                raise CorruptDataError("member data is truncated", key)
        else:
            if length == 0 and not whole:
                return b""
            self._check_decoded_size(m, start + length)
            data = self._inflate(m, data_start, start + length)[start:]
        if whole and zlib.crc32(data) != m.crc:
            raise CorruptDataError("CRC-32 mismatch", key)
        return data

    def _decompressor(self, m: _Member, first: bytes) -> tuple[_Decompressor, int]:
        if m.method == zipfile.ZIP_DEFLATED:
            return _Inflate(), 0
        if m.method == zipfile.ZIP_BZIP2:
            return bz2.BZ2Decompressor(), 0
        if m.method == zipfile.ZIP_LZMA:
            return _zip_lzma(first)
        raise StoreError(f"{self.url}: {m.key!r}: unsupported zip compression method {m.method}")

    def _block(self, m: _Member, pos: int, left: int) -> bytes:
        """The next compressed block (the archive may have shrunk since it was opened)."""
        block = self._pread(min(_BLOCK, left), pos)
        if not block:
            raise CorruptDataError("archive ends inside the member's data", m.key)
        return block

    def _inflate(self, m: _Member, data_start: int, want: int) -> bytes:
        """The first ``want`` decoded bytes of a compressed member, never decoding more than
        ``want`` (+1 to detect overlong data when ``want`` is the whole member)."""
        pos, left = data_start, m.compress_size
        block = self._block(m, pos, left) if left else b""
        pos, left = pos + len(block), left - len(block)
        try:
            dec, skip = self._decompressor(m, block)
            block = block[skip:]
            parts: list[bytes] = []
            produced = stalls = 0
            while produced < want and not dec.eof:
                fresh = bool(block)
                if not block and dec.needs_input and left:
                    block = self._block(m, pos, left)
                    pos, left, fresh = pos + len(block), left - len(block), True
                out = dec.decompress(block, want - produced)
                block = b""
                if not out:
                    if dec.needs_input and not left:
                        break  # input exhausted and nothing pending
                    stalls = 0 if fresh else stalls + 1
                    if stalls > 2:
                        raise CorruptDataError("decompressor makes no progress", m.key)
                    continue
                stalls = 0
                parts.append(out)
                produced += len(out)
            if produced < want:
                raise CorruptDataError(
                    f"decompressed data is shorter than the declared {m.file_size} bytes", m.key
                )
            if want == m.file_size:
                self._check_end(m, dec, block, pos, left)
        except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as exc:
            raise CorruptDataError(f"cannot decompress: {exc}", m.key) from exc
        return b"".join(parts)

    def _check_end(self, m: _Member, dec: _Decompressor, block: bytes, pos: int, left: int) -> None:
        """After ``file_size`` bytes the stream must end: one more byte means it lies.
        ``block`` is compressed input not yet fed to ``dec``."""
        stalls = 0
        while not dec.eof:
            if not block and dec.needs_input:
                if not left:
                    raise CorruptDataError("compressed stream is truncated", m.key)
                block = self._block(m, pos, left)
                pos, left = pos + len(block), left - len(block)
            if dec.decompress(block, 1):
                raise CorruptDataError(
                    f"decompressed data is longer than the declared {m.file_size} bytes", m.key
                )
            stalls = 0 if block else stalls + 1
            block = b""
            if stalls > 2:
                raise CorruptDataError("decompressor makes no progress", m.key)

    def size(self, key: str) -> int | None:
        check_key(key)
        m = self._members.get(key)
        return None if m is None else m.file_size

    def version(self, key: str) -> str | None:
        check_key(key)
        m = self._members.get(key)
        return None if m is None else f"{m.crc:08x}:{m.file_size}:{m.header_offset}"

    # -- listable ---------------------------------------------------------------------------

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        check_prefix(prefix)
        entry = self._dirs.get(prefix.rstrip("/"))
        if entry is None:
            return [], []
        return sorted(entry[0]), sorted(entry[1])

    def list_prefix(self, prefix: str) -> Iterator[str]:
        check_prefix(prefix)
        prefix = prefix.rstrip("/")
        start = prefix + "/" if prefix else ""
        return iter([key for key in self._members if key.startswith(start)])

    def close(self) -> None:
        with self._lock:
            self._fd = -1
        self._finalizer()  # closes the descriptor once


def _encoded_name(info: zipfile.ZipInfo) -> bytes:
    if info.flag_bits & 0x800:
        return info.orig_filename.encode("utf-8")
    try:
        return info.orig_filename.encode("cp437")
    except UnicodeEncodeError:
        return info.orig_filename.encode("utf-8")


def _directory_index(members: dict[str, _Member]) -> dict[str, tuple[set[str], set[str]]]:
    """prefix (no trailing slash, ``""`` for the root) -> (file names, sub-prefix names)."""
    index: dict[str, tuple[set[str], set[str]]] = {}
    for key in members:
        parts = key.split("/")
        for depth in range(len(parts)):
            parent = "/".join(parts[:depth])
            files, dirs = index.setdefault(parent, (set(), set()))
            if depth == len(parts) - 1:
                files.add(parts[depth])
            else:
                dirs.add(parts[depth])
    return index
