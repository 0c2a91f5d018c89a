"""Fault injection between a remote store and its server (the proxy in ``faultproxy.py``):
transient faults give the right bytes after retries; permanent ones give ``StoreError`` /
``StoreTimeout`` within the deadline -- never ``None``, never short or wrong bytes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote.faultproxy import Fault, FaultProxy
from remote.httpserver import StaticServer, write_tree
from remote.motoserver import MotoProcess
from zarrfs.core.errors import StoreError, StoreTimeout
from zarrfs.core.stores.base import ByteRange, SuffixRange
from zarrfs.core.stores.registry import open_store
from zarrfs.core.stores.remote import RemoteStore

DATA = bytes(range(256)) * 512  # 128 KiB
#: store deadline for these tests: 3 s per attempt
TIMEOUT = 9.0


@pytest.fixture
def proxy(moto_server: MotoProcess) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server.endpoint) as p:
        yield p


@pytest.fixture
def store(moto_server: MotoProcess, bucket: str, proxy: FaultProxy) -> Iterator[RemoteStore]:
    client = moto_server.client()
    for key in ("root/obj", "root/c/0", "root/c/1", "root/c/2"):
        client.put_object(Bucket=bucket, Key=key, Body=DATA)
    s = open_store(f"s3://{bucket}/root", endpoint=proxy.url, timeout=TIMEOUT)
    assert isinstance(s, RemoteStore)
    yield s
    s.close()


TRANSIENT = [
    pytest.param(Fault.error(503, times=2), id="503"),
    pytest.param(Fault.error(500, times=2), id="500"),
    pytest.param(Fault.error(429, times=2), id="429"),
    pytest.param(Fault.error(502, times=1), id="502"),
    pytest.param(Fault.reset(times=2), id="reset"),
    pytest.param(Fault.truncate(times=2), id="truncated-body"),
    pytest.param(Fault.hang(4.0, times=1), id="timeout"),
]


def outcomes(proxy: FaultProxy, method: str, path: str) -> list[str]:
    return [e[2] for e in proxy.outcomes(path=path) if e[0] == method]


@pytest.mark.parametrize("fault", TRANSIENT)
def test_transient_faults_on_get_give_the_right_bytes(
    store: RemoteStore, proxy: FaultProxy, fault: Fault
) -> None:
    times = fault.times
    fault.method, fault.path = "GET", "/root/obj"
    proxy.add(fault)
    assert store.get("obj") == DATA
    assert outcomes(proxy, "GET", "/root/obj") == [fault.kind] * (times or 0) + ["forward"]


@pytest.mark.parametrize("fault", TRANSIENT)
def test_transient_faults_on_ranges_give_the_right_bytes(
    store: RemoteStore, proxy: FaultProxy, fault: Fault
) -> None:
    fault.method, fault.path = "GET", "/root/c/1"
    proxy.add(fault)
    got = store.get_many(
        [
            ("c/0", ByteRange(1000, 5000)),
            ("c/1", ByteRange(70_000, 10_000)),
            ("c/1", SuffixRange(16)),
            ("c/2", None),
        ]
    )
    assert got == [DATA[1000:6000], DATA[70_000:80_000], DATA[-16:], DATA]


def test_transient_faults_on_head_list_put_and_delete(
    store: RemoteStore, proxy: FaultProxy, moto_server: MotoProcess, bucket: str
) -> None:
    proxy.add(
        Fault.error(503, method="HEAD", times=2),
        Fault.reset(method="GET", path="list-type", times=1),
        Fault.error(500, method="GET", path="list-type", times=1),
        Fault.error(503, method="PUT", times=2),
        Fault.error(503, method="DELETE", times=1),
    )
    assert store.size("obj") == len(DATA)
    assert store.list_dir("c/") == (["0", "1", "2"], [])
    store.set("new", b"fresh")
    store.delete("c/2")
    client = moto_server.client()
    assert client.get_object(Bucket=bucket, Key="root/new")["Body"].read() == b"fresh"
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="root/c/2")
    assert outcomes(proxy, "PUT", "/root/new") == ["status", "status", "forward"]


def test_only_a_real_404_is_missing(store: RemoteStore, proxy: FaultProxy) -> None:
    assert store.get("c/9") is None
    proxy.add(Fault.error(404, method="GET", path="/root/obj"))
    assert store.get("obj") is None  # the server said so
    proxy.add(Fault.error(503, method="GET", path="/root/obj", times=None))
    started = time.monotonic()
    with pytest.raises(StoreError) as info:
        store.get("obj")
    assert time.monotonic() - started < TIMEOUT + 1.0
    assert not isinstance(info.value, StoreTimeout)
    assert "503" in str(info.value) and "obj" in str(info.value)


def test_retries_are_bounded(moto_server: MotoProcess, bucket: str, proxy: FaultProxy) -> None:
    moto_server.client().put_object(Bucket=bucket, Key="root/obj", Body=b"x")
    store = open_store(f"s3://{bucket}/root", endpoint=proxy.url, retries=2)
    proxy.add(Fault.error(500, method="GET", path="/root/obj", times=None))
    with pytest.raises(StoreError, match="after 3 attempt"):
        store.get("obj")
    assert outcomes(proxy, "GET", "/root/obj") == ["status"] * 3


def test_a_server_that_hangs_times_out_within_the_deadline(
    moto_server: MotoProcess, bucket: str, proxy: FaultProxy
) -> None:
    moto_server.client().put_object(Bucket=bucket, Key="root/obj", Body=b"x")
    store = open_store(f"s3://{bucket}/root", endpoint=proxy.url, timeout=3.0)
    proxy.add(Fault.hang(30.0, method="GET", path="/root/obj", times=None))
    started = time.monotonic()
    with pytest.raises(StoreTimeout):
        store.get("obj", ByteRange(0, 1))
    assert time.monotonic() - started < 3.0 + 0.5


def test_get_many_shares_one_deadline(
    moto_server: MotoProcess, bucket: str, proxy: FaultProxy
) -> None:
    client = moto_server.client()
    for i in range(4):
        client.put_object(Bucket=bucket, Key=f"root/c/{i}", Body=b"x")
    store = open_store(f"s3://{bucket}/root", endpoint=proxy.url, timeout=3.0, concurrency=1)
    proxy.add(Fault.hang(30.0, method="GET", path="/root/c/", times=None))
    started = time.monotonic()
    with pytest.raises(StoreTimeout):
        store.get_many([(f"c/{i}", None) for i in range(4)])
    # parts queued behind the one pool thread do not each get a deadline of their own
    assert time.monotonic() - started < 3.0 + 1.0 + 0.5


def test_always_truncated_bodies_fail_never_short(store: RemoteStore, proxy: FaultProxy) -> None:
    proxy.add(Fault.truncate(method="GET", path="/root/obj", times=None))
    with pytest.raises(StoreError):
        store.get("obj")
    with pytest.raises(StoreError):
        store.get_many([("obj", ByteRange(0, 100_000))])


def test_permanent_errors_are_not_retried(store: RemoteStore, proxy: FaultProxy) -> None:
    proxy.add(Fault.error(400, method="GET", path="/root/obj", times=None))
    with pytest.raises(StoreError, match="400"):
        store.get("obj")
    assert outcomes(proxy, "GET", "/root/obj") == ["status"]


def test_http_store_behind_faults(tmp_path: Path) -> None:
    write_tree(tmp_path / "site" / "s", {"zarr.json": b"{}", "c/0": DATA})
    with StaticServer(tmp_path / "site") as server, FaultProxy(server.url) as proxy:
        store = open_store(f"{proxy.url}/s", timeout=TIMEOUT)
        proxy.add(
            Fault.error(503, path="/s/c/0", times=1),
            Fault.truncate(path="/s/c/0", times=1),
            Fault.reset(path="/s/c/0", times=1),
        )
        assert store.get("c/0", SuffixRange(1000)) == DATA[-1000:]
        assert store.get("c/0") == DATA
        proxy.add(Fault.error(503, path="/s/zarr.json", times=None))
        with pytest.raises(StoreError):
            store.get("zarr.json")
