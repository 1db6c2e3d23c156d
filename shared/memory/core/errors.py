"""The error hierarchy.

Every error the package raises derives from :class:`MemoryStoreError`, and each
leaf also derives from the built-in a caller would naturally catch
(``ValueError`` for bad input, ``PermissionError`` for access, ``TimeoutError``
for locks, ``OSError`` for the disk), so ``except ValueError`` keeps working in
code that never heard of this package.

Errors carry structured attributes (``namespace``, ``key``, ``path``, ...) and
pickle cleanly, so a worker process can send one back to its parent.
"""

from __future__ import annotations

from typing import Any


class MemoryStoreError(Exception):
    """Root of every error raised by hrm-memory."""

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        for name, value in attrs.items():
            # setattr, not __dict__: OSError keeps errno in a slot of its own
            setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the message and restore the structured attributes;
        # the built-in bases (OSError in particular) would otherwise try to
        # re-run __init__ with positional args they interpret themselves.
        attrs = dict(self.__dict__)
        if isinstance(self, OSError) and self.errno is not None:
            attrs["errno"] = self.errno
        return (_rebuild, (type(self), str(self), attrs))

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _rebuild(cls: type[MemoryStoreError], message: str, attrs: dict[str, Any]) -> MemoryStoreError:
    return cls(message, **attrs)


class InvalidNamespace(MemoryStoreError, ValueError):
    """The namespace name is malformed (attribute ``namespace``)."""


class UndeclaredNamespace(InvalidNamespace, LookupError):
    """The namespace is well formed but was never declared."""


class InvalidSpec(InvalidNamespace, TypeError):
    """A namespace declaration has a field of the wrong type or out of range
    (attributes ``namespace``, ``field``). Nothing was registered or stored."""


class NamespaceConflict(InvalidSpec):
    """The namespace is already declared with different fields (attribute
    ``fields``: the names of the fields that differ)."""


class NamespaceInUse(MemoryStoreError, ValueError):
    """The namespace still holds data, so it cannot be undeclared without ``purge=True``."""


class InvalidKey(MemoryStoreError, ValueError):
    """The key is not a usable key (attributes ``namespace``, ``key``)."""


class InvalidValue(MemoryStoreError, ValueError, TypeError):
    """The value is not plain JSON data (NaN, non-str dict key, int over 64 bits,
    circular or too deep, an object, a tuple, ...). Attribute ``path`` locates it."""


class TrivialMemory(InvalidValue):
    """``remember()`` refused content with nothing worth keeping (empty, a
    pleasantry, too few words); attribute ``reason`` says which."""


class DuplicateMemory(MemoryStoreError, ValueError):
    """``remember()`` refused a near-duplicate of an existing memory of a kind
    that is never merged (prospective); attribute ``key`` names the existing one."""


class ValueTooLarge(InvalidValue):
    """The encoded value exceeds the namespace's ``max_value_bytes``."""


class SchemaViolation(InvalidValue):
    """The value does not fit the namespace's schema (attributes ``namespace``,
    ``key``, ``field``, ``errors``)."""


class UnknownSchema(InvalidValue):
    """The namespace names a schema that cannot be found or is not a model."""


class InvalidArgument(MemoryStoreError, ValueError):
    """An argument other than a namespace, key or value is out of range."""


class BadInput(InvalidArgument):
    """A command-line argument (CLI, migration) cannot be used; exit code 2."""


class NoLegacyFiles(BadInput):
    """The folder given to the migration holds no file the legacy layout
    recognises (the wrong folder; the message names the right one if found)."""


class LegacyChanged(MemoryStoreError, OSError):
    """A legacy file no longer hashes as it did when the tree was scanned
    (something wrote to it while the migration ran)."""


class InvalidFilter(InvalidArgument):
    """A ``where`` filter cannot mean anything (unknown operator, an operand of
    the wrong type); attribute ``field``."""


class UnknownConsentCategory(MemoryStoreError, ValueError):
    """Not one of the consent categories (attribute ``category``)."""


class CursorExpired(MemoryStoreError, LookupError):
    """The cursor points at change-log entries that were already removed."""


class InvalidCursor(MemoryStoreError, ValueError):
    """The cursor is not one this store handed out."""


