"""``hrm-memory trace tail|show``: read a span file; never open (or create) a store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hrm_memory.core.errors import BadInput
from hrm_memory.manager import default_root
from hrm_memory.cli.textfmt import EXIT_NOT_FOUND, EXIT_OK
from hrm_memory.cli.textfmt import dump_json as _dump


def cmd_trace(args: argparse.Namespace) -> int:
    """``trace tail`` / ``trace show``: read a span file; never opens (or creates) a store."""
    from hrm_memory.tracing import setup as telemetry

    if args.file:
        path = Path(args.file)
    elif args.trace_file:
        path = Path(args.trace_file)
    else:
        path = telemetry.default_trace_file(Path(args.root) if args.root is not None else default_root())
    if args.trace_command == "show":
        prefix = args.trace_id.strip().lower()
        if not telemetry.is_trace_id_prefix(prefix):
            raise BadInput(f"{args.trace_id!r} is not a trace id: expected 1 to 32 hexadecimal digits")
        if not path.exists():
            print(f"no trace file at {path} (run commands with --trace jsonl)", file=sys.stderr)
            return EXIT_NOT_FOUND
        spans, _ = telemetry.load_spans(path)
        matches = telemetry.match_trace_id(spans, prefix)
        if not matches:
            print(f"trace {args.trace_id} not found in {path}", file=sys.stderr)
            return EXIT_NOT_FOUND
        if len(matches) > 1 and prefix in matches:
            matches = [prefix]  # a whole id is never ambiguous
        if len(matches) > 1:
            shown = ", ".join(m[: max(len(prefix) + 4, 12)] for m in matches[:5])
            raise BadInput(
                f"trace id prefix {args.trace_id!r} is ambiguous: {len(matches)} traces start with it "
                f"({shown}{', ...' if len(matches) > 5 else ''}); give more digits"
            )
        trace_id = matches[0]
        if args.json:
            print(_dump([s for s in spans if s["trace_id"] == trace_id]))
        else:
            print(f"trace {trace_id}")
            print("\n".join(telemetry.show_trace(spans, trace_id)))
        return EXIT_OK
    if args.n < 0:
        raise BadInput(f"-n must be 0 or more, not {args.n}")
    if not _has_spans(path, telemetry):
        # Nothing to show yet: say how to make some (exit 1 unless following).
        print(
            f"no spans in {path} yet. Make some: run a command with --trace jsonl "
            "(hrm-memory --trace jsonl put NAMESPACE KEY VALUE), or in your agent's process call "
            f"hrm_memory.setup_tracing('jsonl', path={str(path)!r}) before using the MemoryManager "
            "(docs/tracing.md)",
            file=sys.stderr,
        )
        if not args.follow:
            return EXIT_NOT_FOUND
    try:
        for _ in telemetry.tail(path, args.n, args.follow, sys.stdout):
            pass
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _has_spans(path: Path, telemetry: Any) -> bool:
    """True if ``path`` holds at least one span (a file that is not a regular
    file raises ``BadInput``, as ``tail`` would)."""
    try:
        return bool(telemetry.load_spans(path, keep=1)[0])
    except FileNotFoundError:
        return False


__all__ = ["cmd_trace"]
