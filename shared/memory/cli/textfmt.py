"""Plain-text output of the command lines: tables, JSON, exit codes."""

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


#: Exit codes of ``hrm-memory`` (README, "The CLI").
EXIT_OK, EXIT_NOT_FOUND, EXIT_BAD_INPUT, EXIT_STORE, EXIT_FINDINGS = 0, 1, 2, 3, 4
#: stdout was closed by its reader (128 + SIGPIPE, as a shell reports ``yes | head -1``).
EXIT_BROKEN_PIPE = 141


def dump_json(obj: Any) -> str:
    """Indented JSON for ``--json`` output (non-JSON values as their str)."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode()


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_FINDINGS",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_STORE",
    "cell",
    "dump_json",
    "table",
]
