"""Persisted bucket indexes (``warm/<ns>/<bb>.idx``)
and a bounded signal log.

An index is a cache: used only when it is intact and of the bucket file as
it is (same file, its sampled bytes unchanged), extended by a scan of what
was appended after it, and checked by ``check()``. A stale, damaged or
forged one never makes a read wrong (forged: reported by check).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hrm_memory import CursorExpired, MemoryManager, NamespaceSpec
from hrm_memory.storage.file import changes as signal_log
from hrm_memory.storage.file.warm import buckets as bucket_index
from hrm_memory.storage.file.warm.tier import bucket_of
from tests.helpers.layout import assert_layout

NS = "t.big"
N = 600


def open_mm(root: Path) -> MemoryManager:
    return MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)])


def value(i: int, gen: int = 1) -> dict[str, object]:
    return {"i": i, "gen": gen, "text": "word " * 10}


def fill(root: Path, gen: int = 1, n: int = N) -> None:
    with open_mm(root) as mm:
        for i in range(n):
            mm.write(NS, f"k{i}", value(i, gen))


def bucket(mm: MemoryManager, idx: int):  # type: ignore[no-untyped-def]
    return mm.backend.warm.files.bucket(NS, idx)  # type: ignore[attr-defined]


def idx_files(root: Path) -> list[Path]:
    return sorted((root / "warm" / NS).glob("*.idx"))


def test_index_written_at_close_and_used_after_reopen(root: Path) -> None:
    fill(root)
    files = idx_files(root)
    assert len(files) == 64
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in files)
    assert_layout(root)
    with open_mm(root) as mm:
        k = "k17"
        assert mm.read(NS, k) == value(17)
        b = bucket(mm, bucket_of(k))
        assert b.pidx is not None and len(b.index) == 1  # one key looked up, no scan
        assert mm.read(NS, "absent-key") is None
        for i in range(N):
            assert mm.read(NS, f"k{i}") == value(i)
        assert len(mm.query(NS)) == N  # a query needs whole indexes: scanned once
        assert mm.check() == []


def test_writes_after_reopen_see_the_indexed_versions(root: Path) -> None:
    fill(root)
    with open_mm(root) as mm:
        mm.write(NS, "k3", {"new": 1})
        assert mm.get_record(NS, "k3").version == 2
        mm.delete(NS, "k4")
        assert mm.read(NS, "k4") is None
        assert mm.get_record(NS, "k5").version == 1
    with open_mm(root) as mm:
        assert mm.get_record(NS, "k3").version == 2
        assert mm.read(NS, "k4") is None
        assert mm.check() == []


def test_stale_index_is_extended_by_the_appended_lines(root: Path) -> None:
    fill(root)
    old = {p.name: p.read_bytes() for p in idx_files(root)}
    fill(root, gen=2, n=N // 2)  # rewrites half the keys; close writes new indexes
    for name, data in old.items():  # put the old (stale but true) indexes back
        (root / "warm" / NS / name).write_bytes(data)
    with open_mm(root) as mm:
        for i in range(N):
            assert mm.read(NS, f"k{i}") == value(i, 2 if i < N // 2 else 1)
        b = bucket(mm, bucket_of("k1"))
        assert b.pidx is not None and b.pidx.covered < b.size
        assert mm.check() == []


def test_damaged_index_is_ignored_reported_and_removed(root: Path) -> None:
    fill(root)
    victim = idx_files(root)[7]
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x40
    victim.write_bytes(bytes(data))
    with open_mm(root) as mm:
        for i in range(N):
            assert mm.read(NS, f"k{i}") == value(i)
        assert bucket(mm, 7).pidx is None  # scanned instead
        findings = mm.check()
        assert [(f.kind, f.path) for f in findings] == [("bad-index", str(victim))]
        assert [f.kind for f in mm.check(fix=True)] == ["bad-index"]
        assert not victim.exists()
        assert mm.check() == []


def test_index_of_a_bucket_rewritten_in_place_is_not_trusted(root: Path) -> None:
    """Same inode and size, other bytes (its lines reversed): the sampled
    bytes no longer match, so the index is ignored; check reports it."""
    fill(root)
    log = root / "warm" / NS / "05.log"
    lines = [ln for ln in log.read_bytes().split(b"\n") if ln]
    ino = log.stat().st_ino
    with open(log, "r+b") as f:
        f.write(b"".join(b"\n" + ln + b"\n" for ln in reversed(lines)))
    assert log.stat().st_ino == ino
    with open_mm(root) as mm:
        keys = [f"k{i}" for i in range(N) if bucket_of(f"k{i}") == 5]
        for k in keys:
            assert mm.read(NS, k) == value(int(k[1:]))
        assert bucket(mm, 5).pidx is None
        assert [f.kind for f in mm.check()] == ["bad-index"]


def test_forged_index_is_reported_by_check(root: Path) -> None:
    """Checksums right, content wrong (a key left out): check compares every
    index with a fresh scan of the bytes it covers."""
    fill(root)
    with open_mm(root) as mm:
        b = bucket(mm, 9)
        mm.read(NS, "k0")  # any read, so that the manager is fully open
        assert mm.backend.warm.files.full(b)  # type: ignore[attr-defined]
        keys = list(b.index)[1:]
        offs = [b.index[k].offset for k in keys]
        fd = os.open(b.path, os.O_RDONLY)
        try:
            data = bucket_index.encode(keys, offs, fd, os.fstat(fd), b.size, b.garbage)
        finally:
            os.close(fd)
    bucket_index.write(root / "warm" / NS / "09.idx", data)
    with open_mm(root) as mm:
        findings = mm.check(fix=True)
        assert [f.kind for f in findings] == ["bad-index"] and "disagrees" in findings[0].detail
        assert mm.check() == []


def test_compaction_writes_the_index_of_the_new_file(root: Path) -> None:
    fill(root)
    fill(root, gen=2)
    with open_mm(root) as mm:
        assert mm.compact(NS) > 0
        b = bucket(mm, 3)
        assert b.idx_covered == b.size
        assert mm.check() == []
    with open_mm(root) as mm:
        assert mm.read(NS, "k11") == value(11, 2)
        assert bucket(mm, bucket_of("k11")).pidx is not None


def test_stray_index_is_reported(root: Path) -> None:
    fill(root)
    (root / "warm" / NS / "05.log").unlink()
    with open_mm(root) as mm:
        findings = mm.check(fix=True)
        assert [f.kind for f in findings] == ["bad-index"]
        assert not (root / "warm" / NS / "05.idx").exists()
        assert mm.check() == []


# -- the signal log is bounded by count and by age -----------------------------------------


def test_signal_log_is_bounded_by_count(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signal_log, "SEGMENT_BYTES", 4096)
    with open_mm(root) as mm:
        cursor = mm.cursor()
        for i in range(2000):
            mm.write(NS, f"e{i}", i)
        events = root / "events"
        logs = sorted(events.glob("*.log"))
        assert len(logs) <= signal_log.KEEP_SEGMENTS
        assert sum(p.stat().st_size for p in logs) <= (signal_log.KEEP_SEGMENTS + 1) * 4096
        with pytest.raises(CursorExpired):
            mm.events_since(cursor)


def test_signal_log_drops_segments_past_their_age(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signal_log, "SEGMENT_BYTES", 4096)
    with open_mm(root) as mm:
        cursor = mm.cursor()
        for i in range(200):
            mm.write(NS, f"e{i}", i)
    logs = sorted((root / "events").glob("*.log"))
    assert len(logs) >= 3
    old = time.time() - signal_log.MAX_AGE_SECONDS - 60
    for p in logs[:-1]:
        os.utime(p, (old, old))
    with open_mm(root) as mm:
        mm.write(NS, "fresh", 1)  # a process's first append prunes what aged out
        assert sorted((root / "events").glob("*.log")) == logs[-1:]
        with pytest.raises(CursorExpired):
            mm.events_since(cursor)
