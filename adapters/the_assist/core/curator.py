"""``the_assist.core.curator``: MemoryCurator (storage parts).

Record ``("altitude.agents", "curator")`` = ``{last_daily, last_weekly,
daily_summaries, weekly_themes, insights}`` (legacy ``curator/state.json``),
seeded if missing. ``run_daily`` / ``run_weekly`` call an LLM and raise
NotImplementedError; ``run_if_needed`` returns ``[]`` when nothing is due.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hrm_memory.adapters._doc import Doc, checked
from hrm_memory.adapters.runtime import get_manager

from ._llm import llm_only
from .memory_v2 import CompressedMemory

DAILY_AFTER = timedelta(hours=20)
WEEKLY_AFTER = timedelta(days=6)


def default_state() -> dict[str, Any]:
    return {"last_daily": None, "last_weekly": None, "daily_summaries": [], "weekly_themes": [], "insights": []}


class MemoryCurator:
    """Daily and weekly consolidation of the compressed memory."""

    def __init__(self) -> None:
        self.memory = CompressedMemory()
        self._doc = Doc(get_manager(), "altitude.agents", "curator")
        self._doc.seed(default_state())

    def _load(self) -> dict[str, Any]:
        state: dict[str, Any] = checked(self._doc.load(), dict, self._doc)
        return state

    def get_state(self) -> dict[str, Any]:
        return self._load()

    def _due(self, field: str, after: timedelta) -> bool:
        last = self._load().get(field)
        if not last:
            return True
        return datetime.now() - datetime.fromisoformat(last) > after

    def needs_daily(self) -> bool:
        """No daily run yet, or the last one more than 20 hours ago (naive local time)."""
        return self._due("last_daily", DAILY_AFTER)

    def needs_weekly(self) -> bool:
        """No weekly run yet, or the last one more than 6 days ago."""
        return self._due("last_weekly", WEEKLY_AFTER)

    def run_daily(self) -> str | None:
        raise llm_only("MemoryCurator.run_daily")

    def run_weekly(self) -> str | None:
        raise llm_only("MemoryCurator.run_weekly")

    def run_if_needed(self) -> list[str]:
        """``[]`` when neither run is due; a due run raises NotImplementedError."""
        results: list[str] = []
        if self.needs_weekly():
            theme = self.run_weekly()
            if theme:
                results.append(f"[Weekly] {theme}")
        if self.needs_daily():
            insight = self.run_daily()
            if insight:
                results.append(f"[Daily] {insight}")
        return results

    def get_unsurfaced_insights(self) -> list[str]:
        """The insight texts not surfaced yet, in order; they are marked
        ``surfaced: true`` and stored (one atomic update)."""
        found: list[str] = []

        def fn(state: dict[str, Any]) -> dict[str, Any]:
            found.clear()
            for item in checked(state, dict, self._doc).get("insights", []):
                if not item.get("surfaced"):
                    found.append(item["insight"])
                    item["surfaced"] = True
            return state

        self._doc.modify(fn)
        return found


__all__ = ["MemoryCurator", "default_state"]
