"""``the_assist.core.retrospective``: SessionRetrospective (storage parts).

Records in ``learning.retrospectives``: ``"baseline"``, ``"trends"`` and one
``"<YYYY-MM-DD>_session_<id>"`` per analysed session (legacy
``memory/store/retrospectives/*.json``).

``analyze_session`` (an LLM call) raises NotImplementedError. The adapter
adds :meth:`SessionRetrospective.record_retrospective`: the legacy steps after
the LLM call (stamp, save the per-session record, update the trends) for an
analysis dict produced elsewhere.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime
from typing import Any

from hrm_memory.adapters._doc import Doc, checked, create_unique, now_iso
from hrm_memory.adapters.runtime import get_manager

from ._llm import llm_only, mean

NAMESPACE = "learning.retrospectives"
MAX_CORRECTION_RATES = 50
MAX_LEARNINGS = 100
MAX_MBTI_SHIFTS = 20
SHIFT_THRESHOLD = 0.2
TREND_WINDOW = 5

DEFAULT_BASELINE: dict[str, Any] = {
    "mbti": {"type": "ENTP", "dimensions": {"E_I": 0.7, "N_S": 0.8, "T_F": 0.6, "J_P": 0.3}},
    "big5": {
        "openness": 0.85,
        "conscientiousness": 0.5,
        "extraversion": 0.7,
        "agreeableness": 0.6,
        "neuroticism": 0.4,
    },
    "behavioral": {
        "energy_typical": "high",
        "focus_pattern": "multi-threaded",
        "decision_style": "quick_iterate",
        "communication": "direct_exploratory",
        "stress_response": "action_oriented",
    },
    "preferences": {
        "no_ai_self_awareness": True,
        "numbers_over_bullets": True,
        "proactive_nudges": True,
        "concise_responses": True,
    },
}


def default_trends() -> dict[str, Any]:
    return {
        "sessions_analyzed": 0,
        "correction_rates": [],
        "intuition_hits": [],
        "mbti_shifts": [],
        "big5_signals": [],
        "recurring_topics": {},
        "learnings": [],
        "preference_updates": [],
    }


def session_key(session_id: Any, when: datetime | None = None) -> str:
    """``<local date>_session_<id>``, the legacy file stem."""
    return f"{(when or datetime.now()).strftime('%Y-%m-%d')}_session_{session_id}"


def update_trends(trends: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """Fold one analysis into ``trends`` (mutated and returned), as legacy did
    after each analysed session. ``intuition_hits``, ``big5_signals`` and
    ``preference_updates`` are never written (as in legacy)."""
    session = result.get("session_id")
    now = now_iso()
    dynamics = result.get("session_dynamics") or {}
    trends["sessions_analyzed"] = trends.get("sessions_analyzed", 0) + 1
    rates = [*trends.get("correction_rates", []), dynamics.get("corrections_given", 0)]
    trends["correction_rates"] = rates[-MAX_CORRECTION_RATES:]
    topics = trends.setdefault("recurring_topics", {})
    for topic in dynamics.get("topics") or []:
        topics[topic] = topics.get(topic, 0) + 1
    learnings = trends.get("learnings", [])
    learnings += [{"session": session, "learning": text, "timestamp": now} for text in result.get("learnings") or []]
    trends["learnings"] = learnings[-MAX_LEARNINGS:]
    mbti = result.get("mbti_signals") or {}
    shifts = {dim: v for dim, v in (mbti.get("dimension_shifts") or {}).items() if abs(v) >= SHIFT_THRESHOLD}
    if shifts:
        entry = {"session": session, "shifts": shifts, "observed_type": mbti.get("observed_type"), "timestamp": now}
        trends["mbti_shifts"] = [*trends.get("mbti_shifts", []), entry][-MAX_MBTI_SHIFTS:]
    trends["last_updated"] = now
    return trends


def correction_trend(rates: list[float]) -> str:
    """``insufficient_data`` below 5 values; else the mean of the last 5 against
    the 5 before (the first 5 when there are fewer than 10): under 0.8x
    ``improving``, over 1.2x ``declining``, else ``stable``."""
    if len(rates) < TREND_WINDOW:
        return "insufficient_data"
    recent = mean(rates[-TREND_WINDOW:])
    previous = mean(rates[-2 * TREND_WINDOW : -TREND_WINDOW] if len(rates) >= 2 * TREND_WINDOW else rates[:TREND_WINDOW])
    if recent < previous * 0.8:
        return "improving"
    if recent > previous * 1.2:
        return "declining"
    return "stable"


class SessionRetrospective:
    """The user model: baseline, per-session retrospectives and their trends."""

    def __init__(self) -> None:
        mm = get_manager()
        self._baseline = Doc(mm, NAMESPACE, "baseline")
        self._trends = Doc(mm, NAMESPACE, "trends")
        self._baseline.seed({**copy.deepcopy(DEFAULT_BASELINE), "last_updated": now_iso()})
        self._trends.seed({**default_trends(), "last_updated": now_iso()})

    # -- storage -------------------------------------------------------------------------

    def _load_trends(self) -> dict[str, Any]:
        trends: dict[str, Any] = checked(self._trends.load(), dict, self._trends)
        return trends

    def _change_baseline(self, fn: Callable[[dict[str, Any]], None]) -> None:
        def step(baseline: dict[str, Any]) -> dict[str, Any]:
            fn(checked(baseline, dict, self._baseline))
            baseline["last_updated"] = now_iso()
            return baseline

        self._baseline.modify(step, copy.deepcopy(DEFAULT_BASELINE))

    # -- API ----------------------------------------------------------------------------

    def analyze_session(
        self, conversation: list[dict[str, Any]], session_id: Any, intuition_data: Any = None
    ) -> dict[str, Any]:
        """Legacy: LLM analysis of the conversation. Fewer than 2 messages is
        answered without a call, as in legacy; otherwise NotImplementedError."""
        if len(conversation) < 2:
            return {"skipped": True, "reason": "conversation_too_short"}
        raise llm_only("SessionRetrospective.analyze_session", "store an analysis with record_retrospective()")

    def record_retrospective(
        self, result: dict[str, Any], session_id: Any, turn_count: int | None = None
    ) -> dict[str, Any]:
        """Adapter addition: what legacy did with the LLM's analysis. Adds
        ``session_id``, ``timestamp`` and ``turn_count`` (the number of
        messages; kept from ``result`` when not given), stores it as
        ``<date>_session_<id>`` (``_2``, ``_3``... if that key is taken) and
        updates the trends. A skipped or failed analysis (``skipped`` set) is
        returned unchanged and stores nothing. Returns the stored dict."""
        if result.get("skipped"):
            return result
        stored = dict(result)
        stored["session_id"] = session_id
        stored["timestamp"] = now_iso()
        stored["turn_count"] = turn_count if turn_count is not None else result.get("turn_count", 0)
        create_unique(self._trends.mm, NAMESPACE, session_key(session_id), stored)
        self._trends.modify(lambda t: update_trends(checked(t, dict, self._trends), stored), {**default_trends()})
        return stored

    def get_trends_summary(self) -> dict[str, Any]:
        trends = self._load_trends()
        rates = trends.get("correction_rates", [])
        topics = sorted(trends.get("recurring_topics", {}).items(), key=lambda item: item[1], reverse=True)
        return {
            "sessions_analyzed": trends.get("sessions_analyzed", 0),
            "avg_corrections_per_session": round(mean(rates), 2) if rates else 0,
            "correction_trend": correction_trend(rates),
            "top_topics": topics[:5],
            "recent_learnings": trends.get("learnings", [])[-5:],
            "mbti_baseline": self.get_baseline().get("mbti"),
            "recent_mbti_shifts": trends.get("mbti_shifts", [])[-3:],
        }

    def get_baseline(self) -> dict[str, Any]:
        baseline: dict[str, Any] = checked(self._baseline.load(), dict, self._baseline)
        return baseline

    def update_baseline_preference(self, key: str, value: Any) -> None:
        self._change_baseline(lambda b: b.setdefault("preferences", {}).__setitem__(key, value))


def run_retrospective(*args: Any, **kwargs: Any) -> dict[str, Any]:
    raise llm_only("run_retrospective", "store an analysis with SessionRetrospective().record_retrospective()")


__all__ = [
    "DEFAULT_BASELINE",
    "SessionRetrospective",
    "correction_trend",
    "default_trends",
    "run_retrospective",
    "session_key",
    "update_trends",
]
