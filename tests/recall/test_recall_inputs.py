"""Issue 22, item 11: recall() input the index could not take is refused, typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from hrm_memory import InvalidArgument, MemoryManager


def test_prefix_with_a_lone_surrogate_is_invalid_argument(root: Path) -> None:
    """Failed before the fix: UnicodeEncodeError once 160+ records matched
    (the prefix went into SQLite); fewer matches filtered in Python."""
    with MemoryManager(root, durability="flush") as mm:
        for i in range(200):
            mm.remember(f"apples are nice number {i}", kind="semantic", key=f"apple-{i:03d}")
        for prefix in ("\ud800", "apple-\udfff", "\udc80x"):
            with pytest.raises(InvalidArgument) as info:
                mm.recall("apples", prefix=prefix)
            assert isinstance(info.value, ValueError)
        assert len(mm.recall("apples", prefix="apple-1", k=200)) == 100
        assert mm.recall("apples", prefix="pomme") == []
