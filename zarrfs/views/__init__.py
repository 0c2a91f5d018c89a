"""Virtual file tree over a Zarr hierarchy: names, sizes, headers, JSON renderings.

Knows nothing of FUSE: the FUSE layer walks these nodes and calls their (blocking) methods from
worker threads.
"""
