"""shared: read by every HRM; written only by an unscoped manager (the owner)."""

from hrm_memory.spec import NamespaceSpec

NAMESPACES = [
    NamespaceSpec("shared.north_stars", owner="shared", description="long-term north stars"),
    NamespaceSpec("shared.priorities", owner="shared", description="current priorities"),
    NamespaceSpec("shared.people", owner="shared", description="people the user knows"),
]
