"""Operations as data.

Every public operation of the memory layer is one of the small immutable
values below. ``MemoryManager``, ``Scope``, ``AsyncMemoryManager``, ``batch()``
and the CLI only build them; one pipeline (:mod:`hrm_memory.core.pipeline`) runs
them all, so validation, scope and consent checks, locking, the span and
event dispatch happen in one place whichever door an operation came through.

They are ``NamedTuple``s (as LangGraph's store ops are): comparable,
printable, and easy to keep in a list for ``batch()``. An op is its type and
its fields: the pipeline reads fields by position, so ``read`` and ``write``
(the hot path) hand it the type and a plain tuple of the same fields, which
costs a fifth of building the NamedTuple on CPython 3.11. A new capability is
one op here and one handler in the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Union

from hrm_memory.core.records import Event
from hrm_memory.core.spec import NamespaceSpec


class GetOp(NamedTuple):
    """Read one key: its value as written (``default`` when absent);
    ``compact=True`` gives the coded form, as stored."""

    namespace: str
    key: str
    default: Any = None
    compact: bool = False


class GetRecordOp(NamedTuple):
    """Read one key's :class:`Record` (value, version, times, tier), or None."""

    namespace: str
    key: str
    compact: bool = False


class PutOp(NamedTuple):
    """Store ``value`` under ``key``; the result is the trace id.
    ``imported=True`` marks data that existed before this store (a migration):
    it is persisted whatever the consent, and the span says so."""

    namespace: str
    key: str
    value: Any
    imported: bool = False


class UpdateOp(NamedTuple):
    """Replace the value by ``fn(current or default)`` atomically; the result
    is the new value."""

    namespace: str
    key: str
    fn: Callable[[Any], Any]
    default: Any = None


class DeleteOp(NamedTuple):
    """Remove ``key``; the result says whether it existed."""

    namespace: str
    key: str


class QueryOp(NamedTuple):
    """Records whose namespace and key match the globs (see
    :meth:`MemoryManager.query`); the result is a list of :class:`Record`."""

    namespace: str = "*"
    key: str = "*"
    where: Mapping[str, Any] | None = None
    limit: int | None = None
    include_cold: bool = False
    compact: bool = False


class SubscribeOp(NamedTuple):
    """Call ``callback(Event)`` on every matching change; the result is a
    :class:`Subscription`."""

    namespace: str
    callback: Callable[[Event], Any]
    key: str = "*"
    remote: bool = True
    since: str | None = None


class CursorOp(NamedTuple):
    """The current position in the change log (a cursor string)."""


class EventsSinceOp(NamedTuple):
    """Changes logged after ``cursor``: ``(events, next_cursor)``."""

    cursor: str
    namespace: str = "*"
    key: str = "*"


class ExpandOp(NamedTuple):
    """The readable form of a coded ``value`` of ``namespace``."""

    namespace: str
    value: Any


class NamespacesOp(NamedTuple):
    """The declared namespace specs, sorted by name."""


class DeclareOp(NamedTuple):
    """Declare a namespace at run time; the result is the spec."""

    spec: NamespaceSpec


class UndeclareOp(NamedTuple):
    """Remove a run-time declaration. A namespace that still holds data is
    refused unless ``purge=True``, which removes its data first. The result
    counts what was purged."""

    namespace: str
    purge: bool = False


class ConsentOp(NamedTuple):
    """Grant or revoke a consent category (``purge`` with a revoke removes the
    category's data from disk); the result summarises what moved."""

    category: str
    grant: bool
    purge: bool = False


class ArchiveOp(NamedTuple):
    """Move warm records past their namespace's TTL to the cold tier; the
    result counts the records moved per namespace."""

    now: float | None = None


class CheckOp(NamedTuple):
    """Walk the store; the result is the list of findings."""

    fix: bool = False


class CompactOp(NamedTuple):
    """Rewrite logs without superseded lines; the result is bytes reclaimed."""

    namespace: str | None = None


class StatsOp(NamedTuple):
    """Counts and sizes per namespace and tier."""


class RecallOp(NamedTuple):
    """Memories matching ``query`` by meaning, best first (see
    :meth:`MemoryManager.recall`); the result is a list of ``Hit``."""

    query: str
    namespaces: str | Sequence[str] = "*"
    kinds: str | Sequence[str] | None = None
    k: int = 10
    since: Any = None
    explain: bool = False
    include_cold: bool = False
    where: Mapping[str, Any] | None = None
    prefix: str | None = None


