"""``locked_system.memory.consent``: ConsentManager, ConsentPreferences, texts.

The legacy ``consent.json`` document is the record ``("focus.consent", "legacy")``.
The ConsentManager also drives the manager's own consent: the three flags map
to ``mm.consent`` categories (conversation_history -> "conversation",
interaction_signals -> "signals", learned_preferences -> "preferences"), which
decide whether consent-gated namespaces reach disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from hrm_memory.adapters._doc import checked

from ._base import doc

CONSENT_FILE = "consent.json"

#: legacy flag -> MemoryManager consent category (also can_persist's argument)
CATEGORIES: dict[str, str] = {
    "conversation_history": "conversation",
    "interaction_signals": "signals",
    "learned_preferences": "preferences",
}
_FLAG_OF = {category: flag for flag, category in CATEGORIES.items()}


@dataclass
class ConsentPreferences:
    conversation_history: bool = True
    interaction_signals: bool = True
    learned_preferences: bool = False
    first_consent_at: str | None = None
    last_updated_at: str | None = None
    consent_version: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConsentPreferences:
        return cls(
            conversation_history=data.get("conversation_history", True),
            interaction_signals=data.get("interaction_signals", True),
            learned_preferences=data.get("learned_preferences", False),
            first_consent_at=data.get("first_consent_at"),
            last_updated_at=data.get("last_updated_at"),
            consent_version=data.get("consent_version", 1),
        )


class ConsentManager:
    """What the user agreed may be remembered across sessions."""

    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = memory_dir
        # Not wrapped in Path, as in legacy: a str memory_dir raises TypeError here.
        self.consent_path = memory_dir / CONSENT_FILE
        self._doc = doc("focus.consent", "legacy")
        self._preferences: ConsentPreferences | None = self._doc.load_as(
            lambda v: ConsentPreferences.from_dict(checked(v, dict, self._doc)), None
        )
        if self._preferences is not None:
            self._sync(only_undecided=True)

    def _sync(self, *, only_undecided: bool = False) -> None:
        """Make ``mm.consent`` match the flags. At construction only the
        categories never decided in the manager (e.g. after a migration) are
        set, so a revoke made through the manager is never undone here."""
        prefs = self._preferences
        assert prefs is not None
        mm = self._doc.mm
        for flag, category in CATEGORIES.items():
            wanted = bool(getattr(prefs, flag))
            decided = mm.read("focus.consent", category, None)
            if decided == {"granted": wanted} or (only_undecided and decided is not None):
                continue
            if wanted:
                mm.consent.grant(category)
            else:
                mm.consent.revoke(category)

    def _save(self) -> None:
        assert self._preferences is not None
        self._preferences.last_updated_at = datetime.now().isoformat()
        self._doc.save(self._preferences.to_dict())
        self._sync()

    def needs_consent(self) -> bool:
        return self._preferences is None

    def grant_consent(
        self,
        conversation_history: bool = True,
        interaction_signals: bool = True,
        learned_preferences: bool = False,
    ) -> None:
        if self._preferences is None:
            self._preferences = ConsentPreferences(first_consent_at=datetime.now().isoformat())
        self._preferences.conversation_history = conversation_history
        self._preferences.interaction_signals = interaction_signals
        self._preferences.learned_preferences = learned_preferences
        self._save()

    def revoke_all(self) -> None:
        """All flags off (nothing happens when consent was never given)."""
        if self._preferences is None:
            return
        self._preferences.conversation_history = False
        self._preferences.interaction_signals = False
        self._preferences.learned_preferences = False
        self._save()

    def can_persist(self, category: str) -> bool:
        """``"conversation"``, ``"signals"`` or ``"preferences"``: granted here
        and (the manager enforces it) in ``mm.consent``."""
        flag = _FLAG_OF.get(category)
        if self._preferences is None or flag is None:
            return False
        return bool(getattr(self._preferences, flag)) and self._doc.mm.consent.granted(category)

    def get_preferences(self) -> ConsentPreferences | None:
        return self._preferences

    def get_summary(self) -> dict[str, Any]:
        prefs = self._preferences
        if prefs is None:
            return {"status": "not_configured", "message": "No consent preferences set"}
        return {
            "status": "configured",
            "conversation_history": prefs.conversation_history,
            "interaction_signals": prefs.interaction_signals,
            "learned_preferences": prefs.learned_preferences,
            "first_consent_at": prefs.first_consent_at,
            "last_updated_at": prefs.last_updated_at,
        }


_BOX_WIDTH = 60


def format_consent_prompt() -> str:
    """The consent menu (options 1, 2, 3; 'all' / 'none')."""
    rows = [
        "MEMORY CONSENT",
        "",
        "What may I remember between sessions?",
        "",
        "  1. Conversation history (what we talked about)",
        "  2. Interaction signals (response lengths, focus level)",
        "  3. Learned preferences (how you like to work)",
        "",
        "Enter numbers (e.g. '12'), 'all', or 'none'.",
    ]
    border = "+" + "-" * (_BOX_WIDTH - 2) + "+"
    return "\n".join([border, *(f"| {row:<{_BOX_WIDTH - 4}} |" for row in rows), border])


def _mark(enabled: bool) -> str:
    return "✓ enabled" if enabled else "✗ disabled"


def format_consent_status(prefs: ConsentPreferences) -> str:
    lines = [
        "MEMORY CONSENT STATUS",
        "",
        f"  Conversation history:  {_mark(prefs.conversation_history)}",
        f"  Interaction signals:   {_mark(prefs.interaction_signals)}",
        f"  Learned preferences:   {_mark(prefs.learned_preferences)}",
        "",
    ]
    if prefs.first_consent_at:
        lines.append(f"  First consent: {prefs.first_consent_at[:10]}")
    if prefs.last_updated_at:
        lines.append(f"  Last updated:  {prefs.last_updated_at[:10]}")
    return "\n".join(lines)


__all__ = [
    "CATEGORIES",
    "CONSENT_FILE",
    "ConsentManager",
    "ConsentPreferences",
    "format_consent_prompt",
    "format_consent_status",
]
