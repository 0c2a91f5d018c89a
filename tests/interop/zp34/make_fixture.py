"""Write the zarr-python 3.4 fixture of ``test_zarr_python_34.py`` (run by hand, not by the tests).

zarr-python 3.2 and later need Python 3.12, the tests run on 3.11 with zarr 3.1.6, so what the
newer zarr-python writes is kept here as data: ``store/`` (the arrays as it wrote them),
``expected.npz`` (its own read of each array), ``rewrite.npz`` (new values for each array) and
``rewritten/`` (the store after it wrote those values: the objects zarrfs must store for them).
The arrays are what zarr-python 3.2+ writes that 3.1 did not: the ``struct`` data type and the
``scale_offset`` and ``cast_value`` codecs (every rounding and out-of-range mode, a scalar map,
integer and float arithmetic, inside a shard), and its defaults (zstd, sharding, strings as
``fixed_length_utf32``/``null_terminated_bytes``, ``numpy.datetime64``).

    python3.12 -m venv /tmp/zp34 && /tmp/zp34/bin/pip install zarr==3.4.2 cast-value-rs==0.5.1
    /tmp/zp34/bin/python tests/interop/zp34/make_fixture.py
"""

from __future__ import annotations

import shutil
import warnings
import zlib
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import BytesCodec, CastValue, ScaleOffset

HERE = Path(__file__).resolve().parent


def build(root: Path) -> dict[str, np.ndarray]:
    g = zarr.open_group(zarr.storage.LocalStore(root), mode="w", zarr_format=3)
    rng = np.random.default_rng(7)
    out: dict[str, np.ndarray] = {}

    def add(name: str, data: np.ndarray, fill=None, region=None, **kw) -> None:
        a = g.create_array(name, shape=data.shape, dtype=data.dtype, fill_value=fill, **kw)
        a[... if region is None else region] = data if region is None else data[region]
        out[name] = a[...]

    temps = (rng.standard_normal((12, 20)) * 8 + 15).astype("f4")
    temps_nan = temps.copy()
    temps_nan[3:6, 7:15] = np.nan
    packed = [
        ScaleOffset(offset=-20, scale=100),
        CastValue(data_type="uint16", out_of_range="clamp"),
    ]
    add("so_cast_u16", temps, filters=packed, chunks=(8, 16))
    nan_map = {"encode": [("NaN", 0)], "decode": [(0, "NaN")]}
    add(
        "so_cast_u16_nan",
        temps_nan,
        fill=np.nan,
        region=(slice(0, 10), slice(0, 17)),
        filters=[
            ScaleOffset(offset=-20, scale=100),
            CastValue(data_type="uint16", scalar_map=nan_map),
        ],
        chunks=(8, 16),
    )
    wide = (rng.standard_normal((50,)) * 300).astype("f8")
    for mode in (
        "nearest-even",
        "towards-zero",
        "towards-positive",
        "towards-negative",
        "nearest-away",
    ):
        add(
            f"round_{mode}",
            wide,
            filters=[
                ScaleOffset(offset=0.5, scale=2.5),
                CastValue(data_type="int16", rounding=mode),
            ],
            chunks=(16,),
        )
    add("wrap_i8", wide, filters=[CastValue(data_type="int8", out_of_range="wrap")], chunks=(16,))
    add(
        "clamp_u8", wide, filters=[CastValue(data_type="uint8", out_of_range="clamp")], chunks=(16,)
    )
    add("f64_f16", wide, filters=[CastValue(data_type="float16")], chunks=(16,))
    ints = rng.integers(-1000, 1000, (20, 9)).astype("i4")
    add(
        "so_int",
        ints,
        fill=7,
        region=(slice(0, 14), slice(None)),
        filters=[ScaleOffset(offset=-5, scale=3)],
        chunks=(16, 4),
    )
    add(
        "so_int_cast_i16",
        ints,
        filters=[ScaleOffset(offset=100, scale=2), CastValue(data_type="int16")],
        chunks=(16, 4),
    )
    add(
        "u8_to_f32",
        rng.integers(0, 255, (33,)).astype("u1"),
        filters=[CastValue(data_type="float32")],
        serializer=BytesCodec(endian="little"),
        chunks=(10,),
    )
    add("so_noconf", temps, filters=[ScaleOffset()], chunks=(8, 16))
    add("so_f32", temps, filters=[ScaleOffset(offset=3.25, scale=0.1)], chunks=(8, 16))
    add(
        "so_sharded",
        temps,
        filters=[ScaleOffset(offset=-20, scale=100), CastValue(data_type="int32")],
        chunks=(4, 8),
        shards=(8, 16),
    )
    rec = np.dtype([("p", [("x", "f4"), ("y", "f8")]), ("v", "i2")])
    add(
        "struct_nested",
        np.array([((1.5, -2.0), 3), ((0.0, 1e10), -1)] * 4, dtype=rec),
        fill=((9.0, 8.0), 7),
        region=slice(0, 5),
        chunks=(3,),
    )
    add(
        "struct_time",
        np.array(
            [(np.datetime64("2020-01-01T00:00:01"), 1.5)] * 5, dtype=[("t", "M8[s]"), ("v", "f4")]
        ),
        chunks=(2,),
    )
    add("default_f4", temps, chunks=(8, 16))
    add("sharded_f4", temps, chunks=(4, 8), shards=(8, 16))
    add("utf32", np.array(["ab", "c", "ééé"] * 5, dtype="U3"), chunks=(4,))
    add("bytes_s3", np.array([b"ab", b"c", b"xyz"] * 5, dtype="S3"), chunks=(4,))
    add("datetime", (np.arange(20) * 86400).astype("datetime64[s]"), chunks=(6,))
    return out


def rewrite_values(name: str, values: np.ndarray) -> np.ndarray:
    """New values for an array: its own, shuffled and (floats) nudged, so they stay in range."""
    flat = values.reshape(-1).copy()
    np.random.default_rng(zlib.crc32(name.encode())).shuffle(flat)
    if flat.dtype.kind == "f":
        flat = np.where(np.isnan(flat), flat, flat + np.asarray(0.01, flat.dtype))
    return flat.reshape(values.shape)


def main() -> None:
    warnings.simplefilter("ignore")
    store, rewritten = HERE / "store", HERE / "rewritten"
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(rewritten, ignore_errors=True)
    expected = build(store)
    np.savez(HERE / "expected.npz", **expected)
    shutil.copytree(store, rewritten)
    new = {name: rewrite_values(name, values) for name, values in expected.items()}
    for name, values in new.items():
        zarr.open_array(zarr.storage.LocalStore(rewritten), path=name, mode="r+")[...] = values
    np.savez(HERE / "rewrite.npz", **new)
    print(f"zarr {zarr.__version__}: {len(expected)} arrays")


if __name__ == "__main__":
    main()
