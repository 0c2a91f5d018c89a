"""Numbers from free-form attributes (OME-NGFF transformations, georeferencing), for headers.

Attributes are JSON written by anyone: a number may come as a boolean, as text, as an
infinity, or as an integer past float's range (JSON has no limit on digits). A header built
from them takes only finite floats; anything else makes the value unusable, never an error.
"""

from __future__ import annotations

import math
from typing import Any


def finite_number(v: Any) -> float | None:
    """``v`` as a finite float when it is a JSON number that is one, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None
