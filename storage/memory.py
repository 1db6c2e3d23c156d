"""The reference backend: a whole store in process memory (``memory://``).

``MemoryManager(backend="memory://")`` keeps every record in dictionaries of
this process; nothing is written anywhere, and everything is gone when the
last manager on it closes (its ``capabilities`` say so: not ``persistent``,
not ``cross_process``). ``memory://<name>`` names a store that every manager
of this process opening the same name shares while one has it open (two
handles on one store, as two processes share a file root).

It is also the example of the seam (:class:`hrm_memory.core.backend.Backend`),
written to be read: each method is the contract in its plainest form. A new
backend keeps the same state per namespace:

- ``live``: the current record of each key (``Stored``, tier ``"warm"``);
- ``cold``: the records archived by :meth:`archive` (tier ``"cold"``), which
  :meth:`get` still finds and :meth:`scan` gives with ``include_cold``;
- ``tombs``: the version of each deleted key, so versions never go back;

and beside them, store-wide: run-time declarations, the purge epochs and the
change log (:class:`MemoryChangeLog`: entries without values, in commit
order, read from opaque cursors). A key is in at most one of ``live``,
``cold`` and ``tombs``. :meth:`purge` and :meth:`erase` remove every trace of
a namespace or a key from all of them, change-log entries included.
The conformance suite (``tests/conformance/``) runs every case against it.
"""

from __future__ import annotations

import os
import random
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from hrm_memory.core.backend import ARCHIVE
from hrm_memory.core.errors import CursorExpired, InvalidArgument, InvalidCursor, LockTimeout
from hrm_memory.core.records import Event, Finding, Stored

SCHEME = "memory://"
#: Change-log entries kept (at least; a quarter more before a trim); a
#: cursor older than the oldest kept raises CursorExpired.
LOG_ENTRIES = 100_000
_CURSOR = "m:"
_NO_TRACE = "0" * 32


class _Namespace:
    """One namespace's records (see the module docstring)."""

    __slots__ = ("live", "cold", "tombs", "lock")

    def __init__(self) -> None:
        self.live: dict[str, Stored] = {}
        self.cold: dict[str, Stored] = {}
        self.tombs: dict[str, int] = {}
        self.lock = threading.RLock()


class _Entry:
    """One change-log entry: who wrote it (a handle's token) and what changed."""

    __slots__ = ("token", "op", "namespace", "key", "version", "trace_id")

    def __init__(self, token: str, op: str, namespace: str, key: str, version: int, trace_id: str) -> None:
        self.token, self.op, self.namespace, self.key = token, op, namespace, key
        self.version, self.trace_id = version, trace_id


class Space:
    """The state of one store, shared by every :class:`MemoryBackend` handle on it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.guard = threading.Lock()  # the dicts below (not the records: each namespace has its lock)
        self.namespaces: dict[str, _Namespace] = {}
        self.declared: dict[str, dict[str, Any]] = {}
        self.declared_gen = 0
        self.epoch = 0
        self.purged: dict[str, int] = {}
        # The change log: entry ``i`` (counted from the first ever) is
        # ``log[i - first]``; an erased entry is None (positions never move).
        self.log: list[_Entry | None] = []
        self.first = 0
        self.handles = 0
        self.wakes: set[Callable[[], None]] = set()  # subscribers told of each append

    def ns(self, namespace: str) -> _Namespace:
        found = self.namespaces.get(namespace)
        if found is None:
            with self.guard:
                found = self.namespaces.setdefault(namespace, _Namespace())
        return found


_named: dict[str, Space] = {}
_named_guard = threading.Lock()


def open_space(url: str) -> Space:
    """The store a ``memory://[name]`` URL names: a new private one for
    ``memory://``, the process's shared one of that name otherwise."""
    if not isinstance(url, str) or not url.lower().startswith(SCHEME):
        raise InvalidArgument("a memory backend URL is memory:// or memory://<name>")
    name = url[len(SCHEME):]
    if not name:
        space = Space("")
        space.handles = 1
        return space
    if len(name) > 200 or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in name):
        raise InvalidArgument("a memory store's name is up to 200 ASCII letters, digits, '-', '_' or '.'")
    with _named_guard:
        space = _named.setdefault(name, Space(name))
        space.handles += 1
    return space


