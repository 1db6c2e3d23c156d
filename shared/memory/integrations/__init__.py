"""Integrations: hrm-memory behind other systems' interfaces, over the public
:class:`~hrm_memory.MemoryManager`: the LangGraph store (``langgraph``) and the
MCP server (``mcp_server``, its tools ``mcp_tools`` and HTTP guard ``mcp_http``).
Each imports its third-party package lazily, so ``import hrm_memory`` never needs it."""
