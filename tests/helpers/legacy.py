"""The real legacy data, for tests that run on it when it is there and skip
with a reason when it is not: ``$HRM_LEGACY_DATA`` if set (the folder
holding ``the_assist/`` and ``locked_system/``), else ``../shared/legacy/data``
beside the repository. Every test that reads the legacy data takes its
folder from :data:`DATA`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

ENV = "HRM_LEGACY_DATA"
DATA = Path(os.environ.get(ENV) or Path(__file__).resolve().parents[3] / "shared" / "legacy" / "data")


def legacy(relpath: str) -> Any:
    """The parsed JSON of one legacy file; skips the test if it is absent."""
    path = DATA / relpath
    if not path.is_file():
        pytest.skip(f"legacy data file {relpath} is absent (set {ENV} to the folder holding the_assist/)")
    return json.loads(path.read_text())
