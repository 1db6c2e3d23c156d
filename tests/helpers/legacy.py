"""The real legacy data beside the repo (../shared/legacy/data), for tests
that run on it when it is there and skip with a reason when it is not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[3] / "shared" / "legacy" / "data"


def legacy(relpath: str) -> Any:
    """The parsed JSON of one legacy file; skips the test if it is absent."""
    path = DATA / relpath
    if not path.is_file():
        pytest.skip(f"legacy data file {relpath} is absent")
    return json.loads(path.read_text())
