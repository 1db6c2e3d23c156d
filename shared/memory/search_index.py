"""What recall needs of an index, and the document it indexes.

``Doc`` is one record as an index holds it; ``SearchIndex`` the operations
:mod:`hrm_memory.recall` uses (``hrm_memory.storage.textindex.TextIndex``
has them; a persisted and an in-memory instance serve a manager).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol


class Doc(NamedTuple):
    """One record as the index holds it: its text, its context and, with an
    embedder, its normalised vector (float32 bytes)."""

    ns: str
    key: str
    version: int
    created_us: int
    updated_us: int
    tier: str
    kind: str | None
    importance: float
    body: str
    ctx: str
    vec: bytes | None = None


class SearchIndex(Protocol):
    """What recall needs of an index (``hrm_memory.storage.textindex.TextIndex``)."""

    @property
    def persistent(self) -> bool: ...

    def apply(self, upserts: Sequence[Doc], removals: Iterable[tuple[str, str]], meta: dict[str, str] | None = None,
              purged: Callable[[], set[str] | None] | None = None) -> None: ...
    def purge(self, namespace: str) -> int: ...
    def touch(self, ids: Iterable[int]) -> None: ...
    def meta(self, name: str) -> str | None: ...
    def versions(self, namespace: str) -> dict[str, tuple[int, int, str]]: ...
    def search(self, match: str, namespaces: Sequence[str], *, cold: bool, limit: int,
               kinds: Sequence[str] | None = None, since_us: int | None = None, prefix: str | None = None,
               text: bool = True) -> list[Any]: ...
    def vectors(self, namespaces: Sequence[str], *, cold: bool) -> list[tuple[int, str, str, bytes]]: ...
    def rows(self, ids: Sequence[int]) -> dict[int, Any]: ...
    def selective(self, terms: Sequence[str]) -> list[str]: ...
    def newest(self, namespace: str, n: int) -> list[tuple[str, int]]: ...
    def close(self) -> None: ...
    def check(self, fix: bool) -> list[Any]: ...
    def namespaces(self) -> set[str]: ...
    def exists(self) -> bool: ...


__all__ = ["Doc", "SearchIndex"]
