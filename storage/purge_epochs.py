"""Purge epochs: how every recall index learns that a namespace was purged.

A purge (``revoke(purge=True)``, ``undeclare(purge=True)``) removes a
namespace's records from the store, then bumps the store's purge epoch and
records, for the namespace, the epoch of its last purge. The recall index
of every process and host (each may keep its own ``recall.db``) keeps the
epoch it has caught up to; before it answers (``sync_index``) it compares,
and drops the rows of every namespace purged since. An index update that
read records before a purge (and embedded them for seconds) checks the epoch
again inside its write transaction and leaves out the namespaces purged
meanwhile, so it never writes purged text back.

File backend: ``meta/purges.json`` (``{"epoch": n, "namespaces": {ns: n}}``),
replaced atomically under ``meta/purges.lock``. Redis: ``<prefix>purgegen``
(a counter) and ``<prefix>purges`` (a hash), bumped by one script.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from . import fsutil as _fs

_BUMP_LUA = """
local e = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], e)
return e
"""


class FilePurgeEpochs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "meta" / "purges.json"
        self.lock_path = root / "meta" / "purges.lock"

    def _read(self) -> dict[str, object]:
        doc = _fs.read_json(self.path, {"epoch": 0, "namespaces": {}})
        if not (isinstance(doc, dict) and type(doc.get("epoch")) is int and isinstance(doc.get("namespaces"), dict)):
            # Damaged: every namespace counts as purged since any epoch (the
            # indexes drop and rebuild their rows: derived data, nothing lost).
            return {"epoch": -1, "namespaces": {}}
        return doc

    def current(self) -> int:
        epoch = self._read()["epoch"]
        assert isinstance(epoch, int)
        return epoch

    def purged_since(self, epoch: int) -> set[str] | None:
        """Namespaces purged after ``epoch``; None means "cannot tell: all"."""
        doc = self._read()
        if doc["epoch"] == -1:
            return None
        spaces = doc["namespaces"]
        assert isinstance(spaces, dict)
        return {ns for ns, e in spaces.items() if type(e) is int and e > epoch}

    def bump(self, namespace: str) -> int:
        _fs.ensure_real_dirs(self.root, "meta")
        try:
            _fs.make_dirs(self.path.parent, durable=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | _fs.NOFOLLOW, _fs.FILE_MODE)
        except OSError as exc:
            raise _fs.storage_error(exc, "open", self.lock_path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            doc = self._read()
            spaces = doc["namespaces"] if isinstance(doc["namespaces"], dict) else {}
            epoch = max(int(doc["epoch"]) if isinstance(doc["epoch"], int) else 0, 0) + 1
            spaces[namespace] = epoch
            try:
                _fs.atomic_write(self.path, orjson.dumps({"epoch": epoch, "namespaces": spaces}))
            except OSError as exc:
                raise _fs.storage_error(exc, "write", self.path) from None
            return epoch
        finally:
            os.close(fd)


class RedisPurgeEpochs:
    """``errors``: the client's exception types; ``typed(exc, what)``: the
    package's typed error for one (``redis_conn.failure``)."""

    def __init__(self, cmd: Any, prefix: str, errors: tuple[type[BaseException], ...],
                 typed: Callable[[Any, str], BaseException]) -> None:
        self._cmd, self._errors, self._typed = cmd, errors, typed
        self._gen, self._map = prefix + "purgegen", prefix + "purges"

    def current(self) -> int:
        try:
            got = self._cmd("GET", self._gen)
        except self._errors as exc:
            raise self._typed(exc, "reading the purge epoch") from None
        return int(got) if got is not None else 0

    def purged_since(self, epoch: int) -> set[str] | None:
        try:
            got = self._cmd("HGETALL", self._map)
        except self._errors as exc:
            raise self._typed(exc, "reading the purge epochs") from None
        items = got.items() if isinstance(got, dict) else zip(got[::2], got[1::2])
        out = set()
        for ns, e in items:
            try:
                if int(e) > epoch:
                    out.add(ns.decode() if isinstance(ns, bytes) else str(ns))
            except ValueError:
                return None
        return out

    def bump(self, namespace: str) -> int:
        try:
            return int(self._cmd("EVAL", _BUMP_LUA, 2, self._gen, self._map, namespace))
        except self._errors as exc:
            raise self._typed(exc, "a purge") from None


__all__ = ["FilePurgeEpochs", "RedisPurgeEpochs"]
