"""``locked_system.capabilities.note_capture``: the legacy import path of
:mod:`adapters.locked_system.note_capture` (the same objects)."""

from hrm_memory.adapters.locked_system.note_capture import HEADERS, NoteCaptureCapability, NoteType, note_value

__all__ = ["HEADERS", "NoteCaptureCapability", "NoteType", "note_value"]
