"""Adapter for the legacy ``the_assist`` package (also importable as ``dopejar``).

Covers the storage modules only: ``core.memory`` (v1), ``core.memory_v2``,
``core.feedback``, ``core.entities``, ``core.integrity`` and ``hrm.history``.
"""
