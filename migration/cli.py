"""``hrm-memory migrate plan|apply|verify|export|rollback``.

Wiring into another CLI: ``add_cli(subparsers)`` adds the ``migrate``
command, ``run_cli(args)`` runs it (it opens the store itself, from
``args.root`` / ``$HRM_MEMORY_ROOT``, and ``args.durability`` /
``args.locking`` when present). Standalone: ``python -m migration ...``.

Exit codes: 0 done; 2 bad input (a missing legacy folder, an unusable
path); 3 the store failed; 4 the command finished but found problems (a file
not imported, a mismatch in verify, a record rollback kept).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from hrm_memory import BadInput, MemoryManager, MemoryStoreError

from . import engine
from .report import Report

EXIT_OK, EXIT_BAD_INPUT, EXIT_STORE, EXIT_PROBLEMS = 0, 2, 3, 4
COMMANDS = ("plan", "apply", "verify", "export", "rollback")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the migrate sub-commands to ``parser``."""
    common = argparse.ArgumentParser(add_help=False)
    # Own dest: a sub-command's --json default would overwrite a global --json.
    common.add_argument("--json", dest="migrate_json", action="store_true", help="print the report as JSON")
    common.add_argument("-v", "--verbose", action="store_true", help="one line per file in the report")
    common.add_argument("--no-tokens", action="store_true", help="skip the token columns (faster)")
    sub = parser.add_subparsers(dest="migrate_command", required=True, metavar="|".join(COMMANDS))
    s = sub.add_parser("plan", parents=[common], help="inventory of LEGACY_DIR (kind, target, size, sha256, anomalies); changes nothing")
    s.add_argument("legacy_dir", metavar="LEGACY_DIR")
    s = sub.add_parser("apply", parents=[common], help="import LEGACY_DIR into the store (idempotent, resumable)")
    s.add_argument("legacy_dir", metavar="LEGACY_DIR")
    s.add_argument("--overwrite", action="store_true", help="replace records that differ from the legacy file (changed since import, or not imported)")
    s = sub.add_parser("verify", parents=[common], help="compare every record with LEGACY_DIR, byte for byte, and check the store")
    s.add_argument("legacy_dir", metavar="LEGACY_DIR")
    s = sub.add_parser("export", parents=[common], help="write the legacy tree back under OUT_DIR/<legacy folder name>/")
    s.add_argument("out_dir", metavar="OUT_DIR")
    s.add_argument("--flat", action="store_true", help="write straight into OUT_DIR")
    s = sub.add_parser("rollback", parents=[common], help="delete what apply imported, then the manifest")
    s.add_argument("--force", action="store_true", help="also delete records changed since import")


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``migrate`` on a CLI's sub-parsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "migrate",
        help="import legacy HRM files (plan, apply, verify, export, rollback)",
        description="Lossless migration of the legacy the_assist/locked_system files into the store.",
    )
    add_arguments(p)
    return p


def run_cli(args: argparse.Namespace) -> int:
    """Run a parsed ``migrate`` command; print its report; return the exit code."""
    start = time.perf_counter()
    try:
        report = _run(args)
    except BadInput as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    except MemoryStoreError as exc:
        return _error(f"{type(exc).__name__}: {exc}", EXIT_BAD_INPUT if isinstance(exc, ValueError) else EXIT_STORE)
    except OSError as exc:
        return _error(str(exc), EXIT_STORE)
    report.timings["total"] = time.perf_counter() - start
    if not getattr(args, "no_tokens", False):
        report.count_tokens()
    if getattr(args, "migrate_json", False) or getattr(args, "json", False):
        print(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        print(report.to_text(verbose=args.migrate_command == "plan" or bool(getattr(args, "verbose", False))))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def _error(message: str, code: int) -> int:
    print(f"hrm-memory migrate: error: {message}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace) -> Report:
    command = args.migrate_command
    legacy = str(getattr(args, "legacy_dir", None) or "")
    if command in ("plan", "apply", "verify") and not Path(legacy).is_dir():
        raise BadInput(f"legacy folder {legacy} does not exist or is not a folder")
    if command == "plan":
        return engine.plan(legacy)
    root: str | os.PathLike[str] | None = getattr(args, "root", None)
    with MemoryManager(root, durability=getattr(args, "durability", "fsync"), locking=bool(getattr(args, "locking", False))) as mm:
        if command == "apply":
            return engine.apply(mm, legacy, overwrite=args.overwrite)
        if command == "verify":
            return engine.verify(mm, legacy)
        if command == "export":
            return engine.export(mm, args.out_dir, flat=args.flat)
        return engine.rollback(mm, force=args.force)


__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_STORE", "add_arguments", "add_cli", "run_cli"]
