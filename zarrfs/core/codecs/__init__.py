"""Zarr v3 codecs: interfaces (``base``), the chain (``chain``) and one module per codec.

Importing a codec module registers it (``base.register_codec``); ``builtin`` imports them all and
is loaded lazily by ``base.codec_class`` the first time a codec is looked up by name.
"""
