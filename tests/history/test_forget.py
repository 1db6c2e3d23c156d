"""``forget``: after it, a canary's bytes are in no file under the
root (recall index, its WAL and SHM, quarantine included) and in no Redis key
or stream entry, while every other record stays as it was.

The canary is high-entropy (32 hex digits), so a hit can only be a copy of
it. The key is a canary too: it must be gone from the change log (file
segments, Redis stream); the warm tier keeps a tombstone naming it.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from hrm_memory import Keep, MemoryManager, NamespaceSpec
from tests.helpers.canary import files_holding, redis_key_parts
from tests.helpers.redis_server import RedisServer, require_redis

NS = "canary.notes"


def _spec() -> NamespaceSpec:
    return NamespaceSpec(NS, ttl=1.0, index=("$",), history=Keep(versions=10))


def _fill(mm: MemoryManager, key: str, canary: str) -> None:
    """The canary in every place a record can be: warm versions, kept
    history, the cold archive, the recall index; other records beside it."""
    mm.declare(_spec())
    for i in range(30):
        mm.write(NS, f"other{i}", {"text": f"an ordinary note number {i}"})
    mm.write(NS, key, {"text": f"first draft {canary}"})
    mm.write(NS, key, {"text": f"second draft {canary}"})
    assert mm.recall(canary, namespaces=NS)  # indexed (and the index file written)
    mm.write(NS, key, {"text": f"third draft {canary}"})
    mm.archive(now=time.time() + 3600)  # every record to the cold archive, the canary's current version too
    mm.write(NS, "other0", {"text": "an ordinary note, edited"})
    assert mm.recall(canary, namespaces=NS, include_cold=True)


def _check_survivors(mm: MemoryManager, key: str, canary: str) -> None:
    assert mm.read(NS, key) is None and mm.history(NS, key) == []
    assert mm.recall(canary, namespaces=NS) == []
    assert mm.read(NS, "other0") == {"text": "an ordinary note, edited"}
    assert [v.value["text"] for v in mm.history(NS, "other0")] == ["an ordinary note, edited", "an ordinary note number 0"]
    cold = {r.key: r.value for r in mm.query(NS, include_cold=True)}
    assert len(cold) == 30 and cold["other7"] == {"text": "an ordinary note number 7"}
    assert mm.check() == []


def test_forget_leaves_no_byte_of_the_canary_in_any_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    canary, key = secrets.token_hex(16), "k-" + secrets.token_hex(8)
    with MemoryManager(root, durability="flush") as mm:
        _fill(mm, key, canary)
        # A damaged line holding the canary, moved to quarantine/ by check(fix=True).
        log = next(p for p in (root / "warm" / NS).glob("*.log") if key.encode() in p.read_bytes())
        with open(log, "ab") as f:
            f.write(b"0badf00d " + orjson.dumps(["p", key, 9, 0, 0, {"text": canary}]) + b"\n")
        assert any(f.fixed for f in mm.check(fix=True))
        held = files_holding(root, canary.encode())
        assert any(h.startswith("quarantine/") for h in held), held
        assert any(h.startswith("cold/") for h in held), held
        assert any(h.startswith("index/") for h in held), held
        assert any(h.startswith("warm/_h.") for h in held), held  # kept history
        assert files_holding(root / "events", key.encode())

        counts = mm.forget(NS, key)
        assert counts["cold"] >= 1 and counts["quarantine"] >= 1 and counts["history"] == 2 and counts["index"] >= 1

        assert files_holding(root, canary.encode()) == []
        assert files_holding(root / "events", key.encode()) == []
        assert files_holding(root / "index", key.encode()) == []
        assert files_holding(root / "warm" / NS, key.encode()) == []  # no tombstone names it either
        _check_survivors(mm, key, canary)
    with MemoryManager(root) as mm:  # and after a reopen
        _check_survivors(mm, key, canary)
        mm.write(NS, key, {"text": "a new life"})  # the key can be used again
        assert [v.value for v in mm.history(NS, key)] == [{"text": "a new life"}]


def test_the_change_log_stays_readable_from_old_cursors_after_forget(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "root", durability="flush") as mm:
        mm.declare(_spec())
        cursor = mm.cursor()
        mm.write(NS, "a", 1)
        mm.write(NS, "secret", 2)
        mm.write(NS, "b", 3)
        mm.forget(NS, "secret")
        events, _ = mm.events_since(cursor)
        assert [(e.op, e.key) for e in events] == [("write", "a"), ("write", "b")]


def _redis_holding(client: redis.Redis, prefix: str, needle: bytes) -> list[str]:
    """Keys under ``prefix`` holding ``needle`` (in their DUMP or their
    contents read back: ``redis_key_parts``)."""
    return [name.decode() for name in client.scan_iter(match=prefix + "*", count=1000)
            if any(needle in part for part in redis_key_parts(client, name))]


def test_forget_leaves_no_byte_of_the_canary_in_redis(tmp_path: Path) -> None:
    require_redis()
    with RedisServer(tmp_path / "redis", appendonly=True) as server:
        url = server.fresh_url()
        prefix = url.split("prefix=")[1]
        client = redis.Redis.from_url(server.url)
        root = tmp_path / "root"  # the recall index lives here
        canary, key = secrets.token_hex(16), "k-" + secrets.token_hex(8)
        with MemoryManager(root, backend=url) as mm:
            _fill(mm, key, canary)
            # A damaged blob holding the canary, moved to the quarantine hash by check(fix=True).
            client.hset(f"{prefix}r:{NS}", "broken", b"zz" + canary.encode())
            assert any(f.fixed for f in mm.check(fix=True))
            held = _redis_holding(client, prefix, canary.encode())
            assert {f"{prefix}q:{NS}", f"{prefix}c:{NS}", f"{prefix}r:_h.{NS}"} <= set(held), held
            assert _redis_holding(client, prefix, key.encode())
            client.hdel(f"{prefix}q:{NS}", "broken")
            client.hset(f"{prefix}q:{NS}", key, b"damaged " + canary.encode())

            counts = mm.forget(NS, key)
            assert counts["events"] >= 1 and counts["quarantine"] == 1

            assert _redis_holding(client, prefix, canary.encode()) == []
            assert _redis_holding(client, prefix, key.encode()) == []
            assert files_holding(root, canary.encode()) == []
            _check_survivors(mm, key, canary)
            # The server was asked to rewrite its append-only file: once done,
            # the canary is in none of its files either.
            deadline = time.monotonic() + 30
            while client.info("persistence")["aof_rewrite_in_progress"] or client.info("persistence")[
                "aof_rewrite_scheduled"
            ]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert files_holding(server.dir, canary.encode()) == []
        with MemoryManager(root, backend=url) as mm:
            _check_survivors(mm, key, canary)


@pytest.mark.parametrize("backend", ["file", "redis"])
def test_forget_a_key_that_was_never_there_changes_nothing(tmp_path: Path, backend: str) -> None:
    kwargs: dict[str, Any] = {}
    if backend == "redis":
        require_redis()
        from tests.helpers.redis_server import fresh_url

        kwargs["backend"] = fresh_url()
    with MemoryManager(tmp_path / "root", **kwargs) as mm:
        mm.write("shared.people", "ann", {"n": "Ann"})
        counts = mm.forget("shared.people", "nobody")
        assert not any(v for k, v in counts.items() if k != "rewrite")
        assert mm.read("shared.people", "ann") == {"n": "Ann"}
