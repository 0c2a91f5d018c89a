"""The versions a remote store last saw of its keys, which make its writes conditional.

Invariants (the rules themselves are in ``remote.py``'s docstring, "Conditional writes"):
- A key's entry is its (ETag, generation) from a data read or our own PUT, or ``MISSING``
  after a 404 or our own delete; a read that carried neither ETag nor generation forgets the
  key (an unconditional PUT follows).
- A 304 from the disk cache brings an ETag without a generation: the generation known for that
  same ETag is kept.
- At most ``limit`` keys are kept, the least recently seen forgotten first.
- Thread-safe: every access holds one lock, never across I/O.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from zarrfs.core.stores.rangeplan import Fetched

#: remembered state of a key seen missing
MISSING: tuple[str | None, str | None] = ("", None)


class VersionMemory:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, key: str, fetched: Fetched) -> None:
        if fetched.data is None:
            state: tuple[str | None, str | None] = MISSING
        elif fetched.etag is None and fetched.generation is None:
            with self._lock:
                self._seen.pop(key, None)
            return
        else:
            state = (fetched.etag, fetched.generation)
        with self._lock:
            known = self._seen.get(key)
            if state[1] is None and known is not None and known[0] == state[0]:
                state = known  # a 304 from the disk cache: keep the generation we knew
            self._seen[key] = state
            self._seen.move_to_end(key)
            while len(self._seen) > self.limit:
                self._seen.popitem(last=False)

    def put_mode(self, key: str) -> Any:
        """obstore's ``PutMode`` for a PUT of ``key``: an update of the version seen, a create
        of a key seen missing, or an overwrite of a key never seen."""
        with self._lock:
            state = self._seen.get(key)
        if state is None:
            return "overwrite"
        if state == MISSING:
            return "create"
        etag, generation = state
        return {"e_tag": etag} if generation is None else {"e_tag": etag, "version": generation}
