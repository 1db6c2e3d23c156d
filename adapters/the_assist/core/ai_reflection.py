"""``the_assist.core.ai_reflection``: AIReflection (storage parts).

Records in ``learning.reflections``: ``"ai_trends"``, ``"outcome_log"`` and
one ``"<YYYY-MM-DD>_session_<id>_reflection"`` per reflected session (legacy
``memory/store/ai_reflection/*.json``).

``reflect_on_session`` (an LLM call) raises NotImplementedError. The adapter
adds :meth:`AIReflection.record_reflection`: the legacy steps after the LLM
call (stamp, save, update the trends, log the outcome) for a reflection dict
produced elsewhere.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from hrm_memory.adapters._doc import Doc, checked, create_unique, now_iso
from hrm_memory.adapters.runtime import get_manager

from ._llm import llm_only, mean

NAMESPACE = "learning.reflections"
MAX_SCORES = 50
MAX_IMPROVEMENTS = 30
MAX_FAILURES = 20
MAX_STRENGTHS = 20
MAX_OUTCOMES = 100
PATTERN_WINDOW = 20
STRESSED = ("elevated", "high")

QUALITY_DIMENSIONS: dict[str, str] = {
    "conciseness": "Response length appropriate to context",
    "accuracy": "Information provided was correct",
    "actionability": "Response led to clear next steps",
    "tone_match": "Matched user's energy and mode",
    "intuition_quality": "Proactive insights were relevant",
    "memory_relevance": "Surfaced relevant, not stale, context",
    "value_add": "Actually helped vs just responded",
    "trust_building": "Increased or maintained trust",
}


def default_trends() -> dict[str, Any]:
    return {
        "sessions_reflected": 0,
        "quality_scores": {dim: [] for dim in QUALITY_DIMENSIONS},
        "outcome_patterns": [],
        "improvement_areas": [],
        "strengths": [],
        "failure_modes": [],
    }


def reflection_key(session_id: Any, when: datetime | None = None) -> str:
    return f"{(when or datetime.now()).strftime('%Y-%m-%d')}_session_{session_id}_reflection"


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def update_trends(trends: dict[str, Any], reflection: dict[str, Any]) -> dict[str, Any]:
    """Fold one reflection into ``trends`` (mutated and returned).
    ``outcome_patterns`` is never written (as in legacy)."""
    session = reflection.get("session_id")
    now = now_iso()
    trends["sessions_reflected"] = trends.get("sessions_reflected", 0) + 1
    scores = trends.setdefault("quality_scores", {})
    for dim, score in (reflection.get("quality_scores") or {}).items():
        if dim in QUALITY_DIMENSIONS:
            scores[dim] = [*scores.get(dim, []), score][-MAX_SCORES:]
    actions = [{"session": session, "action": a, "timestamp": now} for a in reflection.get("improvement_actions") or []]
    trends["improvement_areas"] = [*trends.get("improvement_areas", []), *actions][-MAX_IMPROVEMENTS:]
    critique = reflection.get("self_critique") or {}
    if critique.get("what_failed"):
        entry = {"session": session, "failure": critique["what_failed"], "timestamp": now}
        trends["failure_modes"] = [*trends.get("failure_modes", []), entry][-MAX_FAILURES:]
    if critique.get("what_worked"):
        entry = {"session": session, "strength": critique["what_worked"], "timestamp": now}
        trends["strengths"] = [*trends.get("strengths", []), entry][-MAX_STRENGTHS:]
    trends["last_updated"] = now
    return trends


def outcome_pattern(effectiveness: Any, trust: Any, stress: Any) -> str:
    """The legacy pattern rule, first match wins."""
    if effectiveness == "effective" and trust == "building":
        return "positive_reinforcement"
    if effectiveness == "ineffective" and trust == "eroding":
        return "negative_spiral"
    if stress in STRESSED and effectiveness == "effective":
        return "stress_support_success"
    if stress in STRESSED:
        return "stress_support_failure"
    return "neutral"


def outcome_entry(reflection: dict[str, Any], user_retrospective: dict[str, Any] | None = None) -> dict[str, Any]:
    """The outcome-log entry for one reflection (and the user's retrospective)."""
    scores = [v for v in (reflection.get("quality_scores") or {}).values() if _numeric(v)]
    effectiveness = (reflection.get("outcome_analysis") or {}).get("overall_effectiveness")
    trust = (reflection.get("pattern_detection") or {}).get("trust_trajectory")
    entry: dict[str, Any] = {
        "session": reflection.get("session_id"),
        "timestamp": now_iso(),
        "effectiveness": effectiveness,
        "trust_trajectory": trust,
        "avg_quality": round(mean(scores), 2) if scores else 0.0,
    }
    if user_retrospective and not user_retrospective.get("skipped"):
        behavioral = user_retrospective.get("behavioral") or {}
        entry["user_state"] = {
            "session_quality": user_retrospective.get("session_quality"),
            "energy": behavioral.get("energy"),
            "stress": behavioral.get("stress_signals"),
            "corrections": (user_retrospective.get("session_dynamics") or {}).get("corrections_given"),
        }
        entry["pattern"] = outcome_pattern(effectiveness, trust, behavioral.get("stress_signals"))
    return entry


def trust_trend(values: list[float]) -> str:
    """``insufficient_data`` below 6 values; else the mean of the last 5
    against the 5 before (the first 5 when there are fewer than 10): more than
    0.1 higher ``improving``, more than 0.1 lower ``declining``, else ``stable``."""
    if len(values) < 6:
        return "insufficient_data"
    recent = mean(values[-5:])
    previous = mean(values[-10:-5] if len(values) >= 10 else values[:5])
    if recent > previous + 0.1:
        return "improving"
    if recent < previous - 0.1:
        return "declining"
    return "stable"


class AIReflection:
    """The AI's view of its own sessions: quality trends and an outcome log."""

    def __init__(self) -> None:
        mm = get_manager()
        self._trends = Doc(mm, NAMESPACE, "ai_trends")
        self._outcomes = Doc(mm, NAMESPACE, "outcome_log")
        self._trends.seed({**default_trends(), "last_updated": now_iso()})
        self._outcomes.seed({"outcomes": []})

    def _load_trends(self) -> dict[str, Any]:
        trends: dict[str, Any] = checked(self._trends.load(), dict, self._trends)
        return trends

    def reflect_on_session(
        self,
        conversation: list[dict[str, Any]],
        session_id: Any,
        user_retrospective: dict[str, Any] | None = None,
        session_feedback: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Legacy: LLM self-review. Fewer than 2 messages is answered without a
        call, as in legacy; otherwise NotImplementedError."""
        if len(conversation) < 2:
            return {"skipped": True, "reason": "conversation_too_short"}
        raise llm_only("AIReflection.reflect_on_session", "store a reflection with record_reflection()")

    def record_reflection(
        self,
        reflection: dict[str, Any],
        session_id: Any,
        user_retrospective: dict[str, Any] | None = None,
        turn_count: int | None = None,
    ) -> dict[str, Any]:
        """Adapter addition: what legacy did with the LLM's reflection. Adds
        ``session_id``, ``timestamp``, ``turn_count``; stores it as
        ``<date>_session_<id>_reflection`` (``_2``... if taken); updates the
        trends; appends the outcome-log entry (last 100). A skipped reflection
        is returned unchanged and stores nothing."""
        if reflection.get("skipped"):
            return reflection
        stored = dict(reflection)
        stored["session_id"] = session_id
        stored["timestamp"] = now_iso()
        stored["turn_count"] = turn_count if turn_count is not None else reflection.get("turn_count", 0)
        create_unique(self._trends.mm, NAMESPACE, reflection_key(session_id), stored)
        self._trends.modify(lambda t: update_trends(checked(t, dict, self._trends), stored), default_trends())
        entry = outcome_entry(stored, user_retrospective)

        def log(data: dict[str, Any]) -> dict[str, Any]:
            checked(data, dict, self._outcomes)
            data["outcomes"] = [*data.get("outcomes", []), entry][-MAX_OUTCOMES:]
            return data

        self._outcomes.modify(log, {"outcomes": []})
        return stored

    def get_outcomes(self) -> list[dict[str, Any]]:
        outcomes: list[dict[str, Any]] = checked(self._outcomes.load(), dict, self._outcomes).get("outcomes", [])
        return outcomes

    def get_ai_performance_summary(self) -> dict[str, Any]:
        trends = self._load_trends()
        scores = trends.get("quality_scores", {})
        averages = {dim: round(mean(scores[dim]), 2) if scores.get(dim) else None for dim in QUALITY_DIMENSIONS}
        present = [v for v in averages.values() if v is not None]
        patterns = Counter(o["pattern"] for o in self.get_outcomes()[-PATTERN_WINDOW:] if "pattern" in o)
        return {
            "sessions_reflected": trends.get("sessions_reflected", 0),
            "avg_quality_scores": averages,
            "overall_avg": round(mean(present), 2) if present else None,
            "recent_failures": trends.get("failure_modes", [])[-3:],
            "recent_strengths": trends.get("strengths", [])[-3:],
            "improvement_actions": trends.get("improvement_areas", [])[-5:],
            "outcome_patterns": dict(patterns),
            "trend_direction": trust_trend(scores.get("trust_building", [])),
        }


def analyze_session_complete(*args: Any, **kwargs: Any) -> dict[str, Any]:
    raise llm_only("analyze_session_complete", "store results with record_retrospective() / record_reflection()")


def get_combined_insights() -> dict[str, Any]:
    """``{user, ai, alignment}``. The alignment rule is inferred: ``strong``
    when both trends are ``improving``, ``weak`` when either is ``declining``,
    else ``moderate``."""
    from .retrospective import SessionRetrospective

    user = SessionRetrospective().get_trends_summary()
    ai = AIReflection().get_ai_performance_summary()
    user_trend, ai_trend = user["correction_trend"], ai["trend_direction"]
    if user_trend == "improving" and ai_trend == "improving":
        strength = "strong"
    elif "declining" in (user_trend, ai_trend):
        strength = "weak"
    else:
        strength = "moderate"
    return {
        "user": user,
        "ai": ai,
        "alignment": {
            "alignment_strength": strength,
            "user_corrections_trending": user_trend,
            "ai_performance_trending": ai_trend,
        },
    }


__all__ = [
    "QUALITY_DIMENSIONS",
    "AIReflection",
    "analyze_session_complete",
    "get_combined_insights",
    "outcome_entry",
    "outcome_pattern",
    "reflection_key",
    "trust_trend",
    "update_trends",
]
