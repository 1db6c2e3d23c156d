"""``locked_system.memory``: the memory classes (ConsentManager is imported
from ``locked_system.memory.consent``, as in legacy)."""

from .bridge import BridgeMemory
from .fast import FastMemory, InteractionSignals, ProgressState
from .history import GateTransition, History
from .slow import CommitmentLease, Decision, SlowMemory

__all__ = [
    "BridgeMemory",
    "CommitmentLease",
    "Decision",
    "FastMemory",
    "GateTransition",
    "History",
    "InteractionSignals",
    "ProgressState",
    "SlowMemory",
]
