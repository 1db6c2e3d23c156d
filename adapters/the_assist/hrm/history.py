"""``the_assist.hrm.history``: SessionHistory and SessionRecord.

Record ``("altitude.sessions", "session_history")`` = ``{sessions: [...], next_index: int}``
(legacy ``the_assist/hrm/memory/session_history.json``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from hrm_memory.adapters._doc import Doc
from hrm_memory.adapters.runtime import get_manager

MAX_TOPICS = 10
BRIEF_CHARS = 60

#: The legacy patterns, verbatim: each is searched in the lowercased text and
#: each ends at a word boundary (so "session" followed by a two-digit number, and "pick upstairs", do not match).
CONTINUITY_PATTERNS: tuple[str, ...] = (
    r"\bwhat were we\b",
    r"\bwhere were we\b",
    r"\blast (time|session)\b",
    r"\bprevious(ly)?\b",
    r"\bcontinue from\b",
    r"\bpick up\b",
    r"\bbefore (the )?(crash|session)\b",
    r"\bremember when\b",
    r"\bwe (talked|discussed|worked on)\b",
    r"\bwhat did we\b",
    r"\bsession (#|\d|history)\b",
)
_CONTINUITY = tuple(re.compile(p) for p in CONTINUITY_PATTERNS)


@dataclass
class SessionRecord:
    index: int
    date: str  # YYYY-MM-DD (local)
    time: str  # HH:MM (local)
    summary: str
    topics: list[str]
    duration_exchanges: int


class SessionHistory:
    """The last :attr:`MAX_SESSIONS` sessions, with ever-increasing indexes."""

    MAX_SESSIONS = 20

    def __init__(self) -> None:
        self._doc = Doc(get_manager(), "altitude.sessions", "session_history")
        self._doc.seed({"sessions": [], "next_index": 1})
        self._session_start: datetime | None = None
        self._current_topics: list[str] = []
        self._exchange_count = 0

    def _sessions(self) -> list[SessionRecord]:
        data = self._doc.load()
        return [SessionRecord(**s) for s in data["sessions"]]

    # -- the live session -------------------------------------------------------------

    def start_session(self) -> None:
        self._session_start = datetime.now()
        self._current_topics = []
        self._exchange_count = 0

    def record_exchange(self, topics: list[str]) -> None:
        self._exchange_count += 1
        for topic in topics:
            if topic and topic not in self._current_topics:
                self._current_topics.append(topic)
        self._current_topics = self._current_topics[-MAX_TOPICS:]

    def end_session(self, summary: str) -> None:
        """Store the session (nothing happens if it was never started)."""
        start = self._session_start
        if start is None:
            return
        topics, count = list(self._current_topics), self._exchange_count

        def fn(data: dict[str, Any]) -> dict[str, Any]:
            record = SessionRecord(
                index=data["next_index"],
                date=start.strftime("%Y-%m-%d"),
                time=start.strftime("%H:%M"),
                summary=summary,
                topics=topics,
                duration_exchanges=count,
            )
            data["sessions"].append(asdict(record))
            data["next_index"] += 1
            data["sessions"] = data["sessions"][-self.MAX_SESSIONS :]
            return data

        self._doc.modify(fn)
        self._session_start = None
        self._current_topics = []
        self._exchange_count = 0

    # -- queries ---------------------------------------------------------------------------

    def get_last_session(self) -> SessionRecord | None:
        sessions = self._sessions()
        return sessions[-1] if sessions else None

    def get_session(self, index: int) -> SessionRecord | None:
        return next((s for s in self._sessions() if s.index == index), None)

    def get_sessions_by_date(self, date: str) -> list[SessionRecord]:
        return [s for s in self._sessions() if s.date == date]

    def get_recent_sessions(self, n: int = 5) -> list[SessionRecord]:
        """The last ``n``, oldest first."""
        return self._sessions()[-n:]

    def get_all_sessions(self) -> list[SessionRecord]:
        return self._sessions()

    def search_sessions(self, keyword: str) -> list[SessionRecord]:
        needle = keyword.lower()
        return [
            s
            for s in self._sessions()
            if needle in s.summary.lower() or any(needle in t.lower() for t in s.topics)
        ]

    # -- text ---------------------------------------------------------------------------------

    def format_session(self, s: SessionRecord) -> str:
        return "\n".join(
            [
                f"[Session #{s.index}] {s.date} {s.time}",
                f"  Summary: {s.summary}",
                f"  Topics: {', '.join(s.topics) if s.topics else 'none'}",
                f"  Exchanges: {s.duration_exchanges}",
            ]
        )

    def format_sessions_brief(self, sessions: list[SessionRecord]) -> str:
        if not sessions:
            return "No sessions found."
        lines = []
        for s in sessions:
            more = "..." if len(s.summary) > BRIEF_CHARS else ""
            lines.append(f"#{s.index} [{s.date}] {s.summary[:BRIEF_CHARS]}{more}")
        return "\n".join(lines)

    def build_context_for_continuity(self, n: int = 3) -> str:
        sessions = self.get_recent_sessions(n)
        if not sessions:
            return "No previous sessions recorded."
        lines = ["PREVIOUS SESSIONS:"]
        for s in sessions:
            lines.append(f"- Session #{s.index} ({s.date}): {s.summary}")
            if s.topics:
                lines.append(f"  Topics: {', '.join(s.topics)}")
        return "\n".join(lines)

    @staticmethod
    def is_continuity_question(text: str) -> bool:
        lowered = text.lower()
        return any(p.search(lowered) is not None for p in _CONTINUITY)


__all__ = ["SessionHistory", "SessionRecord"]
