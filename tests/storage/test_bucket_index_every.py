"""Every bucket has a persisted index, and it stays current.

- a bucket of a few records gets one too (its first read after a reopen
  is then no scan of the bucket);
- a process that read through an index and appended rewrites it at close
  by merging it with what was appended, so that the next process scans no
  tail; keys whose hashes collide are told apart by reading their lines;
- whatever sequence of writes, deletes and reopens, the index on disk is
  what a scan of the bucket gives (``check()`` compares them) and reads
  agree with a model;
- another process appending meanwhile is merged in too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.storage.file.warm import buckets as bucket_index
from hrm_memory.storage.file.warm.tier import bucket_of

NS = "t.small"
# Two keys with the same crc32 (so the same bucket and the same index hash).
TWIN_A, TWIN_B = "c699378", "c18020006"
REPO = Path(__file__).resolve().parents[2]


def open_mm(root: Path) -> MemoryManager:
    return MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)])


def bucket(mm: MemoryManager, key: str):  # type: ignore[no-untyped-def]
    return mm.backend.warm.files.bucket(NS, bucket_of(key))  # type: ignore[attr-defined]


def log_and_index(root: Path, key: str) -> tuple[Path, Path]:
    log = root / "warm" / NS / f"{bucket_of(key):02x}.log"
    return log, log.with_suffix(".idx")


def covered(root: Path, key: str) -> int:
    """Bytes of the bucket file of ``key`` that its index on disk covers."""
    _, idx = log_and_index(root, key)
    _, identity = bucket_index.describe(idx)
    assert identity is not None
    return identity[2]


def test_the_twins_collide() -> None:
    assert zlib.crc32(TWIN_A.encode()) == zlib.crc32(TWIN_B.encode())
    assert TWIN_A != TWIN_B


def test_a_bucket_of_a_few_records_is_indexed_and_read_without_a_scan(root: Path) -> None:
    with open_mm(root) as mm:
        for i in range(5):
            mm.write(NS, f"k{i}", {"i": i})
    log, idx = log_and_index(root, "k3")
    assert idx.exists() and covered(root, "k3") == log.stat().st_size
    with open_mm(root) as mm:
        assert mm.read(NS, "k3") == {"i": 3}
        b = bucket(mm, "k3")
        assert b.pidx is not None and list(b.index) == ["k3"]  # no scan: only the key read is in memory
        assert b.pidx.data is not None  # small: its bytes were read whole with the index
        assert mm.read(NS, "absent") is None
        assert mm.check() == []


def test_appends_after_reading_through_the_index_are_merged_at_close(root: Path) -> None:
    with open_mm(root) as mm:
        for i in range(40):
            mm.write(NS, f"k{i}", {"i": i})
    with open_mm(root) as mm:
        assert mm.read(NS, "k1") == {"i": 1}
        assert bucket(mm, "k1").pidx is not None
        for i in range(0, 40, 3):
            mm.write(NS, f"k{i}", {"i": i, "gen": 2})
        mm.delete(NS, "k4")
        mm.write(NS, "new", 1)
    for key in ("k0", "k4", "new"):
        log, _ = log_and_index(root, key)
        assert covered(root, key) == log.stat().st_size, key  # rewritten at close, by merging
    with open_mm(root) as mm:
        for i in range(40):
            want = None if i == 4 else {"i": i, "gen": 2} if i % 3 == 0 else {"i": i}
            assert mm.read(NS, f"k{i}") == want
        b = bucket(mm, "k0")
        assert b.pidx is not None and b.pidx.covered == b.size  # no tail was scanned
        assert mm.check() == []


def test_merge_tells_keys_of_one_hash_apart(root: Path) -> None:
    with open_mm(root) as mm:
        mm.write(NS, TWIN_A, "a1")
        mm.write(NS, TWIN_B, "b1")
    with open_mm(root) as mm:
        assert mm.read(NS, TWIN_A) == "a1"
        assert bucket(mm, TWIN_A).pidx is not None
        mm.write(NS, TWIN_B, "b2")  # the merge must drop B's old entry, not A's
    with open_mm(root) as mm:
        assert mm.read(NS, TWIN_A) == "a1"
        assert mm.read(NS, TWIN_B) == "b2"
        assert mm.check() == []
    with open_mm(root) as mm:
        assert mm.read(NS, TWIN_B) == "b2"  # read first this time: B's entry is the newer line
        mm.write(NS, TWIN_A, "a2")
    with open_mm(root) as mm:
        assert (mm.read(NS, TWIN_A), mm.read(NS, TWIN_B)) == ("a2", "b2")
        assert mm.check() == []


def test_lags() -> None:
    assert not bucket_index.lags(-1, 0)  # an empty bucket needs none
    assert bucket_index.lags(-1, 1)  # a bucket without one does
    assert not bucket_index.lags(1600, 1600)
    assert bucket_index.lags(1600, 1700)  # a small bucket: a sixteenth
    assert not bucket_index.lags(1600, 1699)
    big = 64 * bucket_index.LAG_BYTES
    assert not bucket_index.lags(big, big + bucket_index.LAG_BYTES - 1)
    assert bucket_index.lags(big, big + bucket_index.LAG_BYTES)  # a big one: LAG_BYTES at most


keys = st.sampled_from([f"k{i}" for i in range(12)] + [TWIN_A, TWIN_B])
ops = st.lists(
    st.tuples(st.sampled_from(["put", "delete", "read"]), keys, st.integers(0, 3)),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sessions=st.lists(ops, min_size=1, max_size=4))
def test_index_matches_a_scan_after_any_sessions(tmp_path_factory, sessions) -> None:  # type: ignore[no-untyped-def]
    """Each session is one open of the store; between them the indexes on
    disk must be what a scan gives (check), and reads must match a model."""
    root = tmp_path_factory.mktemp("s") / "store"
    model: dict[str, int] = {}
    for session in sessions:
        with open_mm(root) as mm:
            for op, key, n in session:
                if op == "put":
                    mm.write(NS, key, n)
                    model[key] = n
                elif op == "delete":
                    mm.delete(NS, key)
                    model.pop(key, None)
                else:
                    assert mm.read(NS, key) == model.get(key)
        with open_mm(root) as mm:
            assert mm.check() == []
            for key in sorted(set(model) | {TWIN_A, TWIN_B, "k0"}):
                assert mm.read(NS, key) == model.get(key)


_WRITER = """
import sys
from hrm_memory import MemoryManager, NamespaceSpec
with MemoryManager(sys.argv[1], durability="flush", namespaces=[NamespaceSpec(sys.argv[2])]) as mm:
    for i in range(0, 60, 2):
        mm.write(sys.argv[2], f"k{i}", {"i": i, "by": "other"})
