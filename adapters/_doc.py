"""The one storage helper of the adapters: a legacy file is one record.

:class:`Doc` names the record (namespace, key from :mod:`migration.layout`)
and loads, saves and modifies its value in the legacy shape. Reads always ask
the manager for the expanded (readable) form; writes hand it the legacy-shaped
value, which the manager may store compacted.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from hrm_memory import MISSING, CorruptRecord, MemoryManager

T = TypeVar("T")


def now_iso() -> str:
    """Legacy "now": naive local time, ``datetime.now().isoformat()``."""
    return datetime.now().isoformat()


def plain(value: Any, default: Callable[[Any], Any] | None = None) -> Any:
    """``value`` as the legacy writers' ``json.dump`` would have stored it
    (tuples become lists, non-str keys strings; ``default=str`` where the
    legacy writer had it). A value json cannot serialize raises TypeError,
    as it did in the legacy writer."""
    return json.loads(json.dumps(value, default=default))


_SUFFIX = re.compile(r"_(\d+)$")
_ABSENT: Any = object()  # "no record" where None is a legal value


class _Exists(Exception):
    """Internal: abort a create because the key is taken."""


@dataclass(frozen=True, slots=True)
class Doc:
    """One record holding one legacy file's content."""

    mm: MemoryManager
    namespace: str
    key: str

    def __str__(self) -> str:
        return f"record ({self.namespace!r}, {self.key!r})"

    def load(self, default: Any = MISSING) -> Any:
        """The value; ``default`` if there is none (FileNotFoundError without
        one, as the legacy open() gave). Damaged bytes raise CorruptRecord."""
        value = self.mm.read(self.namespace, self.key, MISSING)
        if value is MISSING:
            if default is MISSING:
                raise FileNotFoundError(f"{self} does not exist")
            return default
        return value

    def load_as(self, convert: Callable[[Any], T], default: T) -> T:
        """``convert(value)``, or ``default`` if there is none. A value the
        legacy classes cannot rebuild raises CorruptRecord (the legacy loaders
        swallowed this and the next save overwrote the file)."""
        value = self.load(_ABSENT)
        if value is _ABSENT:
            return default
        try:
            return convert(value)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise CorruptRecord(
                f"{self} does not fit the legacy shape ({type(exc).__name__}: {exc}); "
                "it is left untouched",
                namespace=self.namespace,
                key=self.key,
            ) from exc

    def exists(self) -> bool:
        """True if the record exists (damaged or not)."""
        try:
            return self.mm.read(self.namespace, self.key, MISSING) is not MISSING
        except CorruptRecord:
            return True

    def save(self, value: Any, *, json_default: Callable[[Any], Any] | None = None) -> None:
        self.mm.write(self.namespace, self.key, plain(value, json_default))

    def modify(
        self,
        fn: Callable[[Any], Any],
        default: Any = MISSING,
        *,
        json_default: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Atomic read-modify-write: store and return ``fn(current)``.

        ``current`` is the expanded value, or a copy of ``default`` when the
        record does not exist (FileNotFoundError without a default). If ``fn``
        raises, nothing is stored."""

        def step(current: Any) -> Any:  # update() hands over the expanded value
            if current is MISSING:
                if default is MISSING:
                    raise FileNotFoundError(f"{self} does not exist")
                current = copy.deepcopy(default)
            return plain(fn(current), json_default)

        return self.mm.update(self.namespace, self.key, step, MISSING)

    def create(self, value: Any, *, json_default: Callable[[Any], Any] | None = None) -> bool:
        """Store ``value`` only if the record does not exist yet (atomically);
        True if stored."""
        data = plain(value, json_default)

        def step(current: Any) -> Any:
            if current is not MISSING:
                raise _Exists
            return data

        try:
            self.mm.update(self.namespace, self.key, step, MISSING)
        except _Exists:
            return False
        return True

    def seed(self, value: Any) -> None:
        """Create the record with ``value`` if it is missing (legacy constructors)."""
        if not self.exists():
            self.create(value)

    def delete(self) -> bool:
        return self.mm.delete(self.namespace, self.key)


def create_unique(
    mm: MemoryManager, namespace: str, stem: str, value: Any, *, json_default: Callable[[Any], Any] | None = None
) -> str:
    """Store ``value`` under ``stem``, or ``stem_2``, ``stem_3``, ... if taken
    (legacy file names by the second overwrote each other); the key used."""
    n = 1
    while True:
        key = stem if n == 1 else f"{stem}_{n}"
        if Doc(mm, namespace, key).create(value, json_default=json_default):
            return key
        n += 1


def unique_order(key: str) -> tuple[str, int]:
    """Sort key matching :func:`create_unique`: the stem, then the counter."""
    match = _SUFFIX.search(key)
    if match is None:
        return key, 1
    return key[: match.start()], int(match.group(1))


def checked(value: Any, expected: type, doc: Doc) -> Any:
    """``value`` if it has the legacy top-level type, else CorruptRecord."""
    if not isinstance(value, expected):
        raise CorruptRecord(
            f"{doc} holds a {type(value).__name__}, not a {expected.__name__}; it is left untouched",
            namespace=doc.namespace,
            key=doc.key,
        )
    return value
