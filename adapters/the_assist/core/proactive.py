"""``the_assist.core.proactive``: ProactiveEngine (storage parts).

Record ``("altitude.agents", "proactive")`` = ``{intuition_history,
directness_level, last_nudge, consecutive_misses, session_nudges}`` (legacy
``proactive/state.json``), seeded if missing. The LLM methods raise
NotImplementedError, except for the answers legacy gave without a call.
"""

from __future__ import annotations

from typing import Any

from hrm_memory.adapters._doc import Doc, checked, now_iso
from hrm_memory.adapters.runtime import get_manager

from ._llm import llm_only

MAX_HISTORY = 50
MAX_DIRECTNESS = 2
MISSES_TO_ESCALATE = 3
MAX_SESSION_NUDGES = 3
REACTIONS = ("confirmed", "corrected", "pivoted", "ignored")
FALLBACK_OPENING = "What's on your mind?"


def default_state() -> dict[str, Any]:
    return {
        "intuition_history": [],
        "directness_level": 0,
        "last_nudge": None,
        "consecutive_misses": 0,
        "session_nudges": [],
    }


def apply_reaction(state: dict[str, Any], reaction: str) -> dict[str, Any]:
    """The legacy record_reaction rules on ``state`` (mutated and returned)."""
    nudge = state.get("last_nudge")
    if not nudge:
        return state
    nudge["resolved"] = True
    nudge["reaction"] = reaction
    entry = {"timestamp": now_iso(), "target": nudge.get("target"), "reaction": reaction}
    state["intuition_history"] = [*state.get("intuition_history", []), entry][-MAX_HISTORY:]
    if reaction == "confirmed":
        state["consecutive_misses"] = 0
        state["directness_level"] = max(0, state.get("directness_level", 0) - 1)
    elif reaction in ("corrected", "pivoted"):
        state["consecutive_misses"] = state.get("consecutive_misses", 0) + 1
        if state["consecutive_misses"] >= MISSES_TO_ESCALATE:
            state["directness_level"] = min(MAX_DIRECTNESS, state.get("directness_level", 0) + 1)
    return state


class ProactiveEngine:
    """Opening nudges and how the user reacted to them."""

    def __init__(self) -> None:
        self._doc = Doc(get_manager(), "altitude.agents", "proactive")
        self._doc.seed(default_state())

    def _load(self) -> dict[str, Any]:
        state: dict[str, Any] = checked(self._doc.load(), dict, self._doc)
        return state

    def _change(self, fn: Any) -> None:
        self._doc.modify(lambda s: fn(checked(s, dict, self._doc)))

    def get_state(self) -> dict[str, Any]:
        return self._load()

    # -- LLM methods -------------------------------------------------------------------

    def generate_opening(self) -> str:
        raise llm_only("ProactiveEngine.generate_opening")

    def generate_mid_conversation_nudge(self, recent_exchange: Any) -> str | None:
        """None without a call once 3 nudges were made this session."""
        if len(self._load().get("session_nudges", [])) >= MAX_SESSION_NUDGES:
            return None
        raise llm_only("ProactiveEngine.generate_mid_conversation_nudge")

    def analyze_response_for_reaction(self, user_response: str) -> str:
        """``ignored`` without a call when there is no unresolved nudge."""
        nudge = self._load().get("last_nudge")
        if not nudge or nudge.get("resolved"):
            return "ignored"
        raise llm_only("ProactiveEngine.analyze_response_for_reaction", "classify the reply and call record_reaction()")

    # -- storage ----------------------------------------------------------------------

    def record_reaction(self, reaction: str) -> None:
        """Acts whenever ``last_nudge`` exists (resolved or not): marks it,
        appends to the history (last 50); ``confirmed`` resets the misses and
        lowers directness (floor 0); ``corrected``/``pivoted`` count a miss and
        at 3+ misses raise directness (ceiling 2); ``ignored`` only logs."""
        self._change(lambda s: apply_reaction(s, reaction))

    def get_directness_level(self) -> int:
        level: int = self._load().get("directness_level", 0)
        return level

    def get_hit_rate(self) -> float:
        """confirmed / all reactions in the history; 0.5 when there are none."""
        history = self._load().get("intuition_history", [])
        if not history:
            return 0.5
        return sum(1 for h in history if h.get("reaction") == "confirmed") / len(history)

    def reset_session(self) -> None:
        """Clears ``session_nudges`` and ``last_nudge``."""

        def fn(state: dict[str, Any]) -> dict[str, Any]:
            state["session_nudges"] = []
            state["last_nudge"] = None
            return state

        self._change(fn)


__all__ = ["REACTIONS", "ProactiveEngine", "apply_reaction", "default_state"]
