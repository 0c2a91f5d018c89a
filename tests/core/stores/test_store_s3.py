"""S3 store (``s3://`` through obstore) against a real S3-compatible server on loopback (moto):
the store contract, prefixes, coalesced and concurrent range reads, conditional writes,
credentials, endpoints and URL forms (``gs://``/``az://`` are only constructed: no server here).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from remote.faultproxy import Fault, FaultProxy
from remote.fixtures import (  # noqa: F401 - pytest fixtures
    bucket_fixture,
    moto_server_fixture,
    s3_env_fixture,
)
from remote.motoserver import MotoProcess
from test_store_contract import BLOB, REFERENCE, WritableStoreContract

from zarrfs.core.errors import ConflictError, StoreError
from zarrfs.core.stores.base import ByteRange, Store, SuffixRange
from zarrfs.core.stores.registry import open_store
from zarrfs.core.stores.remote import RemoteStore


def s3_store(
    moto: MotoProcess, bucket: str, prefix: str = "root", **options: object
) -> RemoteStore:
    endpoint = options.pop("endpoint", moto.endpoint)
    store = open_store(f"s3://{bucket}/{prefix}", endpoint=endpoint, **options)
    assert isinstance(store, RemoteStore)
    return store


def put(moto: MotoProcess, bucket: str, key: str, value: bytes) -> None:
    moto.client().put_object(Bucket=bucket, Key=key, Body=value)


def fetch(moto: MotoProcess, bucket: str, key: str) -> bytes:
    return moto.client().get_object(Bucket=bucket, Key=key)["Body"].read()


class TestS3Store(WritableStoreContract):
    @pytest.fixture(autouse=True)
    def _server(self, moto_server: MotoProcess, s3_env: dict[str, str]) -> None:
        self.moto = moto_server

    def make_store(self, tmp_path: Path, contents: dict[str, bytes]) -> Store:
        name = self.moto.new_bucket()
        for key, value in contents.items():
            put(self.moto, name, f"root/{key}", value)
        return s3_store(self.moto, name)


@pytest.fixture
def proxy(moto_server: MotoProcess) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server.endpoint) as p:
        yield p


# -- prefixes and listing -------------------------------------------------------------------


def test_prefix_confines_keys(moto_server: MotoProcess, bucket: str) -> None:
    for key in ["root/zarr.json", "root/a/b", "rootx/zarr.json", "other", "root2/x"]:
        put(moto_server, bucket, key, key.encode())
    store = s3_store(moto_server, bucket)
    assert store.list_dir("") == (["zarr.json"], ["a"])
    assert sorted(store.list_prefix("")) == ["a/b", "zarr.json"]
    assert store.get("zarr.json") == b"root/zarr.json"
    store.set("new", b"n")
    assert fetch(moto_server, bucket, "root/new") == b"n"
    whole = s3_store(moto_server, bucket, prefix="")
    assert whole.list_dir("") == (["other"], ["root", "root2", "rootx"])
    assert whole.url.startswith(f"s3://{bucket} at ")


def test_listing_pages_through_many_keys(moto_server: MotoProcess, bucket: str) -> None:
    store = s3_store(moto_server, bucket)
    client = moto_server.client()
    names = [f"{i:05d}" for i in range(1100)]  # more than one 1000-key page
    for name in names:
        client.put_object(Bucket=bucket, Key=f"root/c/{name}", Body=b"")
    assert store.list_dir("c/") == (names, [])
    assert len(list(store.list_prefix("c"))) == 1100


# -- get_many: coalescing and concurrency ----------------------------------------------------


def test_nearby_ranges_of_one_key_are_one_request(
    moto_server: MotoProcess,
    bucket: str,
    proxy: FaultProxy,
) -> None:
    put(moto_server, bucket, "root/shard", BLOB)
    store = s3_store(moto_server, bucket, endpoint=proxy.url)
    ranges = [ByteRange(i * 500, 100) for i in range(20)]
    before = len(proxy.outcomes(path="/shard"))
    got = store.get_many([("shard", r) for r in ranges])
    assert got == [BLOB[r.start : r.start + 100] for r in ranges]
    assert len(proxy.outcomes(path="/shard")) - before == 1


def test_distant_ranges_and_suffixes_are_separate_requests(
    moto_server: MotoProcess,
    bucket: str,
    proxy: FaultProxy,
) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB
    put(moto_server, bucket, "root/big", big)
    store = s3_store(moto_server, bucket, endpoint=proxy.url, coalesce_gap=1000)
    requests = [
        ("big", ByteRange(0, 10)),
        ("big", ByteRange(500_000, 10)),
        ("big", SuffixRange(16)),
        ("big", SuffixRange(4)),
        ("big", ByteRange(1_048_570, None)),
    ]
    got = store.get_many(requests)
    assert got == [big[:10], big[500_000:500_010], big[-16:], big[-4:], big[1_048_570:]]
    gets = [e for e in proxy.outcomes(path="/big") if e[0] == "GET"]
    assert len(gets) == 4  # two spans, the open-ended one, one suffix for both suffixes
    ranges = {h.get("Range") or h.get("range") for h in proxy.headers if h}
    assert "bytes=-16" in ranges


def test_different_keys_are_fetched_concurrently(
    moto_server: MotoProcess,
    bucket: str,
    proxy: FaultProxy,
) -> None:
    for i in range(8):
        put(moto_server, bucket, f"root/c/{i}", bytes([i]) * 100)
    store = s3_store(moto_server, bucket, endpoint=proxy.url)
    proxy.add(Fault.hang(0.4, method="GET", path="/c/", times=None))
    got = store.get_many([(f"c/{i}", None) for i in range(8)] + [("c/missing", None)])
    assert got == [bytes([i]) * 100 for i in range(8)] + [None]
    assert proxy.max_inflight >= 4


def test_get_many_refetches_when_the_object_changes_between_parts(
    moto_server: MotoProcess,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, new = b"A" * 5000, b"B" * 5000
    put(moto_server, bucket, "root/obj", old)
    store = s3_store(moto_server, bucket, coalesce_gap=10)
    real_fetch = store._fetch
    calls = []

    def racing_fetch(key: str, rng: object, *args: object) -> object:
        calls.append(args[0] if args else None)  # the If-Match tag
        got = real_fetch(key, rng, *args)  # type: ignore[arg-type]
        if len(calls) == 1:  # the object is replaced right after the first part was read
            put(moto_server, bucket, "root/obj", new)
        return got

    monkeypatch.setattr(store, "_fetch", racing_fetch)
    monkeypatch.setattr(store, "_pool", _InlinePool())
    got = store.get_many([("obj", ByteRange(0, 10)), ("obj", ByteRange(4000, 10))])
    assert got == [new[:10], new[4000:4010]]  # one version, never a mix
    assert any(tag is not None for tag in calls)  # the refetch used If-Match


class _InlinePool:
    """Runs submitted work at once, in order (a deterministic stand-in for the thread pool)."""

    def submit(self, fn, *args):  # type: ignore[no-untyped-def]
        from concurrent.futures import Future

        fut: Future[object] = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001
            fut.set_exception(exc)
        return fut


# -- conditional writes ----------------------------------------------------------------------


def test_write_after_an_external_change_conflicts(
    moto_server: MotoProcess,
    bucket: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    put(moto_server, bucket, "root/c/0", b"original")
    store = s3_store(moto_server, bucket)
    assert store.get("c/0") == b"original"
    put(moto_server, bucket, "root/c/0", b"theirs")
    assert store.version("c/0") is not None  # a HEAD must not bless the stale read
    with pytest.raises(ConflictError):
        store.set("c/0", b"mine")
    assert fetch(moto_server, bucket, "root/c/0") == b"theirs"
    assert "changed in the store" in caplog.text
    with pytest.raises(ConflictError):  # still refused: the dirty data was based on "original"
        store.set("c/0", b"mine")
    assert store.get("c/0") == b"theirs"  # a fresh read ...
    store.set("c/0", b"mine")  # ... makes a write based on it possible
    assert fetch(moto_server, bucket, "root/c/0") == b"mine"


def test_empty_range_reads_do_not_bless_a_stale_read(moto_server: MotoProcess, bucket: str) -> None:
    put(moto_server, bucket, "root/c/0", b"original")
    store = s3_store(moto_server, bucket)
    assert store.get("c/0") == b"original"
    put(moto_server, bucket, "root/c/0", b"theirs")
    assert store.get("c/0", ByteRange(3, 0)) == b""  # answered by a HEAD
    assert store.get_many([("c/0", ByteRange(0, 0))]) == [b""]
    with pytest.raises(ConflictError):
        store.set("c/0", b"mine")


def test_ranged_reads_also_guard_writes(moto_server: MotoProcess, bucket: str) -> None:
    put(moto_server, bucket, "root/shard", BLOB)
    store = s3_store(moto_server, bucket)
    assert store.get_many([("shard", SuffixRange(16))]) == [BLOB[-16:]]
    put(moto_server, bucket, "root/shard", b"other")
    with pytest.raises(ConflictError):
        store.set("shard", b"new shard")
    assert fetch(moto_server, bucket, "root/shard") == b"other"


def test_creating_a_key_seen_missing_conflicts_with_another_creator(
    moto_server: MotoProcess,
    bucket: str,
) -> None:
    store = s3_store(moto_server, bucket)
    assert store.get("c/1") is None
    put(moto_server, bucket, "root/c/1", b"theirs")
    with pytest.raises(ConflictError):
        store.set("c/1", b"mine")
    assert fetch(moto_server, bucket, "root/c/1") == b"theirs"


def test_own_writes_and_deletes_keep_the_version_current(
    moto_server: MotoProcess,
    bucket: str,
) -> None:
    store = s3_store(moto_server, bucket)
    assert store.get("k") is None
    store.set("k", b"1")  # create
    store.set("k", b"2")  # update with the ETag of our own PUT
    store.delete("k")
    store.set("k", b"3")  # create again
    assert fetch(moto_server, bucket, "root/k") == b"3"


def test_never_read_keys_are_overwritten_unconditionally(
    moto_server: MotoProcess,
    bucket: str,
) -> None:
    put(moto_server, bucket, "root/k", b"theirs")
    store = s3_store(moto_server, bucket)
    store.set("k", b"mine")  # a whole-object write of data nobody here read
    assert fetch(moto_server, bucket, "root/k") == b"mine"


def test_forgotten_versions_fall_back_to_plain_puts(
    moto_server: MotoProcess,
    bucket: str,
) -> None:
    store = s3_store(moto_server, bucket, remember=2)
    for key in ("a", "b", "c"):
        put(moto_server, bucket, f"root/{key}", b"old")
        store.get(key)
    put(moto_server, bucket, "root/a", b"theirs")
    store.set("a", b"mine")  # "a" fell out of the memory: plain PUT
    put(moto_server, bucket, "root/c", b"theirs")
    with pytest.raises(ConflictError):
        store.set("c", b"mine")


def test_a_retried_put_that_had_landed_succeeds(
    moto_server: MotoProcess,
    bucket: str,
    proxy: FaultProxy,
) -> None:
    put(moto_server, bucket, "root/k", b"old")
    store = s3_store(moto_server, bucket, endpoint=proxy.url)
    assert store.get("k") == b"old"
    proxy.add(Fault.lose_reply(method="PUT", path="/root/k"))
    store.set("k", b"new")  # attempt 1 lands, its answer is lost; attempt 2 gets 412
    assert fetch(moto_server, bucket, "root/k") == b"new"
    assert [e[2] for e in proxy.outcomes() if e[0] == "PUT"] == ["lose_reply", "forward"]
    store.set("k", b"newer")  # the store knows the version it wrote
    assert fetch(moto_server, bucket, "root/k") == b"newer"


# -- opening: credentials, endpoints, URL forms ----------------------------------------------


def test_anon_sends_unsigned_requests(
    moto_server: MotoProcess,
    bucket: str,
    proxy: FaultProxy,
) -> None:
    client = moto_server.client()
    client.put_object(Bucket=bucket, Key="root/zarr.json", Body=b"{}", ACL="public-read")
    client.put_object(Bucket=bucket, Key="root/private", Body=b"secret")
    signed = s3_store(moto_server, bucket, endpoint=proxy.url)
    assert signed.get("zarr.json") == b"{}"
    assert all("authorization" in {k.lower() for k in h} for h in proxy.headers)
    count = len(proxy.headers)
    anon = s3_store(moto_server, bucket, endpoint=proxy.url, anon=True, probe=False)
    assert anon.get("zarr.json") == b"{}"
    with pytest.raises(StoreError, match="access denied"):  # permanent: no retries
        anon.get("private")
    assert [e[2] for e in proxy.outcomes(path="/root/private")] == ["forward"]
    assert proxy.headers[count:]
    assert all("authorization" not in {k.lower() for k in h} for h in proxy.headers[count:])


def test_endpoint_from_the_environment(
    moto_server: MotoProcess,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    put(moto_server, bucket, "root/zarr.json", b"{}")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)
    store = open_store(f"s3://{bucket}/root")
    assert store.get("zarr.json") == b"{}"


def test_missing_bucket_fails_at_open(moto_server: MotoProcess, s3_env: dict[str, str]) -> None:
    with pytest.raises(StoreError, match="zarrfs-no-such-bucket"):
        open_store("s3://zarrfs-no-such-bucket/x", endpoint=moto_server.endpoint)


def test_missing_credentials_are_named(
    moto_server: MotoProcess, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    with pytest.raises(StoreError, match="no AWS credentials"):
        open_store(f"s3://{bucket}/x", endpoint=moto_server.endpoint, timeout=3)


def test_plain_http_endpoint_only_on_loopback(
    s3_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(StoreError, match="non-loopback"):
        open_store("s3://bkt/x", endpoint="http://192.0.2.1:9000", probe=False)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    store = open_store("s3://bkt/x", endpoint="http://192.0.2.1:9000", probe=False)
    store.close()
    store = open_store("s3://bkt/x", endpoint="https://192.0.2.1:9000", probe=False)
    assert store.writable and store.listable
    store.close()


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3://bkt/a/../b", "invalid store key"),
        ("s3://bkt/x?versionId=1", "query"),
    ],
)
def test_bad_s3_urls(url: str, match: str, s3_env: dict[str, str]) -> None:
    with pytest.raises(StoreError, match=match):
        open_store(url, probe=False)


def test_unknown_options_are_refused(s3_env: dict[str, str]) -> None:
    with pytest.raises(StoreError, match="colour"):
        open_store("s3://bkt/x", probe=False, colour="red")


def test_timeout_option_bounds_each_attempt(s3_env: dict[str, str]) -> None:
    store = open_store("s3://bkt/x", endpoint="https://127.0.0.1:1", probe=False, timeout=6)
    assert isinstance(store, RemoteStore)
    assert (store.timeout, store.attempt_timeout) == (6.0, 2.0)
    store.close()


def test_read_only_s3_store_refuses_writes(moto_server: MotoProcess, bucket: str) -> None:
    store = s3_store(moto_server, bucket, read_only=True)
    assert store.writable is False
    with pytest.raises(Exception, match="read-only"):
        store.set("k", b"v")


def test_gcs_and_azure_urls_construct(monkeypatch: pytest.MonkeyPatch) -> None:
    """Construction only: there is no GCS or Azure server here to talk to."""
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "zarrfsaccount")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "a2V5")
    gcs = open_store("gs://bucket/path/store.zarr", read_only=True)
    azure = open_store("az://container/store.zarr")
    assert isinstance(gcs, RemoteStore) and isinstance(azure, RemoteStore)
    assert gcs.url == "gs://bucket/path/store.zarr" and not gcs.writable and gcs.listable
    assert azure.url == "az://container/store.zarr" and azure.writable
    gcs.close()
    azure.close()
    with pytest.raises(StoreError, match="names no bucket"):
        open_store("gs:///x")


def test_reference_contents_round_trip_through_boto3(
    moto_server: MotoProcess,
    bucket: str,
) -> None:
    store = s3_store(moto_server, bucket)
    for key, value in REFERENCE.items():
        store.set(key, value)
    for key, value in REFERENCE.items():
        assert fetch(moto_server, bucket, f"root/{key}") == value
