"""reasoning: strategy choice, escalation and routing."""

from hrm_memory.core.spec import DAY, NamespaceSpec
from hrm_memory.namespaces.history import STRATEGIES_HISTORY


NAMESPACES = [
    NamespaceSpec("reasoning.strategies", description="strategies and how well they worked", index=("$",), kind="procedural", history=STRATEGIES_HISTORY),
    NamespaceSpec("reasoning.escalations", ttl=30 * DAY, description="escalations raised to a higher altitude"),
    NamespaceSpec("reasoning.routing", description="routing decisions between modules"),
    NamespaceSpec("reasoning.hrm", description="legacy HRM intent, plans and evaluations"),
    NamespaceSpec("reasoning.memories", index=("text", "tags[*]"), description="typed memories (remember())"),
]
