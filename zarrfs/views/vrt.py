"""``data.vrt``: a GDAL Virtual Format document whose raw raster bands read ``data.raw``.

Format: GDAL VRT, ``VRTRawRasterBand`` (https://gdal.org/drivers/raster/vrt.html, "Raw
Raster Band"); the XML is built with ``xml.etree``.

Invariants:
- 2-D and 3-D arrays only: a 2-D array is one band, a 3-D array one band per index of axis 0
  (band ``b`` starts at ``ImageOffset = b * lines * line bytes``). ``SourceFilename`` is
  ``data.raw`` relative to the VRT; ``ByteOrder`` is the mount's.
- Data types: GDAL's Byte (uint8, bool), Int8, (U)Int16/32/64, Float32/64, CFloat32/64. Other
  types (float16, raw bytes) and sizes beyond GDAL's 32-bit raster dimensions get no VRT:
  absent, never approximate. At most :data:`MAX_BANDS` bands, so the document stays small.
- Georeferencing is written only as the attributes give it, never guessed or converted:
  ``GeoTransform`` and ``SRS`` come from one :class:`Georeference` (see ``views.georef``); the
  SRS text is what the attributes hold (WKT, PROJJSON or an authority code, each of which GDAL
  parses). Without georeferencing the VRT is still valid (pixel coordinates).
- Equal inputs give byte-identical documents.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrfs.views.legacy import DATA_FILE, resolve_byte_order, type_code

#: GDAL data type names by byte-order-free type key
GDAL_TYPES: dict[str, str] = {
    "u1": "Byte", "i1": "Int8", "u2": "UInt16", "i2": "Int16", "u4": "UInt32", "i4": "Int32",
    "u8": "UInt64", "i8": "Int64", "f4": "Float32", "f8": "Float64", "c8": "CFloat32",
    "c16": "CFloat64",
}  # fmt: skip
#: GDAL raster sizes and offsets inside a line are C ``int``
_INT32_MAX = 2**31 - 1
#: most bands written (a band is ~300 bytes of XML)
MAX_BANDS = 4096


@dataclass(frozen=True)
class Georeference:
    """Where the pixels lie: a GDAL geotransform (``x = gt[0] + col*gt[1] + row*gt[2]``,
    ``y = gt[3] + col*gt[4] + row*gt[5]``, corners of pixels) and an SRS definition."""

    geotransform: tuple[float, float, float, float, float, float] | None = None
    srs: str | None = None
    #: where it came from (``_CRS``, ``proj:``, ``grid_mapping``), shown in ``info.json``
    source: str = ""


def describable(dtype: np.dtype[Any], shape: Sequence[int]) -> bool:
    """Whether a VRT raw band can describe an array of this data type and shape exactly."""
    if type_code(dtype) not in GDAL_TYPES or len(shape) not in (2, 3):
        return False
    if not all(n > 0 for n in shape):
        return False
    bands = shape[0] if len(shape) == 3 else 1
    lines, samples = shape[-2], shape[-1]
    return (
        bands <= MAX_BANDS
        and max(lines, samples) <= _INT32_MAX
        and samples * dtype.itemsize <= _INT32_MAX
    )


def _number(x: float) -> str:
    """Shortest text that reads back as exactly ``x`` (``repr`` of a float)."""
    value = float(x)
    return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def vrt_document(
    dtype: np.dtype[Any],
    shape: Sequence[int],
    byte_order: str,
    geo: Georeference | None = None,
    band_names: Sequence[str] | None = None,
    data_file: str = DATA_FILE,
) -> bytes | None:
    """The VRT XML for ``data_file`` holding this array in C order, or None when a VRT cannot
    describe it exactly."""
    if not describable(dtype, shape):
        return None
    code = type_code(dtype)
    assert code is not None
    bands = shape[0] if len(shape) == 3 else 1
    lines, samples = int(shape[-2]), int(shape[-1])
    line_bytes = samples * dtype.itemsize
    root = ET.Element("VRTDataset", rasterXSize=str(samples), rasterYSize=str(lines))
    if geo is not None and geo.srs:
        ET.SubElement(root, "SRS").text = geo.srs
    if geo is not None and geo.geotransform is not None:
        gt = ET.SubElement(root, "GeoTransform")
        gt.text = ", ".join(_number(v) for v in geo.geotransform)
    order = "LSB" if resolve_byte_order(byte_order) == "little" else "MSB"
    for b in range(bands):
        band = ET.SubElement(
            root,
            "VRTRasterBand",
            dataType=GDAL_TYPES[code],
            band=str(b + 1),
            subClass="VRTRawRasterBand",
        )
        if band_names is not None and b < len(band_names):
            ET.SubElement(band, "Description").text = band_names[b]
        ET.SubElement(band, "SourceFilename", relativeToVRT="1").text = data_file
        ET.SubElement(band, "ImageOffset").text = str(b * lines * line_bytes)
        ET.SubElement(band, "PixelOffset").text = str(dtype.itemsize)
        ET.SubElement(band, "LineOffset").text = str(line_bytes)
        ET.SubElement(band, "ByteOrder").text = order
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=False) + b"\n"
