"""NoteCaptureCapability (legacy ``locked_system.capabilities.note_capture``).

Each note file is the record ``("focus.notes", "developer" | "personal")``
with the value shape of the migration (:func:`migration.formats.parse_notes`):
``{"raw": <file text>, "title", "entries": [{"heading", "body"}]}``. A capture
appends ``\\n## YYYY-MM-DD HH:MM\\n<content>\\n`` to ``raw`` and recomputes
the parsed parts from it in the same atomic update, so ``migrate export``
writes the new file text. When the record holds ``raw_base64`` (an imported
file that was not UTF-8) the appended bytes go there too.

The readers split ``raw`` on ``\\n## `` as legacy did.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

from hrm_memory.adapters._doc import Doc, checked

from .memory._base import as_path, doc

NAMESPACE = "focus.notes"
HEADERS = {"developer": "# Developer Notes\n\n", "personal": "# Personal Notes\n\n"}
WRITE_LOG_SIZE = 100


class NoteType(str, Enum):
    DEVELOPER = "developer"
    PERSONAL = "personal"


def _parsed(text: str) -> dict[str, Any]:
    from hrm_memory.migration.anomalies import Flags
    from hrm_memory.migration.formats import parse_notes

    return parse_notes(text, Flags())


def note_value(text: str) -> dict[str, Any]:
    """The record value for a note file's text (the migration's shape)."""
    return {"raw": text, **_parsed(text)}


def _append(value: dict[str, Any], addition: str) -> dict[str, Any]:
    raw = value["raw"]
    out = dict(value)
    out["raw"] = raw + addition
    if isinstance(value.get("raw_base64"), str):
        data = base64.b64decode(value["raw_base64"]) + addition.encode("utf-8")
        out["raw_base64"] = base64.b64encode(data).decode("ascii")
    out.update(_parsed(out["raw"]))
    return out


_INTENTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(?:dev(?:eloper)?|code|bug|tech(?:nical)?)\s+note\b|\bnote\s+(?:for|to)\s+(?:the\s+)?dev", re.I), "developer"),
    (re.compile(r"\b(?:personal|private)\s+note\b|\bnote\s+(?:for|to)\s+(?:my\s*self|me)\b", re.I), "personal"),
]
_PREFIX = re.compile(
    r"^\s*(?:please\s+)?(?:(?:make|take|add|write|save|capture|log)\s+(?:a\s+)?)?"
    r"(?:(?:dev(?:eloper)?|personal|private|tech(?:nical)?)\s+)?note(?:\s+(?:for|to)\s+(?:the\s+)?"
    r"(?:dev(?:eloper)?s?|my\s*self|me))?\s*[:\-]?\s*",
    re.I,
)


class NoteCaptureCapability:
    """Developer and personal notes, appended to markdown text records."""

    def __init__(self, notes_dir: Path | str, authorization_check: Callable[..., bool] | None = None) -> None:
        self.notes_dir = as_path(notes_dir)
        self.authorization_check = authorization_check
        self._write_log: list[dict[str, Any]] = []
        for kind, header in HEADERS.items():
            self._doc(kind).seed(note_value(header))

    # -- records ---------------------------------------------------------------------

    @staticmethod
    def _type(note_type: NoteType | str) -> str:
        value = note_type.value if isinstance(note_type, NoteType) else str(note_type)
        if value not in HEADERS:
            raise ValueError(f"unknown note type {note_type!r} (developer or personal)")
        return value

    def _doc(self, kind: str) -> Doc:
        return doc(NAMESPACE, kind)

    def _text(self, kind: str) -> str:
        d = self._doc(kind)
        value = checked(d.load(note_value(HEADERS[kind])), dict, d)
        raw = value.get("raw")
        if not isinstance(raw, str):
            checked(raw, str, d)
        return str(raw)

    def get_notes_path(self, note_type: NoteType | str) -> Path:
        return self.notes_dir / f"{self._type(note_type)}.md"

    # -- writing -----------------------------------------------------------------------

    def _authorized(self, grantee: str, kind: str) -> bool:
        if self.authorization_check is None:
            return True
        return bool(self.authorization_check(grantee, kind))

    def capture(
        self, note_type: NoteType | str, content: str, grantee: str = "agent", source: str = "conversation"
    ) -> dict[str, Any]:
        """Append one note (stamped to the minute); the result dict says
        whether it was authorized, written and read back."""
        now = datetime.now()
        result: dict[str, Any] = {
            "success": False,
            "authorized": False,
            "note_type": note_type.value if isinstance(note_type, NoteType) else note_type,
            "timestamp": now.isoformat(),
            "grantee": grantee,
            "source": source,
            "verified": False,
            "file": None,
            "message": "",
        }
        try:
            kind = self._type(note_type)
        except ValueError as exc:
            result["message"] = str(exc)
            return self._log(result)
        result["file"] = str(self.get_notes_path(kind))
        if not self._authorized(grantee, kind):
            result["message"] = f"{grantee} is not authorized to write {kind} notes"
            return self._log(result)
        result["authorized"] = True
        addition = f"\n## {now.strftime('%Y-%m-%d %H:%M')}\n{content}\n"
        d = self._doc(kind)

        def step(value: Any) -> dict[str, Any]:
            checked(checked(value, dict, d).get("raw"), str, d)
            return _append(value, addition)

        d.modify(step, note_value(HEADERS[kind]))
        result["verified"] = self._text(kind).endswith(addition)
        result["success"] = result["verified"]
        result["message"] = f"{kind.capitalize()} note saved" if result["verified"] else "note written but not verified"
        return self._log(result)

    def _log(self, result: dict[str, Any]) -> dict[str, Any]:
        self._write_log = [*self._write_log, dict(result)][-WRITE_LOG_SIZE:]
        return result

    def get_write_log(self, n: int = 10) -> list[dict[str, Any]]:
        """This object's capture attempts (in memory only, as in legacy)."""
        return self._write_log[-n:]

    # -- reading -------------------------------------------------------------------------

    def _entries(self, kind: str) -> list[str]:
        return self._text(kind).split("\n## ")[1:]

    def get_recent_notes(self, note_type: NoteType | str, n: int = 5) -> list[str]:
        """The last ``n`` raw entries (``"YYYY-MM-DD HH:MM\\n<content>\\n"``), oldest first."""
        return self._entries(self._type(note_type))[-n:]

    def get_notes_formatted(self, note_type: NoteType | str | None = None, n: int = 10) -> list[dict[str, Any]]:
        """``{timestamp, datetime, content, type, file}`` per entry, newest first."""
        kinds = list(HEADERS) if note_type is None else [self._type(note_type)]
        notes = []
        for kind in kinds:
            for entry in self._entries(kind):
                stamp, _, body = entry.partition("\n")
                try:
                    when: datetime | None = datetime.strptime(stamp.strip(), "%Y-%m-%d %H:%M")
                except ValueError:
                    when = None
                notes.append(
                    {
                        "timestamp": stamp.strip(),
                        "datetime": when,
                        "content": body.strip(),
                        "type": kind,
                        "file": str(self.get_notes_path(kind)),
                    }
                )
        notes.sort(key=lambda note: note["datetime"] or datetime.min, reverse=True)
        return notes[:n]

    def get_all_notes_summary(self) -> dict[str, Any]:
        """(Inferred shape) per type: ``{count, latest, file}``."""
        summary = {}
        for kind in HEADERS:
            entries = self._entries(kind)
            summary[kind] = {
                "count": len(entries),
                "latest": entries[-1].partition("\n")[0].strip() if entries else None,
                "file": str(self.get_notes_path(kind)),
            }
        return summary

    # -- text helpers (inferred patterns) -----------------------------------------------

    @staticmethod
    def detect_note_intent(text: str) -> str | None:
        """``developer``, ``personal`` or None."""
        for pattern, kind in _INTENTS:
            if pattern.search(text):
                return kind
        return None

    @staticmethod
    def extract_note_content(text: str, context: str = "") -> str:
        """The text without a leading "make a developer note:"-style prefix;
        ``context`` when nothing is left."""
        content = _PREFIX.sub("", text, count=1).strip()
        return content or context.strip()


__all__ = ["HEADERS", "NoteCaptureCapability", "NoteType", "note_value"]
