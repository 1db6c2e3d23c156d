"""reasoning: strategy choice, escalation and routing."""

from hrm_memory.core.spec import DAY, NamespaceSpec


NAMESPACES = [
    NamespaceSpec("reasoning.strategies", description="strategies and how well they worked", index=("$",), kind="procedural"),
    NamespaceSpec("reasoning.escalations", ttl=30 * DAY, description="escalations raised to a higher altitude"),
    NamespaceSpec("reasoning.routing", description="routing decisions between modules"),
    NamespaceSpec("reasoning.hrm", description="legacy HRM intent, plans and evaluations"),
    NamespaceSpec("reasoning.memories", index=("text", "tags[*]"), description="typed memories (remember())"),
]
