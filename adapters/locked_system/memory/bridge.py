"""``locked_system.memory.bridge``: BridgeMemory, BridgeSignal.

Record ``("focus.bridge", "bridge_signals")`` (an array).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ._base import LegacyRecord, append, as_path, doc, load_list


@dataclass
class BridgeSignal(LegacyRecord):
    signal_type: str
    source: str
    content: str
    severity: str = "normal"
    timestamp: datetime = field(default_factory=datetime.now)

    _TIMES = ("timestamp",)


class BridgeMemory:
    """Signals passed between the fast and slow loops."""

    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = as_path(memory_dir)
        self._doc = doc("focus.bridge", "bridge_signals")
        self._signals = load_list(self._doc, BridgeSignal)

    def add_signal(self, signal: BridgeSignal) -> None:
        self._signals.append(signal)
        append(self._doc, signal)

    def get_pending_signals(self) -> list[BridgeSignal]:
        return list(self._signals)

    def has_emergency(self) -> bool:
        return any(s.severity == "emergency" for s in self._signals)

    def clear_signals(self) -> None:
        self._signals = []
        self._doc.save([])


__all__ = ["BridgeMemory", "BridgeSignal"]
