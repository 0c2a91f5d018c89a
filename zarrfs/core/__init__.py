"""The Zarr engine: metadata, data types, grids, codecs, sharding, stores, caches.

Plain synchronous, thread-safe Python. Never imports pyfuse3, trio or the FUSE/CLI layers.
"""

import warnings

# numcodecs >= 0.16.4 warns at import (and installs a filter of its own that outranks any set
# earlier, so an "ignore" filter does not help) that it prefers google-crc32c over the crc32c
# package zarrfs' own crc32c codec uses; that is not the user's concern. The module is imported
# here once with its warnings recorded and dropped, so the notice never reaches a terminal.
with warnings.catch_warnings(record=True):
    import numcodecs.checksum32  # noqa: F401

# registers the extension data types with ``dtypes`` (``parse_data_type`` knows them all)
from zarrfs.core import extension_dtypes  # noqa: E402,F401
