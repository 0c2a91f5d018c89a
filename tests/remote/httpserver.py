"""A static HTTP file server on 127.0.0.1 for the HTTP store tests, in a thread of this process.

It serves the regular files under one directory (a directory, a missing file or a name that
escapes the root is 404, as a static bucket website would answer), answers ``GET`` and ``HEAD``,
and optionally:
- single byte ranges (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``; 206 with ``Content-Range``,
  416 when unsatisfiable). With ``ranges=False`` the Range header is ignored (200, whole body),
  like a server without range support;
- strong ETags (from size and mtime) and ``If-None-Match`` (304), ``If-Match`` (412).

Every request is recorded in ``requests`` (method, path, Range header) so tests can count
round trips. The server stops itself after ``lifetime`` seconds at the latest.
"""

from __future__ import annotations

import email.utils
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str | None


class StaticServer:
    """``with StaticServer(root) as srv: srv.url`` -- serves ``root`` until the block ends."""

    def __init__(
        self, root: Path, *, ranges: bool = True, etags: bool = True, lifetime: float = 600.0
    ) -> None:
        self.root = Path(root).resolve()
        self.ranges = ranges
        self.etags = etags
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True
        self._stopped = False

    def start(self) -> StaticServer:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._timer.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> StaticServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def count(self, method: str | None = None, prefix: str = "") -> int:
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (method is None or r.method == method) and r.path.startswith(prefix)
            )

    def resolve(self, url_path: str) -> Path | None:
        """The regular file a request path names, or None (never outside the root)."""
        rel = unquote(urlsplit(url_path).path).lstrip("/")
        if not rel or any(part in ("", ".", "..") for part in rel.split("/")):
            return None
        path = (self.root / rel).resolve()
        if self.root not in path.parents or not path.is_file():
            return None
        return path


class _Handler(BaseHTTPRequestHandler):
    owner: StaticServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base signature
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _reply(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _serve(self, body: bool) -> None:
        owner = self.owner
        rng = self.headers.get("Range")
        owner.record(Seen(self.command, self.path, rng))
        path = owner.resolve(self.path)
        if path is None:
            self._reply(404, {"Content-Type": "text/plain"}, b"not found")
            return
        st = path.stat()
        size = st.st_size
        headers = {
            "Content-Type": "application/octet-stream",
            "Last-Modified": email.utils.formatdate(st.st_mtime, usegmt=True),
        }
        if owner.ranges:
            headers["Accept-Ranges"] = "bytes"
        etag = f'"{st.st_mtime_ns:x}-{size:x}"'
        if owner.etags:
            headers["ETag"] = etag
            if_match = self.headers.get("If-Match")
            if if_match is not None and if_match not in ("*", etag):
                self._reply(412, headers)
                return
            if self.headers.get("If-None-Match") in ("*", etag):
                self._reply(304, {**headers, "Content-Length": "0"})
                return
        data = path.read_bytes()
        start, stop = 0, size
        status = 200
        if rng is not None and owner.ranges:
            match = _RANGE.match(rng.strip())
            if match is None or match.group(1) == match.group(2) == "":
                self._reply(416, {**headers, "Content-Range": f"bytes */{size}"})
                return
            first, last = match.group(1), match.group(2)
            if first == "":
                n = int(last)
                start, stop = max(0, size - n), size
            else:
                start = int(first)
                stop = size if last == "" else min(size, int(last) + 1)
            if start >= size or (first == "" and int(last) == 0):
                self._reply(416, {**headers, "Content-Range": f"bytes */{size}"})
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        payload = data[start:stop]
        headers["Content-Length"] = str(len(payload))
        self._reply(status, headers, payload if body else b"")


def write_tree(root: Path, contents: dict[str, bytes]) -> None:
    """Create the files of ``contents`` (key -> bytes) under ``root``."""
    for key, value in contents.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)
