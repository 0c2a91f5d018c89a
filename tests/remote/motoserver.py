"""An S3-compatible server on 127.0.0.1: moto in server mode, in a child process.

``MotoProcess`` starts this file as a script; the child serves on a free port, prints it, and
exits on its own after ``lifetime`` seconds or as soon as its parent process is gone, so no
test run leaves it behind. ``stop()`` ends it by its PID (terminate, then kill).

``upload_tree`` and ``download_tree`` copy a local directory store to and from a bucket with
boto3, the independent client the tests compare against.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

#: credentials moto accepts (it does not check them); the region every client uses
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "zarrfs-test-key",
    "AWS_SECRET_ACCESS_KEY": "zarrfs-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


class MotoProcess:
    """``with MotoProcess() as moto: moto.endpoint`` -- an S3 endpoint until the block ends."""

    def __init__(self, lifetime: float = 1800.0, log_path: Path | None = None) -> None:
        self.lifetime = lifetime
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""

    def start(self) -> MotoProcess:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, str(self.lifetime), str(os.getpid())],
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, **CREDENTIALS},
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # type: ignore[union-attr]
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"moto server did not start (said {line!r})")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"
        return self

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def __enter__(self) -> MotoProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self) -> Any:
        """A boto3 S3 client for this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def new_bucket(self, stem: str = "zarrfs") -> str:
        """Create an empty bucket with a unique name and return the name."""
        name = f"{stem}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


def upload_tree(client: Any, bucket: str, prefix: str, root: Path) -> list[str]:
    """Put every regular file under ``root`` at ``prefix/<relative path>``; returns the keys."""
    keys = []
    for path in sorted(Path(root).rglob("*")):
        if path.is_file():
            key = "/".join(filter(None, [prefix.strip("/"), path.relative_to(root).as_posix()]))
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
            keys.append(key)
    return keys


def download_tree(client: Any, bucket: str, prefix: str, root: Path) -> list[str]:
    """Copy every object under ``prefix/`` into ``root``; returns the relative keys."""
    start = prefix.strip("/") + "/" if prefix.strip("/") else ""
    found = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(start) :]
            target = Path(root) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
            found.append(rel)
    return found


def _serve(lifetime: float, parent: int) -> None:
    """Child process: run moto until the lifetime ends, the parent dies or SIGTERM."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    print(f"port {port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    end = time.monotonic() + lifetime
    try:
        while time.monotonic() < end and os.getppid() == parent:
            time.sleep(0.5)
    finally:
        os._exit(0)


if __name__ == "__main__":
    _serve(float(sys.argv[1]), int(sys.argv[2]))
