"""``locked_system.memory.history``: History, GateTransition.

Record ``("focus.gates", "gate_history")`` (an array, no cap).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ._base import LegacyRecord, append, as_path, doc, load_list


@dataclass
class GateTransition(LegacyRecord):
    gate: str
    from_stance: str
    to_stance: str
    reason: str
    timestamp: datetime = field(default_factory=datetime.now)

    _TIMES = ("timestamp",)


class History:
    """Gate transitions of the stance machine."""

    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = as_path(memory_dir)
        self._doc = doc("focus.gates", "gate_history")
        self._transitions = load_list(self._doc, GateTransition)

    def add_gate_transition(self, transition: GateTransition) -> None:
        self._transitions.append(transition)
        append(self._doc, transition)

    def get_gate_transitions(self) -> list[GateTransition]:
        return list(self._transitions)

    def get_recent_transitions(self, n: int = 10) -> list[GateTransition]:
        return self._transitions[-n:]


__all__ = ["GateTransition", "History"]
