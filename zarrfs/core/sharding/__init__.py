"""Sharding (Zarr v3 ``sharding_indexed``): ``format`` is the pure shard kernel (index encode,
decode and validation, shard assembly); ``access`` reads index and inner chunks from a store with
ranged requests and rewrites shards. The codec itself is ``zarrfs.core.codecs.sharding``.
"""
