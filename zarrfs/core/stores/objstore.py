"""``s3://``, ``gs://`` and ``az://`` stores: URL -> obstore client -> ``RemoteStore``.

Spec: Zarr v3 core, "Stores" (a store's canonical URL names the root of the hierarchy). What the
stores do once open -- deadlines, retries, coalesced range reads, conditional writes, the disk
cache -- is ``remote.py``; this module only turns a URL and options into a client.

Invariants:
- ``s3://BUCKET/PREFIX``: credentials, region and endpoint come from the standard AWS_*
  environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
  ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL(_S3)``), the ``endpoint`` option
  (``-o endpoint=URL``) overrides the endpoint and ``anon`` (``-o anon``) sends unsigned requests.
  A plain ``http://`` endpoint is accepted only on a loopback address (or with
  ``AWS_ALLOW_HTTP=true``), so credentials never cross a network unencrypted by accident.
- ``gs://BUCKET/PREFIX`` and ``az://CONTAINER/PREFIX`` go through obstore's ``from_url`` with its
  environment configuration (``GOOGLE_*``, ``AZURE_*``).
- Every client has obstore's own retries off and a per-attempt timeout, so ``RemoteStore``
  alone decides retries within one deadline per call (``timeout=``, default 30 s).
- Opening an S3 store lists its prefix once (``probe``): a bad endpoint, bad credentials or a
  missing bucket fail at open with a clear ``StoreError``, not at the first read.
- Unknown options raise ``StoreError`` naming them.
"""

from __future__ import annotations

import os
from datetime import timedelta
from ipaddress import ip_address
from typing import Any
from urllib.parse import urlsplit

import obstore
from obstore import exceptions as oe

from zarrfs.core.errors import StoreError
from zarrfs.core.stores.base import check_key
from zarrfs.core.stores.diskcache import open_disk_cache
from zarrfs.core.stores.remote import RemoteStore
from zarrfs.core.stores.retrying import DEFAULT_TIMEOUT, first_line

#: obstore's own retries are off: ``RemoteStore`` retries within its deadline
NO_RETRIES: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=1)}

#: where obstore looks for credentials when the environment has none (EC2 instance metadata)
_METADATA_ENDPOINT = "169.254.169.254"
_STORE_OPTIONS = ("timeout", "attempt_timeout", "retries", "concurrency", "coalesce_gap",
                  "max_full_get", "remember", "disk_cache", "disk_cache_size")  # fmt: skip


def client_options(timeout: float, attempt_timeout: float | None, allow_http: bool) -> Any:
    """obstore client options: every attempt bounded, plain HTTP only where allowed."""
    attempt = attempt_timeout if attempt_timeout else timeout / 3
    return {
        "timeout": timedelta(seconds=attempt),
        "connect_timeout": timedelta(seconds=min(attempt, 5.0)),
        "allow_http": allow_http,
    }


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def store_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """Take the ``RemoteStore`` options out of ``options``; anything left over is refused."""
    options.pop("create", None)
    picked = {name: options.pop(name) for name in _STORE_OPTIONS if name in options}
    if options:
        raise StoreError(f"{url}: unknown store option(s): {', '.join(sorted(options))}")
    return picked


def make_store(
    backend: Any, url: str, read_only: bool, options: dict[str, Any], **kw: Any
) -> RemoteStore:
    """The ``RemoteStore`` over ``backend``, with its disk cache if one was asked for."""
    options = dict(options)
    directory, size = options.pop("disk_cache", None), options.pop("disk_cache_size", None)
    cache = open_disk_cache(directory, size, url) if directory else None
    return RemoteStore(backend, url, read_only=read_only, disk_cache=cache, **options, **kw)


def bucket_url(url: str, scheme: str) -> tuple[str, str]:
    """(bucket, prefix) of ``scheme://BUCKET/PREFIX``."""
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise StoreError(f"store URL {url!r} must not have a query or fragment")
    bucket, prefix = parts.netloc, parts.path.strip("/")
    if not bucket:
        raise StoreError(f"store URL {url!r} names no bucket ({scheme}://BUCKET/PREFIX)")
    if prefix:
        check_key(prefix)
    return bucket, prefix


