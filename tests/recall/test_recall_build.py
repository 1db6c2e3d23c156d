"""Building and closing the recall index: a store indexed in batches holds
the same rows as one indexed at once (the near columns included, whatever
order the batches come in); closing a store whose index this process never
opened opens nothing, yet still catches up with a purge made elsewhere.
"""

from __future__ import annotations

import random
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.recall import index as recall_index
from hrm_memory.recall import textindex
from hrm_memory.storage.file.backend import FileBackend
from tests.helpers.redis_server import require_redis

NS = "t.notes"


def _rows(root: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(root / "index" / "recall.db")
    try:
        return sorted(db.execute("SELECT d.ns, d.key, f.rowid & 1023, f.body, f.ctx, f.near FROM fts f"
                                 " JOIN docs d ON d.id = (f.rowid >> 10)").fetchall())
    finally:
        db.close()


def _fill(root: Path, keys: list[str]) -> None:
    rng = random.Random(5)
    with MemoryManager(root, durability="flush") as mm:
        mm.declare(NamespaceSpec(NS, index=("$",)))
        for key in keys:  # created in this order; keys sort in another
            mm.write(NS, key, {"text": " ".join(rng.choice(["alpha", "beta", "gamma", key]) for _ in range(6)),
                               "more": ["a second passage " * 30, "and a third one " * 30] if rng.random() < 0.3 else []})


def test_batched_indexing_builds_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [f"k{secrets.token_hex(3)}" for _ in range(120)]
    for name in ("one", "batched"):
        _fill(tmp_path / name, keys)
    with MemoryManager(tmp_path / "one") as mm:
        assert mm.recall("alpha", namespaces=NS)
    monkeypatch.setattr(recall_index, "INDEX_BATCH", 7)
    with MemoryManager(tmp_path / "batched") as mm:
        assert mm.recall("alpha", namespaces=NS)
    one, batched = _rows(tmp_path / "one"), _rows(tmp_path / "batched")
    assert len(one) > 120 and batched == one
    assert any(r[5] for r in one)  # the near columns are there to compare


def _connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The index files SQLite is asked to open from now on (the real connect, counted)."""
    opened: list[str] = []
    real = textindex.sqlite3.connect

    def counting(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        opened.append(str(database))
        return real(database, *args, **kwargs)

    monkeypatch.setattr(textindex.sqlite3, "connect", counting)
    return opened


def test_close_of_an_idle_indexed_store_opens_no_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    with MemoryManager(root) as mm:
        mm.write("shared.people", "ann", {"name": "Ann", "notes": "likes tea"})
        assert mm.recall("tea")
    opened = _connections(monkeypatch)
    with MemoryManager(root) as mm:
        assert mm.read("shared.people", "ann")
    assert opened == []
    with MemoryManager(root) as mm:  # a purge here is caught up by this process's own index
        mm.consent.grant("conversation")
        mm.write("focus.conversation", "c1", "said something")
        assert mm.recall("said something")
        mm.consent.revoke("conversation", purge=True)
    del opened[:]
    with MemoryManager(root) as mm:
        assert mm.read("shared.people", "ann")
    assert [o for o in opened if "mode=ro" not in o] == []  # at most a read-only look at the recorded epoch


def test_close_still_catches_up_with_a_purge_made_elsewhere(tmp_path: Path) -> None:
    """Two hosts (roots) on one Redis: each keeps its own index file. A purge
    by one reaches the other's file at that one's next close, even when it
    never recalled in between."""
    require_redis()
    from tests.helpers.redis_server import fresh_url

    url, canary = fresh_url(), secrets.token_hex(16)
    a, b = tmp_path / "a", tmp_path / "b"
    with MemoryManager(a, backend=url) as mm:
        mm.consent.grant("conversation")
        mm.write("focus.conversation", "c1", f"said {canary}")
        assert mm.recall(canary)
    assert canary.encode() in (a / "index" / "recall.db").read_bytes()
    with MemoryManager(b, backend=url) as mm:
        mm.consent.revoke("conversation", purge=True)
    with MemoryManager(a, backend=url) as mm:
        assert mm.read("focus.conversation", "c1") is None
    for f in (a / "index").iterdir():
        assert canary.encode() not in f.read_bytes(), f


def test_a_first_build_compares_one_namespace_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The catch-up streams the keys to index: a namespace's records are read
    from the store just before they are indexed, so a whole store's keys are
    never held at once; the rows are those of one build at once."""
    names = [f"t{i}.notes" for i in range(4)]
    keys = [f"k{i:03d}" for i in range(60)]
    for root in ("streamed", "at_once"):
        with MemoryManager(tmp_path / root, durability="flush") as mm:
            for ns in names:
                mm.declare(NamespaceSpec(ns, index=("$",)))
                for key in keys:
                    mm.write(ns, key, {"text": f"alpha {ns} {key}"})
    with MemoryManager(tmp_path / "at_once") as mm:
        assert mm.recall("alpha", namespaces="*.notes")
    scanned: list[str] = []
    applied: list[int] = []  # how many namespaces were read when each batch was written
    real_scan, real_apply = FileBackend.scan, textindex.TextIndex.apply

    def scan(self: FileBackend, namespace: str, **kwargs: Any) -> Any:
        scanned.append(namespace)
        return real_scan(self, namespace, **kwargs)

    def apply(self: textindex.TextIndex, upserts: Any, *args: Any, **kwargs: Any) -> None:
        if upserts and self.persistent:
            applied.append(len(set(scanned) & set(names)))
        real_apply(self, upserts, *args, **kwargs)

    monkeypatch.setattr(FileBackend, "scan", scan)
    monkeypatch.setattr(textindex.TextIndex, "apply", apply)
    monkeypatch.setattr(recall_index, "INDEX_BATCH", 25)
    with MemoryManager(tmp_path / "streamed") as mm:
        assert mm.recall("alpha", namespaces="*.notes")
    assert set(names) <= set(scanned)
    assert applied[0] == 1 and applied == sorted(applied) and len(applied) >= 4 * 3
    assert _rows(tmp_path / "streamed") == _rows(tmp_path / "at_once")
