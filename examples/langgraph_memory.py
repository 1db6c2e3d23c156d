"""A LangGraph graph with long-term memory in hrm-memory (no LLM needed).

    python examples/langgraph_memory.py [STORE_ROOT]

Without STORE_ROOT the store lives in a temporary folder, removed at the end.

A tiny "assistant" graph: ``recall`` reads what the store remembers about the
user (a get, and a search of their notes), ``learn`` stores what the message
teaches (statements such as "I like tea" become notes), ``reply`` answers
from memory. Memory lives in ``hrm_memory.langgraph.MemoryStore``, so the
second run, a new process with a new graph, still knows what the first
learned. Needs ``pip install 'hrm-memory[langgraph]'`` (LangGraph and its store interface).
"""

from __future__ import annotations

import re
import sys
import tempfile
import uuid
from dataclasses import dataclass
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from hrm_memory.langgraph import MemoryStore


@dataclass
class Context:
    user_id: str


class State(TypedDict, total=False):
    message: str
    known: list[str]
    visits: int
    reply: str


def recall(state: State, runtime: Runtime[Context]) -> State:
    store = runtime.store
    assert store is not None
    user = runtime.context.user_id
    profile = store.get(("users", user), "profile")
    notes = store.search(("users", user, "notes"), filter={"kind": "preference"}, limit=20)
    return {
        "known": [n.value["text"] for n in notes],
        "visits": profile.value["visits"] if profile else 0,
    }


def learn(state: State, runtime: Runtime[Context]) -> State:
    store = runtime.store
    assert store is not None
    user = runtime.context.user_id
    visits = state.get("visits", 0) + 1
    store.put(("users", user), "profile", {"visits": visits})
    match = re.search(r"\bI (like|love|prefer) ([\w ]+)", state.get("message", ""), re.IGNORECASE)
    if match:
        text = f"likes {match.group(2).strip()}"
        # one note per fact: the key is derived from the text, so saying it twice stores it once
        key = str(uuid.uuid5(uuid.NAMESPACE_URL, text))
        store.put(("users", user, "notes"), key, {"kind": "preference", "text": text})
    return {"visits": visits}


def reply(state: State) -> State:
    known = state.get("known") or []
    memory = "; ".join(known) if known else "nothing yet"
    return {"reply": f"visit {state.get('visits')}, remembered: {memory}"}


def build() -> object:
    graph = StateGraph(State, context_schema=Context)
    graph.add_node("recall", recall)
    graph.add_node("learn", learn)
    graph.add_node("reply", reply)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "learn")
    graph.add_edge("learn", "reply")
    graph.add_edge("reply", END)
    return graph


def run(root: str, message: str) -> str:
    # A fresh store and graph each run, as a new process would have.
    with MemoryStore(root=root, durability="flush") as store:
        app = build().compile(store=store)  # type: ignore[attr-defined]
        out = app.invoke({"message": message}, context=Context(user_id="ann"))
        return str(out["reply"])


def main() -> None:
    if len(sys.argv) > 1:
        runs(sys.argv[1])
        return
    with tempfile.TemporaryDirectory(prefix="hrm-langgraph-") as root:
        runs(root)


def runs(root: str) -> None:
    print("run 1:", run(root, "Hello! I like tea."))
    print("run 2:", run(root, "Hi again."))


if __name__ == "__main__":
    main()
