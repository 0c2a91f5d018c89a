"""A fault-injection HTTP proxy on 127.0.0.1, in threads of this process.

It forwards each request to one upstream server (moto or the static HTTP server) unless a
scripted fault matches it first. Faults:

- ``Fault.error(503)``: answer with that status (an S3-style XML error body) instead;
- ``Fault.hang(seconds)``: wait, then forward (the client's timeout fires first);
- ``Fault.truncate()``: forward, but send only half of the body after a full Content-Length
  and close the connection;
- ``Fault.reset()``: close the connection without any answer;
- ``Fault.lose_reply()``: forward (the upstream acts on the request), then close the connection
  without passing the answer on.

Each fault applies to the next ``times`` matching requests (``None``: to all of them) and
matches on method and path substring. The proxy stops itself after ``max_requests`` requests
or ``lifetime`` seconds; every request is recorded in ``log`` as (method, path, outcome), its
headers in ``headers``, and ``max_inflight`` is the most requests it ever held at once.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
    "upgrade", "content-length",
}  # fmt: skip


@dataclass
class Fault:
    kind: str
    status: int = 503
    seconds: float = 0.0
    method: str | None = None
    path: str = ""
    times: int | None = 1

    @classmethod
    def error(cls, status: int, **match: object) -> Fault:
        return cls("status", status=status, **match)  # type: ignore[arg-type]

    @classmethod
    def hang(cls, seconds: float, **match: object) -> Fault:
        return cls("hang", seconds=seconds, **match)  # type: ignore[arg-type]

    @classmethod
    def truncate(cls, **match: object) -> Fault:
        return cls("truncate", **match)  # type: ignore[arg-type]

    @classmethod
    def reset(cls, **match: object) -> Fault:
        return cls("reset", **match)  # type: ignore[arg-type]

    @classmethod
    def lose_reply(cls, **match: object) -> Fault:
        return cls("lose_reply", **match)  # type: ignore[arg-type]

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        return (self.method is None or self.method == method) and self.path in path


class FaultProxy:
    """``with FaultProxy(upstream_url) as proxy: proxy.url`` -- until the block ends."""

    def __init__(self, upstream: str, *, max_requests: int = 5000, lifetime: float = 600.0) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.max_requests = max_requests
        self.faults: list[Fault] = []
        self.log: list[tuple[str, str, str]] = []
        self.headers: list[dict[str, str]] = []
        #: (method, path, upstream status) of every forwarded request
        self.statuses: list[tuple[str, str, int]] = []
        self.inflight = 0
        self.max_inflight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True
        self._stopped = False

    def start(self) -> FaultProxy:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._stop.set()
        self._timer.cancel()
        # shutdown() waits for serve_forever; never call it from a handler thread's stack
        threading.Thread(target=self._shutdown, daemon=True).start()

    def _shutdown(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def outcomes(self, outcome: str | None = None, path: str = "") -> list[tuple[str, str, str]]:
        with self._lock:
            return [e for e in self.log if (outcome is None or e[2] == outcome) and path in e[1]]

    def take(self, method: str, path: str, headers: dict[str, str]) -> Fault | None:
        """The fault for this request (spending one of its uses), and log the request."""
        with self._lock:
            count = len(self.log)
            self.headers.append(headers)
            fault = next((f for f in self.faults if f.matches(method, path)), None)
            if fault is not None and fault.times is not None:
                fault.times -= 1
            self.log.append((method, path, fault.kind if fault else "forward"))
        if count + 1 >= self.max_requests:
            self.stop()
        return fault


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # dropped connections are the point of this server


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base signature
        pass

    def do_GET(self) -> None:
        self._handle()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _handle(self) -> None:
        owner = self.owner
        with owner._lock:
            owner.inflight += 1
            owner.max_inflight = max(owner.max_inflight, owner.inflight)
        try:
            self._proxy()
        finally:
            with owner._lock:
                owner.inflight -= 1

    def _proxy(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = self.owner.take(self.command, self.path, dict(self.headers.items()))
        if fault is not None and fault.kind == "reset":
            self._reset()
            return
        if fault is not None and fault.kind == "status":
            payload = (
                b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InjectedFault</Code>'
                b"<Message>injected by the test proxy</Message></Error>"
            )
            self.send_response(fault.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        if fault is not None and fault.kind == "hang":
            self.owner._stop.wait(fault.seconds)
        status, reason, headers, data = self._forward(body)
        with self.owner._lock:
            self.owner.statuses.append((self.command, self.path, status))
        if fault is not None and fault.kind == "lose_reply":
            self._reset()
            return
        self.send_response(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        declared = len(data)
        if self.command == "HEAD":
            declared = int(dict((k.lower(), v) for k, v in headers).get("content-length", 0))
        self.send_header("Content-Length", str(declared))
        self.end_headers()
        if self.command == "HEAD" or status in (204, 304):
            return
        if fault is not None and fault.kind == "truncate":
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self._reset()
            return
        self.wfile.write(data)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.owner.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        finally:
            conn.close()

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the connection was dropped on purpose

    def _reset(self) -> None:
        """Drop the connection with a TCP reset."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
