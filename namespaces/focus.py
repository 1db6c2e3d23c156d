"""focus: the fast/slow focus loops (locked_system's memories)."""

from hrm_memory.core.spec import DAY, NamespaceSpec
from hrm_memory.namespaces.history import NOTES_HISTORY


NAMESPACES = [
    NamespaceSpec("focus.fast", tier="hot", max_keys=10_000, consent="signals", description="per-turn progress and signals"),
    NamespaceSpec("focus.slow", description="commitment lease, decisions, bootstrap"),
    NamespaceSpec("focus.lanes", description="active work lanes"),
    NamespaceSpec("focus.consent", description="consent preferences per category"),
    NamespaceSpec("focus.gates", ttl=30 * DAY, description="gate transitions"),
    # Legacy locked_system stores (see migration/layout.py).
    NamespaceSpec("focus.conversation", consent="conversation", description="legacy LockedLoop conversation", index=("$",), kind="episodic"),
    NamespaceSpec("focus.interactions", description="legacy FastMemory interaction signals and progress"),
    NamespaceSpec("focus.bridge", description="legacy BridgeMemory signals"),
    NamespaceSpec("focus.notes", description="legacy developer and personal notes (markdown)", index=("$",), kind="semantic", history=NOTES_HISTORY),
    NamespaceSpec("focus.chat_history", description="legacy readline chat history (libedit bytes)"),
    NamespaceSpec("focus.memories", index=("text", "tags[*]"), description="typed memories (remember())"),
]
