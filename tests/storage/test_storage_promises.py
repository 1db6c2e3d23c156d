"""Issue 14, storage items: each test failed before its fix (named in the test)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import msgpack
import pytest

from hrm_memory import CorruptRecord, MemoryManager, NamespaceSpec, StorageError
from hrm_memory.storage.file.warm.tier import bucket_of
from tests.storage.test_corruption import damage, find_line

NS = "t.notes"
REPO = Path(__file__).resolve().parent.parent.parent


def open_mm(root: Path, **kw: object) -> MemoryManager:
    return MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)], **kw)  # type: ignore[arg-type]


def test_item3_fix_keeps_an_intact_record_whose_key_a_damaged_line_claims(root: Path) -> None:
    """A bit flip turns note)0000's key into note-0000 (")" is 0x29, "-" is
    0x2d): check(fix=True) used to drop the intact note-0000 with the damage."""
    pairs = [(f"note-{i:04d}", f"note){i:04d}") for i in range(2000)]
    good, bad = next((g, b) for g, b in pairs if bucket_of(g) == bucket_of(b))
    with open_mm(root) as mm:
        mm.write(NS, good, {"keep": "me"})
        mm.write(NS, bad, {"lost": "to damage"})
    path, start, end = find_line(root, NS, bad)
    at = path.read_bytes().index(bad.encode(), start) + 4
    damage(path, {at: ord("-")})  # the damaged line now names `good`, with a bad checksum
    with open_mm(root) as mm:
        findings = mm.check(fix=True)
        assert [f.kind for f in findings] == ["corrupt-record"] and findings[0].fixed
        assert mm.read(NS, good) == {"keep": "me"}
        assert mm.read(NS, bad) is None  # its only version is in quarantine
        assert mm.check() == []


def test_item6_query_does_not_serve_the_superseded_version(root: Path) -> None:
    """The newest line of a key damaged in its key: read() raised
    CorruptRecord but query() served version 1 as current."""
    with open_mm(root) as mm:
        mm.write(NS, "victim", {"v": 1})
        mm.write(NS, "victim", {"v": 2})
    path, start, end = find_line(root, NS, "victim")
    key_at = path.read_bytes().index(b"victim", start)
    damage(path, {key_at + 2: path.read_bytes()[key_at + 2] ^ 0x01})
    with open_mm(root) as mm:
        with pytest.raises(CorruptRecord):
            mm.read(NS, "victim")
        with pytest.raises(CorruptRecord):
            rows = mm.query(NS)
            pytest.fail(f"query served {[r.value for r in rows]}")
        mm.check(fix=True)  # the damage goes to quarantine; read and query agree again
        assert [(r.key, r.value) for r in mm.query(NS)] == [("victim", mm.read(NS, "victim"))]


@pytest.mark.parametrize("planted", ["quarantine", "meta", "run", "locks"])
def test_item4_planted_links_are_never_followed(root: Path, tmp_path: Path, planted: str) -> None:
    """Links planted as quarantine/, meta/, run/ or locks/ were followed:
    the store wrote outside its root, values included."""
    outside = tmp_path / "outside"
    outside.mkdir()
    with open_mm(root) as mm:
        mm.write(NS, "k", {"v": "CANARY-outside"})
    if (root / planted).exists():
        os.rename(root / planted, tmp_path / f"{planted}.moved")
    os.symlink(outside, root / planted)
    try:  # refusing at open (a typed error) is as good as refusing at use
        with open_mm(root, locking=True) as mm:
            attempts = {
                "quarantine": lambda: (damage_one(root), mm.check(fix=True)),
                "meta": lambda: mm.declare(NamespaceSpec("t.extra")),
                "run": lambda: mm.write(NS, "k2", {"v": "CANARY-outside"}),
                "locks": lambda: mm.update(NS, "k", lambda v: {"v": "CANARY-outside", "n": 2}),
            }
            attempts[planted]()
    except StorageError as exc:
        assert "symbolic link" in str(exc)
    assert list(outside.iterdir()) == [], f"the store wrote into the linked {planted}/"


def damage_one(root: Path) -> None:
    path, start, end = find_line(root, NS, "k")
    damage(path, {end - 2: path.read_bytes()[end - 2] ^ 0x01})


def test_item13_kill_during_compact_leaves_no_temp_after_reopen(root: Path) -> None:
    """SIGKILL during compact() left a .NN.log.PID.compact temp that no later
    open removed (the compacting process had no run/ note for the bucket)."""
    with open_mm(root) as mm:
        for i in range(300):
            mm.write(NS, "k", {"i": i, "pad": "x" * 2000})
    code = f"""
