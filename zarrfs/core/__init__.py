"""The Zarr engine: metadata, data types, grids, codecs, sharding, stores, caches.

Plain synchronous, thread-safe Python. Never imports pyfuse3, trio or the FUSE/CLI layers.
"""
