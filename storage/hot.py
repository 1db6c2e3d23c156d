"""Hot tier: in-process memory, per session, bounded.

Two roles, two small classes:

- :class:`HotTier` is the home of hot namespaces (``altitude.session``,
  ``focus.fast``): the records live only in this process and end with it.
- :class:`ReadCache` is a bounded LRU in front of the warm tier. It is only a
  cache: the warm tier checks every hit against its on-disk index (version and
  update time), so a stale entry is never served.

Values are kept as their JSON bytes, so nothing a caller does to a returned
object can change what is stored. A hot record written through the pipeline
also keeps a private copy of the value with its copy plan
(``hrm_memory.core.values.snapshot``): a read then copies the containers (C-level
``copy()`` calls) instead of decoding the JSON; the copy shares no container
with the private one, so the promise holds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from hrm_memory.core.records import MISSING, Finding, Stored

#: One hot record, as a plain tuple:
#: ``(key, version, created_us, updated_us, value, "hot", copy, plan)``: the
#: fields of its ``Stored``, then a private copy of the value (MISSING when
#: none was given: decode the bytes) and that copy's plan. Read by unpacking
#: it into those names (``HotTier.store`` makes it, ``Records`` reads it).
#: Not a NamedTuple: one is made per hot write, and making a NamedTuple
#: costs about 6% of a hot write (BENCHMARKS.md, "Named state: instructions
#: per operation before and after", row "hot entry as a NamedTuple"); and
#: the garbage collector stops tracking a plain tuple that holds no
#: container, where it tracks a NamedTuple for good.
Entry = tuple[str, int, int, int, bytes, str, Any, Any]

#: How many of an Entry's fields are a Stored's (``Stored`` of ``entry[:STORED]``).
STORED = len(Stored._fields)

_new = tuple.__new__  # Stored(...) without the Python-level __new__ of a NamedTuple


class HotTier:
    name = "hot"
    capabilities: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self._data: dict[str, dict[str, Entry]] = {}
        self._versions: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def get(self, namespace: str, key: str) -> Stored | None:
        ns = self._data.get(namespace)
        entry = None if ns is None else ns.get(key)
        return None if entry is None else _new(Stored, entry[:STORED])

    def entry(self, namespace: str, key: str) -> Entry | None:
        """The :data:`Entry` of ``key`` (its ``Stored`` fields, then the
        private copy of its value or MISSING, and the copy plan), or None.
        The private copy is never to be handed out: ``values.clone`` it."""
        ns = self._data.get(namespace)
        return None if ns is None else ns.get(key)

    def put(
        self,
        namespace: str,
        key: str,
        value: bytes,
        now_us: int,
        base_version: int = 0,
    ) -> Stored:
        """Store ``value``; its version follows the previous one here, or
        ``base_version`` (the version the key has in another tier) if higher.
        A read decodes ``value`` (see :meth:`store` for a kept copy)."""
        with self._lock:
            return _new(Stored, self.store(namespace, key, value, now_us, MISSING, None, base_version)[:STORED])

    def store(
        self, namespace: str, key: str, value: bytes, now_us: int, obj: Any, plan: Any, base_version: int = 0
    ) -> Entry:
        """:meth:`put` for a caller that holds the namespace's lock (every
        caller in the pipeline does: a put and an ``update`` must not
        interleave): no lock of its own, and the new :data:`Entry` is
        returned instead of a ``Stored`` (its first six fields are one).
        ``obj`` and ``plan``: a private copy of the decoded value and its
        copy plan (``hrm_memory.core.values.snapshot``), kept for reads; MISSING
        and None to have reads decode ``value``."""
        ns = self._data.get(namespace)
        if ns is None:
            ns = self._data[namespace] = {}
        old = ns.get(key)
        if old is not None:
            _, old_version, created, _, _, _, _, _ = old
            version = (old_version if old_version > base_version else base_version) + 1
        else:
            gone = self._versions.pop((namespace, key), 0) if self._versions else 0
            version = (gone if gone > base_version else base_version) + 1
            created = now_us
        ns[key] = entry = (key, version, created, now_us, value, "hot", obj, plan)
        return entry

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        with self._lock:
            ns = self._data.get(namespace)
            entry = None if ns is None else ns.pop(key, None)
            if entry is None:
                return None
            # Versions keep counting across delete and re-create, as in warm.
            stored: Stored = _new(Stored, entry[:STORED])
            self._versions[(namespace, key)] = stored.version + 1
            return stored

    def scan(self, namespace: str) -> Iterator[Stored]:
        ns = self._data.get(namespace)
        return iter([_new(Stored, e[:STORED]) for e in ns.values()]) if ns else iter(())

    def oldest(self, namespace: str, n: int) -> list[Stored]:
        """The ``n`` records created first (a dict keeps insertion order, and
        an update keeps a key's place, so this is creation order)."""
        ns = self._data.get(namespace) or {}
        return [_new(Stored, e[:STORED]) for e, _ in zip(ns.values(), range(n))]

    def count(self, namespace: str) -> int:
        return len(self._data.get(namespace) or ())

    def namespaces(self) -> list[str]:
        return sorted(n for n, d in self._data.items() if d)

    def check(self, fix: bool = False) -> list[Finding]:
        return []

    def close(self) -> None:
        with self._lock:
            self._data.clear()
            self._versions.clear()


class ReadCache:
    """A bounded LRU of ``(namespace, key) -> Stored``. Thread-safe.

    An entry is kept as a plain tuple of its ``Stored``'s fields (strings,
    ints and the value's bytes), and made a ``Stored`` again on a hit: the
    garbage collector stops tracking such a tuple at its first collection,
    where it tracks a NamedTuple for good, and a cache full of tracked
    records made every collection that reached them walk them all, a
    visible share of a first read after a reopen (BENCHMARKS.md, "Figures
    the code's comments rely on")."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, str], tuple[Any, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, str]) -> Stored | None:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            self._items.move_to_end(key)
        except KeyError:
            pass
        return _new(Stored, item)

    def put(self, key: tuple[str, str], stored: Stored) -> None:
        if self.capacity <= 0:
            return
        fields = tuple(stored)  # an exact tuple (see the class docstring)
        with self._lock:
            self._items[key] = fields
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def discard(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