class ContextOp(NamedTuple):
    """Render an HRM's memory into a prompt within ``budget`` tokens (see
    :meth:`MemoryManager.context`); the result is a ``Context``."""

    hrm: str
    budget: int = 2000
    query: str | None = None
    sections: str | Sequence[str] | None = None
    now: Any = None


class RememberOp(NamedTuple):
    """Store a typed memory (see :meth:`MemoryManager.remember`); the result
    is a ``Remembered``."""

    content: str
    kind: str
    namespace: str | None = None
    importance: float = 0.5
    tags: Sequence[str] = ()
    key: str | None = None


class HistoryOp(NamedTuple):
    """The kept versions of one key, newest first, deletions included (see
    :meth:`MemoryManager.history`); the result is a list of ``Version``."""

    namespace: str
    key: str
    compact: bool = False


class ReadAsOfOp(NamedTuple):
    """Read one key as it was at ``as_of`` (epoch seconds or an aware
    datetime): its value (``default`` when absent then), or its
    :class:`Record` (None when absent) with ``record=True``."""

    namespace: str
    key: str
    as_of: Any
    default: Any = None
    compact: bool = False
    record: bool = False


class QueryAsOfOp(NamedTuple):
    """:class:`QueryOp` answered as the store was at ``as_of``."""

    namespace: str
    key: str
    where: Mapping[str, Any] | None
    limit: int | None
    as_of: Any
    compact: bool = False


class ForgetOp(NamedTuple):
    """Erase every version of one key from every place it lives (see
    :meth:`MemoryManager.forget`); the result counts what was removed, per place."""

    namespace: str
    key: str


class ExportOp(NamedTuple):
    """Write the store (namespaces matching ``namespaces``) to ``out`` (a
    path or a binary file) in the export format; the result counts what was
    written. ``progress`` is called with the records written so far."""

    out: Any
    namespaces: str = "*"
    progress: Callable[[int], Any] | None = None
    #: Also carry the data keys of sealed namespaces, wrapped under ``passphrase``.
    include_keys: bool = False
    #: A :class:`~hrm_memory.storage.sealed.wrap.Passphrase` (its repr hides it), or None.
    passphrase: Any = None


class ImportOp(NamedTuple):
    """Read an export from ``source`` (a path or a binary file) into the
    store; the result counts what was imported and what was already there."""

    source: Any
    progress: Callable[[int], Any] | None = None
    apply_consent: bool = False
    #: Unwraps the keys an export carries: a :class:`~hrm_memory.storage.sealed.wrap.Passphrase`, or None.
    passphrase: Any = None


Op = Union[
    ContextOp,
    RecallOp,
    RememberOp,
    GetOp,
    GetRecordOp,
    PutOp,
    UpdateOp,
    DeleteOp,
    QueryOp,
    SubscribeOp,
    CursorOp,
    EventsSinceOp,
    ExpandOp,
    NamespacesOp,
    DeclareOp,
    UndeclareOp,
    ConsentOp,
    ArchiveOp,
    CheckOp,
    CompactOp,
    StatsOp,
    HistoryOp,
    ReadAsOfOp,
    QueryAsOfOp,
    ForgetOp,
    ExportOp,
    ImportOp,
]

#: Every op type, for code that needs to enumerate them (the pipeline checks
#: at import that each one has a handler).
OP_TYPES: tuple[type, ...] = Op.__args__  # type: ignore[attr-defined]

__all__ = [
    "ImportOp",
    "ExportOp",
    "ForgetOp",
    "QueryAsOfOp",
    "ReadAsOfOp",
    "HistoryOp",
    "OP_TYPES",
    "ArchiveOp",
    "CheckOp",
    "CompactOp",
    "ConsentOp",
    "ContextOp",
    "CursorOp",
    "DeclareOp",
    "DeleteOp",
    "EventsSinceOp",
    "ExpandOp",
    "GetOp",
    "GetRecordOp",
    "NamespacesOp",
    "Op",
    "PutOp",
    "QueryOp",
    "RecallOp",
    "RememberOp",
    "StatsOp",
    "SubscribeOp",
    "UndeclareOp",
    "UpdateOp",
]
