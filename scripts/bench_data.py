"""The bench's data and the peers' engines: what every measurement reads and writes, and how
zarr-python and tensorstore open it.

- ``Config`` (``FULL``, ``SMALL``), ``VARIANTS`` and ``create_kwargs`` (each variant's chunks
  and codecs);
- ``ensure_data`` (``src.raw`` and one store per variant, each a root group holding the array
  ``ARRAY``) and ``ensure_listing`` (the hierarchy of small arrays the listing walks);
- the peers: ``zarr_open``, ``ts_open``, their whole-array reads and writes, and the bytes each
  fetched from the store (``ts_bytes_read``, ``zarr_counting_array``).

Invariants: the data comes from a fixed seed, so every run of one ``Config`` measures the same
bytes, and ``src.raw`` holds the bytes of every store's array; a store is written again only
when its marker (``VARIANT.done``: the config, the variant, zarr-python's version) is missing
or differs, so later runs reuse it (the listing hierarchy likewise, by its shape). Imports only
``bench_machine`` among the bench modules.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bench_machine import log

ARRAY = "x"


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Config:
    tag: str
    shape: tuple[int, int, int]
    chunks: tuple[int, int, int] = (64, 256, 256)
    shards: tuple[int, int, int] = (128, 512, 512)
    inner: tuple[int, int, int] = (32, 128, 128)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * 4


FULL = Config("full", (128, 1024, 1024))
SMALL = Config("small", (32, 512, 512))
VARIANTS = ("bytes", "blosc", "gzip", "sharded")


def create_kwargs(variant: str, cfg: Config) -> dict[str, Any]:
    from zarr.codecs import BloscCodec, GzipCodec

    if variant == "bytes":
        return {"chunks": cfg.chunks, "compressors": None}
    if variant == "blosc":
        return {
            "chunks": cfg.chunks,
            "compressors": BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),
        }
    if variant == "gzip":
        return {"chunks": cfg.chunks, "compressors": GzipCodec(level=1)}
    if variant == "sharded":
        return {
            "chunks": cfg.inner,
            "shards": cfg.shards,
            "compressors": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
        }
    raise SystemExit(f"unknown variant {variant!r} (choose from {', '.join(VARIANTS)})")


# --------------------------------------------------------------------------- data


def _generate(cfg: Config) -> np.ndarray:
    """Smooth data (product of slow waves drifting along axis 0) plus a little noise."""
    nz, ny, nx = cfg.shape
    out = np.empty(cfg.shape, dtype="<f4")
    rng = np.random.default_rng(42)
    y = np.arange(ny, dtype=np.float32)[:, None]
    x = np.arange(nx, dtype=np.float32)[None, :]
    for z in range(nz):
        plane = np.sin(x * (2 * np.pi / 500) + z * 0.05) * np.cos(y * (2 * np.pi / 700) - z * 0.03)
        plane = plane * 10 + 20 + rng.standard_normal((ny, nx), dtype=np.float32) * 0.05
        out[z] = plane
    return out


def ensure_data(cfg: Config, base: Path, variants: list[str]) -> dict[str, Path]:
    """Write ``src.raw`` and every requested store once; later runs reuse them."""
    import zarr

    base.mkdir(parents=True, exist_ok=True)
    src = base / "src.raw"
    data: np.ndarray | None = None
    if not (src.exists() and src.stat().st_size == cfg.nbytes):
        log(f"generating {cfg.shape} float32 -> {src}")
        data = _generate(cfg)
        data.tofile(src)
    stores = {}
    for v in variants:
        store = base / f"{v}.zarr"
        marker = base / f"{v}.done"
        stamp = json.dumps({"cfg": asdict(cfg), "variant": v, "zarr": zarr.__version__})
        stores[v] = store
        if (
            marker.exists()
            and marker.read_text() == stamp
            and (store / ARRAY / "zarr.json").exists()
        ):
            continue
        if data is None:
            data = np.fromfile(src, dtype="<f4").reshape(cfg.shape)
        log(f"writing {store} with zarr-python")
        shutil.rmtree(store, ignore_errors=True)
        marker.unlink(missing_ok=True)
        root = zarr.open_group(str(store), mode="w", zarr_format=3)
        arr = root.create_array(
            ARRAY, shape=cfg.shape, dtype="float32", fill_value=0.0, **create_kwargs(v, cfg)
        )
        arr[...] = data
        marker.write_text(stamp)
    return stores


def ensure_listing(path: Path, groups: int, per_group: int) -> None:
    """A hierarchy of groups x arrays of shape (4,), one chunk each; metadata written directly."""
    stamp = f"{groups}x{per_group}"
    marker = path.with_suffix(".done")
    if marker.exists() and marker.read_text() == stamp and (path / "zarr.json").exists():
        return
    log(f"building the listing hierarchy {path} ({groups} groups x {per_group} arrays)")
    shutil.rmtree(path, ignore_errors=True)
    marker.unlink(missing_ok=True)
    group_doc = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
    array_doc = json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
    })  # fmt: skip
    path.mkdir(parents=True)
    (path / "zarr.json").write_text(group_doc)
    for g in range(groups):
        gdir = path / f"g{g:03d}"
        gdir.mkdir()
        (gdir / "zarr.json").write_text(group_doc)
        for a in range(per_group):
            adir = gdir / f"a{a:03d}"
            (adir / "c").mkdir(parents=True)
            (adir / "zarr.json").write_text(array_doc)
            (adir / "c" / "0").write_bytes(np.arange(4, dtype="<f4").tobytes())
    marker.write_text(stamp)


# --------------------------------------------------------------------------- engines


def zarr_open(store: Path, mode: str = "r") -> Any:
    import zarr

    return zarr.open_array(store=str(store), path=ARRAY, mode=mode)


def ts_open(store: Path, cache_bytes: int = 0) -> Any:
    import tensorstore as ts

    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(store / ARRAY)}}
    ctx = ts.Context({"cache_pool": {"total_bytes_limit": cache_bytes}})
    return ts.open(spec, context=ctx, open=True).result()


def read_all_zarr(arr: Any) -> Any:
    return arr[...]


def read_all_ts(arr: Any) -> Any:
    return arr.read().result()


def write_ts(arr: Any, x: np.ndarray) -> None:
    arr.write(x).result()


def ts_bytes_read() -> int:
    import tensorstore as ts

    for m in ts.experimental_collect_matching_metrics("/tensorstore/kvstore/file/bytes_read"):
        return int(sum(v.get("value", 0) for v in m["values"]))
    return 0


class ByteCounter:
    total = 0


def zarr_counting_array(store: Path) -> Any:
    """A zarr-python array whose store counts the bytes every get returns."""
    import zarr
    from zarr.storage import LocalStore, WrapperStore

    class Counting(WrapperStore):  # type: ignore[misc, type-arg]
        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            buf = await self._store.get(key, prototype, byte_range)
            if buf is not None:
                ByteCounter.total += len(buf)
            return buf

        async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
            bufs = await self._store.get_partial_values(prototype, key_ranges)
            ByteCounter.total += sum(len(b) for b in bufs if b is not None)
            return bufs

    return zarr.open_array(store=Counting(LocalStore(str(store), read_only=True)), path=ARRAY)
