"""learning: learned patterns, feedback and generalizations."""

from hrm_memory.spec import DAY, NamespaceSpec


NAMESPACES = [
    NamespaceSpec("learning.patterns", consent="preferences", description="patterns learned across sessions"),
    NamespaceSpec("learning.feedback", ttl=60 * DAY, consent="preferences", description="explicit feedback events"),
    NamespaceSpec("learning.generalizations", description="generalizations drawn from patterns"),
    NamespaceSpec("learning.retrospectives", description="legacy session retrospectives, trends and baseline"),
    NamespaceSpec("learning.reflections", description="legacy AI reflections, trends and outcome log"),
]
