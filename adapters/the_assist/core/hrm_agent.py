"""``the_assist.core.hrm_agent``: HRMAgent (blocked topics; storage parts).

Record ``("altitude.agents", "blocked_topics")`` = ``{blocked: [{topic,
strength, added}], cooldowns: {<lowercased topic>: {remaining, added}}}``
(legacy ``hrm/blocked_topics.json``), seeded if missing. Legacy read a
damaged file as the empty default (and the next save overwrote it); here it
raises CorruptRecord. ``adjust_prompt`` (an LLM call) raises NotImplementedError.
"""

from __future__ import annotations

from typing import Any

from hrm_memory.adapters._doc import Doc, checked, now_iso
from hrm_memory.adapters.runtime import get_manager

from ._llm import llm_only

STRENGTHS = ("demand", "request")
INJECTION_HEADER = "\n# HRM Guidance (follow strictly)\n"


def default_blocks() -> dict[str, Any]:
    return {"blocked": [], "cooldowns": {}}


class HRMAgent:
    """Topics the user asked not to raise, and per-topic cooldowns."""

    def __init__(self) -> None:
        self._doc = Doc(get_manager(), "altitude.agents", "blocked_topics")
        self._doc.seed(default_blocks())

    def _change(self, fn: Any) -> None:
        def step(data: Any) -> Any:
            fn(checked(data, dict, self._doc))
            return data

        self._doc.modify(step, default_blocks())

    def add_blocked_topic(self, topic: str, strength: str = "demand") -> None:
        """A case-insensitive match gets its strength overwritten (even
        downgraded); otherwise ``{topic, strength, added}`` is appended."""

        def fn(data: dict[str, Any]) -> None:
            blocked = data.setdefault("blocked", [])
            for item in blocked:
                if str(item.get("topic", "")).lower() == topic.lower():
                    item["strength"] = strength
                    return
            blocked.append({"topic": topic, "strength": strength, "added": now_iso()})

        self._change(fn)

    def add_cooldown(self, topic: str, exchanges: int = 5) -> None:
        self._change(
            lambda d: d.setdefault("cooldowns", {}).__setitem__(
                topic.lower(), {"remaining": exchanges, "added": now_iso()}
            )
        )

    def decrement_cooldowns(self) -> None:
        """-1 on every cooldown; those at 0 or below are removed (always stored)."""

        def fn(data: dict[str, Any]) -> None:
            kept = {}
            for topic, cooldown in data.get("cooldowns", {}).items():
                cooldown["remaining"] -= 1
                if cooldown["remaining"] > 0:
                    kept[topic] = cooldown
            data["cooldowns"] = kept

        self._change(fn)

    def get_active_blocks(self) -> dict[str, Any]:
        """The whole record."""
        data: dict[str, Any] = checked(self._doc.load(), dict, self._doc)
        return data

    def adjust_prompt(self, perception: Any, memory_state: Any, user_baseline: Any = None) -> dict[str, Any]:
        raise llm_only("HRMAgent.adjust_prompt", "store blocks with add_blocked_topic() / add_cooldown()")

    def build_orchestrator_injection(self, adj: dict[str, Any] | None) -> str:
        """(Text inferred) the header, then one ``- key: value`` line per
        non-empty adjustment and the stored blocks and cooldowns; "" when
        there is nothing to say."""
        lines: list[str] = []
        for key, value in (adj or {}).items():
            if value in (None, "", [], {}):
                continue
            shown = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            lines.append(f"- {key.replace('_', ' ')}: {shown}")
        data = self.get_active_blocks()
        blocked = [f"{b['topic']} ({b.get('strength', 'demand')})" for b in data.get("blocked", [])]
        if blocked:
            lines.append("- DO NOT raise: " + ", ".join(blocked))
        cooling = [f"{t} ({c.get('remaining')})" for t, c in data.get("cooldowns", {}).items()]
        if cooling:
            lines.append("- Cooling down (avoid): " + ", ".join(cooling))
        return INJECTION_HEADER + "\n".join(lines) + "\n" if lines else ""


__all__ = ["INJECTION_HEADER", "STRENGTHS", "HRMAgent", "default_blocks"]
