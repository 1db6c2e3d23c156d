"""Integrations of hrm-memory with other systems (the MCP server: :mod:`hrm_memory.integrations.mcp_server`).

Each integration imports its third-party package lazily, so ``import hrm_memory`` never needs it."""
