"""altitude: the strategic-altitude HRM (the_assist's compressed memory)."""

from shared.memory.spec import DAY, NamespaceSpec


NAMESPACES = [
    NamespaceSpec("altitude.session", tier="hot", max_keys=10_000, description="live session state, this process only"),
    NamespaceSpec(
        "altitude.history",
        ttl=90 * DAY,
        max_keys=20,
        consent="conversation",
        description="session summaries; keeps the newest 20 warm",
    ),
    NamespaceSpec("altitude.patterns", description="observed user patterns, by pattern code"),
    NamespaceSpec("altitude.coaching", description="how the assistant should behave, by coaching code"),
]
