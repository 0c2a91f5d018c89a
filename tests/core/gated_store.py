"""A directory store whose chunk reads stop at the first streamed piece until a gate opens:
what a load has published before the rest of a chunk is read is all a reader can get."""

from __future__ import annotations

import threading

from zarrfs.core.stores.local import LocalStore
from zarrfs.core.units import STREAM_PIECE


class GatedStore(LocalStore):
    """Reads of chunk files reaching past ``STREAM_PIECE`` bytes wait until ``gate`` is set;
    ``opened`` lists the chunk keys opened, in order."""

    def __init__(self, root):
        super().__init__(root)
        self.gate = threading.Event()
        self.opened: list[str] = []

    def open_reader(self, key):
        reader = super().open_reader(key)
        if reader is None or not key.startswith("c/"):
            return reader
        self.opened.append(key)
        gate, inner = self.gate, reader.readinto

        def readinto(buf, offset, nowait=False):
            if offset + len(buf) > STREAM_PIECE:
                assert gate.wait(30), "the test never opened the gate"
            return inner(buf, offset, nowait)

        reader.readinto = readinto
        return reader
