"""One small adapter per store, all with the same three methods.

Namespaces arrive as an index ``0 .. N_NAMESPACES-1``; each adapter maps it
to its own notion of a namespace (a dict, a tuple prefix, a sub-database, a
directory, a declared hrm-memory namespace). Every persistent peer stores the
record as orjson bytes and decodes it on read, as hrm-memory does, so all of
them pay for serialisation; the in-memory peers keep the dict itself.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import orjson

from .harness import N_NAMESPACES

Value = dict[str, Any]


class Store(ABC):
    @abstractmethod
    def put(self, ns: int, key: str, value: Value) -> None: ...

    @abstractmethod
    def get(self, ns: int, key: str) -> Any: ...

    def flush(self) -> None:
        """Finish work the store left in the background (timed with the ops)."""
        return None

    def close(self) -> None:
        return None


class DictStore(Store):
    """A plain dict per namespace: the floor."""

    def __init__(self, path: Path) -> None:
        self._data: list[dict[str, Value]] = [{} for _ in range(N_NAMESPACES)]

    def put(self, ns: int, key: str, value: Value) -> None:
        self._data[ns][key] = value

    def get(self, ns: int, key: str) -> Any:
        return self._data[ns].get(key)


class LangGraphStore(Store):
    """LangGraph's ``InMemoryStore``, namespaces as ``("bench", "nsI")``."""

    def __init__(self, path: Path) -> None:
        from langgraph.store.memory import InMemoryStore

        self._store = InMemoryStore()
        self._ns = [("bench", f"ns{i}") for i in range(N_NAMESPACES)]

    def put(self, ns: int, key: str, value: Value) -> None:
        self._store.put(self._ns[ns], key, value)

    def get(self, ns: int, key: str) -> Any:
        item = self._store.get(self._ns[ns], key)
        return None if item is None else item.value


class DiskcacheStore(Store):
    """``diskcache.Cache`` with its defaults (SQLite in WAL mode,
    ``synchronous=NORMAL``: no fsync per write); key ``"nsI/key"``."""

    def __init__(self, path: Path) -> None:
        import diskcache

        self._cache = diskcache.Cache(str(path))
        self._prefix = [f"ns{i}/" for i in range(N_NAMESPACES)]

    def put(self, ns: int, key: str, value: Value) -> None:
        self._cache.set(self._prefix[ns] + key, orjson.dumps(value))

    def get(self, ns: int, key: str) -> Any:
        data = self._cache.get(self._prefix[ns] + key)
        return None if data is None else orjson.loads(data)

    def close(self) -> None:
        self._cache.close()


class LmdbStore(Store):
    """lmdb, one named sub-database per namespace, one transaction per operation.
    ``sync=False`` skips the fsyncs at commit (survives a process crash, not an
    OS crash); ``sync=True`` is lmdb's durable default."""

    def __init__(self, path: Path, *, sync: bool) -> None:
        import lmdb

        self._env = lmdb.open(str(path), map_size=1 << 32, max_dbs=N_NAMESPACES, sync=sync)
        self._dbs = [self._env.open_db(f"ns{i}".encode()) for i in range(N_NAMESPACES)]

    def put(self, ns: int, key: str, value: Value) -> None:
        with self._env.begin(write=True, db=self._dbs[ns]) as txn:
            txn.put(key.encode(), orjson.dumps(value))

    def get(self, ns: int, key: str) -> Any:
        with self._env.begin(db=self._dbs[ns]) as txn:
            data = txn.get(key.encode())
        return None if data is None else orjson.loads(data)

    def close(self) -> None:
        self._env.close()


class FilePerKeyStore(Store):
    """The naive store: one orjson file per key, written to a temporary file
    and renamed over the old one. With ``fsync`` the file is fsynced before
    the rename and the directory after it (what durability needs)."""

    def __init__(self, path: Path, *, fsync: bool) -> None:
        self._fsync = fsync
        self._dirs = [path / f"ns{i}" for i in range(N_NAMESPACES)]
        for d in self._dirs:
            d.mkdir(parents=True, exist_ok=True)

    def put(self, ns: int, key: str, value: Value) -> None:
        directory = self._dirs[ns]
        final = directory / f"{key}.json"
        tmp = directory / f".{key}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, orjson.dumps(value))
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        if self._fsync:
            dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def get(self, ns: int, key: str) -> Any:
        try:
            with open(self._dirs[ns] / f"{key}.json", "rb") as f:
                return orjson.loads(f.read())
        except FileNotFoundError:
            return None


class HrmStore(Store):
    """hrm-memory's ``MemoryManager``: ``write`` / ``read`` on declared
    namespaces ``bench.<tier>I`` of the given tier."""

    def __init__(
        self,
        path: Path,
        *,
        tier: str,
        durability: str = "flush",
        tracer_provider: Any = None,
    ) -> None:
        from hrm_memory import MemoryManager, NamespaceSpec

        self.mm = MemoryManager(path, durability=durability, tracer_provider=tracer_provider)
        self._provider = tracer_provider
        self._names = [f"bench.{tier}{i}" for i in range(N_NAMESPACES)]
        for name in self._names:
            self.mm.declare(NamespaceSpec(name, tier=tier))

    def put(self, ns: int, key: str, value: Value) -> None:
        self.mm.write(self._names[ns], key, value)

    def get(self, ns: int, key: str) -> Any:
        return self.mm.read(self._names[ns], key)

    def flush(self) -> None:
        if self._provider is not None:
            self._provider.force_flush()  # spans still pending on a background thread

    def close(self) -> None:
        self.mm.close()
