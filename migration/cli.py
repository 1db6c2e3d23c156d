"""``hrm-memory migrate plan|apply|verify|export|rollback``.

Wiring into another CLI: ``add_cli(subparsers)`` adds the ``migrate``
command, ``run_cli(args)`` runs it (it opens the store itself, from
``args.root`` / ``$HRM_MEMORY_ROOT``, and ``args.durability`` /
``args.locking`` when present). Standalone: ``python -m migration ...``.

Exit codes: 0 done; 2 bad input (a missing legacy folder, a folder in which
no legacy file is recognised, an unusable path); 3 the store failed; 4 the
command finished but found problems (a file not imported, a mismatch in
verify, a record rollback kept).

Progress (files done / total, per phase) goes to stderr: a line when a phase
starts, then at most one a second, and one when it ends; ``--quiet`` and
``--json`` turn it off. The report goes to stdout: a summary, or one line per
file with ``-v``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import orjson
from hrm_memory import BadInput, MemoryManager, MemoryStoreError

from . import engine
from .inventory import NoLegacyFiles, check_root
from .report import Report

EXIT_OK, EXIT_BAD_INPUT, EXIT_STORE, EXIT_PROBLEMS = 0, 2, 3, 4
COMMANDS = ("plan", "apply", "verify", "export", "rollback")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the migrate sub-commands to ``parser``."""
    common = argparse.ArgumentParser(add_help=False)
    # Own dest: a sub-command's --json default would overwrite a global --json.
    common.add_argument("--json", dest="migrate_json", action="store_true", help="print the report as JSON")
    common.add_argument("-v", "--verbose", action="store_true", help="one line per file in the report (and every warning)")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
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
    as_json = bool(getattr(args, "migrate_json", False) or getattr(args, "json", False))
    progress = None if as_json or getattr(args, "quiet", False) else ProgressPrinter(args.migrate_command)
    try:
        report = _run(args, progress)
    except BadInput as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    except MemoryStoreError as exc:
        return _error(f"{type(exc).__name__}: {exc}", EXIT_BAD_INPUT if isinstance(exc, ValueError) else EXIT_STORE)
    except OSError as exc:
        return _error(str(exc), EXIT_STORE)
    report.timings["total"] = time.perf_counter() - start
    if as_json:
        print(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        print(report.to_text(verbose=bool(getattr(args, "verbose", False))))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


class ProgressPrinter:
    """``progress(phase, done, total)`` for the engine: one stderr line when a
    phase starts, then at most one every ``interval`` seconds, and one when
    the phase ends (``migrate apply: scan 1200/20175 files (5%), 3.2s``)."""

    def __init__(self, command: str, stream: TextIO | None = None, interval: float = 1.0) -> None:
        self.command = command
        self.stream = stream
        self.interval = interval
        self.start = time.monotonic()
        self.phase = ""
        self.last = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != self.phase or done == 0:
            self.phase = phase
        elif done < total and now - self.last < self.interval:
            return
        self.last = now
        pct = f" ({100 * done // total}%)" if total else ""
        print(f"migrate {self.command}: {phase} {done}/{total} files{pct}, {now - self.start:.1f}s",
              file=self.stream or sys.stderr, flush=True)


def _error(message: str, code: int) -> int:
    print(f"hrm-memory migrate: error: {message}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace, progress: ProgressPrinter | None) -> Report:
    command = args.migrate_command
    legacy = str(getattr(args, "legacy_dir", None) or "")
    tokens = not getattr(args, "no_tokens", False)
    if command in ("plan", "apply", "verify"):
        if not Path(legacy).is_dir():
            raise BadInput(f"legacy folder {legacy} does not exist or is not a folder")
        try:
            check_root(legacy)  # before a store is opened: the wrong folder writes nothing
        except NoLegacyFiles as exc:
            raise BadInput(str(exc)) from None
    if command == "plan":
        return engine.plan(legacy, tokens=tokens, progress=progress)
    root: str | os.PathLike[str] | None = getattr(args, "root", None)
    with MemoryManager(root, durability=getattr(args, "durability", "fsync"), locking=bool(getattr(args, "locking", False))) as mm:
        if command == "apply":
            return engine.apply(mm, legacy, overwrite=args.overwrite, tokens=tokens, progress=progress)
        if command == "verify":
            return engine.verify(mm, legacy, tokens=tokens, progress=progress)
        if command == "export":
            return engine.export(mm, args.out_dir, flat=args.flat, tokens=tokens, progress=progress)
        return engine.rollback(mm, force=args.force, tokens=tokens, progress=progress)


__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_STORE", "ProgressPrinter", "add_arguments", "add_cli", "run_cli"]
