"""The recall index file (``index/recall.db``) when it is damaged or SQLite fails.

A damaged index (truncated to 4 KiB, header overwritten, pages overwritten)
is reported by check() (``corrupt-index``); the damaged file is kept under
``quarantine/`` and the index is rebuilt, by the same recall that met it.
SQLite's own errors (disk full, database locked) come out typed, and a busy
index gives up within ``index_health.BUSY_TIMEOUT``.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hrm_memory import IndexBusy, LockTimeout, MemoryManager, MemoryStoreError, StorageError
from hrm_memory.recall import index_health

REPO = Path(__file__).resolve().parent.parent.parent
WORDS = "alpha beta gamma delta river stone cloud maple cedar orbit pixel tunnel harbor violet amber quartz".split()


def fill(root: Path, n: int = 300) -> None:
    rnd = random.Random(7)
    with MemoryManager(root, durability="flush") as mm:
        for i in range(n):
            mm.remember("apples " + " ".join(rnd.sample(WORDS, 8)) + f" n{i}", kind="semantic", key=f"a{i:03d}")
        assert len(mm.recall("apples", k=5)) == 5


def _truncate(db: Path) -> None:
    os.truncate(db, 4096)


def _header(db: Path) -> None:
    with open(db, "r+b") as f:
        f.write(b"\xff" * 100)


def _pages(db: Path) -> None:
    with open(db, "r+b") as f:
        f.seek(8192)
        f.write(random.Random(3).randbytes(20_000))


@pytest.mark.parametrize("damage", [_truncate, _header, _pages], ids=["truncated", "header", "pages"])
@pytest.mark.parametrize("first", ["check", "recall", "context"])
def test_damaged_index_is_reported_kept_aside_and_rebuilt(root: Path, damage: object, first: str) -> None:
    """check() reports the damage, quarantines the file and rebuilds the
    index; recall() and context() answer again, in this and every new process."""
    fill(root)
    db = root / "index" / "recall.db"
    damage(db)  # type: ignore[operator]
    damaged = db.read_bytes()
    with MemoryManager(root, durability="flush") as mm:
        if first == "check":
            assert [f.kind for f in mm.check()] == ["corrupt-index"]
        hits = mm.recall("apples", k=5)
        assert len(hits) == 5 and all(h.key.startswith("a") for h in hits)
        assert "apples" in mm.context("focus").text or mm.context("focus").text
        assert len(mm.recall("quartz", k=300)) >= 100
        findings = mm.check(fix=True)
        assert {f.kind for f in findings} == {"corrupt-index"} and all(f.fixed for f in findings)
        assert mm.check() == []
    kept = [p for p in (root / "quarantine").iterdir() if p.name.startswith("index__recall.db.")]
    assert len(kept) == 1 and kept[0].read_bytes() == damaged, "the damaged file is kept, as it was"
    with MemoryManager(root, durability="flush") as mm:
        assert mm.check() == []
        assert len(mm.recall("apples", k=5)) == 5


def test_busy_index_gives_up_bounded_and_typed(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A locked index is a typed error (not sqlite3.OperationalError "database
    is locked") within index_health.BUSY_TIMEOUT (5 s), shortened here."""
    assert index_health.BUSY_TIMEOUT <= 5
    fill(root, 20)
    monkeypatch.setattr(index_health, "BUSY_TIMEOUT", 0.3)
    holder = sqlite3.connect(root / "index" / "recall.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        with MemoryManager(root, durability="flush") as mm:
            mm.remember("pears are a different fruit entirely", kind="semantic", key="pear")
            t0 = time.monotonic()
            with pytest.raises(IndexBusy) as info:
                mm.recall("pears")
            assert time.monotonic() - t0 < 3
            assert isinstance(info.value, LockTimeout) and isinstance(info.value, TimeoutError)
            holder.execute("ROLLBACK")
            assert [h.key for h in mm.recall("pears")] == ["pear"]
    finally:
        holder.close()


_FULL = """
import random, resource, signal, sys
from hrm_memory import MemoryManager
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
root = sys.argv[1]
with MemoryManager(root, durability="flush") as mm:
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))  # recall.db outgrows it; each bucket does not
    rnd = random.Random(5)
    words = [f"w{i}" for i in range(5000)]
    for i in range(400):
        mm.write("focus.slow", f"k{i}", i)  # not indexed: only recall.db grows
        try:
            mm.remember(" ".join(rnd.sample(words, 40)), kind="semantic", key=f"m{i}")
            mm.recall(" ".join(rnd.sample(words, 3)))
        except Exception as exc:
            print(type(exc).__module__ + "." + type(exc).__name__, "|", [c.__name__ for c in type(exc).__mro__])
            sys.exit(0)
print("no error")
"""


def test_full_disk_under_the_index_is_a_storage_error(tmp_path: Path) -> None:
    """A full disk under the index is a typed error (not sqlite3.OperationalError
    "database or disk is full"). A file size limit (RLIMIT_FSIZE) stands in
    for the full disk."""
    p = subprocess.run([sys.executable, "-c", _FULL, str(tmp_path / "s")], capture_output=True, text=True,
                       timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    line = p.stdout.strip().splitlines()[-1]
    assert line != "no error"
    name, mro = line.split(" | ")
    assert "sqlite3" not in name and "MemoryStoreError" in mro and "OSError" in mro, line
    assert name.endswith(("StorageError",)), line


def test_sqlite_errors_map_to_typed_errors() -> None:
    full = index_health.operational(sqlite3.OperationalError("database or disk is full"), Path("/x"), "recall")
    assert isinstance(full, StorageError) and isinstance(full, OSError) and full.errno == 28
    busy = index_health.operational(sqlite3.OperationalError("database is locked"), Path("/x"), "recall")
    assert isinstance(busy, IndexBusy) and isinstance(busy, MemoryStoreError)
    io = index_health.operational(sqlite3.OperationalError("disk I/O error"), Path("/x"), "recall")
    assert isinstance(io, StorageError)

