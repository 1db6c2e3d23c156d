"""altitude: the strategic-altitude HRM (the_assist's compressed memory)."""

from hrm_memory.core.spec import DAY, NamespaceSpec
from hrm_memory.namespaces.history import PATTERNS_HISTORY


NAMESPACES = [
    NamespaceSpec("altitude.session", tier="hot", max_keys=10_000, description="live session state, this process only"),
    NamespaceSpec(
        "altitude.history",
        ttl=90 * DAY,
        max_keys=20,
        consent="conversation",
        description="session summaries; keeps the newest 20 warm", index=("$",), kind="episodic"),
    NamespaceSpec("altitude.patterns", description="observed user patterns, by pattern code", index=("$",), kind="semantic", history=PATTERNS_HISTORY),
    NamespaceSpec("altitude.coaching", description="how the assistant should behave, by coaching code", index=("$",), kind="procedural"),
    # Legacy the_assist stores (one record per legacy file; see migration/layout.py).
    NamespaceSpec(
        "altitude.compressed", description="legacy CompressedMemory state (memory_v2)", index=("$",), kind="semantic"
    ),
    NamespaceSpec("altitude.conversations", description="legacy v1 saved conversations, by timestamp", index=("$",), kind="episodic"),
    NamespaceSpec("altitude.context", description="legacy v1 context, observations and entities", index=("$",), kind="semantic"),
    NamespaceSpec("altitude.agents", description="legacy curator, proactive engine and HRM agent state"),
    NamespaceSpec("altitude.integrity", description="legacy integrity, preflight and version logs"),
    NamespaceSpec("altitude.checkpoints", ttl=30 * DAY, description="legacy boot checkpoints (age into cold)"),
    NamespaceSpec("altitude.sessions", description="legacy SessionHistory"),
    NamespaceSpec("altitude.memories", index=("text", "tags[*]"), description="typed memories (remember())"),
]
