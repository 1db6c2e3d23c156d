"""Consent gating: no consent, nothing reaches disk.

A namespace may declare a consent category (``conversation``, ``signals``,
``preferences``, as the legacy ``ConsentManager`` had them). While that
category is not granted, writes to the namespace are kept in the hot tier of
this process only (``Record.persisted`` and the span say so) and not one byte
of their values is written under the root. The default, when nothing was ever
recorded, is deny.

Decisions are stored in the ``focus.consent`` namespace (key = category,
value ``{"granted": bool}``), so every process on the root sees them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .errors import MemoryStoreError

if TYPE_CHECKING:
    from .manager import MemoryManager

CATEGORIES = ("conversation", "signals", "preferences")
NAMESPACE = "focus.consent"


class UnknownConsentCategory(MemoryStoreError, ValueError):
    """Not one of the consent categories."""


def check_category(category: object) -> str:
    if not isinstance(category, str) or category not in CATEGORIES:
        raise UnknownConsentCategory(
            f"unknown consent category {category!r}; expected one of {CATEGORIES}", category=category
        )
    return category


class Consent:
    """``mm.consent``: grant, revoke and inspect consent per category."""

    def __init__(self, manager: MemoryManager) -> None:
        self._mm = manager

    def granted(self, category: str) -> bool:
        """True if ``category`` was granted and not revoked since (default False)."""
        stored = self._mm._warm.get(NAMESPACE, category)
        if stored is None or stored.tier != "warm":
            return False
        value = orjson.loads(stored.value)
        return type(value) is dict and value.get("granted") is True

    def status(self) -> dict[str, bool]:
        """Every category and whether it is granted."""
        return {c: self.granted(c) for c in CATEGORIES}

    def namespaces(self, category: str) -> list[str]:
        """The persisted namespaces gated by ``category``."""
        check_category(category)
        return [s.name for s in self._mm._registry if s.consent == category and s.tier != "hot"]

    def grant(self, category: str) -> dict[str, Any]:
        """Grant ``category``. What this session holds for it (written while it
        was denied) is persisted now; later writes go to disk as usual.
        Returns ``{"category", "granted", "persisted": {namespace: count}}``."""
        check_category(category)
        mm = self._mm
        mm.write(NAMESPACE, category, {"granted": True})
        persisted = {}
        for ns in self.namespaces(category):
            n = mm._persist_session_data(ns)
            if n:
                persisted[ns] = n
        return {"category": category, "granted": True, "persisted": persisted}

    def revoke(self, category: str, *, purge: bool = False) -> dict[str, Any]:
        """Revoke ``category``: from now on its namespaces are kept in memory
        only. With ``purge=True`` its data is also removed from disk: every
        warm record is deleted and its log rewritten without the old lines,
        its cold archive is rewritten without it, and quarantined copies are
        removed. Returns counts per namespace."""
        check_category(category)
        mm = self._mm
        mm.write(NAMESPACE, category, {"granted": False})
        purged: dict[str, dict[str, int]] = {}
        if purge:
            for ns in self.namespaces(category):
                purged[ns] = mm._purge_namespace(ns)
        return {"category": category, "granted": False, "purged": purged}
