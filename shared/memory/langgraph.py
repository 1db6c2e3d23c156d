"""The LangGraph store's documented import path; it lives in
:mod:`hrm_memory.integrations.langgraph`."""

from hrm_memory.integrations.langgraph import DEFAULT_NAMESPACE, AsyncMemoryStore, MemoryStore

__all__ = ["DEFAULT_NAMESPACE", "AsyncMemoryStore", "MemoryStore"]
