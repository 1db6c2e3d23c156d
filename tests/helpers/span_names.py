"""A span's operation as ``memory.<op>``: spans are named by the GenAI
convention's operation (``search_memory`` for read, query and recall alike),
so tests that tell operations apart read ``db.operation.name``."""

from __future__ import annotations

from typing import Any


def op_name(span: Any) -> str:
    """``memory.<db.operation.name>`` of an SDK span (or a JSONL span dict); its name if it has none."""
    attrs = span.get("attributes") if isinstance(span, dict) else span.attributes
    op = (attrs or {}).get("db.operation.name")
    if op is None:
        return str(span["name"] if isinstance(span, dict) else span.name)
    return f"memory.{op}"
