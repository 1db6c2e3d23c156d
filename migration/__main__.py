"""``python -m migration [--root DIR] plan|apply|verify|export|rollback ...``
(the same commands as ``hrm-memory migrate``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hrm_memory.manager import default_root

from .cli import add_arguments, run_cli


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m migration",
        description="Lossless migration of legacy HRM files into an hrm-memory store.",
        epilog=f"Store: --root, else $HRM_MEMORY_ROOT, else {default_root()}.",
    )
    p.add_argument("--root", help="storage root directory")
    p.add_argument("--durability", choices=["fsync", "flush"], default="fsync")
    p.add_argument("--locking", action="store_true", help="take cross-process file locks for writes")
    add_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
