"""A warm bucket's index entry names what it holds: the newest line's op,
version and times, and where that line is in the bucket file, whether the
entry came from a scan, a write, a delete, an archive marker or the persisted
index."""

from __future__ import annotations

import os
from pathlib import Path

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.storage.file.warm.format import parse_line
from hrm_memory.storage.file.warm.tier import bucket_of

NS = "t.entries"


def open_mm(root: Path) -> MemoryManager:
    return MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)])


def entry_of(mm: MemoryManager, key: str):  # type: ignore[no-untyped-def]
    files = mm.backend.warm.files  # type: ignore[attr-defined]
    b = files.bucket(NS, bucket_of(key))
    with b.lock:
        files.refresh(b)
        return b, files.lookup(b, key)


def line_at(b, e) -> list[object]:  # type: ignore[no-untyped-def]
    """The header of the line the entry points to, read from the file."""
    fd = os.open(b.path, os.O_RDONLY)
    try:
        line = os.pread(fd, e.length, e.offset)
    finally:
        os.close(fd)
    parsed = parse_line(line)
    assert parsed is not None, line
    header, _ = parsed
    return header


def test_an_entry_names_the_newest_line_and_where_it_is(root: Path) -> None:
    with open_mm(root) as mm:
        mm.write(NS, "a", {"n": 1})
        first = mm.get_record(NS, "a")
        mm.write(NS, "a", {"n": 2})
        record = mm.get_record(NS, "a")
        assert first is not None and record is not None
        b, e = entry_of(mm, "a")
        assert (e.op, e.version) == ("p", 2)
        assert e.created_us == int(first.created_at.timestamp() * 1_000_000) or e.created_us <= e.updated_us
        assert line_at(b, e) == ["p", "a", 2, e.created_us, e.updated_us]
        mm.delete(NS, "a")
        b, d = entry_of(mm, "a")
        assert (d.op, d.version, d.created_us) == ("d", 3, e.created_us)
        assert d.offset > e.offset and line_at(b, d) == ["d", "a", 3, e.created_us, d.updated_us]


def test_entries_from_a_scan_and_from_the_persisted_index_agree(root: Path) -> None:
    with open_mm(root) as mm:
        for i in range(40):
            mm.write(NS, f"k{i}", {"i": i})
        mm.write(NS, "k7", {"i": 70})
        _, written = entry_of(mm, "k7")
    with open_mm(root) as mm:  # the persisted index, then the line it locates
        b, found = entry_of(mm, "k7")
        assert b.pidx is not None
        assert found == written and found.version == 2 and line_at(b, found)[:3] == ["p", "k7", 2]
        files = mm.backend.warm.files  # type: ignore[attr-defined]
        with b.lock:
            assert files.reload(b, use_index=False)  # a scan of the whole file
            scanned = b.index["k7"]
        assert scanned == written and scanned.offset == written.offset and scanned.length == written.length
