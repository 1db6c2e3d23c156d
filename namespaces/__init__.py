"""The HRM namespace declarations: one module per HRM, each a list of specs.

Declarations are data (name, home tier, TTL, caps, ...), read by one engine,
the manager. :func:`seed` returns the whole seed set (the README's namespace table).
"""

from __future__ import annotations

from dataclasses import replace

from hrm_memory.core.codes import Codec
from hrm_memory.core.spec import DAY, NamespaceSpec

from . import altitude, codecs, focus, learning, reasoning, shared



def seed() -> list[NamespaceSpec]:
    """Every seed namespace, sorted by name, each with its HRM's codec
    (``codecs.NAMESPACE_CODECS``) unless it declares one itself."""
    specs = [*altitude.NAMESPACES, *focus.NAMESPACES, *reasoning.NAMESPACES, *learning.NAMESPACES, *shared.NAMESPACES]
    specs = [s if s.codec else replace(s, codec=codecs.NAMESPACE_CODECS.get(s.name)) for s in specs]
    return sorted(specs, key=lambda s: s.name)


def _consent(spec: NamespaceSpec) -> str:
    """The consent column: a hot namespace is never persisted, granted or not."""
    if spec.consent is None:
        return "-"
    return f"{spec.consent} (hot: memory only either way)" if spec.tier == "hot" else spec.consent


def table() -> str:
    """The seed namespaces as the Markdown table the README shows (a test
    keeps the two equal)."""
    rows = [
        "| namespace | tier | TTL | consent | codec | max keys | recall index (kind) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in seed():
        ttl = "-" if s.ttl is None else f"{s.ttl / DAY:g} d"
        index = "-" if s.index is None else ", ".join(f"`{p}`" for p in s.index) + (f" ({s.kind})" if s.kind else "")
        rows.append(
            f"| `{s.name}` | {s.tier} | {ttl} | {_consent(s)} | {s.codec or '-'} | {s.max_keys or '-'} | {index} |"
        )
    return "\n".join(rows)


def seed_codecs() -> list[Codec]:
    """The codecs the seed namespaces name."""
    return list(codecs.CODECS.values())


__all__ = ["DAY", "seed", "seed_codecs", "table"]
