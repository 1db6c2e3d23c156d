"""The HRM namespace declarations: one module per HRM, each a list of specs.

Declarations are data (name, home tier, TTL, caps, ...), read by one engine,
the manager. :func:`seed` returns the whole seed set of DESIGN.md.
"""

from __future__ import annotations

from shared.memory.spec import DAY, NamespaceSpec

from . import altitude, focus, learning, reasoning, shared



def seed() -> list[NamespaceSpec]:
    """Every seed namespace, sorted by name."""
    specs = [*altitude.NAMESPACES, *focus.NAMESPACES, *reasoning.NAMESPACES, *learning.NAMESPACES, *shared.NAMESPACES]
    return sorted(specs, key=lambda s: s.name)


__all__ = ["DAY", "seed"]
