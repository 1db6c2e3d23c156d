"""``locked_system.memory.slow``: SlowMemory, CommitmentLease, Decision, BootstrapSnapshot.

Records: ``("focus.slow", "commitment")``, ``("focus.slow", "decisions")`` and
``("focus.slow", "bootstrap")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ._base import LegacyRecord, append, as_path, doc, load_list


@dataclass
class CommitmentLease(LegacyRecord):
    frame: str
    horizon_authority: str = "mid"
    success_criteria: list[str] = field(default_factory=list)
    non_goals: list[str] = field(default_factory=list)
    lease_expiry: str = "20 turns"
    renewal_prompt: str = "Continue with this focus?"
    turns_remaining: int = 20

    def is_expired(self) -> bool:
        return self.turns_remaining <= 0


@dataclass
class Decision(LegacyRecord):
    id: str
    decision: str
    rationale: list[str]
    tradeoffs: str
    confidence: str
    revisit_triggers: list[str] = field(default_factory=list)
    timestamp: datetime = field(default_factory=datetime.now)

    _TIMES = ("timestamp",)


@dataclass
class BootstrapSnapshot(LegacyRecord):
    bootstrap_timestamp: datetime
    stage: str  # intro | connect | complete
    user_name: str = ""
    favorite_things: str = ""  # pipe-separated
    complete: bool = False

    _TIMES = ("bootstrap_timestamp",)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BootstrapSnapshot:
        if "ladder_position" not in data:
            return super().from_dict(data)
        # The older format: consent ladder fields; other old keys are dropped.
        # As in legacy, a missing timestamp is "now" and a missing
        # consent_state counts as not "listen_only" (complete).
        complete = data.get("consent_state") != "listen_only"
        stabilizers = data.get("stabilizers", "")
        if "bootstrap_timestamp" in data:
            stamp = datetime.fromisoformat(data["bootstrap_timestamp"])
        else:
            stamp = datetime.now()
        return cls(
            bootstrap_timestamp=stamp,
            stage="complete" if complete else "intro",
            user_name=data.get("user_state_summary", ""),
            favorite_things="|".join(stabilizers) if isinstance(stabilizers, list) else stabilizers,
            complete=complete,
        )


class SlowMemory:
    """The commitment lease, decisions and the bootstrap snapshot."""

    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = as_path(memory_dir)
        self._commitment_doc = doc("focus.slow", "commitment")
        self._decisions_doc = doc("focus.slow", "decisions")
        self._bootstrap_doc = doc("focus.slow", "bootstrap")
        self._commitment: CommitmentLease | None = self._commitment_doc.load_as(CommitmentLease.from_dict, None)
        self._decisions = load_list(self._decisions_doc, Decision)
        self._bootstrap: BootstrapSnapshot | None = self._bootstrap_doc.load_as(BootstrapSnapshot.from_dict, None)

    # -- commitment lease ---------------------------------------------------------------

    def get_commitment(self) -> CommitmentLease | None:
        return self._commitment

    def has_commitment(self) -> bool:
        """A lease is present and not expired."""
        return self._commitment is not None and not self._commitment.is_expired()

    def set_commitment(self, commitment: CommitmentLease) -> None:
        self._commitment = commitment
        self._save_commitment()

    def renew_commitment(self, turns: int = 20) -> None:
        if self._commitment is not None:
            self._commitment.turns_remaining = turns
            self._save_commitment()

    def decrement_commitment(self) -> None:
        """One turn less (may go below zero)."""
        if self._commitment is not None:
            self._commitment.turns_remaining -= 1
            self._save_commitment()

    def clear_commitment(self) -> None:
        self._commitment = None
        self._commitment_doc.delete()

    def _save_commitment(self) -> None:
        assert self._commitment is not None
        self._commitment_doc.save(self._commitment.to_dict())

    # -- decisions ------------------------------------------------------------------------

    def add_decision(self, decision: Decision) -> None:
        self._decisions.append(decision)
        append(self._decisions_doc, decision)

    def get_decisions(self) -> list[Decision]:
        return list(self._decisions)

    def get_recent_decisions(self, n: int = 5) -> list[Decision]:
        return self._decisions[-n:]

    # -- bootstrap ------------------------------------------------------------------------

    def get_bootstrap(self) -> BootstrapSnapshot | None:
        return self._bootstrap

    def set_bootstrap(self, snapshot: BootstrapSnapshot) -> None:
        self._bootstrap = snapshot
        self._bootstrap_doc.save(snapshot.to_dict())

    def clear_bootstrap(self) -> None:
        self._bootstrap = None
        self._bootstrap_doc.delete()


__all__ = ["BootstrapSnapshot", "CommitmentLease", "Decision", "SlowMemory"]
