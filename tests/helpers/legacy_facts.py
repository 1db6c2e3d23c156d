"""The legacy prompts' facts, and which of them a context text keeps.

Facts are read from the migrated records the legacy prompts are built from:
v1 (``shared.north_stars/v1``, ``altitude.context/context``) and v2
(``altitude.compressed/state``). A fact is kept when its normalised text
(lower case, runs of white space as one space, typographic quotes and dashes
as ASCII) occurs in the normalised text with no word character on either
side. The context tests and benchmarks/bench_context_legacy.py share this one
checker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hrm_memory import MemoryManager

#: 2026-01-12 12:00 UTC: two days after the legacy data's last session, so
#: relative dates render as they would have the next working day.
NOW = 1_768_219_200.0
SHOW_AT = 0.7


def norm(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = text.replace("\u2013", "-").replace("\u2014", "-")
    return " ".join(text.lower().split())


def present(fact: str, normed_text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(norm(fact))}(?!\w)", normed_text) is not None


def facts_of(mm: MemoryManager) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(kind, fact) pairs carried by the v1 prompt, and by the v2 prompt."""
    stars: dict[str, Any] = mm.read("shared.north_stars", "v1") or {}
    context: dict[str, Any] = mm.read("altitude.context", "context") or {}
    state: dict[str, Any] = mm.read("altitude.compressed", "state") or {}
    v1 = ([("north star", s) for s in stars.get("north_stars", [])]
          + [("priority", s) for s in stars.get("current_priorities", [])]
          + [("pending commitment", s) for s in context.get("pending_commits", [])]
          + [("active thread", s) for s in context.get("active_threads", [])])
    v2 = ([("north star code", s) for s in state.get("north_stars", [])]
          + [("priority code", s) for s in state.get("priorities", [])]
          + [("commitment code", str(s).split(":", 1)[0]) for s in state.get("commits", [])]
          + [("person", name) for name in state.get("people", {})]
          + [("pattern code", code) for code, score in state.get("patterns", {}).items() if score >= SHOW_AT])
    return v1, v2


def kept(facts: Sequence[tuple[str, str]], text: str) -> list[tuple[str, str]]:
    t = norm(text)
    return [f for f in facts if present(f[1], t)]
