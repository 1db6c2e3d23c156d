"""learning: learned patterns, feedback and generalizations."""

from hrm_memory.core.spec import DAY, NamespaceSpec
from hrm_memory.namespaces.history import PATTERNS_HISTORY


NAMESPACES = [
    NamespaceSpec("learning.patterns", consent="preferences", description="patterns learned across sessions", index=("$",), kind="semantic", history=PATTERNS_HISTORY),
    NamespaceSpec("learning.feedback", ttl=60 * DAY, consent="preferences", description="explicit feedback events"),
    NamespaceSpec("learning.generalizations", description="generalizations drawn from patterns", index=("$",), kind="semantic"),
    NamespaceSpec("learning.retrospectives", description="legacy session retrospectives, trends and baseline", index=("$",), kind="episodic"),
    NamespaceSpec("learning.reflections", description="legacy AI reflections, trends and outcome log", index=("$",), kind="episodic"),
    NamespaceSpec("learning.memories", index=("text", "tags[*]"), description="typed memories (remember())"),
]
