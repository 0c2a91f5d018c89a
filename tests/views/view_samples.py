"""Sample arrays shared by the view tests: distinct values per element, with the type's
extremes at both ends for integers."""

from __future__ import annotations

from math import prod

import numpy as np


def sample(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct values per element, with the type's extremes at both ends for integers."""
    dt, n = np.dtype(dtype), prod(shape)
    if dt.kind == "b":
        a = np.arange(n) % 3 == 1
    elif dt.kind in "iu":
        a = (np.arange(n) - (n // 2 if dt.kind == "i" else 0)).astype(dt)
        if n >= 2:
            a[0], a[-1] = np.iinfo(dt).min, np.iinfo(dt).max
    elif dt.kind == "f":
        a = (np.arange(n) * 0.5 - 3).astype(dt)
    elif dt.kind == "c":
        a = (np.arange(n) * 0.5 - 3 + 1j * (np.arange(n) * 0.25 + 1)).astype(dt)
    else:
        a = np.frombuffer(bytes((7 * i + 1) % 256 for i in range(n * dt.itemsize)), dt)
    return a.reshape(shape)
