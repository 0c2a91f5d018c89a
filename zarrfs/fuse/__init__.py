"""The FUSE front end: the only package that imports pyfuse3 and trio.

It serves a tree of ``zarrfs.views.base`` nodes and knows nothing about Zarr:

- ``options``    ``-o`` option strings -> ``MountOptions`` (consumed by the tree builder too)
- ``errors``     the one exception -> errno table (DESIGN §4 "Errors have one table")
- ``inodes``     inode numbers stable per path, kernel lookup counts, forget
- ``offload``    the single path from a request to a blocking node call (thread + deadline)
- ``operations`` the ``pyfuse3.Operations`` subclass; translates requests, owns no content
- ``daemon``     mount lifecycle: open tree, mount, serve, signals, unmount, flush

Importing this package does not import pyfuse3 or trio; the submodules that need them do.
"""
