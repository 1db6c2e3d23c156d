"""What the locked_system memory classes share: dataclasses that serialize
their datetime fields as naive ISO strings, and the record of each store.

``memory_dir`` arguments are accepted for compatibility but do not choose
where data goes: each store has one fixed record (migration/layout.py), so
there is one locked_system per MemoryManager root.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from hrm_memory.adapters._doc import Doc, checked
from hrm_memory.adapters.runtime import get_manager

R = TypeVar("R", bound="LegacyRecord")


class LegacyRecord:
    """Mixin for the legacy dataclasses: ``to_dict`` / ``from_dict``."""

    _TIMES: ClassVar[tuple[str, ...]] = ()  # datetime fields, stored as ISO strings

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)  # type: ignore[call-overload]
        for name in self._TIMES:
            data[name] = data[name].isoformat()
        return data  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        kwargs = dict(data)
        for name in cls._TIMES:
            if name in kwargs:
                kwargs[name] = datetime.fromisoformat(kwargs[name])
        return cls(**kwargs)


def doc(namespace: str, key: str) -> Doc:
    return Doc(get_manager(), namespace, key)


def load_list(d: Doc, cls: type[R]) -> list[R]:
    """The stored array rebuilt as ``cls`` objects ([] if there is none)."""
    return d.load_as(lambda value: [cls.from_dict(item) for item in checked(value, list, d)], [])


def append(d: Doc, item: LegacyRecord) -> None:
    """Append one entry to the stored array (atomically, across processes)."""
    entry = item.to_dict()
    d.modify(lambda items: [*items, entry], [])


def as_path(memory_dir: Path | str) -> Path:
    return Path(memory_dir)
