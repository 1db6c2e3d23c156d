"""``locked_system.loop``: the conversation persistence of LockedLoop.

LockedLoop itself drives an LLM and is not adapted; its storage is
:class:`ConversationStore` (adapter name), with LockedLoop's public storage
methods (``get_history``, ``clear_conversation`` and the consent ones).

Record ``("focus.conversation", "conversation")`` = ``{messages: [{role,
content}], turn_count, last_saved}`` (legacy ``memory/conversation.json``).
The namespace is consent-gated by the manager ("conversation"); as in legacy
the save also checks ``ConsentManager.can_persist("conversation")`` and does
nothing without it. The load happens regardless of consent. A damaged record
raises CorruptRecord (legacy reset the history to empty).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hrm_memory.adapters._doc import checked, now_iso

from .memory._base import as_path, doc
from .memory.consent import ConsentManager

MAX_SAVED_MESSAGES = 100


class ConversationStore:
    """LockedLoop's message list and turn count, persisted with consent."""

    def __init__(self, memory_dir: Path | str = "./memory", consent: ConsentManager | None = None) -> None:
        self.memory_dir = as_path(memory_dir)
        self.consent = consent if consent is not None else ConsentManager(self.memory_dir)
        self._doc = doc("focus.conversation", "conversation")
        self.messages: list[dict[str, Any]] = []
        self.turn_count = 0
        self._load()

    def _load(self) -> None:
        data = self._doc.load(None)
        if data is None:
            return
        checked(data, dict, self._doc)
        self.messages = list(checked(data.get("messages", []), list, self._doc))
        self.turn_count = data.get("turn_count", 0)

    def save(self) -> bool:
        """Store the last 100 messages and the turn count if the user agreed
        to keep conversation history; True if it was stored."""
        if not self.consent.can_persist("conversation"):
            return False
        self._doc.save(
            {"messages": self.messages[-MAX_SAVED_MESSAGES:], "turn_count": self.turn_count, "last_saved": now_iso()}
        )
        return True

    def add_turn(self, user_input: str, response: str) -> None:
        """Adapter addition: one exchange (user, assistant), counted as one
        turn, then saved (with consent)."""
        self.messages.append({"role": "user", "content": user_input})
        self.messages.append({"role": "assistant", "content": response})
        self.turn_count += 1
        self.save()

    def get_history(self) -> list[dict[str, Any]]:
        """A copy of the messages (all of this session's, not only the saved 100)."""
        return list(self.messages)

    def clear_conversation(self) -> None:
        """Empty the history and delete the record."""
        self.messages = []
        self.turn_count = 0
        self._doc.delete()

    # -- consent (LockedLoop's delegating methods) ---------------------------------------

    def needs_consent(self) -> bool:
        return self.consent.needs_consent()

    def grant_consent(
        self, conversation_history: bool = True, interaction_signals: bool = True, learned_preferences: bool = False
    ) -> None:
        self.consent.grant_consent(conversation_history, interaction_signals, learned_preferences)

    def revoke_consent(self) -> None:
        self.consent.revoke_all()

    def get_consent_summary(self) -> dict[str, Any]:
        return self.consent.get_summary()


__all__ = ["MAX_SAVED_MESSAGES", "ConversationStore"]