class BadImportLine(BadInput):
    """A line of an export file fails a check a write would fail, or is not
    a well-formed export line (attributes ``path``, ``line``; the check's
    own error is the cause). What was imported is said in the docs of
    ``import_``: nothing, when the file could be checked whole first."""


class AccessDenied(MemoryStoreError, PermissionError):
    """A scoped handle tried to touch a namespace outside its scope."""


class LockTimeout(MemoryStoreError, TimeoutError):
    """A cross-process lock was not acquired within ``lock_timeout`` seconds."""


class CorruptRecord(MemoryStoreError, OSError):
    """Stored bytes failed their checksum or could not be decoded.

    The damaged bytes are reported by :meth:`MemoryManager.check` and moved
    aside by ``check(fix=True)``; they are never silently dropped."""


class IndexRebuilt(CorruptRecord):
    """The recall index was found damaged during an operation, moved under
    ``quarantine/`` and replaced by an empty one (rebuilt from the store).
    The pipeline runs the operation again; a caller sees it only if the new
    index fails the same way at once."""


class IndexBusy(LockTimeout):
    """Another connection held the recall index's write lock too long."""


class StoreClosed(MemoryStoreError, ValueError):
    """The manager was used after :meth:`MemoryManager.close`."""


class Unsupported(MemoryStoreError, NotImplementedError):
    """The tier cannot honour the request (see its declared capabilities)."""


class BackendUnavailable(MemoryStoreError, ConnectionError):
    """The backend's server (Redis) could not be reached, was loading its
    data, or did not answer within its socket timeout (attributes
    ``backend``: where, credentials left out; ``operation``). A call that
    failed this way changed nothing, unless it reached the server and only
    its answer was lost: read the record back before writing it again."""


class NotReplicated(BackendUnavailable):
    """A write in the replicated mode (``wait=N`` in a Redis URL) was applied
    on the primary but not confirmed by N replicas within ``wait_timeout``
    (attributes ``backend``, ``operation``, ``namespace``, ``acked``,
    ``wanted``): it is there now, but a failover of that primary may lose
    it. Read it back (or write it again) once the replicas are back."""


class HistoryNotKept(MemoryStoreError, LookupError):
    """An ``as_of`` read asked for a time older than the history the
    namespace keeps (attributes ``namespace``, ``key``, ``as_of_us``): the
    store cannot say what was current then, and says so rather than guess."""


class UnsupportedFormat(MemoryStoreError, ValueError):
    """An export file this version cannot read: not an hrm-memory export, or
    written in a newer format (attributes ``path``, ``found``, ``supported``).
    Nothing was imported."""


class KeyUnavailable(MemoryStoreError, LookupError):
    """A sealed (encrypted) record cannot be opened because its data key is
    not here: the key file is missing or another one, the key was destroyed
    (consent revoked with purge), or a key provider has no key for the group
    (attributes ``namespace``, ``key``, ``group``, ``key_id``, ``where``).
    Nothing was changed; the record's bytes stay as they are."""


class WrongKey(KeyUnavailable):
    """A sealed record names a key that is here but does not open it: the
    key is not the one it was sealed with, or the record's bytes (or the
    namespace and key it is bound to) were altered. Nothing was changed."""


class StorageError(MemoryStoreError, OSError):
    """The file system refused a write (disk full, read-only, permission).

    The store is unchanged: a record is either wholly written or not at all."""


__all__ = [
    "AccessDenied",
    "BackendUnavailable",
    "BadImportLine",
    "BadInput",
    "CorruptRecord",
    "CursorExpired",
    "DuplicateMemory",
    "HistoryNotKept",
    "IndexBusy",
    "IndexRebuilt",
    "InvalidArgument",
    "InvalidCursor",
    "InvalidFilter",
    "InvalidKey",
    "InvalidNamespace",
    "InvalidSpec",
    "InvalidValue",
    "KeyUnavailable",
    "LegacyChanged",
    "LockTimeout",
    "MemoryStoreError",
    "NamespaceConflict",
    "NamespaceInUse",
    "NoLegacyFiles",
    "NotReplicated",
    "SchemaViolation",
    "StorageError",
    "StoreClosed",
    "TrivialMemory",
    "UndeclaredNamespace",
    "UnknownConsentCategory",
    "UnknownSchema",
    "Unsupported",
    "UnsupportedFormat",
    "ValueTooLarge",
    "WrongKey",
]
