"""``hrm-memory history``, ``forget``, ``export`` and ``import``."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any, Callable

import orjson

from hrm_memory.cli.textfmt import EXIT_NOT_FOUND, EXIT_OK, table
from hrm_memory.cli.textfmt import dump_json as _dump
from hrm_memory.core.errors import InvalidArgument
from hrm_memory.manager import MemoryManager

#: Where the CLI takes the export passphrase from when no --passphrase-file is given.
PASSPHRASE_ENV = "HRM_MEMORY_PASSPHRASE"


def register(sub: Any) -> None:
    s = sub.add_parser("history", help="the kept versions of a key, newest first (deletions included)")
    s.add_argument("namespace")
    s.add_argument("key")
    s = sub.add_parser("forget", help="erase every version of a key from every place it lives (not undoable)")
    s.add_argument("namespace")
    s.add_argument("key")
    s = sub.add_parser("export", help="write the store to a file in the export format (docs/history.md)")
    s.add_argument("out", metavar="OUT", help="the file to write ('-' for stdout)")
    s.add_argument("--ns", default="*", metavar="GLOB", help="only namespaces matching GLOB (default all)")
    s.add_argument("--include-keys", action="store_true",
                   help="also write the data keys of sealed namespaces, wrapped under a passphrase (from "
                        "--passphrase-file, else $HRM_MEMORY_PASSPHRASE, else asked on the terminal)")
    _passphrase_file(s)
    s = sub.add_parser("import", help="read an export file into the store (idempotent)")
    s.add_argument("source", metavar="IN", help="the export file ('-' for stdin)")
    s.add_argument("--apply-consent", action="store_true",
                   help="apply the file's consent decisions (by default the store's stay, and records of a "
                        "category not granted here are held in this process only: not persisted)")
    _passphrase_file(s)


def _passphrase_file(parser: Any) -> None:
    parser.add_argument("--passphrase-file", metavar="FILE",
                        help="the passphrase the export's keys are wrapped under: the file's first line "
                             "(never on the command line, where other users see it; or $HRM_MEMORY_PASSPHRASE)")


def _passphrase(args: argparse.Namespace, ask: bool) -> str | None:
    """The passphrase from ``--passphrase-file``, else ``$HRM_MEMORY_PASSPHRASE``,
    else (when ``ask`` and stdin is a terminal) asked twice; None when none."""
    if args.passphrase_file:
        with open(args.passphrase_file, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    env = os.environ.get(PASSPHRASE_ENV)
    if env:
        return env
    if ask and sys.stdin.isatty():
        first = getpass.getpass("passphrase for the export's keys: ")
        if getpass.getpass("again: ") != first:
            raise InvalidArgument("the two passphrases differ")
        return first
    return None


def _progress(verb: str) -> Callable[[int], None] | None:
    """Records done so far on stderr, on one line, when it is a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(n: int) -> None:
        sys.stderr.write(f"\r{verb} {n:,} records")
        sys.stderr.flush()

    return show


def _done_progress(progress: Callable[[int], None] | None) -> None:
    if progress is not None:
        sys.stderr.write("\n")


def cmd_history(mm: MemoryManager, args: argparse.Namespace) -> int:
    versions = mm.history(args.namespace, args.key)
    if not versions:
        print(f"not found: {args.namespace} {args.key!r}", file=sys.stderr)
        return EXIT_NOT_FOUND
    rows = [
        {"version": v.version, "updated_at": v.updated_at.isoformat(), "deleted": v.deleted,
         "current": v.current, "value": v.value}
        for v in versions
    ]
    if args.json:
        print(_dump(rows))
    else:
        # The value on one line (compact JSON), the last column: a row per version.
        print(table([{**r, "value": orjson.dumps(r["value"]).decode()} for r in rows],
                    ["version", "updated_at", "deleted", "current", "value"]))
    return EXIT_OK


def cmd_forget(mm: MemoryManager, args: argparse.Namespace) -> int:
    counts = mm.forget(args.namespace, args.key)
    if not any(counts.values()):  # nothing held it anywhere: not found, as rm, get and history say
        if args.json:
            print(_dump(counts))
        print(f"not found: {args.namespace} {args.key!r} (nothing to forget)", file=sys.stderr)
        return EXIT_NOT_FOUND
    print(_dump(counts) if args.json else "forgotten: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return EXIT_OK


def cmd_export(mm: MemoryManager, args: argparse.Namespace) -> int:
    progress = _progress("exported")
    out: Any = sys.stdout.buffer if args.out == "-" else args.out
    passphrase = _passphrase(args, ask=args.include_keys) if args.include_keys else None
    if args.include_keys and passphrase is None:
        raise InvalidArgument(f"--include-keys needs a passphrase: --passphrase-file FILE or ${PASSPHRASE_ENV}")
    counts = mm.export(out, namespaces=args.ns, progress=progress, include_keys=args.include_keys,
                       passphrase=passphrase)
    _done_progress(progress)
    if args.out != "-":
        print(_dump(counts) if args.json else f"exported {counts['records']} records ({counts['versions']} versions) "
              f"of {counts['namespaces']} namespaces to {args.out}")
    return EXIT_OK


def cmd_import(mm: MemoryManager, args: argparse.Namespace) -> int:
    progress = _progress("imported")
    source: Any = sys.stdin.buffer if args.source == "-" else args.source
    counts = mm.import_(source, progress=progress, apply_consent=args.apply_consent,
                        passphrase=_passphrase(args, ask=False))
    _done_progress(progress)
    print(_dump(counts) if args.json else _import_summary(counts))
    if not args.json and (counts["held"] or counts["consent_skipped"]):
        print(f"not persisted: {counts['held']} records of consent categories not granted in this store; "
              f"{counts['consent_skipped']} consent decisions of the file left out (--apply-consent applies them)")
    return EXIT_OK


def _import_summary(counts: dict[str, int]) -> str:
    """What an import changed: ``records`` counts every record read, of which
    ``existing`` the store already held as new (left as they were) and
    ``held`` were kept in this process only (consent not granted: said apart)."""
    read, there, held = counts["records"], counts["existing"], counts.get("held", 0)
    settings = f"{counts['declared']} namespaces declared, {counts['consents']} consent decisions"
    if read and read == there:
        return f"nothing new: the {read} records were already in the store (left as they were); {settings}"
    return f"imported {read - there - held} new records ({there} already there, left as they were); {settings}"


COMMANDS = {"history": cmd_history, "forget": cmd_forget, "export": cmd_export, "import": cmd_import}