def _release_space(space: Space) -> None:
    with _named_guard:
        space.handles -= 1
        if space.handles == 0 and _named.get(space.name) is space:
            del _named[space.name]


class _Lock:
    """The namespace's re-entrant lock, given up after ``timeout`` seconds
    with :class:`LockTimeout` (as the file backend's)."""

    __slots__ = ("rlock", "namespace", "timeout")

    def __init__(self, rlock: threading.RLock, namespace: str, timeout: float) -> None:
        self.rlock, self.namespace, self.timeout = rlock, namespace, timeout

    def __enter__(self) -> _Lock:
        if not self.rlock.acquire(timeout=self.timeout):
            raise LockTimeout(f"namespace {self.namespace!r}: lock not acquired within {self.timeout} s",
                              namespace=self.namespace)
        return self

    def __exit__(self, *exc: object) -> None:
        self.rlock.release()


class MemoryPurgeEpochs:
    """:class:`hrm_memory.core.backend.PurgeEpochs` over the space."""

    def __init__(self, space: Space) -> None:
        self.space = space

    def current(self) -> int:
        return self.space.epoch

    def purged_since(self, epoch: int) -> set[str] | None:
        with self.space.guard:
            return {ns for ns, e in self.space.purged.items() if e > epoch}

    def bump(self, namespace: str) -> None:
        with self.space.guard:
            self.space.epoch += 1
            self.space.purged[namespace] = self.space.epoch


class _Wakeups:
    """A subscriber's registration for the space's appends."""

    def __init__(self, space: Space, wake: Callable[[], None]) -> None:
        self.space = space
        self.wake = wake
        with space.guard:
            space.wakes.add(wake)

    def alive(self) -> bool:
        return True  # delivered by the appending thread itself

    def close(self) -> None:
        with self.space.guard:
            self.space.wakes.discard(self.wake)


