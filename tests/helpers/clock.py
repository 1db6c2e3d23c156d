"""Freezing ``datetime.now()`` inside one module, for tests of legacy code
whose behaviour depends on the time of day (minute-precision keys and the like)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest


def freeze(monkeypatch: pytest.MonkeyPatch, module: str, when: datetime) -> None:
    """Make ``datetime.now()`` inside ``module`` return ``when``."""

    class Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Frozen:  # type: ignore[override]
            return cls.fromisoformat(when.isoformat())

    monkeypatch.setattr(f"{module}.datetime", Frozen)
