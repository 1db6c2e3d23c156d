"""``the_assist.core.feedback``: explicit user feedback (module functions).

Record ``("learning.feedback", "log")`` = ``{feedback: [{timestamp, type, note,
context, tags}]}`` (legacy ``the_assist/feedback/log.json``). The namespace is
consent-gated ("preferences"): until that is granted the log is kept in this
process only, and granting it persists what was logged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hrm_memory.adapters._doc import Doc, now_iso
from hrm_memory.adapters.runtime import get_manager

FEEDBACK_TYPES = ("worked", "didnt_work", "suggestion", "observation")
RECENT = 10


def _doc() -> Doc:
    return Doc(get_manager(), "learning.feedback", "log")


def _entries() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = _doc().load({"feedback": []}).get("feedback", [])
    return entries


def log_feedback(
    feedback_type: str, note: str, context: str | None = None, tags: list[str] | None = None
) -> dict[str, Any]:
    """Append one entry; returns it."""
    entry = {"timestamp": now_iso(), "type": feedback_type, "note": note, "context": context, "tags": tags or []}

    def fn(log: dict[str, Any]) -> dict[str, Any]:
        log.setdefault("feedback", []).append(entry)
        return log

    _doc().modify(fn, {"feedback": []})
    return entry


def _of_type(entries: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("type") == kind]


def get_feedback_summary() -> dict[str, Any]:
    entries = _entries()
    return {
        "total": len(entries),
        "worked": len(_of_type(entries, "worked")),
        "didnt_work": len(_of_type(entries, "didnt_work")),
        "suggestions": len(_of_type(entries, "suggestion")),
        "recent": entries[-RECENT:],
    }


def get_session_feedback(session_start: datetime) -> dict[str, Any]:
    """Feedback given since ``session_start`` (a naive datetime, like the stored times)."""
    since = []
    for entry in _entries():
        try:
            if datetime.fromisoformat(entry["timestamp"]) >= session_start:
                since.append(entry)
        except (ValueError, KeyError):
            continue
    worked, didnt = _of_type(since, "worked"), _of_type(since, "didnt_work")
    return {
        "worked": worked,
        "didnt_work": didnt,
        "suggestions": _of_type(since, "suggestion"),
        "positive_count": len(worked),
        "negative_count": len(didnt),
    }


__all__ = ["FEEDBACK_TYPES", "get_feedback_summary", "get_session_feedback", "log_feedback"]
