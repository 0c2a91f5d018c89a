"""zarrfs: mount any Zarr store as plain files (FUSE)."""

__version__ = "0.1.0"
