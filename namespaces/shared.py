"""shared: read by every HRM; written only by an unscoped manager (the owner)."""

from hrm_memory.core.spec import NamespaceSpec
from hrm_memory.namespaces.history import GOALS_HISTORY, PEOPLE_HISTORY

NAMESPACES = [
    NamespaceSpec("shared.north_stars", owner="shared", description="long-term north stars", index=("$",), kind="prospective", history=GOALS_HISTORY),
    NamespaceSpec("shared.priorities", owner="shared", description="current priorities", index=("$",), kind="prospective", history=GOALS_HISTORY),
    NamespaceSpec("shared.people", owner="shared", description="people the user knows", index=("$",), kind="semantic", history=PEOPLE_HISTORY),
    NamespaceSpec(
        "shared.memories", owner="shared", index=("text", "tags[*]"), description="typed memories (remember())"
    ),
]
