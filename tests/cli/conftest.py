"""The ``cli`` fixture: the command line run in-process on the test's root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hrm_memory.cli.main import main


@pytest.fixture
def cli(root: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """Run main() in-process on the test's root; return (exit code, stdout, stderr)."""

    def run(*args: str, json: bool = False) -> tuple[Any, str, str]:
        capsys.readouterr()
        argv = ["--root", str(root), "--durability", "flush", *(["--json"] if json else []), *args]
        try:
            rc: Any = main(argv)
        except SystemExit as exc:  # argparse: usage errors, --help, --version
            rc = exc.code
        out, err = capsys.readouterr()
        return rc, out, err

    return run
