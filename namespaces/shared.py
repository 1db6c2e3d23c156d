"""shared: read by every HRM; written only by an unscoped manager (the owner)."""

from hrm_memory.core.spec import NamespaceSpec

NAMESPACES = [
    NamespaceSpec("shared.north_stars", owner="shared", description="long-term north stars", index=("$",), kind="prospective"),
    NamespaceSpec("shared.priorities", owner="shared", description="current priorities", index=("$",), kind="prospective"),
    NamespaceSpec("shared.people", owner="shared", description="people the user knows", index=("$",), kind="semantic"),
    NamespaceSpec(
        "shared.memories", owner="shared", index=("text", "tags[*]"), description="typed memories (remember())"
    ),
]
