"""hrm-memory: one MemoryManager for every HRM's memory.

>>> from hrm_memory import MemoryManager
>>> with MemoryManager(root) as mm:                          # doctest: +SKIP
...     mm.write("altitude.patterns", "timeboxing", {"s": 0.8})
...     mm.read("altitude.patterns", "timeboxing")
{'s': 0.8}

Everything a user needs is importable from here; the modules behind it are
the package's own. Every error derives from :class:`MemoryStoreError` and from
the built-in a caller would catch (``ValueError``, ``PermissionError``, ...).
"""

from hrm_memory.aio import AsyncMemoryManager, AsyncSubscription
from hrm_memory.core.backend import Backend, ChangeLog, HotStore
from hrm_memory.core.codes import Codec, CodecRegistry
from hrm_memory.core.errors import (
    AccessDenied,
    BackendUnavailable,
    BadInput,
    CorruptRecord,
    CursorExpired,
    DuplicateMemory,
    InvalidArgument,
    InvalidCursor,
    InvalidFilter,
    InvalidKey,
    InvalidNamespace,
    InvalidSpec,
    InvalidValue,
    LegacyChanged,
    LockTimeout,
    MemoryStoreError,
    NamespaceConflict,
    NamespaceInUse,
    NoLegacyFiles,
    NotReplicated,
    SchemaViolation,
    StorageError,
    StoreClosed,
    TrivialMemory,
    UndeclaredNamespace,
    UnknownConsentCategory,
    UnknownSchema,
    Unsupported,
    ValueTooLarge,
)
from hrm_memory.core.events import Subscription
from hrm_memory.manager import Consent, MemoryManager, Scope, default_root
from hrm_memory.core.ops import (
    ArchiveOp,
    CheckOp,
    CompactOp,
    ConsentOp,
    CursorOp,
    DeclareOp,
    DeleteOp,
    EventsSinceOp,
    ExpandOp,
    GetOp,
    GetRecordOp,
    NamespacesOp,
    Op,
    PutOp,
    QueryOp,
    RecallOp,
    RememberOp,
    StatsOp,
    SubscribeOp,
    UndeclareOp,
    UpdateOp,
)
from hrm_memory.recall.memories import Remembered
from hrm_memory.recall.search import Hit
from hrm_memory.core.records import MISSING, Event, Finding, Record
from hrm_memory.core.spec import NamespaceSpec, Registry

__all__ = [
    "MISSING",
    "AccessDenied",
    "ArchiveOp",
    "AsyncMemoryManager",
    "AsyncSubscription",
    "Backend",
    "BackendUnavailable",
    "BadInput",
    "ChangeLog",
    "CheckOp",
    "Codec",
    "CodecRegistry",
    "CompactOp",
    "Consent",
    "ConsentOp",
    "CorruptRecord",
    "CursorExpired",
    "CursorOp",
    "DeclareOp",
    "DeleteOp",
    "DuplicateMemory",
    "Event",
    "EventsSinceOp",
    "ExpandOp",
    "Finding",
    "GetOp",
    "GetRecordOp",
    "Hit",
    "HotStore",
    "InvalidArgument",
    "InvalidCursor",
    "InvalidFilter",
    "InvalidKey",
    "InvalidNamespace",
    "InvalidSpec",
    "InvalidValue",
    "LegacyChanged",
    "LockTimeout",
    "MemoryManager",
    "MemoryStoreError",
    "NamespaceConflict",
    "NamespaceInUse",
    "NamespaceSpec",
    "NamespacesOp",
    "NoLegacyFiles",
    "NotReplicated",
    "Op",
    "PutOp",
    "QueryOp",
    "RecallOp",
    "Record",
    "Registry",
    "RememberOp",
    "Remembered",
    "SchemaViolation",
    "Scope",
    "StatsOp",
    "StorageError",
    "StoreClosed",
    "SubscribeOp",
    "Subscription",
    "TrivialMemory",
    "UndeclareOp",
    "UndeclaredNamespace",
    "UnknownConsentCategory",
    "UnknownSchema",
    "Unsupported",
    "UpdateOp",
    "ValueTooLarge",
    "default_root",
]
