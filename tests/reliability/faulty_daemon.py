"""Test-only zarrfs daemon with fault injection: ``python faulty_daemon.py mount STORE MNT -f ...``.

Production code has no test hooks. This wrapper registers, in its own process only,

- the store scheme ``faulty://<absolute path of a directory store>``: a ``LocalStore`` behind a
  ``FaultyStore`` that consults the fault plan before every store call;
- the bytes->bytes codec ``x_faulty`` (identity on the bytes) whose ``decode``/``encode``
  consult the plan (op ``decode``/``encode``; the plan's ``key`` pattern is matched against the
  codec's ``tag`` configuration value);

and then runs ``zarrfs.cli.main`` with its own arguments.

The plan is the JSON file named by ``$ZARRFS_FAULT_PLAN``; it is re-read whenever the file
changes, so a test can switch faults on and off while the mount runs (fire counters restart
when it changes)::

    {"listable": true,
     "rules": [{"op": "get", "key": "^a/c/1$", "action": "raise", "error": "StoreError",
                "times": 1, "probability": 1.0}]}

``op`` is a store method (``get`` ``size`` ``version`` ``set`` ``delete`` ``list_dir``
``list_prefix``; ``get_many`` goes through ``get``), ``decode``/``encode``, or ``*``. ``key`` is a
regular expression searched in the key (or listing prefix). Actions:

- ``raise``: raise ``error`` (a zarrfs error class name or a builtin exception name);
- ``sleep``: sleep ``seconds``, then do the call;
- ``hang``: block until the rule is removed from the plan (or ``seconds``, default 600, pass),
  then raise ``StoreTimeout`` -- a store that accepted the request and never answers;
- ``garbage``: do the call and return ``value`` instead: ``"flip"`` (the real bytes with one
  byte flipped), ``"truncate"`` (half the real bytes), ``"random"`` (random bytes of the same
  length), ``"empty"`` (``b""``), ``"none"``, ``"str"``, ``"int"``, ``"list"``, ``"object"``.

Every call is appended to ``$ZARRFS_FAULT_LOG`` (if set) as ``op<TAB>key<TAB>fired-action``, so
tests can check that the fault they meant to inject really fired.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from zarrfs.core import errors as zerrors
from zarrfs.core.codecs.base import BytesBytesCodec, register_codec
from zarrfs.core.stores.base import RangeRequest, Store
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.registry import register_scheme

PLAN_ENV = "ZARRFS_FAULT_PLAN"
LOG_ENV = "ZARRFS_FAULT_LOG"


class Plan:
    """The current fault plan, re-read when its file changes. Thread-safe."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._doc: dict[str, Any] = {}
        self._fired: dict[int, int] = {}
        self._log_lock = threading.Lock()

    def _reload(self) -> None:
        if not self.path:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            stamp, doc = None, {}
        else:
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            try:
                with open(self.path, encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                return  # half-written: keep the previous plan until the next change
        if stamp != self._stamp:
            self._stamp, self._doc, self._fired = stamp, doc, {}

    def document(self) -> dict[str, Any]:
        with self._lock:
            self._reload()
            return self._doc

    def rule_for(self, op: str, key: str) -> dict[str, Any] | None:
        """The first rule that matches and still fires (its counter is advanced)."""
        with self._lock:
            self._reload()
            for i, rule in enumerate(self._doc.get("rules", [])):
                if rule.get("op", "*") not in ("*", op):
                    continue
                if not re.search(rule.get("key", ""), key):
                    continue
                times = rule.get("times")
                if times is not None and self._fired.get(i, 0) >= times:
                    continue
                if random.random() >= rule.get("probability", 1.0):
                    continue
                self._fired[i] = self._fired.get(i, 0) + 1
                return rule
            return None

    def still_active(self, rule: dict[str, Any]) -> bool:
        with self._lock:
            self._reload()
            return rule in self._doc.get("rules", [])

    def log(self, op: str, key: str, fired: str) -> None:
        path = os.environ.get(LOG_ENV)
        if not path:
            return
        with self._log_lock, open(path, "a", encoding="utf-8") as f:
            f.write(f"{op}\t{key}\t{fired}\n")


PLAN = Plan(os.environ.get(PLAN_ENV))


def _error(name: str, message: str) -> BaseException:
    cls = getattr(zerrors, name, None) or getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        cls = RuntimeError
    if issubclass(cls, OSError):
        return cls(5, message)
    return cls(message)


def _garbage(kind: str, real: Any) -> Any:
    if kind == "flip" and isinstance(real, bytes | bytearray) and real:
        out = bytearray(real)
        out[len(out) // 2] ^= 0x5A
        return bytes(out)
    if kind == "truncate" and isinstance(real, bytes | bytearray):
        return bytes(real[: len(real) // 2])
    if kind == "random" and isinstance(real, bytes | bytearray):
        return os.urandom(max(1, len(real)))
    return {
        "empty": b"",
        "none": None,
        "str": "not bytes at all",
        "int": 12345,
        "list": [b"a", b"b"],
        "object": object(),
    }.get(kind, real)


def faulty_call(op: str, key: str, call: Any) -> Any:
    """Run ``call()`` as the plan says for ``(op, key)``."""
    rule = PLAN.rule_for(op, key)
    if rule is None:
        PLAN.log(op, key, "-")
        return call()
    action = rule.get("action", "raise")
    PLAN.log(op, key, action)
    if action == "raise":
        raise _error(rule.get("error", "StoreError"), f"injected fault: {op} {key}")
    if action == "sleep":
        time.sleep(float(rule.get("seconds", 1.0)))
        return call()
    if action == "hang":
        deadline = time.monotonic() + float(rule.get("seconds", 600.0))
        while PLAN.still_active(rule) and time.monotonic() < deadline:
            time.sleep(0.05)
        raise zerrors.StoreTimeout(f"injected hang: {op} {key} never answered")
    if action == "garbage":
        return _garbage(rule.get("value", "random"), call())
    raise RuntimeError(f"unknown fault action {action!r}")


class FaultyStore(Store):
    """A store that forwards every call to ``inner`` through ``faulty_call``."""

    def __init__(self, inner: Store, listable: bool) -> None:
        self.inner = inner
        self.url = "faulty+" + inner.url
        self.writable = inner.writable
        self.listable = listable and inner.listable

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        return faulty_call("get", key, lambda: self.inner.get(key, byte_range))  # type: ignore[no-any-return]

    def get_many(self, requests: Sequence[tuple[str, RangeRequest]]) -> list[bytes | None]:
        return [self.get(key, rng) for key, rng in requests]

    def size(self, key: str) -> int | None:
        return faulty_call("size", key, lambda: self.inner.size(key))  # type: ignore[no-any-return]

    def version(self, key: str) -> str | None:
        return faulty_call("version", key, lambda: self.inner.version(key))  # type: ignore[no-any-return]

    def set(self, key: str, data: bytes) -> None:
        faulty_call("set", key, lambda: self.inner.set(key, data))

    def delete(self, key: str) -> None:
        faulty_call("delete", key, lambda: self.inner.delete(key))

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        if not self.listable:
            raise zerrors.StoreError("this faulty store cannot list")
        return faulty_call("list_dir", prefix, lambda: self.inner.list_dir(prefix))  # type: ignore[no-any-return]

    def list_prefix(self, prefix: str) -> Iterator[str]:
        if not self.listable:
            raise zerrors.StoreError("this faulty store cannot list")
        return faulty_call("list_prefix", prefix, lambda: self.inner.list_prefix(prefix))  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()


def open_faulty_url(url: str, *, read_only: bool = False, **options: Any) -> Store:
    """``faulty:///abs/dir``: the directory store at that path, behind the fault plan."""
    path = url.split("://", 1)[1]
    options.pop("create", None)
    listable = bool(PLAN.document().get("listable", True))
    return FaultyStore(LocalStore(path, read_only=read_only), listable)


class FaultyCodec(BytesBytesCodec):
    """Identity bytes->bytes codec whose decode/encode obey the plan (``key`` = ``tag``)."""

    name = "x_faulty"

    def __init__(self, tag: str = "") -> None:
        self.tag = tag

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> FaultyCodec:
        return cls(str(configuration.get("tag", "")))

    def configuration(self) -> dict[str, Any]:
        return {"tag": self.tag}

    def encode(self, data: bytes | memoryview) -> bytes:
        return faulty_call("encode", self.tag, lambda: bytes(data))  # type: ignore[no-any-return]

    def decode(self, data: bytes | memoryview, max_size: int) -> bytes:
        return faulty_call("decode", self.tag, lambda: bytes(data))  # type: ignore[no-any-return]

    def max_encoded_size(self, size: int) -> int:
        return size


def main(argv: list[str]) -> int:
    register_scheme("faulty", open_faulty_url)
    register_codec(FaultyCodec)
    from zarrfs.cli import main as zarrfs_main

    return zarrfs_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
