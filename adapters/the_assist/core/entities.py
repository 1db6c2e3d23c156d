"""``the_assist.core.entities``: people and behaviours (v1-era module functions).

Records ``("altitude.context", "entities_people")`` = ``{people: {...}}`` and
``("altitude.context", "entities_behaviors")`` = ``{observed, validated, preferences}``.
"""

from __future__ import annotations

from typing import Any

from hrm_memory.adapters._doc import Doc, now_iso
from hrm_memory.adapters.runtime import get_manager

MAX_OBSERVED = 50
CONTEXT_PATTERNS = 10


def _people() -> Doc:
    return Doc(get_manager(), "altitude.context", "entities_people")


def _behaviors() -> Doc:
    return Doc(get_manager(), "altitude.context", "entities_behaviors")


def _no_people() -> dict[str, Any]:
    return {"people": {}}


def _no_behaviors() -> dict[str, Any]:
    return {"observed": [], "validated": [], "preferences": {}}


def get_people() -> dict[str, Any]:
    people: dict[str, Any] = _people().load(_no_people())["people"]
    return people


def add_or_update_person(name: str, details: dict[str, Any]) -> None:
    """New: ``mentions`` 1 and ``first_mentioned``. Known: details merged
    (AttributeError if the stored details is a string, as in legacy),
    ``mentions`` + 1, ``last_mentioned``."""

    def fn(data: dict[str, Any]) -> dict[str, Any]:
        key = name.lower()
        person = data["people"].get(key)
        if person is None:
            data["people"][key] = {"name": name, "first_mentioned": now_iso(), "details": details, "mentions": 1}
        else:
            person["details"].update(details)
            person["mentions"] += 1
            person["last_mentioned"] = now_iso()
        return data

    _people().modify(fn, _no_people())


def get_behaviors() -> dict[str, Any]:
    behaviors: dict[str, Any] = _behaviors().load(_no_behaviors())
    return behaviors


def _change_behaviors(fn: Any) -> None:
    def step(data: dict[str, Any]) -> dict[str, Any]:
        fn(data)
        return data

    _behaviors().modify(step, _no_behaviors())


def log_behavior_observation(observation: str, category: str = "general") -> None:
    entry = {"timestamp": now_iso(), "observation": observation, "category": category, "validated": False}

    def fn(data: dict[str, Any]) -> None:
        data["observed"] = [*data["observed"], entry][-MAX_OBSERVED:]

    _change_behaviors(fn)


def validate_behavior(observation: str, category: str = "general") -> None:
    entry = {"timestamp": now_iso(), "pattern": observation, "category": category}
    _change_behaviors(lambda data: data["validated"].append(entry))


def set_preference(key: str, value: Any) -> None:
    _change_behaviors(lambda data: data["preferences"].__setitem__(key, {"value": value, "learned": now_iso()}))


def build_entity_context() -> str:
    parts: list[str] = []
    people = get_people()
    if people:
        parts.append("## People You Know")
        for person in people.values():
            details = ", ".join(f"{k}: {v}" for k, v in person["details"].items())
            parts.append(f"- **{person['name']}**: {details}")
    behaviors = get_behaviors()
    validated = behaviors.get("validated", [])
    if validated:
        parts.append("\n## Validated Patterns (Long-term)")
        parts.extend(f"- {v['pattern']}" for v in validated[-CONTEXT_PATTERNS:])
    preferences = behaviors.get("preferences", {})
    if preferences:
        parts.append("\n## Learned Preferences")
        parts.extend(f"- {k}: {p['value']}" for k, p in preferences.items())
    return "\n".join(parts)


__all__ = [
    "add_or_update_person",
    "build_entity_context",
    "get_behaviors",
    "get_people",
    "log_behavior_observation",
    "set_preference",
    "validate_behavior",
]
