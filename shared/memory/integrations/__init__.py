"""Integrations: hrm-memory behind other frameworks' interfaces (the LangGraph
store). They use the public :class:`~hrm_memory.MemoryManager` only."""
