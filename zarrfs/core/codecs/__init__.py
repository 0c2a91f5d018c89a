"""Zarr v3 codecs: interfaces (``base``), the chain (``chain``) and one module per codec.

Importing a codec module registers it (``base.register_codec``). Importing this package (which
any import of one of its modules does first) imports ``builtin``, which imports every built-in
codec module, so no name lookup ever sees the registry without them.
"""

from zarrfs.core.codecs import builtin  # noqa: F401
