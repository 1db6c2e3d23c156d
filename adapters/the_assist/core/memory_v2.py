"""``the_assist.core.memory_v2``: CompressedMemory and its code tables.

The state lives in the record ``("altitude.compressed", "state")`` (legacy
``memory/store/compressed/state.json``). Behaviour, caps and quirks are the
legacy ones (LEGACY_API.md section 2); the read-modify-write of each method
is atomic here (``MemoryManager.update``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hrm_memory.adapters._doc import Doc, now_iso
from hrm_memory.adapters.runtime import get_manager

# The legacy code tables are the altitude codec's tables (one source of truth):
# the same dicts, in the same order, re-exported under their legacy names.
from hrm_memory.namespaces.codecs import COACHING_CODES, PATTERN_CODES, RELATIONSHIP_CODES

NAMESPACE = "altitude.compressed"
KEY = "state"
MAX_ITEMS = 5  # north stars, priorities, tags per person
MAX_ACTIVE = 15
MAX_COMMITS = 10
SHOW_AT = 0.7  # patterns and coaching at or above this are rendered


def estimate_tokens(text: str) -> int:
    return len(text) // 4


def _topic(item: str) -> str:
    """Normalized topic: text before the first ':', lowercased, without '_' and '-'."""
    return item.split(":")[0].lower().replace("_", "").replace("-", "")


def _add_evicting(items: list[str], item: str, cap: int) -> list[str]:
    """Drop every item whose topic contains the new item's topic, append, keep the last ``cap``."""
    topic = _topic(item)
    kept = [old for old in items if topic not in _topic(old)]
    kept.append(item)
    return kept[-cap:]


def _dedupe(items: list[str]) -> list[str]:
    """Keep the newest item per exact topic, in the original order."""
    seen: set[str] = set()
    keep: list[str] = []
    for item in reversed(items):
        topic = _topic(item)
        if topic not in seen:
            seen.add(topic)
            keep.append(item)
    keep.reverse()
    return keep


def _bump(scores: dict[str, float], code: str) -> None:
    scores[code] = min(1.0, scores.get(code, 0.5) + 0.1)


