"""hrm-memory: one MemoryManager for every HRM's memory.

>>> from shared.memory import MemoryManager
>>> with MemoryManager(root) as mm:                          # doctest: +SKIP
...     mm.write("altitude.patterns", "timeboxing", {"s": 0.8})
...     mm.read("altitude.patterns", "timeboxing")
"""

from .errors import (
    AccessDenied,
    CorruptRecord,
    InvalidKey,
    InvalidNamespace,
    InvalidValue,
    LockTimeout,
    MemoryStoreError,
    StorageError,
    StoreClosed,
    UndeclaredNamespace,
    Unsupported,
    ValueTooLarge,
)
from .manager import InvalidArgument, MemoryManager, Scope, default_root
from .records import MISSING, Event, Finding, Record
from .spec import NamespaceSpec, Registry

__all__ = [
    "MISSING",
    "AccessDenied",
    "CorruptRecord",
    "Event",
    "Finding",
    "InvalidArgument",
    "InvalidKey",
    "InvalidNamespace",
    "InvalidValue",
    "LockTimeout",
    "MemoryManager",
    "MemoryStoreError",
    "NamespaceSpec",
    "Record",
    "Registry",
    "Scope",
    "StorageError",
    "StoreClosed",
    "UndeclaredNamespace",
    "Unsupported",
    "ValueTooLarge",
    "default_root",
]
