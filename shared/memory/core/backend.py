"""The backend seam: what the pipeline needs from persistent storage.

The pipeline (:mod:`hrm_memory.core.pipeline`) types against :class:`Backend` and
nothing else; ``hrm_memory.storage.FileBackend`` (warm logs, cold archive,
flock locks, the file change log) is the default, and a backend for several
hosts (Redis) is one more class that implements this protocol.

What stays above the seam, the same for every backend: the hot tier (process
memory for session namespaces and for consent-gated values awaiting consent,
so a backend never sees a byte of gated data before consent), validation,
codes, scope, consent, spans and in-process event dispatch.

Values cross the seam as encoded JSON bytes (the compact form). Versions and
timestamps are assigned by the backend under its own lock, so they stay in
commit order. Capabilities are declared, not probed: the pipeline refuses an
operation a backend cannot honour with :class:`Unsupported`.

Erasure is part of the contract: :meth:`Backend.purge` (a whole namespace)
and :meth:`Backend.erase` (one key) remove every byte the backend keeps of
it, in every place it keeps it (records, archive, quarantine, change log,
the files a server writes), and :attr:`Backend.purges` tells derived data
kept elsewhere (every process's recall index) which namespaces were purged.
``hrm_memory.storage.memory.MemoryBackend`` is the smallest complete
implementation, and the one to read first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from hrm_memory.core.records import Event, Finding, Stored

#: Records survive the process.
PERSISTENT = "persistent"
#: A write returned in one process is seen by the next read in another.
CROSS_PROCESS = "cross_process"
#: Records past their TTL can move to an archive and still be read.
ARCHIVE = "archive"
#: A change-log entry (op) saying that a writer of ``namespace`` died and that
#: its last commits may have no entry of their own: derived data (the recall
#: index) looks at that namespace again. Never delivered to subscribers.
RECOVER = "recover"


class Notifications(Protocol):
    """A subscriber's registration for "the change log may have grown"
    wake-ups (:meth:`ChangeLog.notify`)."""

    def alive(self) -> bool:
        """Wake-ups still come (the thread that delivers them runs)."""
        ...

    def close(self) -> None:
        """End the registration (idempotent)."""
        ...


class ChangeLog(Protocol):
    """The cross-process change log behind subscriptions and cursors.

    Entries carry no values: op, namespace, key, version, trace id, origin.
    A cursor is an opaque string handed out by :meth:`cursor`."""

    token: str  # names this writer in the log (``origin`` of its events elsewhere)

    def append(self, op: str, namespace: str, key: str, version: int, trace_id: str) -> None:
        """Log one committed change; called with the namespace lock held, so
        the log is in commit order per key. Never raises for I/O trouble (the
        change is committed already): a gap is counted and logged instead."""
        ...

    def cursor(self) -> str:
        """The position just after the newest entry."""
        ...

    def read(self, cursor: str, upto: str | None = None, *, skip_own: bool = True) -> tuple[list[Event], str]:
        """Entries after ``cursor`` (up to ``upto``), oldest first, and the
        cursor after them. Raises :class:`CursorExpired` when the log no
        longer reaches back to ``cursor``, :class:`InvalidCursor` for a
        string that is not a cursor."""
        ...

    def changed(self, cursor: str) -> bool:
        """Cheaply: may there be entries after ``cursor``? (The watcher asks
        it when woken, and at every poll when it polls.)"""
        ...

    def notify(self, wake: Callable[[], None]) -> Notifications | None:
        """Call ``wake()`` (from any thread; it must be quick) whenever
        entries may have been added, until the registration is closed. None
        when this log has no such notifications: its subscribers poll
        :meth:`changed`. Raises :class:`OSError` when it has them but they
        cannot work here (the subscriber then polls too)."""
        ...

    def oldest(self) -> str:
        """The oldest cursor still readable."""
        ...

    def close(self) -> None: ...


class PurgeEpochs(Protocol):
    """The store's purge counter, shared by every process and host on it.

    Each purge bumps the epoch and records it for the purged namespace, so
    derived data kept outside the backend (a recall index file per process)
    can tell which namespaces were purged since the epoch it last saw."""

    def current(self) -> int:
        """The epoch now (-1: the record is damaged, so "every namespace")."""
        ...

    def purged_since(self, epoch: int) -> set[str] | None:
        """Namespaces purged after ``epoch``; None means "cannot tell: all"."""
        ...


class HotStore(Protocol):
    """Process memory for hot namespaces and for gated values awaiting consent
    (``hrm_memory.storage.HotTier``). Versions follow ``base_version`` (the
    key's version elsewhere) so they never go back."""

    def get(self, namespace: str, key: str) -> Stored | None: ...

    def entry(self, namespace: str, key: str) -> tuple[Any, ...] | None:
        """The record as one plain tuple: the six fields of its ``Stored``,
        then the private copy of the value ``store`` was given (or MISSING)
        and its copy plan (see ``hrm_memory.core.values.snapshot``)."""
        ...

    def put(
        self,
        namespace: str,
        key: str,
        value: bytes,
        now_us: int,
        base_version: int = 0,
    ) -> Stored: ...

    def store(
        self, namespace: str, key: str, value: bytes, now_us: int, obj: Any, plan: Any, base_version: int = 0
    ) -> tuple[Any, ...]:
        """``put`` for a caller holding the namespace's lock, keeping ``obj``
        (a private copy of the value, or MISSING) and its copy ``plan`` for
        reads; returns the new record as ``entry`` gives it."""
        ...

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None: ...

    def scan(self, namespace: str) -> Iterator[Stored]: ...

    def oldest(self, namespace: str, n: int) -> list[Stored]: ...

    def count(self, namespace: str) -> int: ...

    def close(self) -> None: ...


class Backend(Protocol):
    """Persistent storage for the namespaces whose home is not the hot tier."""

    #: Short name for spans (``db.system``): ``"hrm-memory-file"``, ``"redis"``.
    system: str
    capabilities: frozenset[str]
    @property
    def changes(self) -> ChangeLog | None:
        """The change log, or None when cross-process signals are off."""
        ...

    @property
    def purges(self) -> PurgeEpochs | None:
        """The purge epochs (bumped by :meth:`purge`), or None for a backend
        whose derived data lives and dies with this process (then the
        in-process purge listeners, ``Core.on_purge``, are enough)."""
        ...

    # -- records ------------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Stored | None:
        """The current record, archived ones included (``tier == "cold"``);
        raises :class:`CorruptRecord` when its newest copy is damaged."""
        ...

    def put(
        self, namespace: str, key: str, value: bytes, now_us: int, min_version: int = 1, created_us: int | None = None
    ) -> Stored:
        """Commit ``value`` as the next version (at least ``min_version``); a
        new key's creation time is ``created_us`` when given."""
        ...

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        """Remove ``key``; the record removed, or None if there was none."""
        ...

    def scan(self, namespace: str, *, include_cold: bool = False, strict: bool = True) -> Iterator[Stored]:
        """Every current record, in no particular order; archived ones only
        with ``include_cold``. ``strict``: a record whose newest copy is
        damaged raises :class:`CorruptRecord` (as ``get`` does) instead of
        being skipped; maintenance scans pass False."""
        ...

    def keys(self, namespace: str) -> list[tuple[str, int, int]]:
        """``(key, created_us, updated_us)`` of every live (not archived) key."""
        ...

    def lock(self, namespace: str, *, cross_process: bool | None = None) -> AbstractContextManager[Any]:
        """Hold the namespace's lock (re-entrant within a thread); across
        processes when the backend was opened with locking or when asked."""
        ...

    # -- tiers ----------------------------------------------------------------------

    def archive(self, namespace: str, records: list[Stored]) -> list[str]:
        """Move ``records`` to the archive (the caller holds the lock); the
        keys moved. A record is never in neither place: archive copy first,
        then the live marker."""
        ...

    def purge(self, namespace: str) -> dict[str, int]:
        """Remove every byte of the namespace's values and keys (consent
        revoked, namespace undeclared): records, tombstones, archive,
        quarantine, its change-log entries; then bump :attr:`purges`.
        Versions start again at 1. Counts per place (``warm``, ``cold``,
        ``quarantine``, ``events``, and what else the backend keeps)."""
        ...

    def erase(self, namespace: str, key: str) -> dict[str, int]:
        """Remove every byte of one key (``MemoryManager.forget``): every
        version of its record, its tombstone, its archived copy, quarantined
        copies, and the change-log entries naming it, leaving every other
        key as it was and every cursor handed out valid. Called with the
        namespace's lock held. Counts per place, as :meth:`purge`; all zero
        for a key the backend never held. A backend that cannot erase raises
        :class:`Unsupported`, never leaves a copy and reports success."""
        ...

    # -- declarations made at run time ----------------------------------------------

    def declarations(self) -> dict[str, dict[str, Any]] | None:
        """Run-time declarations, or None when unchanged since the last call."""
        ...

    def declare(self, name: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        """Record a declaration unless one exists; return the existing one
        (unchanged) if there was one."""
        ...

    def undeclare(self, name: str) -> bool:
        """Forget a run-time declaration; True if there was one."""
        ...

    # -- maintenance ----------------------------------------------------------------

    def check(self, fix: bool = False) -> list[Finding]: ...

    def compact(self, namespace: str | None = None) -> int: ...

    def stats(self) -> dict[str, dict[str, int]]:
        """Per namespace: ``keys``, ``archived``, ``bytes`` (live) and ``cold_bytes``."""
        ...

    def info(self) -> dict[str, Any]:
        """What ``stats()`` shows of the backend itself (root, settings, caches)."""
        ...

    def close(self) -> None: ...


__all__ = ["ARCHIVE", "CROSS_PROCESS", "PERSISTENT", "RECOVER", "Backend", "ChangeLog", "HotStore", "PurgeEpochs"]
