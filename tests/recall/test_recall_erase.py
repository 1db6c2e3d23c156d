"""Forget and purge leave no byte of the key or the value in the recall
index files (``index/recall.db`` and its ``-wal`` and ``-shm``), on the file
and the Redis backend.

A passage's ``near`` column holds text written just before it in its
namespace, so a record's text is also in the rows of the record created
after it: these tests forget records that have neighbours after them (and
before), on a store that keeps writing after the index was built. The
canaries are high-entropy (hex digits), so a hit can only be a copy.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hrm_memory import MemoryManager, NamespaceSpec
from tests.helpers.redis_server import require_redis

NS = "canary.notes"


def _index_holding(root: Path, needle: str) -> list[str]:
    """Files of the recall index (the database, its WAL and shared memory) holding ``needle``."""
    folder = root / "index"
    return sorted(p.name for p in folder.iterdir() if p.is_file() and needle.encode() in p.read_bytes())


@pytest.fixture(params=["file", "redis"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "redis":
        require_redis()
        from tests.helpers.redis_server import fresh_url

        yield {"backend": fresh_url()}
    else:
        yield {}


def _write_around(mm: MemoryManager, key: str, texts: list[str]) -> None:
    """Neighbours before, ``key`` with each of ``texts`` in turn (recalled
    after each, so every version reaches the index), neighbours after."""
    for i in range(5):
        mm.write(NS, f"before{i}", {"text": f"an ordinary note written before, number {i}"})
    for text in texts:
        mm.write(NS, key, {"text": text})
        assert mm.recall(text.split()[-1], namespaces=NS)
        time.sleep(0.002)  # created strictly after: the neighbours' order is by creation time
    for i in range(5):
        mm.write(NS, f"after{i}", {"text": f"an ordinary note written after, number {i}"})
        assert mm.recall(f"after number {i}", namespaces=NS)


@pytest.mark.parametrize("versions", [1, 3])
def test_forget_leaves_nothing_in_the_neighbours_rows(tmp_path: Path, backend: dict[str, Any], versions: int) -> None:
    root = tmp_path / "root"
    key = "k-" + secrets.token_hex(8)
    canaries = [secrets.token_hex(16) for _ in range(versions)]
    with MemoryManager(root, durability="flush", **backend) as mm:
        mm.declare(NamespaceSpec(NS, index=("$",)))
        _write_around(mm, key, [f"draft {i} says {c}" for i, c in enumerate(canaries)])
        held = _index_holding(root, canaries[-1])
        assert held, "the index holds the canary before forget (the check can see it)"
        # the record written just after holds the canary in its near column: found by it only through its own words
        assert mm.recall(f"{canaries[-1]} after number 0", namespaces=NS)[0].key == key

        mm.forget(NS, key)

        for needle in (*canaries, key, key[2:]):
            assert _index_holding(root, needle) == [], needle
        assert mm.recall(canaries[-1], namespaces=NS) == []
        hits = mm.recall("written after number 0", namespaces=NS, k=5)
        assert "after0" in [h.key for h in hits]  # the neighbour is still found, by its own text
        mm.write(NS, "after9", {"text": "one more note after forget"})
        assert mm.recall("one more note after forget", namespaces=NS)
        for needle in (*canaries, key[2:]):
            assert _index_holding(root, needle) == [], needle
    for needle in (*canaries, key[2:]):
        assert _index_holding(root, needle) == [], needle


def test_forget_of_a_record_indexed_in_one_batch_with_its_neighbours(tmp_path: Path, backend: dict[str, Any]) -> None:
    """The whole namespace indexed by one recall (the near columns computed
    in one transaction), then the middle record forgotten."""
    root = tmp_path / "root"
    key, canary = "k-" + secrets.token_hex(8), secrets.token_hex(16)
    with MemoryManager(root, durability="flush", **backend) as mm:
        mm.declare(NamespaceSpec(NS, index=("$",)))
        for i in range(20):
            mm.write(NS, f"n{i:02d}", {"text": f"note {i}" + (f" holding {canary}" if i == 10 else "")})
        mm.write(NS, key, {"text": f"the keyed note {canary}"})
        for i in range(20, 40):
            mm.write(NS, f"n{i:02d}", {"text": f"note {i}"})
        assert mm.recall(canary, namespaces=NS)
        assert _index_holding(root, canary)
        mm.forget(NS, key)
        mm.forget(NS, "n10")
        for needle in (canary, key[2:]):
            assert _index_holding(root, needle) == [], needle
        assert {h.key for h in mm.recall("note 11", namespaces=NS, k=50)} >= {"n11", "n20"}


def test_purge_leaves_nothing_in_the_index_files(tmp_path: Path, backend: dict[str, Any]) -> None:
    root = tmp_path / "root"
    canary = secrets.token_hex(16)
    with MemoryManager(root, durability="flush", **backend) as mm:
        mm.write("altitude.patterns", "keep", {"note": "an ungated pattern stays indexed"})
        mm.consent.grant("conversation")
        for i in range(10):
            mm.write("altitude.history", f"s{i}", {"summary": f"session {i} notes {canary if i == 4 else ''}"})
        assert mm.recall(canary)
        assert _index_holding(root, canary)
        mm.consent.revoke("conversation", purge=True)
        assert _index_holding(root, canary) == []
        assert [h.key for h in mm.recall("ungated pattern")] == ["keep"]
        assert _index_holding(root, canary) == []