def _s3_endpoint(endpoint: str | None) -> tuple[str | None, bool]:
    """The endpoint to use (option, else environment) and whether plain HTTP is allowed."""
    env = os.environ
    endpoint = (
        endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        or env.get("AWS_ENDPOINT")
    )  # fmt: skip
    allow_http = env.get("AWS_ALLOW_HTTP", "").lower() == "true"
    if endpoint and endpoint.lower().startswith("http://") and not allow_http:
        if not is_loopback(endpoint):
            raise StoreError(
                f"endpoint {endpoint} is plain HTTP on a non-loopback host; use https:// "
                "(or set AWS_ALLOW_HTTP=true to send requests unencrypted)"
            )
        allow_http = True
    return endpoint, allow_http


def open_s3_url(
    url: str,
    *,
    read_only: bool = False,
    endpoint: str | None = None,
    anon: bool = False,
    config: dict[str, Any] | None = None,
    probe: bool = True,
    **options: Any,
) -> RemoteStore:
    """``s3://BUCKET/PREFIX`` (see the module docstring). ``config`` adds obstore S3 settings
    (``{"region": ...}``); ``options`` are ``RemoteStore``'s (``timeout=``, ``disk_cache=``)."""
    from obstore.store import S3Store

    bucket, prefix = bucket_url(url, "s3")
    picked = store_options(url, options)
    endpoint, allow_http = _s3_endpoint(endpoint)
    s3_config: dict[str, Any] = dict(config or {})
    if endpoint:
        s3_config["endpoint"] = endpoint
    if anon:
        s3_config["skip_signature"] = True
    timeout = picked.get("timeout", DEFAULT_TIMEOUT)
    try:
        backend = S3Store(
            bucket,
            prefix=prefix or None,
            config=s3_config,  # type: ignore[arg-type]
            client_options=client_options(timeout, picked.get("attempt_timeout"), allow_http),
            retry_config=NO_RETRIES,
        )
    except (oe.BaseError, ValueError) as exc:
        raise StoreError(f"cannot open {url}: {first_line(exc)}") from None
    shown = f"s3://{bucket}/{prefix}".rstrip("/") + (f" at {endpoint}" if endpoint else "")
    store = make_store(backend, shown, read_only, picked)
    if probe:
        _probe(store, prefix)
    return store


def _probe(store: RemoteStore, prefix: str) -> None:
    """One listing request, so a bad endpoint, bad credentials or no bucket fail now."""

    def attempt() -> None:
        next(iter(obstore.list(store.backend, None, chunk_size=1)), None)

    try:
        store.call("LIST", prefix + "/" if prefix else "", attempt)
    except StoreError as exc:
        store.close()
        if _METADATA_ENDPOINT in str(exc):  # no credentials anywhere but the instance metadata
            raise StoreError(
                f"{store.url}: no AWS credentials found: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or use -o anon for a public bucket)"
            ) from None
        raise
    except BaseException:
        store.close()
        raise


def _open_from_url(url: str, scheme: str, read_only: bool, options: dict[str, Any]) -> RemoteStore:
    from obstore.store import from_url

    bucket_url(url, scheme)
    picked = store_options(url, options)
    timeout = picked.get("timeout", DEFAULT_TIMEOUT)
    try:
        backend = from_url(
            url,
            client_options=client_options(timeout, picked.get("attempt_timeout"), False),
            retry_config=NO_RETRIES,
        )
    except (oe.BaseError, ValueError) as exc:
        raise StoreError(f"cannot open {url}: {first_line(exc)}") from None
    return make_store(backend, url.rstrip("/"), read_only, picked)


def open_gcs_url(url: str, *, read_only: bool = False, **options: Any) -> RemoteStore:
    """``gs://BUCKET/PREFIX``; credentials from the GOOGLE_* environment variables."""
    return _open_from_url(url, "gs", read_only, options)


def open_azure_url(url: str, *, read_only: bool = False, **options: Any) -> RemoteStore:
    """``az://CONTAINER/PREFIX``; account and credentials from the AZURE_* environment
    variables (``AZURE_STORAGE_ACCOUNT_NAME``, ``AZURE_STORAGE_ACCOUNT_KEY``, ...)."""
    return _open_from_url(url, "az", read_only, options)
