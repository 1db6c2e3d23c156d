"""``locked_system.memory.consent``: ConsentManager, ConsentPreferences, texts.

One consent document per legacy directory, as legacy had one ``consent.json``
per ``memory_dir``. The store's own legacy directory is the first directory a
ConsentManager is opened with on the store (compared as an absolute, resolved
path, so ``./memory`` and its absolute spelling are the same directory); it is
recorded once, atomically, in ``("focus.consent", "legacy_dir")`` =
``{"memory_dir": <path>}`` so every process on the store agrees. Its document
is the record ``("focus.consent", "legacy")`` (the one the migration imports
``consent.json`` into). Any other directory has its own document,
``("focus.consent", "legacy:<path>")`` (``legacy:sha256:<digest>`` for a path
too long or unprintable for a key).

Only the ConsentManager of the store's own directory drives the manager's
consent: its three flags map to ``mm.consent`` categories
(conversation_history -> "conversation", interaction_signals -> "signals",
learned_preferences -> "preferences"), which decide whether consent-gated
namespaces reach disk. A ConsentManager of another directory reads and writes
only its own document and never grants or revokes in ``mm.consent``.

Why this and not refusing a second directory: legacy accepted any directory,
and a directory where consent was never given stayed "never given"
(``needs_consent()`` true, ``revoke_all()`` a no-op); keying by directory
keeps exactly that, while a second directory cannot revoke (or grant)
the main user's store-wide consent. Since the store's consent still gates
every write, ``can_persist`` is true only if the flag is set here *and* the
category is granted in ``mm.consent``.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from hrm_memory.adapters._doc import Doc, checked

from ._base import doc

CONSENT_FILE = "consent.json"

#: the record of the store's own legacy directory's consent.json (migration/layout.py)
PRIMARY_KEY = "legacy"
#: the record naming the store's own legacy directory
PRIMARY_DIR_KEY = "legacy_dir"
_KEY_CHARS = 256  # a readable ``legacy:<path>`` key up to this length, else a digest

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


def _directory_key(directory: str) -> str:
    """The record key of the consent document of a directory that is not the store's own."""
    key = f"legacy:{directory}"
    if len(key) <= _KEY_CHARS and key.isprintable():
        return key
    return "legacy:sha256:" + hashlib.sha256(directory.encode("utf-8", "surrogateescape")).hexdigest()


def _is_primary(claim: Doc, directory: str) -> bool:
    """True if ``directory`` is the store's own legacy directory; the first
    directory asked about becomes it (recorded atomically)."""
    if not claim.create({"memory_dir": directory}):
        owner = checked(claim.load(), dict, claim).get("memory_dir")
        return bool(owner == directory)
    return True


class ConsentManager:
    """What the user agreed may be remembered across sessions (per directory;
    see the module docstring)."""

    CONSENT_FILE = CONSENT_FILE

    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = memory_dir
        # Not wrapped in Path, as in legacy: a str memory_dir raises TypeError here.
        self.consent_file = memory_dir / self.CONSENT_FILE
        self.consent_path = self.consent_file  # adapter name, kept
        directory = str(Path(memory_dir).resolve())
        # True for the store's own directory: only its flags drive mm.consent.
        self.primary = _is_primary(doc("focus.consent", PRIMARY_DIR_KEY), directory)
        self._doc = doc("focus.consent", PRIMARY_KEY if self.primary else _directory_key(directory))
        self._preferences: ConsentPreferences | None = self._doc.load_as(
            lambda v: ConsentPreferences.from_dict(checked(v, dict, self._doc)), None
        )
        if self._preferences is not None and self.primary:
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
        if self.primary:
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
        """``"conversation"``, ``"signals"`` or ``"preferences"``: granted in
        this directory and (the manager enforces it) in ``mm.consent``."""
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


_BOX_INNER = 61  # the legacy box: 61 columns between the vertical bars


def _box_row(text: str) -> str:
    return f"│  {text:<{_BOX_INNER - 2}}│"


def format_consent_prompt() -> str:
    """The legacy consent menu, character for character (a leading newline,
    the box, a blank line and the input hint without a trailing newline)."""
    rule = "─" * _BOX_INNER
    body = [
        "Locked System can remember context across sessions.",
        "This helps continuity but means storing data locally.",
        "",
        "What should I remember?",
        "",
        "[1] Conversation history  - What we discussed",
        "[2] Interaction signals   - How our sessions went",
        "[3] Learned preferences   - Patterns in your style",
        "",
        "You can change these anytime with :memory",
        "You can see stored data with :memory show",
        "You can clear everything with :memory clear",
    ]
    return "\n".join(
        [
            "",
            f"┌{rule}┐",
            _box_row("MEMORY CONSENT"),
            f"├{rule}┤",
            _box_row(""),
            *(_box_row(line) for line in body),
            _box_row(""),
            f"└{rule}┘",
            "",
            "Enter choices (e.g., '12' for options 1 and 2, 'all', or 'none'):",
        ]
    )


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
