"""``the_assist.hrm.intent``: IntentStore (the HRM's standing intent).

Record ``("reasoning.hrm", "intent")`` = ``{north_stars, current_success,
non_goals, stop_conditions, stance}`` (legacy ``the_assist/hrm/memory/intent.json``).
Seeded at construction if missing; a damaged record raises CorruptRecord.

The reference gives the behaviour but not the texts of ``check_alignment``
and ``build_context_for_planner/evaluator``, nor the seed values; those are
inferred (docs/adapters.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hrm_memory.adapters._doc import Doc, checked
from hrm_memory.adapters.runtime import get_manager

NAMESPACE = "reasoning.hrm"
KEY = "intent"
MAX_NORTH_STARS = 5
STANCES = ("partner", "support", "challenge")


def default_intent() -> dict[str, Any]:
    """The seed (inferred: empty lists, no success criterion, stance "partner")."""
    return {"north_stars": [], "current_success": "", "non_goals": [], "stop_conditions": [], "stance": "partner"}


def _forms(phrase: str) -> tuple[str, str]:
    """The phrase lowercased, with underscores and with spaces."""
    p = phrase.lower()
    return p, p.replace("_", " ")


def _matches(phrases: list[str], text: str) -> list[str]:
    """The phrases whose underscore or space form occurs in ``text`` (case-insensitive)."""
    t = text.lower()
    return [p for p in phrases if any(form in t for form in _forms(p))]


class IntentStore:
    """North stars, the current success criterion, non-goals, stop conditions, stance."""

    def __init__(self, memory_dir: Path | str | None = None) -> None:
        # memory_dir is accepted for compatibility; the record is fixed.
        self.memory_dir = memory_dir
        self._doc = Doc(get_manager(), NAMESPACE, KEY)
        self._doc.seed(default_intent())

    # -- storage -------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        data: dict[str, Any] = checked(self._doc.load(), dict, self._doc)
        return data

    def _change(self, fn: Callable[[dict[str, Any]], None]) -> None:
        def step(data: dict[str, Any]) -> dict[str, Any]:
            fn(checked(data, dict, self._doc))
            return data

        self._doc.modify(step)

    # -- getters -------------------------------------------------------------------------

    def get_intent(self) -> dict[str, Any]:
        return self._load()

    def get_north_stars(self) -> list[str]:
        return list(self._load().get("north_stars", []))

    def get_success(self) -> str:
        return str(self._load().get("current_success", ""))

    get_current_success = get_success

    def get_non_goals(self) -> list[str]:
        return list(self._load().get("non_goals", []))

    def get_stop_conditions(self) -> list[str]:
        return list(self._load().get("stop_conditions", []))

    def get_stance(self) -> str:
        return str(self._load().get("stance", "partner"))

    # -- setters -------------------------------------------------------------------------

    def set_north_stars(self, stars: list[str]) -> None:
        """Keeps the first 5."""
        self._change(lambda d: d.__setitem__("north_stars", list(stars)[:MAX_NORTH_STARS]))

    def set_success(self, success: str) -> None:
        self._change(lambda d: d.__setitem__("current_success", success))

    def add_non_goal(self, non_goal: str) -> None:
        """Appended unless already present (exact match)."""

        def fn(d: dict[str, Any]) -> None:
            goals = d.setdefault("non_goals", [])
            if non_goal not in goals:
                goals.append(non_goal)

        self._change(fn)

    def set_stance(self, stance: str) -> None:
        """``partner``, ``support`` or ``challenge``; ValueError for anything else."""
        if stance not in STANCES:
            raise ValueError(f"Invalid stance: {stance!r} (must be one of {', '.join(STANCES)})")
        self._change(lambda d: d.__setitem__("stance", stance))

    # -- checks ----------------------------------------------------------------------------

    def is_non_goal(self, text: str) -> bool:
        """True if a non-goal occurs in ``text`` (``feature_stacking`` or ``feature stacking``)."""
        return bool(_matches(self.get_non_goals(), text))

    def should_stop(self, text: str) -> bool:
        """True if a stop condition occurs in ``text`` (underscore or space form)."""
        return bool(_matches(self.get_stop_conditions(), text))

    def check_alignment(self, text: str) -> dict[str, Any]:
        """(Inferred shape) ``{aligned, violated_non_goals, stop_conditions_hit,
        north_stars_served, stance}``: aligned unless a non-goal or stop
        condition occurs in ``text``."""
        data = self._load()
        violated = _matches(data.get("non_goals", []), text)
        stops = _matches(data.get("stop_conditions", []), text)
        served = _matches(data.get("north_stars", []), text)
        return {
            "aligned": not violated and not stops,
            "violated_non_goals": violated,
            "stop_conditions_hit": stops,
            "north_stars_served": served,
            "stance": data.get("stance", "partner"),
        }

    # -- context texts (inferred) -------------------------------------------------------

    def build_context_for_planner(self) -> str:
        data = self._load()
        lines = ["## Intent"]
        if data.get("north_stars"):
            lines.append("North stars: " + ", ".join(data["north_stars"]))
        if data.get("current_success"):
            lines.append("Success looks like: " + data["current_success"])
        if data.get("non_goals"):
            lines.append("Non-goals (avoid): " + ", ".join(data["non_goals"]))
        lines.append("Stance: " + str(data.get("stance", "partner")))
        return "\n".join(lines)

    def build_context_for_evaluator(self) -> str:
        data = self._load()
        lines = ["## Intent to evaluate against"]
        if data.get("current_success"):
            lines.append("Success looks like: " + data["current_success"])
        if data.get("non_goals"):
            lines.append("Non-goals (violations): " + ", ".join(data["non_goals"]))
        if data.get("stop_conditions"):
            lines.append("Stop conditions: " + ", ".join(data["stop_conditions"]))
        lines.append("Stance: " + str(data.get("stance", "partner")))
        return "\n".join(lines)


__all__ = ["STANCES", "IntentStore", "default_intent"]
