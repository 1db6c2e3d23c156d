"""Where each legacy file lives in the store: the contract shared by the
migration (which imports and exports files) and the adapters (which read and
write the same records through the legacy APIs).

One legacy file is one record: the namespace says which module's data it is,
the key names the file within it, the value is the file's parsed content
(JSON files) or a ``{"raw": ..., ...}`` object (text files). Paths are
relative to the legacy data root (the folder holding ``the_assist/`` and
``locked_system/``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Place:
    kind: str  # the file kind, for reports (DATA_NOTES.md's names)
    namespace: str
    key: str


# (pattern over the relative path, kind, namespace, key template); the first
# match wins. ``{stem}`` is the file name without its extension, ``{name}``
# the file name.
RULES: list[tuple[str, str, str, str]] = [
    (r"the_assist/memory/store/compressed/state\.json", "compressed", "altitude.compressed", "state"),
    (r"the_assist/memory/store/conversations/[^/]+\.json", "conversation", "altitude.conversations", "{stem}"),
    (r"the_assist/memory/store/context/current\.json", "context", "altitude.context", "context"),
    (r"the_assist/memory/store/north_stars/current\.json", "north_stars", "shared.north_stars", "v1"),
    (r"the_assist/memory/store/patterns/observations\.json", "observations", "altitude.context", "observations"),
    (r"the_assist/memory/store/entities/(people|behaviors)\.json", "entities", "altitude.context", "entities_{stem}"),
    (r"the_assist/memory/store/retrospectives/(trends|baseline)\.json", "retro_trends", "learning.retrospectives", "{stem}"),
    (r"the_assist/memory/store/retrospectives/[^/]+\.json", "retrospective", "learning.retrospectives", "{stem}"),
    (r"the_assist/memory/store/ai_reflection/(ai_trends|outcome_log)\.json", "reflection_trends", "learning.reflections", "{stem}"),
    (r"the_assist/memory/store/ai_reflection/[^/]+\.json", "reflection", "learning.reflections", "{stem}"),
    (r"the_assist/memory/store/curator/state\.json", "curator", "altitude.agents", "curator"),
    (r"the_assist/memory/store/proactive/state\.json", "proactive", "altitude.agents", "proactive"),
    (r"the_assist/memory/store/hrm/blocked_topics\.json", "blocked_topics", "altitude.agents", "blocked_topics"),
    (r"the_assist/memory/state/checkpoints/[^/]+\.json", "checkpoint", "altitude.checkpoints", "{stem}"),
    (r"the_assist/memory/state/(integrity|preflight_log|version_log)\.json", "integrity", "altitude.integrity", "{stem}"),
    (r"the_assist/hrm/memory/session_history\.json", "session_history", "altitude.sessions", "session_history"),
    (r"the_assist/hrm/memory/(intent|plans|evaluations)\.json", "hrm_store", "reasoning.hrm", "{stem}"),
    (r"the_assist/feedback/log\.json", "feedback", "learning.feedback", "log"),
    (r"locked_system/memory/consent\.json", "consent", "focus.consent", "legacy"),
    (r"locked_system/memory/conversation\.json", "locked_conversation", "focus.conversation", "conversation"),
    (r"locked_system/memory/fast/(interactions|progress)\.json", "fast", "focus.interactions", "{stem}"),
    (r"locked_system/memory/slow/(commitment|decisions|bootstrap)\.json", "slow", "focus.slow", "{stem}"),
    (r"locked_system/memory/bridge/bridge_signals\.json", "bridge", "focus.bridge", "bridge_signals"),
    (r"locked_system/memory/history/gate_history\.json", "gate_history", "focus.gates", "gate_history"),
    (r"locked_system/memory/notes/[^/]+\.md", "notes", "focus.notes", "{stem}"),
    (r"locked_system/memory/\.chat_history", "chat_history", "focus.chat_history", "chat_history"),
]
_COMPILED = [(re.compile(p), kind, ns, key) for p, kind, ns, key in RULES]


def place_of(relpath: str) -> Place | None:
    """Where the legacy file at ``relpath`` (POSIX, relative) goes; None if unknown."""
    for pattern, kind, ns, key in _COMPILED:
        if pattern.fullmatch(relpath):
            name = relpath.rsplit("/", 1)[-1]
            stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name.lstrip(".")
            return Place(kind, ns, key.format(stem=stem, name=name))
    return None


def path_of(namespace: str, key: str) -> str | None:
    """The legacy relative path for a record (the inverse, for exports of
    records created by adapters rather than imported)."""
    for pattern, _kind, ns, template in RULES:
        if ns != namespace:
            continue
        literal = pattern.replace("\\.", ".")
        if "{" not in template and template == key and "[" not in literal and "(" not in literal:
            return literal
        if template == "{stem}" and "[^/]+" in literal:
            return literal.replace("[^/]+", key)
        group = re.search(r"\(([^)]*)\)", literal)
        if group and key in group.group(1).split("|"):
            prefix = template.replace("{stem}", "")
            if key.startswith(prefix) or not prefix:
                return literal[: group.start()] + key + literal[group.end() :]
        if group and template.startswith("entities_") and key.startswith("entities_"):
            stem = key[len("entities_") :]
            if stem in group.group(1).split("|"):
                return literal[: group.start()] + stem + literal[group.end() :]
    return None
