"""recall() input the index cannot take is refused, typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from hrm_memory import InvalidArgument, MemoryManager


def test_prefix_with_a_lone_surrogate_is_invalid_argument(root: Path) -> None:
    """A key prefix holding lone surrogates is refused, typed, however many
    records match (past 160 matches the prefix goes into SQLite, which could
    not encode it; below that the matches are filtered in Python)."""
    with MemoryManager(root, durability="flush") as mm:
        for i in range(200):
            mm.remember(f"apples are nice number {i}", kind="semantic", key=f"apple-{i:03d}")
        for prefix in ("\ud800", "apple-\udfff", "\udc80x"):
            with pytest.raises(InvalidArgument) as info:
                mm.recall("apples", prefix=prefix)
            assert isinstance(info.value, ValueError)
        assert len(mm.recall("apples", prefix="apple-1", k=200)) == 100
        assert mm.recall("apples", prefix="pomme") == []
