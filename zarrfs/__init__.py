"""zarrfs: mount any Zarr store as plain files (FUSE).

Python API: ``with zarrfs.mounted(store, mountpoint=None, **options) as path:`` (``zarrfs.api``).
"""

__version__ = "0.1.0"

from zarrfs.api import MountError, OptionError, mounted  # noqa: E402

__all__ = ["MountError", "OptionError", "__version__", "mounted"]
