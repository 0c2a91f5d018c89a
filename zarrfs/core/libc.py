"""C library functions reached through ``ctypes``, for the system calls Python's ``os`` lacks.

Invariant: ``function`` returns None where the C library has no such symbol (another
operating system, an old C library); every caller then does without what the call offers
(an advice, a hint, a faster path), never without correctness. Functions are looked up with
``use_errno``, so ``ctypes.get_errno()`` tells why a call failed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any


def function(
    name: str,
    argtypes: Sequence[Any] | None,
    restype: Any = ctypes.c_int,
    library: str | None = None,
) -> Any:
    """The C library's ``name`` (or that of the shared object at path ``library``) with these
    argument and result types, or None."""
    try:
        fn = getattr(ctypes.CDLL(library, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    if argtypes is not None:
        fn.argtypes = list(argtypes)
    fn.restype = restype
    return fn
