"""The reference backend's own promises (``memory://``); what every backend
promises is in tests/conformance/, which runs against it too."""

from __future__ import annotations

from pathlib import Path

import pytest

from hrm_memory import CursorExpired, InvalidArgument, InvalidCursor, MemoryManager
from hrm_memory.core.backend import ARCHIVE, CROSS_PROCESS, PERSISTENT
from hrm_memory.storage import memory

NS = "altitude.patterns"


def test_a_named_store_is_shared_while_open_and_gone_after_the_last_close() -> None:
    a = MemoryManager(backend="memory://shared-test")
    b = MemoryManager(backend="memory://shared-test")
    a.write(NS, "k", {"v": 1})
    assert b.read(NS, "k") == {"v": 1}
    a.close()
    assert b.read(NS, "k") == {"v": 1}  # b still has it open
    b.close()
    with MemoryManager(backend="memory://shared-test") as c:
        assert c.read(NS, "k") is None


def test_unnamed_stores_are_private() -> None:
    with MemoryManager(backend="memory://") as a, MemoryManager(backend="memory://") as b:
        a.write(NS, "k", 1)
        assert b.read(NS, "k") is None


@pytest.mark.parametrize("url", ["memory://a/b", "memory://a b", "memory://" + "x" * 201, "memory://é"])
def test_a_bad_name_is_a_typed_error(url: str) -> None:
    with pytest.raises(InvalidArgument):
        MemoryManager(backend=url)


def test_it_says_it_does_not_persist_and_writes_no_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with MemoryManager(root, backend="memory://") as mm:
        assert mm.backend.capabilities == frozenset({ARCHIVE})
        assert PERSISTENT not in mm.backend.capabilities and CROSS_PROCESS not in mm.backend.capabilities
        mm.write("shared.people", "ann", {"note": "plays the theremin"})
        assert [h.key for h in mm.recall("theremin")] == ["ann"]  # the index is in memory too
        assert mm.stats()["persistent"] is False
    assert not root.exists() or not any(root.rglob("*"))


def test_cursors_are_typed_and_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "LOG_ENTRIES", 10)
    with MemoryManager(backend="memory://") as mm:
        for bad in ("", "m:", "m:-1", "1:0", "m:1x", "n1:altitude.patterns=1-0"):
            with pytest.raises(InvalidCursor):
                mm.events_since(bad)
        start = mm.cursor()
        mm.write(NS, "k", 0)
        events, after = mm.events_since(start)
        assert [(e.op, e.version) for e in events] == [("write", 1)]
        for i in range(20):
            mm.write(NS, "k", i)
        with pytest.raises(CursorExpired):
            mm.events_since(start)
        events, _ = mm.events_since(mm.cursor())
        assert events == []


def test_forget_keeps_every_cursor_valid() -> None:
    with MemoryManager(backend="memory://") as mm:
        start = mm.cursor()
        mm.write(NS, "a", 1)
        middle = mm.cursor()
        mm.write(NS, "secret", 2)
        mm.write(NS, "b", 3)
        mm.forget(NS, "secret")
        assert [e.key for e in mm.events_since(start)[0]] == ["a", "b"]
        assert [e.key for e in mm.events_since(middle)[0]] == ["b"]
