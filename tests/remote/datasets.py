"""Zarr stores written by zarr-python for the remote mount tests, and zarr-python reading them
back over S3 (``zarr.storage.ObjectStore`` with obstore's ``S3Store``) as the oracle."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec

from remote.motoserver import CREDENTIALS, MotoProcess

#: array path -> (shape, chunks, shards, dtype)
LAYOUT: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None, str]] = {
    "temp": ((100, 60), (32, 16), None, "float32"),
    "sharded": ((64, 64), (8, 8), (32, 32), "int16"),
    "sub/x": ((10,), (4,), None, "uint8"),
}


def expected(path: str) -> np.ndarray[Any, Any]:
    shape, _, _, dtype = LAYOUT[path]
    rng = np.random.default_rng(zlib.crc32(path.encode()))
    return (rng.random(shape) * 1000).astype(dtype)


def build_store(root: Path, consolidated: bool = False) -> dict[str, np.ndarray[Any, Any]]:
    """Write the arrays of ``LAYOUT`` (blosc-compressed, one sharded) under ``root``."""
    group = zarr.open_group(store=str(root), mode="w", zarr_format=3)
    group.create_group("sub")
    arrays = {}
    for path, (shape, chunks, shards, dtype) in LAYOUT.items():
        array = group.create_array(
            path,
            shape=shape,
            chunks=chunks,
            shards=shards,
            dtype=dtype,
            compressors=BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
            fill_value=0,
        )
        data = expected(path)
        array[...] = data
        arrays[path] = data
    if consolidated:
        zarr.consolidate_metadata(str(root))
    return arrays


def zarr_s3(moto: MotoProcess, bucket: str, prefix: str, read_only: bool = True) -> Any:
    """zarr-python's own store class over the same S3 objects."""
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    backend = S3Store(
        bucket,
        prefix=prefix,
        endpoint=moto.endpoint,
        access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region=CREDENTIALS["AWS_REGION"],
        client_options={"allow_http": True},
    )
    return ObjectStore(backend, read_only=read_only)
