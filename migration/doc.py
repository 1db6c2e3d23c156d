"""The mapping table of docs/migration.md, generated from ``layout.RULES``
(``python -m migration.doc`` prints it; a test keeps the doc in sync)."""

from __future__ import annotations

from .formats import TEXT_KINDS
from .layout import RULES


def layout_table() -> str:
    """Markdown: legacy path pattern -> kind, namespace, key, value form."""
    lines = [
        "| legacy path (regex, relative to the legacy root) | kind | namespace | key | record value |",
        "|---|---|---|---|---|",
    ]
    for pattern, kind, namespace, key in RULES:
        value = f"`{{raw, ...}}` ({TEXT_KINDS[kind]})" if kind in TEXT_KINDS else "the parsed JSON"
        cell = pattern.replace("|", "\\|")  # a bare | would split the table cell
        lines.append(f"| `{cell}` | {kind} | `{namespace}` | `{key}` | {value} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(layout_table())
