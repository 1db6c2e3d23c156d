"""Integer options are checked by argparse with one message shape: a bound
broken, or not an integer at all, exits 2 and says what was expected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(("args", "expected"), [
    (["declare", "notes.x", "--max-keys", "0"], "expected an integer >= 1, got '0'"),
    (["declare", "notes.x", "--max-keys", "many"], "expected an integer, got 'many'"),
    (["recall", "patent", "-k", "0"], "expected an integer in 1..1000, got '0'"),
    (["recall", "patent", "-k", "1001"], "expected an integer in 1..1000, got '1001'"),
    (["context", "altitude", "--budget", "-1"], "expected an integer in 0..1000000, got '-1'"),
])
def test_bad_integers_exit_2_with_what_was_expected(tmp_path: Path, args: list[str], expected: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "hrm_memory.cli.main", "--root", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert not (tmp_path / "warm").exists()  # nothing was written
