"""Plain-text tables for the CLI and the migration report."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (dict, list)):
        text = orjson.dumps(v).decode()
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


__all__ = ["cell", "table"]
