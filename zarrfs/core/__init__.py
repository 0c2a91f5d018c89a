"""The Zarr engine: metadata, data types, grids, codecs, sharding, stores, caches.

Plain synchronous, thread-safe Python. Never imports pyfuse3, trio or the FUSE/CLI layers.
"""

import warnings

# numcodecs >= 0.16.4 announces at import that it prefers google-crc32c over the crc32c package
# zarrfs depends on for its own crc32c codec; that is not the user's concern
warnings.filterwarnings(
    "ignore", message="crc32c usage is deprecated", category=DeprecationWarning
)
