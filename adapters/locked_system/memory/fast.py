"""``locked_system.memory.fast``: FastMemory, ProgressState, InteractionSignals.

Records: ``("focus.interactions", "progress")`` (one object) and
``("focus.interactions", "interactions")`` (the array, the newest 100, as the
legacy file). Interactions pushed out of the 100 are not dropped: they are
appended to ``("focus.interactions", "interactions_overflow_<YYYY-MM-DD>")``
(by the date of their own timestamp) before the array is rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hrm_memory.adapters._doc import Doc

from ._base import LegacyRecord, as_path, doc, load_list

MAX_ON_DISK = 100
OVERFLOW_PREFIX = "interactions_overflow_"


@dataclass
class ProgressState(LegacyRecord):
    milestones_completed: list[str] = field(default_factory=list)
    milestones_total: int = 0
    blockers: list[str] = field(default_factory=list)
    momentum: str = "steady"  # accelerating | steady | stalled (not validated)
    last_update: datetime = field(default_factory=datetime.now)

    _TIMES = ("last_update",)


@dataclass
class InteractionSignals(LegacyRecord):
    user_input_length: int = 0
    response_length: int = 0
    altitude_used: str = "L3"
    stance_used: str = "sensemaking"
    had_commitment: bool = False
    timestamp: datetime = field(default_factory=datetime.now)

    _TIMES = ("timestamp",)


class FastMemory:
    """Per-turn progress and interaction signals."""

    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = as_path(memory_dir)
        self._progress_doc = doc("focus.interactions", "progress")
        self._interactions_doc = doc("focus.interactions", "interactions")
        self._progress = self._progress_doc.load_as(ProgressState.from_dict, None) or ProgressState()
        self._interactions = load_list(self._interactions_doc, InteractionSignals)

    def get_progress(self) -> ProgressState:
        """The live object (changes are stored with the next update)."""
        return self._progress

    def update_progress(
        self,
        milestone_completed: str | None = None,
        blocker_added: str | None = None,
        blocker_removed: str | None = None,
        momentum: str | None = None,
    ) -> None:
        p = self._progress
        if milestone_completed:
            p.milestones_completed.append(milestone_completed)
        if blocker_added:
            p.blockers.append(blocker_added)
        if blocker_removed and blocker_removed in p.blockers:
            p.blockers.remove(blocker_removed)
        if momentum:
            p.momentum = momentum
        p.last_update = datetime.now()
        self._progress_doc.save(p.to_dict())

    def reset_progress(self, total_milestones: int = 0) -> None:
        self._progress = ProgressState(milestones_total=total_milestones)
        self._progress_doc.save(self._progress.to_dict())

    def record_interaction(self, signals: InteractionSignals) -> None:
        """Remember ``signals`` (this object keeps all of them; the record the
        newest 100, older ones go to the overflow records)."""
        self._interactions.append(signals)
        entry = signals.to_dict()
        mm = self._interactions_doc.mm

        def fn(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
            items.append(entry)
            excess = len(items) - MAX_ON_DISK
            if excess > 0:
                # Overflow first: a crash in between leaves an entry in both
                # records, never in neither. Same namespace, same (re-entrant) lock.
                for old in items[:excess]:
                    day = str(old.get("timestamp", ""))[:10] or "undated"
                    Doc(mm, "focus.interactions", OVERFLOW_PREFIX + day).modify(lambda xs: [*xs, old], [])
            return items[-MAX_ON_DISK:]

        self._interactions_doc.modify(fn, [])

    def get_recent_interactions(self, n: int = 10) -> list[InteractionSignals]:
        return self._interactions[-n:]


__all__ = ["FastMemory", "InteractionSignals", "ProgressState"]
