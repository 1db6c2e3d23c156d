"""``the_assist.core.memory``: the v1 ``Memory`` (hierarchical prose memory).

Records (migration/layout.py): ``("shared.north_stars", "v1")``,
``("altitude.context", "context")``, ``("altitude.context", "observations")``
and one ``("altitude.conversations", <YYYY-MM-DD_HH-MM-SS>)`` per conversation.

Departures from legacy (docs/adapters.md): a damaged record raises
CorruptRecord instead of reading as ``{}`` (which the next update would have
written back, wiping the file); a second conversation saved in the same second
is kept under ``<stem>_2`` (``_3``, ...) instead of overwriting the first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hrm_memory.adapters._doc import Doc, create_unique, now_iso, unique_order
from hrm_memory.adapters.runtime import get_manager

CONVERSATIONS = "altitude.conversations"


class Memory:
    """Long-term north stars, current context, saved conversations, observed patterns."""

    def __init__(self) -> None:
        mm = get_manager()
        self._mm = mm
        self._north_stars = Doc(mm, "shared.north_stars", "v1")
        self._context = Doc(mm, "altitude.context", "context")
        self._patterns = Doc(mm, "altitude.context", "observations")
        self._north_stars.seed({"north_stars": [], "current_priorities": [], "anti_goals": [], "last_updated": None})
        self._context.seed({"active_threads": [], "pending_commits": [], "open_questions": [], "last_session": None})

    def get_north_stars(self) -> dict[str, Any]:
        value: dict[str, Any] = self._north_stars.load({})
        return value

    def update_north_stars(self, data: dict[str, Any]) -> None:
        """Shallow-merge ``data`` and stamp ``last_updated``."""

        def fn(current: dict[str, Any]) -> dict[str, Any]:
            current.update(data)
            current["last_updated"] = now_iso()
            return current

        self._north_stars.modify(fn, {}, json_default=str)

    def get_context(self) -> dict[str, Any]:
        value: dict[str, Any] = self._context.load({})
        return value

    def update_context(self, data: dict[str, Any]) -> None:
        """Shallow-merge ``data`` and stamp ``last_session``."""

        def fn(current: dict[str, Any]) -> dict[str, Any]:
            current.update(data)
            current["last_session"] = now_iso()
            return current

        self._context.modify(fn, {}, json_default=str)

    def save_conversation(self, messages: list[dict[str, Any]], summary: str | None = None) -> None:
        """Store ``{timestamp, messages, summary}`` under the local time to the
        second; a second save in the same second gets the key ``<stem>_2``."""
        stem = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        conversation = {"timestamp": stem, "messages": messages, "summary": summary}
        create_unique(self._mm, CONVERSATIONS, stem, conversation, json_default=str)

    def get_recent_conversations(self, limit: int = 5) -> list[dict[str, Any]]:
        """The ``limit`` newest conversations, newest first."""
        records = self._mm.query(CONVERSATIONS)
        records.sort(key=lambda r: unique_order(r.key), reverse=True)
        return [r.value for r in records[:limit]]

    def log_pattern(self, pattern_type: str, observation: str, data: dict[str, Any] | None = None) -> None:
        entry = {"timestamp": now_iso(), "type": pattern_type, "observation": observation, "data": data or {}}

        def fn(current: dict[str, Any]) -> dict[str, Any]:
            current.setdefault("observations", []).append(entry)
            return current

        self._patterns.modify(fn, {}, json_default=str)

    def build_context_prompt(self) -> str:
        stars = self.get_north_stars()
        context = self.get_context()
        parts: list[str] = []

        def section(header: str, items: list[Any] | None) -> None:
            if items:
                parts.append(header)
                parts.extend(f"- {item}" for item in items)

        section("## North Stars (Long-term)", stars.get("north_stars"))
        section("\n## Current Priorities", stars.get("current_priorities"))
        section("\n## Pending Commitments", context.get("pending_commits"))
        section("\n## Active Threads", context.get("active_threads"))
        recent = self.get_recent_conversations(limit=2)
        if recent:
            parts.append("\n## Recent Context")
            for conversation in recent:
                if conversation.get("summary"):
                    parts.append(f"- {conversation.get('timestamp', 'Unknown')}: {conversation['summary']}")
        if not parts:
            return "No prior context yet. This is our first conversation."
        return "\n".join(parts)


__all__ = ["Memory"]
