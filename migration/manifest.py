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
  file failed, ``rolling-back`` during a rollback; ``consent``, the consent
  decisions apply carried over from the legacy ``consent.json`` (with the
  version of the decision it wrote).

Files whose record goes to a consent-gated namespace (``focus.conversation``,
``learning.feedback``) keep their raw bytes and their anomalies' details and
locations (which may quote values) in ``migration.raw_<category>``, declared
with the same consent category, so that ``mm.consent.revoke(category,
purge=True)`` removes them with the records. Their manifest entry keeps the
path, namespace, key, size, sha256, format facts, value digest, version and
the anomaly codes and counts, and names that namespace in ``private``.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from hrm_memory import MemoryManager, NamespaceSpec, Record, UndeclaredNamespace
from hrm_memory.core.spec import CONSENT_CATEGORIES, MAX_VALUE_BYTES

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


def private_namespace(category: str) -> str:
    """Where the raw copies and anomaly details of files gated by ``category`` go."""
    return f"migration.raw_{category}"


#: consent category -> the run-time namespace gated by it (purged with it).
PRIVATE_SPECS = {
    c: NamespaceSpec(
        private_namespace(c),
        consent=c,
        max_value_bytes=MAX_VALUE_BYTES,
        description=f"legacy migration: raw copies and anomaly details of files whose record is gated by consent {c!r} "
        "(purged with it)",
    )
    for c in CONSENT_CATEGORIES
}


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
    private: str | None = None  # the gated namespace holding raw_base64 and the anomaly details
    #: (not stored) the private part was found and merged in; False once purged
    private_found: bool = field(default=False, compare=False)

    @property
    def raw(self) -> bytes | None:
        return base64.b64decode(self.raw_base64) if self.raw_base64 is not None else None

    @property
    def purged(self) -> bool:
        """The private part is gone (its consent was revoked with purge)."""
        return self.private is not None and not self.private_found

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["private_found"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        fields: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__ if k != "private_found"}
        fields["anomalies"] = fields["anomalies"] or []
        return cls(**fields)

    @classmethod
    def of(cls, f: LegacyFile, version: int | None, data: bytes | None) -> Entry:
        """The entry of ``f`` (``data``: its bytes, needed when ``f.raw_needed``)."""
        if f.raw_needed and data is None:
            raise ValueError(f"{f.rel}: the raw bytes are needed for its entry")
        return cls(
            path=f.rel,
            kind=f.kind,
            namespace=f.place.namespace if f.place else None,
            key=f.place.key if f.place else None,
            size=f.size,
            sha256=f.sha256,
            fmt=f.fmt,
            exact=f.exact,
            value_sha256=f.value_sha256,
            version=version,
            raw_base64=base64.b64encode(data).decode("ascii") if f.raw_needed and data is not None else None,
            anomalies=[a.to_dict() for a in f.anomalies],
        )

    def public(self, category: str) -> tuple[Entry, dict[str, Any]]:
        """This entry split for a file gated by ``category``: what the
        manifest keeps (no bytes, anomaly codes and counts only) and the
        private part (raw bytes, full anomalies) for ``private_namespace``."""
        ns = private_namespace(category)
        shown = [{"code": a["code"], "count": a["count"], "detail": "", "where": []} for a in self.anomalies]
        private = {"path": self.path, "raw_base64": self.raw_base64, "anomalies": self.anomalies}
        return replace(self, raw_base64=None, anomalies=shown, private=ns, private_found=False), private


def declare(mm: MemoryManager) -> None:
    mm.declare(SPEC)
    for spec in PRIVATE_SPECS.values():
        mm.declare(spec)


def _records(mm: MemoryManager, key_glob: str, namespace: str = NAMESPACE) -> list[Record]:
    try:
        return mm.query(namespace, key_glob)
    except UndeclaredNamespace:  # never applied on this store: nothing imported
        return []


def entries(mm: MemoryManager) -> dict[str, Entry]:
    """The file entries by legacy path (empty when nothing was imported),
    each with its private part merged in when it has one and it is there."""
    found = {
        r.value["path"]: Entry.from_dict(r.value)
        for r in _records(mm, FILE_PREFIX + "*")
        if isinstance(r.value, dict) and "path" in r.value
    }
    for ns in sorted({e.private for e in found.values() if e.private}):
        for r in _records(mm, FILE_PREFIX + "*", ns):
            e = found.get(r.key[len(FILE_PREFIX) :])
            if e is None or e.private != ns or not isinstance(r.value, dict):
                continue
            e.raw_base64 = r.value.get("raw_base64")
            e.anomalies = r.value.get("anomalies") or e.anomalies
            e.private_found = True
    return found


def marker(mm: MemoryManager) -> dict[str, Any] | None:
    found = _records(mm, RUN_KEY)
    return found[0].value if found and isinstance(found[0].value, dict) else None


def write_entry(mm: MemoryManager, entry: Entry, category: str | None = None) -> None:
    """Store ``entry``; for a file whose record is gated by ``category``, its
    private part first (in the gated namespace), then the manifest entry."""
    if category is not None:
        entry, private = entry.public(category)
        mm.write(private_namespace(category), FILE_PREFIX + entry.path, private, imported=True)
    mm.write(NAMESPACE, FILE_PREFIX + entry.path, entry.to_dict(), imported=True)


def delete_entry(mm: MemoryManager, path: str, private: str | None = None) -> None:
    """Remove an entry: its private part first, the manifest entry last."""
    if private is not None:
        mm.delete(private, FILE_PREFIX + path)
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
        "consent": old.get("consent") or {},
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
    "PRIVATE_SPECS",
    "RUN_KEY",
    "SPEC",
    "Entry",
    "declare",
    "delete_entry",
    "delete_marker",
    "entries",
    "is_current",
    "marker",
    "private_namespace",
    "write_entry",
    "write_marker",
]
