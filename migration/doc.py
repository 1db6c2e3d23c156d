"""Generated parts of docs/migration.md: the mapping table, from
``layout.RULES``, and the figures on the shipped legacy data, from
``migrate plan`` (``python -m hrm_memory.migration.doc`` prints the table;
``python -m hrm_memory.migration.doc --figures LEGACY_DIR`` the figures line).
Tests keep the doc in sync with both."""

from __future__ import annotations

import sys
from pathlib import Path

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


def figures_line(legacy_dir: str | Path) -> str:
    """One Markdown line: the TOTAL row ``migrate plan`` reports for
    ``legacy_dir`` (``tokens --legacy``, apply and verify report the same
    stored bytes and tokens after: see ``migration.figures``)."""
    from .engine import plan

    report = plan(legacy_dir, tokens=True)
    total = report.by_kind()[-1]
    info = report.tokenizer or {}
    counter = f"{info.get('counter', 'no')} {info.get('encoding', 'tokenizer')}"
    return (
        f"Figures on the shipped data ({total['files']:,} files, {total['bytes']:,} bytes; {counter}): "
        f"{total['records']:,} records, {total['stored_bytes']:,} stored bytes, "
        f"{total['tokens_before'] or 0:,} tokens before and {total['tokens_after'] or 0:,} after, "
        f"{total['anomalies']:,} anomaly occurrences."
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--figures":
        print(figures_line(args[1]))
    elif not args:
        print(layout_table())
    else:
        print("usage: python -m hrm_memory.migration.doc [--figures LEGACY_DIR]", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
