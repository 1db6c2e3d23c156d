"""``check()`` and ``check(fix=True)`` on the file backend: what they find,
and that a fix destroys nothing intact.

- Checksum-valid but misplaced lines: two bucket files swapped (a misdirected
  restore) put every line in a bucket its key does not hash to. Each line is a
  ``misplaced-record`` finding, and ``check(fix=True)`` moves the newest line
  of each key to its own bucket (or, when that bucket already has the same or
  a newer version, leaves the copy in ``quarantine/``).
- An old line replayed at the end of a bucket (a lower version that repeats
  an earlier line byte for byte) is a ``replayed-record`` finding;
  ``check(fix=True)`` moves it to ``quarantine/`` and keeps the newest
  legitimate line as current.
- A damaged line whose key now names another record: the fix quarantines the
  damage and keeps the intact record.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.storage.file.warm.tier import bucket_of, encode_line
from tests.helpers.damage import damage, find_line, quarantined

NS = "t.notes"


def open_mm(root: Path) -> MemoryManager:
    # locking=True: only there do versions grow along a file, so only there
    # is a repeated line reported as replayed (see warm_check.py).
    return MemoryManager(root, durability="flush", locking=True, namespaces=[NamespaceSpec(NS)])


def keys_in(bucket: int, n: int, prefix: str = "k") -> list[str]:
    return [k for k in (f"{prefix}{i}" for i in range(5000)) if bucket_of(k) == bucket][:n]


def log(root: Path, bucket: int) -> Path:
    return root / "warm" / NS / f"{bucket:02x}.log"


def test_swapped_bucket_files_are_found_and_moved_back(root: Path) -> None:
    a_keys, b_keys = keys_in(3, 5), keys_in(5, 5)
    with open_mm(root) as mm:
        for k in a_keys + b_keys:
            mm.write(NS, k, {"k": k, "v": 1})
            mm.write(NS, k, {"k": k, "v": 2})
    a, b = log(root, 3), log(root, 5)
    tmp = a.with_name("swap")
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)
    with open_mm(root) as mm:
        assert mm.read(NS, a_keys[0]) is None  # the swap hides every record
        findings = mm.check()
        kinds = [f.kind for f in findings]
        assert kinds == ["misplaced-record"] * 20, kinds  # 10 keys, two lines each
        assert {f.extra["key"] for f in findings} == set(a_keys + b_keys)
        assert {f.extra["bucket"] for f in findings if f.path == str(a)} == {5}
        fixed = mm.check(fix=True)
        assert len(fixed) == 20 and all(f.fixed for f in fixed)
        assert mm.check() == []
        for k in a_keys + b_keys:
            rec = mm.get_record(NS, k)
            assert rec.value == {"k": k, "v": 2} and rec.version == 2
        mm.write(NS, a_keys[0], {"v": 3})
        assert mm.get_record(NS, a_keys[0]).version == 3
    assert any(".misplaced-" in name for name in quarantined(root))
    with open_mm(root) as mm:
        assert mm.check() == []
        assert mm.read(NS, b_keys[-1]) == {"k": b_keys[-1], "v": 2}


def test_misplaced_line_older_than_its_home_is_kept_in_quarantine(root: Path) -> None:
    """A stale copy of bucket 5 restored as bucket 3: bucket 5 has newer
    versions, which stay current; the stale lines go to quarantine, not away."""
    b_keys = keys_in(5, 4)
    with open_mm(root) as mm:
        for k in b_keys:
            mm.write(NS, k, {"old": k})
    stale = log(root, 5).read_bytes()
    with open_mm(root) as mm:
        for k in b_keys:
            mm.write(NS, k, {"new": k})
    log(root, 3).write_bytes(stale)
    os.chmod(log(root, 3), 0o600)
    with open_mm(root) as mm:
        assert [f.kind for f in mm.check()] == ["misplaced-record"] * 4
        mm.check(fix=True)
        assert mm.check() == []
        for k in b_keys:
            assert mm.read(NS, k) == {"new": k}
    kept = b"".join(v for name, v in quarantined(root).items() if ".misplaced-" in name)
    assert all(f'"old":"{k}"'.encode() in kept for k in b_keys)


def test_misplaced_line_newer_than_its_home_becomes_current(root: Path) -> None:
    """Bucket 5 restored from an old backup while its newer file ended up as
    bucket 3: the newer line moves home and is what reads return."""
    (k,) = keys_in(5, 1)
    with open_mm(root) as mm:
        mm.write(NS, k, {"v": 1})
    old = log(root, 5).read_bytes()
    with open_mm(root) as mm:
        mm.write(NS, k, {"v": 2})
        mm.write(NS, k, {"v": 3})
    os.rename(log(root, 5), log(root, 3))
    log(root, 5).write_bytes(old)
    os.chmod(log(root, 5), 0o600)
    with open_mm(root) as mm:
        assert mm.read(NS, k) == {"v": 1}
        assert [f.kind for f in mm.check()] == ["misplaced-record"] * 3
        mm.check(fix=True)
        assert mm.check() == []
        rec = mm.get_record(NS, k)
        assert rec.value == {"v": 3} and rec.version == 3


def test_replayed_old_line_is_found_and_fixed(root: Path) -> None:
    with open_mm(root) as mm:
        mm.write(NS, "k", {"v": 1})
    path, start, end = find_line(root, NS, "k")
    v1 = path.read_bytes()[start:end]
    with open_mm(root) as mm:
        mm.write(NS, "k", {"v": 2})
        mm.write(NS, "other", {"v": 1})
    with open(path, "ab") as f:
        f.write(b"\n" + v1 + b"\n")  # the old line, replayed at the end
    with open_mm(root) as mm:
        findings = mm.check()
        assert [f.kind for f in findings] == ["replayed-record"]
        assert findings[0].extra["key"] == "k" and findings[0].extra["version"] == 1
        mm.check(fix=True)
        assert mm.check() == []
        assert mm.read(NS, "k") == {"v": 2}
        mm.write(NS, "k", {"v": 3})
        assert mm.get_record(NS, "k").version == 3
    kept = b"".join(v for name, v in quarantined(root).items() if ".replayed-" in name)
    assert v1 in kept
    assert v1 not in path.read_bytes()


def test_replayed_put_does_not_resurrect_a_deleted_key(root: Path) -> None:
    with open_mm(root) as mm:
        mm.write(NS, "gone", {"secret": 1})
    path, start, end = find_line(root, NS, "gone")
    old = path.read_bytes()[start:end]
    with open_mm(root) as mm:
        mm.delete(NS, "gone")
    with open(path, "ab") as f:
        f.write(b"\n" + old + b"\n")
    with open_mm(root) as mm:
        assert [f.kind for f in mm.check(fix=True)] == ["replayed-record"]
        assert mm.check() == []
        assert mm.read(NS, "gone") is None


def test_equal_versions_are_not_replays(root: Path) -> None:
    """An archive marker keeps its record's version, and a line written twice
    (after a concurrent compaction) is the same record: neither is a finding."""
    mm = MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS, ttl=60.0)])
    try:
        mm.write(NS, "a", {"v": 1})
        mm.write(NS, "b", {"v": 1})
        assert mm.archive(now=time.time() + 10**6) == {NS: 2}
        path, start, end = find_line(root, NS, "b", b"a")
        line = path.read_bytes()[start:end]
        with open(path, "ab") as f:
            f.write(b"\n" + line + b"\n")
        assert mm.check() == []
        assert mm.read(NS, "b") == {"v": 1}
    finally:
        mm.close()


def test_a_lower_version_that_repeats_nothing_is_a_racing_write(root: Path) -> None:
    """With locking=False two processes may race on one key and the later
    line may carry a lower version: it is the later write, current as the
    last line of a key always is, and not a finding."""
    with open_mm(root) as mm:
        mm.write(NS, "k", {"v": 1})
        mm.write(NS, "k", {"v": 2})
    path, _, _ = find_line(root, NS, "k")
    with open(path, "ab") as f:  # version 1 again: a racer whose index was a moment old
        f.write(encode_line("p", "k", 1, 1, 2, b'{"v":"racer"}'))
    with open_mm(root) as mm:
        assert mm.check() == []
        assert mm.read(NS, "k") == {"v": "racer"}


def test_fix_keeps_an_intact_record_whose_key_a_damaged_line_claims(root: Path) -> None:
    """A bit flip turns ``note)0000``'s key into ``note-0000`` (")" is 0x29,
    "-" is 0x2d): ``check(fix=True)`` quarantines the damaged line and keeps
    the intact ``note-0000``."""
    pairs = [(f"note-{i:04d}", f"note){i:04d}") for i in range(2000)]
    good, bad = next((g, b) for g, b in pairs if bucket_of(g) == bucket_of(b))
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)]) as mm:
        mm.write(NS, good, {"keep": "me"})
        mm.write(NS, bad, {"lost": "to damage"})
    path, start, end = find_line(root, NS, bad)
    at = path.read_bytes().index(bad.encode(), start) + 4
    damage(path, {at: ord("-")})  # the damaged line now names `good`, with a bad checksum
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)]) as mm:
        findings = mm.check(fix=True)
        assert [f.kind for f in findings] == ["corrupt-record"] and findings[0].fixed
        assert mm.read(NS, good) == {"keep": "me"}
        assert mm.read(NS, bad) is None  # its only version is in quarantine
        assert mm.check() == []
