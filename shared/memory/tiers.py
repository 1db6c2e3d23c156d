"""The tier protocol: what the manager needs from a storage backend.

Kept small on purpose: a Redis backend for several hosts is one new class,
not a rewrite. Values cross this boundary as encoded JSON bytes; versions and
timestamps are assigned by the tier under its own lock so that they stay
consistent with the order in which records are committed.

Capabilities are declared, not probed: the manager refuses a request a tier
cannot honour (for instance archiving into a tier without ``"archive"``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from .records import Finding, Stored

#: The record lives on disk and survives the process.
PERSISTENT = "persistent"
#: Writes by another process on the same root are visible to reads here.
CROSS_PROCESS = "cross_process"
#: The tier accepts records moved out of another tier (append-only archive).
ARCHIVE = "archive"


@runtime_checkable
class Tier(Protocol):
    name: str
    capabilities: frozenset[str]

    def get(self, namespace: str, key: str) -> Stored | None:
        """The current record, or None if absent or deleted.

        A key whose record was archived comes back with ``tier == "cold"`` and
        ``value`` holding the archive location (bytes) instead of the value."""

    def put(self, namespace: str, key: str, value: bytes, now_us: int) -> Stored:
        """Commit ``value`` (version = previous + 1) and return the new record."""

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        """Remove ``key``; return the record that was removed, or None."""

    def scan(self, namespace: str) -> Iterator[Stored]:
        """Every live record of ``namespace`` (archived ones with tier "cold")."""

    def namespaces(self) -> list[str]:
        """Namespaces holding at least one record (live, deleted or archived)."""

    def check(self, fix: bool = False) -> list[Finding]:
        """Walk the stored data and report (and with ``fix`` repair) damage."""

    def close(self) -> None: ...
