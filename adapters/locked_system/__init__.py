"""Adapter for the legacy ``locked_system`` package: the ``memory`` modules,
LockedLoop's conversation persistence (``loop.ConversationStore``) and note
capture (``capabilities.note_capture``)."""