"""


def test_appends_of_another_process_are_merged_too(root: Path) -> None:
    with open_mm(root) as mm:
        for i in range(60):
            mm.write(NS, f"k{i}", {"i": i})
    with open_mm(root) as mm:
        for i in range(60):
            assert mm.read(NS, f"k{i}") == {"i": i}  # every bucket read through its index
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, "-c", _WRITER, str(root), NS], check=True, env=env, timeout=60)
        for i in range(1, 60, 4):
            mm.write(NS, f"k{i}", {"i": i, "by": "us"})
    with open_mm(root) as mm:
        assert mm.check() == []
        for i in range(60):
            by = "other" if i % 2 == 0 else "us" if i % 4 == 1 else None
            assert mm.read(NS, f"k{i}") == ({"i": i, "by": by} if by else {"i": i})
        for i in range(60):
            log, _ = log_and_index(root, f"k{i}")
            assert covered(root, f"k{i}") == log.stat().st_size


_DIES_WRITING_AN_INDEX = """
import os, signal, sys
from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.storage.file.warm import buckets as bucket_index
def die(path, data):
    path.with_name(f".{path.name}.{os.getpid()}.tmp").write_bytes(data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
bucket_index.write = die
with MemoryManager(sys.argv[1], durability="flush", namespaces=[NamespaceSpec(sys.argv[2])]) as mm:
    for i in range(40):
        assert mm.read(sys.argv[2], f"k{i}") == {"i": i}
"""


def test_a_reader_killed_writing_an_index_leaves_no_temp_behind(root: Path) -> None:
    """A process that only read writes the indexes it lacked at close; killed
    part-way, its temp file is removed by the next open (it noted the buckets
    in run/ first, as a writer does), and check() finds nothing."""
    with open_mm(root) as mm:
        for i in range(40):
            mm.write(NS, f"k{i}", {"i": i})
    for idx in (root / "warm" / NS).glob("*.idx"):
        idx.unlink()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _DIES_WRITING_AN_INDEX, str(root), NS], env=env, timeout=60)
    assert proc.returncode == -9
    assert list((root / "warm" / NS).glob(".*.tmp")), "the kill should have left an index temp behind"
    with open_mm(root) as mm:
        assert list((root / "warm" / NS).glob(".*.tmp")) == []
        assert mm.check() == []
        for i in range(40):
            assert mm.read(NS, f"k{i}") == {"i": i}
