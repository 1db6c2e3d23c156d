"""Adapter for the legacy ``the_assist`` package (also importable as ``dopejar``).

Covers the storage modules: ``core.memory`` (v1), ``core.memory_v2``,
``core.feedback``, ``core.entities``, ``core.integrity``, ``hrm.history`` and
``hrm.intent``, and the storage parts of ``core.retrospective``,
``core.ai_reflection``, ``core.curator``, ``core.proactive`` and
``core.hrm_agent`` (their LLM methods raise NotImplementedError).
"""