import os, signal
from hrm_memory.storage.file.warm import upkeep as warm_upkeep
from hrm_memory import MemoryManager, NamespaceSpec
real = warm_upkeep._write_all
def die(fd, data):
    real(fd, data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
warm_upkeep._write_all = die
with MemoryManager({str(root)!r}, durability="flush", namespaces=[NamespaceSpec({NS!r})]) as mm:
    mm.compact()
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO)
    assert proc.returncode == -signal.SIGKILL
    temps = list((root / "warm" / NS).glob(".*.compact"))
    assert temps, "the kill should have left a compaction temp behind"
    with open_mm(root) as mm:
        assert list((root / "warm" / NS).glob(".*.compact")) == []
        assert mm.read(NS, "k") == {"i": 299, "pad": "x" * 2000}
        assert mm.check() == []


@pytest.mark.parametrize(
    "payload",
    [b"not zlib at all", zlib.compress(b"\xc1 not msgpack"), zlib.compress(msgpack.packb([[1, 2], "x"]))],
    ids=["not-zlib", "not-msgpack", "not-records"],
)
def test_item8_frame_with_a_valid_crc_but_bad_payload_is_typed(root: Path, payload: bytes) -> None:
    """A cold frame whose payload passes its crc32 but is not zlib, not
    msgpack or not records made read() and check() raise untyped errors."""
    from hrm_memory.storage.file import cold

    aging = "t.aging"
    specs = [NamespaceSpec(aging, ttl=60.0)]
    with MemoryManager(root, durability="flush", namespaces=specs) as mm:
        mm.write(aging, "k", {"v": 1})
        assert mm.archive(now=time.time() + 10**6) == {aging: 1}
    (seg,) = (root / "cold" / aging).glob("*.seg")
    seg.write_bytes(cold._HEAD.pack(cold.MAGIC, len(payload), zlib.crc32(payload)) + payload)
    with MemoryManager(root, durability="flush", namespaces=specs) as mm:
        with pytest.raises(CorruptRecord):
            mm.read(aging, "k")
        findings = mm.check()
        assert "corrupt-frame" in {f.kind for f in findings}
        mm.check(fix=True)
        assert mm.check() == []


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(20))
def test_items1_2_unlocked_writers_never_lose_an_acknowledged_write(tmp_path: Path, round_: int) -> None:
    """Two processes, locking=False, each rewriting its own keys and adding
    new ones in one bucket with 20-60 KB values, compaction frequent: later
    reads returned *older* versions than acknowledged (compaction cut a live
    writer's line as a torn tail, and copied lines appended to the old file
    in behind newer ones), and check() saw nothing. Appends now hold a shared
    gate that compaction and tail repair take exclusively."""
    import json

    from tests.helpers.mp_workers import SPECS, finish, spawn, wait_ready
    from tests.storage.test_multiprocess import release

    root = tmp_path / "store"
    procs = [spawn("ownwriter", str(root), "2", str(w)) for w in range(2)]
    wait_ready(procs)
    release(procs)
    acked: dict[str, int] = {}
    for p in procs:
        acked.update(json.loads(finish(p).splitlines()[-1]))
    assert len(acked) > 12
    with MemoryManager(root, durability="flush", namespaces=SPECS) as mm:
        got = {k: mm.read("t.fault", k)["n"] for k in acked}
        assert got == acked, {k: (acked[k], got[k]) for k in acked if got[k] != acked[k]}
        assert mm.check() == []
    assert not (root / "quarantine").exists() or list((root / "quarantine").iterdir()) == []


def test_item22_grant_keeps_the_creation_time_of_waiting_records(root: Path) -> None:
    """consent.grant() reset created_at of the records written while consent was denied."""
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.conversation", "turn", "hello")
        before = mm.get_record("focus.conversation", "turn")
        time.sleep(0.02)
        mm.consent.grant("conversation")
        after = mm.get_record("focus.conversation", "turn")
        assert after.persisted and (after.created_at, after.updated_at) == (before.created_at, before.updated_at)


def test_item22_archive_leaves_warm_compacted(root: Path) -> None:
    """archive() of many records grew warm/ (markers appended after the
    moved lines) until a manual compact()."""
    aging = "t.aging"
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(aging, ttl=60.0)]) as mm:
        for i in range(2000):
            mm.write(aging, f"k{i}", {"i": i, "pad": "x" * 200})
        grown = mm.stats()["namespaces"][aging]["warm_bytes"]
        assert mm.archive(now=time.time() + 10**6) == {aging: 2000}
        left = mm.stats()["namespaces"][aging]["warm_bytes"]
        assert left < grown / 2, (grown, left)  # what is left: one small archive marker per key
        assert mm.compact(aging) == 0  # nothing left to reclaim
        assert mm.read(aging, "k7") == {"i": 7, "pad": "x" * 200}