class CompressedMemory:
    """Token-efficient state: north stars, priorities, active items, commits,
    people, pattern and coaching scores."""

    def __init__(self) -> None:
        self._doc = Doc(get_manager(), NAMESPACE, KEY)
        self._doc.seed({**self._default_state(), "last_update": now_iso()})

    # -- the private helpers other legacy code calls ---------------------------------

    def _default_state(self) -> dict[str, Any]:
        return {
            "north_stars": [],
            "priorities": [],
            "active": [],
            "commits": [],
            "people": {},
            "patterns": {},
            "coaching": {},
            "last_update": None,
            "session_count": 0,
        }

    def _load(self) -> dict[str, Any]:
        """The state; FileNotFoundError if the record is gone, CorruptRecord if damaged."""
        state: dict[str, Any] = self._doc.load()
        return state

    def _save(self, state: dict[str, Any]) -> None:
        """Stamp ``state["last_update"]`` (mutating the dict, as legacy did) and store it."""
        state["last_update"] = now_iso()
        self._doc.save(state)

    def _change(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Atomically load, apply ``fn`` (which mutates the state), stamp and store."""

        def step(state: dict[str, Any]) -> dict[str, Any]:
            fn(state)
            state["last_update"] = now_iso()
            return state

        self._doc.modify(step)

    # -- API ----------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        return self._load()

    def set_north_stars(self, stars: list[str]) -> None:
        self._change(lambda s: s.__setitem__("north_stars", stars[:MAX_ITEMS]))

    def set_priorities(self, priorities: list[str]) -> None:
        self._change(lambda s: s.__setitem__("priorities", priorities[:MAX_ITEMS]))

    def add_active(self, item: str) -> None:
        """``topic:status:detail``; evicts every item whose topic contains this topic."""
        self._change(lambda s: s.__setitem__("active", _add_evicting(s["active"], item, MAX_ACTIVE)))

    def add_commit(self, item: str) -> None:
        """``what:when:context``; same eviction as :meth:`add_active`."""
        self._change(lambda s: s.__setitem__("commits", _add_evicting(s["commits"], item, MAX_COMMITS)))

    def clear_commit(self, topic: str) -> None:
        """Remove the commits whose raw text starts with ``topic`` (case-sensitive)."""
        self._change(lambda s: s.__setitem__("commits", [c for c in s["commits"] if not c.startswith(topic)]))

    def dedupe_all(self) -> int:
        """Keep the newest item per topic in active and commits; the number removed."""
        removed = 0

        def fn(state: dict[str, Any]) -> None:
            nonlocal removed
            removed = 0
            for field in ("active", "commits"):
                kept = _dedupe(state[field])
                removed += len(state[field]) - len(kept)
                state[field] = kept

        self._change(fn)
        return removed

    def add_person(self, name: str, relationship: str, tags: list[str]) -> None:
        def fn(state: dict[str, Any]) -> None:
            people = state["people"]
            key = name.lower()
            previous = people.get(key, {})
            people[key] = {
                "r": RELATIONSHIP_CODES.get(relationship, relationship[:3]),
                "t": tags[:MAX_ITEMS],
                "n": len(previous.get("t", [])) + 1,
            }

        self._change(fn)

    def add_pattern(self, code: str, confidence: float = 0.7) -> None:
        """+0.1 (from 0.5, capped at 1.0) for a known pattern; ``confidence`` is ignored."""
        if code in PATTERN_CODES:
            self._change(lambda s: _bump(s["patterns"], code))

    def add_coaching(self, code: str, confidence: float = 0.7) -> None:
        """As :meth:`add_pattern`, for COACHING_CODES."""
        if code in COACHING_CODES:
            self._change(lambda s: _bump(s.setdefault("coaching", {}), code))

    def build_context(self) -> str:
        """The compact context block (LEGACY_API.md section 2, to the character)."""
        state = self._load()
        lines = []
        if state["north_stars"]:
            lines.append("NORTH:" + ",".join(state["north_stars"]))
        if state["priorities"]:
            lines.append("PRIO:" + ",".join(state["priorities"]))
        if state["active"]:
            lines.append("ACTIVE:" + "|".join(state["active"]))
        if state["commits"]:
            lines.append("COMMITS:" + "|".join(state["commits"]))
        people = state["people"]
        if people:
            entries = (f"{name}({p.get('r', '?')}):{','.join(p.get('t', []))}" for name, p in people.items())
            lines.append("PEOPLE:" + "|".join(entries))
        strong = [code for code, score in state["patterns"].items() if score >= SHOW_AT]
        if strong:
            lines.append("PATTERNS:" + ",".join(strong))
        coaching = state.get("coaching", {})
        shown = [f"{code}:{COACHING_CODES.get(code, code)[:40]}" for code, score in coaching.items() if score >= SHOW_AT]
        if shown:
            lines.append("COACHING:" + "|".join(shown))
        prefs = state.get("preferences")
        if prefs:
            lines.append("PREFS:" + "|".join(f"{key}:{value[:30]}" for key, value in prefs.items()))
        return "\n".join(lines)


def migrate_from_v1() -> dict[str, Any]:
    """Legacy: an LLM rewrote the v1 files into a compressed state. Not storage."""
    raise NotImplementedError(
        "migrate_from_v1 calls an LLM; the adapter covers storage only "
        "(import legacy data with the migration in migration/ instead)"
    )


_V1_RECORDS = (
    ("altitude.context", "context"),
    ("altitude.context", "observations"),
    ("altitude.context", "entities_people"),
    ("altitude.context", "entities_behaviors"),
)


def compare_efficiency() -> dict[str, Any]:
    """v1 tokens (the v1 context, patterns, people and behaviors files, as the
    legacy writers serialized them) against the v2 context."""
    import json

    mm = get_manager()
    v1_text = ""
    for namespace, key in _V1_RECORDS:
        value = mm.read(namespace, key, None)
        if value is not None:
            v1_text += json.dumps(value, indent=2)
    v2_context = CompressedMemory().build_context()
    v1_tokens = estimate_tokens(v1_text)
    v2_tokens = estimate_tokens(v2_context)
    reduction = int((1 - v2_tokens / v1_tokens) * 100) if v1_tokens else 0
    return {"v1_tokens": v1_tokens, "v2_tokens": v2_tokens, "reduction": reduction, "v2_context": v2_context}


__all__ = [
    "COACHING_CODES",
    "PATTERN_CODES",
    "RELATIONSHIP_CODES",
    "CompressedMemory",
    "compare_efficiency",
    "estimate_tokens",
    "migrate_from_v1",
]
