"""Plain data types shared by the manager and the tiers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple


class _Missing(enum.Enum):
    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"


#: Sentinel for "no value", used where ``None`` is a legal stored value.
MISSING = _Missing.MISSING


class Stored(NamedTuple):
    """What a tier hands back: the value still encoded as JSON bytes.

    ``version`` counts writes of the key (1 for the first); times are integer
    microseconds since the epoch, UTC."""

    key: str
    version: int
    created_us: int
    updated_us: int
    value: bytes
    tier: str


def _utc(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, tz=timezone.utc)


@dataclass(frozen=True, slots=True)
class Record:
    """One stored entry, decoded.

    ``tier`` says where it was served from: ``"hot"``, ``"warm"`` or
    ``"cold"`` (an archived record). ``persisted`` is False when the value
    lives only in this process (a hot-tier namespace)."""

    namespace: str
    key: str
    value: Any
    version: int
    created_at: datetime
    updated_at: datetime
    tier: str
    persisted: bool = True
    trace_id: str | None = None

    @classmethod
    def from_stored(cls, namespace: str, stored: Stored, value: Any, persisted: bool) -> Record:
        return cls(
            namespace=namespace,
            key=stored.key,
            value=value,
            version=stored.version,
            created_at=_utc(stored.created_us),
            updated_at=_utc(stored.updated_us),
            tier=stored.tier,
            persisted=persisted,
        )


@dataclass(frozen=True, slots=True)
class Event:
    """A change notification: ``op`` is ``"write"``, ``"delete"`` or ``"archive"``.

    ``origin`` is ``"local"`` for this process and ``"pid:<n>"`` for another."""

    op: str
    namespace: str
    key: str
    version: int
    trace_id: str
    origin: str = "local"


@dataclass(frozen=True, slots=True)
class Finding:
    """One inconsistency reported by :meth:`MemoryManager.check`.

    ``kind`` is a short stable word (``"corrupt-record"``, ``"torn-tail"``,
    ``"corrupt-frame"``, ``"bad-permissions"``, ...); ``fixed`` is True when
    ``check(fix=True)`` repaired it (the damaged bytes are kept under
    ``quarantine/``)."""

    kind: str
    path: str
    detail: str
    namespace: str | None = None
    fixed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        where = f"{self.namespace}: " if self.namespace else ""
        state = " (fixed)" if self.fixed else ""
        return f"{self.kind}: {where}{self.detail} [{self.path}]{state}"
