"""The migration manifest: what apply imported, kept in the store itself.

Namespace ``migration.manifest`` (declared at run time, so the declaration is
persisted in the store):

- ``file:<legacy relative path>``, one :class:`Entry` per legacy file: where
  it went (namespace, key), its size and sha256, the format facts that turn
  the record back into the same bytes, the raw bytes when those facts are not
  enough, the digest and version of the record as imported, and the anomalies
  flagged.
- ``run``, the run marker: ``state`` is ``applying`` while apply writes,
  ``complete`` once every file is in (written last), ``incomplete`` when some
  file failed, ``rolling-back`` during a rollback.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from hrm_memory import MemoryManager, NamespaceSpec, Record, UndeclaredNamespace
from hrm_memory.spec import MAX_VALUE_BYTES

from .inventory import Inventory, LegacyFile

NAMESPACE = "migration.manifest"
SPEC = NamespaceSpec(
    NAMESPACE,
    max_value_bytes=MAX_VALUE_BYTES,
    description="legacy migration: one entry per imported legacy file (format facts, sha256, anomalies) and the run marker",
)
RUN_KEY = "run"
FILE_PREFIX = "file:"
FORMAT_VERSION = 1


@dataclass
class Entry:
    path: str
    kind: str
    namespace: str | None
    key: str | None
    size: int
    sha256: str
    fmt: dict[str, Any]
    exact: bool
    value_sha256: str | None
    version: int | None
    raw_base64: str | None = None
    anomalies: list[dict[str, Any]] = field(default_factory=list)

    @property
    def raw(self) -> bytes | None:
        return base64.b64decode(self.raw_base64) if self.raw_base64 is not None else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        fields: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__}
        return cls(**fields)

    @classmethod
    def of(cls, f: LegacyFile, version: int | None) -> Entry:
        return cls(
            path=f.rel,
            kind=f.kind,
            namespace=f.place.namespace if f.place else None,
            key=f.place.key if f.place else None,
            size=f.size,
            sha256=f.sha256,
            fmt=f.decoded.fmt,
            exact=f.decoded.exact,
            value_sha256=f.value_sha256,
            version=version,
            raw_base64=base64.b64encode(f.data).decode("ascii") if f.raw_needed else None,
            anomalies=[a.to_dict() for a in f.anomalies],
        )


def declare(mm: MemoryManager) -> None:
    mm.declare(SPEC)


def _records(mm: MemoryManager, key_glob: str) -> list[Record]:
    try:
        return mm.query(NAMESPACE, key_glob)
    except UndeclaredNamespace:  # never applied on this store: nothing imported
        return []


def entries(mm: MemoryManager) -> dict[str, Entry]:
    """The file entries by legacy path (empty when nothing was imported)."""
    return {
        r.value["path"]: Entry.from_dict(r.value)
        for r in _records(mm, FILE_PREFIX + "*")
        if isinstance(r.value, dict) and "path" in r.value
    }


def marker(mm: MemoryManager) -> dict[str, Any] | None:
    found = _records(mm, RUN_KEY)
    return found[0].value if found and isinstance(found[0].value, dict) else None


def write_entry(mm: MemoryManager, entry: Entry) -> None:
    mm.write(NAMESPACE, FILE_PREFIX + entry.path, entry.to_dict(), imported=True)


def delete_entry(mm: MemoryManager, path: str) -> None:
    mm.delete(NAMESPACE, FILE_PREFIX + path)


def write_marker(mm: MemoryManager, state: str, inv: Inventory | None = None, **extra: Any) -> None:
    """Set the run marker; ``inv`` (apply) records which tree it describes."""
    old = marker(mm) or {}
    value: dict[str, Any] = {
        "state": state,
        "format_version": FORMAT_VERSION,
        "source": old.get("source"),
        "source_name": old.get("source_name"),
        "tree_sha256": old.get("tree_sha256"),
        "files": old.get("files"),
        "updated_at": datetime.now().astimezone().isoformat(),
    }
    if inv is not None:
        value.update(source=str(inv.root.resolve()), source_name=inv.root.resolve().name or "data",
                     tree_sha256=inv.tree_sha256, files=len(inv.files))
    value.update(extra)
    mm.write(NAMESPACE, RUN_KEY, value, imported=True)


def delete_marker(mm: MemoryManager) -> None:
    mm.delete(NAMESPACE, RUN_KEY)


def is_current(run: dict[str, Any] | None, inv: Inventory) -> bool:
    """The marker says a complete import of exactly this tree."""
    return bool(run) and run.get("state") == "complete" and run.get("tree_sha256") == inv.tree_sha256  # type: ignore[union-attr]


__all__ = [
    "FILE_PREFIX",
    "NAMESPACE",
    "RUN_KEY",
    "SPEC",
    "Entry",
    "declare",
    "delete_entry",
    "delete_marker",
    "entries",
    "is_current",
    "marker",
    "write_entry",
    "write_marker",
]
