"""Recall: find memories by meaning (``search``, over the index ``text``
extracts), typed memories (``memories``) and optional dense retrieval
(``embedders``). A feature on top of the core."""

from hrm_memory.recall.search import Hit

__all__ = ["Hit"]