class MemoryChangeLog:
    """:class:`hrm_memory.core.backend.ChangeLog` over the space's list of
    entries. A cursor is ``"m:<n>"``: the count of entries logged before it.
    Each handle has its own ``token``, so a subscriber sees the changes made
    through the other handles of the store as remote ones."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self.token = f"{os.getpid()}.{random.getrandbits(64):016x}"

    def append(self, op: str, namespace: str, key: str, version: int, trace_id: str) -> None:
        space = self.space
        with space.guard:
            space.log.append(_Entry(self.token, op, namespace, key, version, trace_id))
            if len(space.log) > LOG_ENTRIES + LOG_ENTRIES // 4:  # trimmed in batches: no shift per append
                drop = len(space.log) - LOG_ENTRIES
                del space.log[:drop]
                space.first += drop
            wakes = tuple(space.wakes)
        for wake in wakes:
            wake()

    def notify(self, wake: Callable[[], None]) -> _Wakeups:
        """Every append wakes ``wake`` at once, on the appending thread (no thread of its own)."""
        return _Wakeups(self.space, wake)

    def _position(self, cursor: str) -> int:
        digits = cursor[len(_CURSOR):] if isinstance(cursor, str) and cursor.startswith(_CURSOR) else ""
        if not digits.isdigit() or len(digits) > 20:
            raise InvalidCursor(f"not a memory change-log cursor: {str(cursor)[:60]!r} (expected 'm:<n>')")
        return int(digits)

    def cursor(self) -> str:
        with self.space.guard:
            return f"{_CURSOR}{self.space.first + len(self.space.log)}"

    def oldest(self) -> str:
        return f"{_CURSOR}{self.space.first}"

    def changed(self, cursor: str) -> bool:
        at = self._position(cursor)
        if at < self.space.first:
            raise CursorExpired(f"cursor {cursor} is older than the oldest entry kept (m:{self.space.first})")
        return at < self.space.first + len(self.space.log)

    def read(self, cursor: str, upto: str | None = None, *, skip_own: bool = True) -> tuple[list[Event], str]:
        start = self._position(cursor)
        space = self.space
        with space.guard:
            end = space.first + len(space.log)
            if upto is not None:
                end = min(end, self._position(upto))
            if start < space.first:
                raise CursorExpired(f"cursor {cursor} is older than the oldest entry kept (m:{space.first}); "
                                    "re-read the state with query() and take a new cursor")
            entries = space.log[start - space.first : max(start, end) - space.first]
        events = []
        for e in entries:
            if e is None or (skip_own and e.token == self.token):
                continue
            origin = "local" if e.token == self.token else "pid:" + e.token.split(".", 1)[0]
            events.append(Event(e.op, e.namespace, e.key, e.version, e.trace_id or _NO_TRACE, origin))
        return events, f"{_CURSOR}{max(start, end)}"

    def blank(self, namespace: str, key: str | None = None) -> int:
        """Erase the entries of ``namespace`` (of one ``key`` of it), in place."""
        blanked = 0
        with self.space.guard:
            log = self.space.log
            for i, e in enumerate(log):
                if e is not None and e.namespace == namespace and (key is None or e.key == key):
                    log[i] = None
                    blanked += 1
        return blanked

    def close(self) -> None:
        """Nothing to release: the entries belong to the space."""


class MemoryBackend:
    """The whole :class:`~hrm_memory.core.backend.Backend` protocol in
    process memory; see the module docstring. Thread-safe."""

    system = "memory"
    capabilities = frozenset({ARCHIVE})  # not persistent, not cross-process

    def __init__(self, url: str = SCHEME, *, lock_timeout: float = 10.0, signal_log: bool = True) -> None:
        self.space = open_space(url)
        self.lock_timeout = lock_timeout
        self.changes = MemoryChangeLog(self.space) if signal_log else None
        self.purges = MemoryPurgeEpochs(self.space)
        self._decl_seen = -1
        self._closed = False
        self._finalizer = weakref.finalize(self, _release_space, self.space)

    # -- records ------------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Stored | None:
        ns = self.space.ns(namespace)
        return ns.live.get(key) or ns.cold.get(key)

    def put(
        self, namespace: str, key: str, value: bytes, now_us: int, min_version: int = 1, created_us: int | None = None
    ) -> Stored:
        ns = self.space.ns(namespace)
        with ns.lock:
            old = ns.live.get(key) or ns.cold.get(key)
            if old is not None:
                version, created = old.version + 1, old.created_us
            else:
                version = ns.tombs.pop(key, 0) + 1
                created = now_us if created_us is None else created_us
            stored = Stored(key, max(version, min_version), created, now_us, bytes(value), "warm")
            # New record first, old archived copy second: a reader without
            # the lock finds one or the other, never neither (as in archive).
            ns.live[key] = stored
            ns.cold.pop(key, None)
            return stored

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        ns = self.space.ns(namespace)
        with ns.lock:
            old = ns.live.pop(key, None) or ns.cold.pop(key, None)
            if old is not None:
                ns.tombs[key] = old.version + 1  # the deletion is a version too
            return old

    def scan(self, namespace: str, *, include_cold: bool = False, strict: bool = True) -> Iterator[Stored]:
        ns = self.space.ns(namespace)
        with ns.lock:  # a snapshot: the caller may write while it iterates
            found = list(ns.live.values()) + (list(ns.cold.values()) if include_cold else [])
        return iter(found)

    def keys(self, namespace: str) -> list[tuple[str, int, int]]:
        ns = self.space.ns(namespace)
        with ns.lock:
            return [(st.key, st.created_us, st.updated_us) for st in ns.live.values()]

    def lock(self, namespace: str, *, cross_process: bool | None = None) -> _Lock:
        return _Lock(self.space.ns(namespace).lock, namespace, self.lock_timeout)

    # -- tiers ----------------------------------------------------------------------

    def archive(self, namespace: str, records: list[Stored]) -> list[str]:
        ns = self.space.ns(namespace)
        moved = []
        with ns.lock:
            for st in records:
                cur = ns.live.get(st.key)
                if cur is not None and cur.version == st.version:  # still the version the caller saw
                    ns.cold[st.key] = cur._replace(tier="cold")  # the archive copy first, then the live one goes
                    del ns.live[st.key]
                    moved.append(st.key)
        return moved

    def purge(self, namespace: str) -> dict[str, int]:
        ns = self.space.ns(namespace)
        with ns.lock:
            counts = {"warm": len(ns.live) + len(ns.cold), "cold": len(ns.cold), "quarantine": 0}
            ns.live.clear()
            ns.cold.clear()
            ns.tombs.clear()  # no key of purged data stays; versions start again at 1
            counts["events"] = self.changes.blank(namespace) if self.changes is not None else 0
            self.purges.bump(namespace)
        return counts

    def erase(self, namespace: str, key: str) -> dict[str, int]:
        ns = self.space.ns(namespace)
        with ns.lock:
            warm = ns.live.pop(key, None) is not None
            cold = ns.cold.pop(key, None) is not None
            tomb = ns.tombs.pop(key, None) is not None
            events = self.changes.blank(namespace, key) if self.changes is not None else 0
        return {"warm": int(warm or cold or tomb), "cold": int(cold), "quarantine": 0, "events": events}

    # -- run-time declarations ------------------------------------------------------

    def declarations(self) -> dict[str, dict[str, Any]] | None:
        with self.space.guard:
            if self.space.declared_gen == self._decl_seen:
                return None
            self._decl_seen = self.space.declared_gen
            return {name: dict(spec) for name, spec in self.space.declared.items()}

    def declare(self, name: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        with self.space.guard:
            found = self.space.declared.get(name)
            if found is not None:
                return dict(found)
            self.space.declared[name] = dict(spec)
            self.space.declared_gen += 1
            return None

    def undeclare(self, name: str) -> bool:
        with self.space.guard:
            if self.space.declared.pop(name, None) is None:
                return False
            self.space.declared_gen += 1
            return True

    # -- maintenance ----------------------------------------------------------------

    def check(self, fix: bool = False) -> list[Finding]:
        """Nothing outside this process can change the dictionaries: no
        damage to find. What is checked is the one invariant they keep."""
        findings = []
        for name, ns in list(self.space.namespaces.items()):
            with ns.lock:
                both = set(ns.live) & set(ns.cold)
                for key in both:
                    findings.append(Finding("orphan-archive-copy", f"memory://{self.space.name}", key, name, fixed=fix))
                    if fix:
                        del ns.cold[key]
        return findings

    def compact(self, namespace: str | None = None) -> int:
        """Nothing to reclaim: a replaced value is freed at once (tombstones
        stay: they keep versions from going back)."""
        return 0

    def stats(self) -> dict[str, dict[str, int]]:
        out = {}
        for name, ns in list(self.space.namespaces.items()):
            with ns.lock:
                if ns.live or ns.cold:
                    out[name] = {
                        "keys": len(ns.live),
                        "archived": len(ns.cold),
                        "bytes": sum(len(st.value) for st in ns.live.values()),
                        "cold_bytes": sum(len(st.value) for st in ns.cold.values()),
                    }
        return out

    def info(self) -> dict[str, Any]:
        return {
            "url": SCHEME + self.space.name,
            "persistent": False,
            "handles": self.space.handles,
            "change_log_entries": len(self.space.log),
        }

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()  # the space goes with its last handle

    def __repr__(self) -> str:
        return f"MemoryBackend({SCHEME + self.space.name!r})"


__all__ = ["LOG_ENTRIES", "SCHEME", "MemoryBackend", "MemoryChangeLog", "MemoryPurgeEpochs", "Space", "open_space"]
