"""A real client: an xarray Dataset with string and datetime coordinates, written with
``Dataset.to_zarr`` (Zarr v2 and v3), mounted; every variable is present and correct.

xarray writes the string coordinate as fixed-length UTF-32 (``<U12`` / ``fixed_length_utf32``),
an object coordinate as ``vlen-utf8`` (v2 object array / v3 ``string``), the datetime
coordinate CF-encoded as int64 with ``units``, and a float variable with ``_FillValue``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")
zarr = pytest.importorskip("zarr")

from zarrfs.views.text import text_line  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _dataset():
    return xr.Dataset(
        {
            "temp": (("time", "station"), np.arange(12, dtype="f4").reshape(4, 3)),
            "flag": (("station",), np.array([True, False, True])),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=4, freq="6h"),
            "station": ["Zürich", "Genève", "Bern\nnewline"],
            "label": ("station", np.array(["a", "bb", "ccc"], dtype=object)),
        },
        attrs={"title": "stations"},
    )


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_xarray_dataset_mounts_with_every_variable(tmp_path: Path, mounter, zarr_format) -> None:
    ds = _dataset()
    store = tmp_path / "ds.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(store, zarr_format=zarr_format, mode="w", consolidated=zarr_format == 2)
    m = mounter(store, "ro")
    names = {p.name for p in m.path.iterdir()}
    assert set(ds.variables) <= names
    assert json.loads((m.path / "attributes.json").read_text())["title"] == "stations"
    for name in ds.variables:
        d = m.path / name
        stored = np.asarray(zarr.open_array(store / name, mode="r")[:])
        if stored.dtype.kind in "OT":  # the vlen-utf8 coordinate (object or StringDType)
            lines = (d / "data.txt").read_text().split("\n")[:-1]
            assert lines == [text_line(v) for v in stored] == ["a", "bb", "ccc"]
            assert json.loads((d / "data.json").read_text()) == list(ds[name].values)
            continue
        raw = (d / "data.raw").read_bytes()
        assert raw == stored.astype(stored.dtype.newbyteorder("<")).tobytes(), name
        npy = np.load(d / "data.npy")
        assert npy.tolist() == stored.tolist(), name
    # the CF-encoded datetimes decode to the dataset's times with the stored units
    attrs = json.loads((m.path / "time" / "attributes.json").read_text())
    hours = np.fromfile(m.path / "time" / "data.raw", dtype="<i8")
    assert attrs["units"].startswith("hours since 2020-01-01")
    got = pd.Timestamp("2020-01-01") + pd.to_timedelta(hours, unit="h")
    assert list(got) == list(pd.DatetimeIndex(ds.time.values))
    # the fixed-length string coordinate: UTF-32 code units, newline kept
    station = np.fromfile(m.path / "station" / "data.raw", dtype="<U12")
    assert station.tolist() == ["Zürich", "Genève", "Bern\nnewline"]
    temp = np.load(m.path / "temp" / "data.npy")
    assert temp.tolist() == ds.temp.values.tolist()
