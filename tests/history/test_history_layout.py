"""How kept history is stored (docs/history.md, "Layout"): one append per
overwrite whatever the versions kept, trimming at compaction, stores written
with one history record per key read as they are, and a writer killed during
an overwrite loses no acknowledged version.

Real files (sizes measured on disk), a real redis-server and Redis Cluster
(the conformance drivers), a real subprocess killed with SIGKILL.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from hrm_memory import Keep, MemoryManager, NamespaceSpec
from hrm_memory.history.keeper import PREFIX, SINCE_KEY, ring_size
from hrm_memory.storage import FileBackend
from tests.helpers.drivers import DRIVERS
from tests.helpers.killed_writer import KilledWriter

NS = "kept.facts"


def _record(i: int) -> dict[str, Any]:
    """A ~0.9 KB record, different each version."""
    return {"version_note": f"revision {i}", "body": (f"observation {i:06d} " * 40)[:820], "n": i}


def _log_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "warm").rglob("*.log"))


def _line_count(root: Path) -> int:
    return sum(p.read_bytes().count(b"\n") // 2 for p in (root / "warm").rglob("*.log"))  # two newlines frame each


# -- one append per overwrite --------------------------------------------------------


def test_an_overwrite_appends_the_same_bytes_whatever_the_versions_behind_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    appended: dict[int, int] = {}
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS, history=Keep(versions=60))]) as mm:
        mm.write(NS, "k", _record(0))
        for i in range(1, 52):
            before = _log_bytes(root)
            mm.write(NS, "k", _record(i))
            if i in (2, 11, 51):  # 1, 10 and 50 versions behind the one superseded
                appended[i - 1] = _log_bytes(root) - before
        assert len(mm.history(NS, "k")) == 52
    live = len(orjson.dumps(_record(51)))
    # Each overwrite appends the new record and one kept copy of the old one,
    # so about twice a record, the same at 1, 10 and 50 versions kept (a few
    # bytes move with the digits of the version numbers).
    assert max(appended.values()) - min(appended.values()) <= 8, appended
    assert all(n < 2 * live + 400 for n in appended.values()), (appended, live)


def test_a_first_write_and_an_overwrite_each_append_what_they_must(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS, history=Keep(versions=20))]) as mm:
        mm.write(NS, "warm-up", 1)  # the namespace's since record
        lines = _line_count(root)
        mm.write(NS, "a", _record(1))
        assert _line_count(root) == lines + 1  # a first write: its record only
        mm.write(NS, "a", _record(2))
        assert _line_count(root) == lines + 3  # an overwrite: its record and one kept version
        mm.delete(NS, "a")
        assert _line_count(root) == lines + 5  # a delete: its tombstone and one head
        mm.write(NS, "a", _record(3))
        assert _line_count(root) == lines + 7  # after a delete: its record and the head's copy
        assert [v.version for v in mm.history(NS, "a")] == [4, 3, 2, 1]


# -- every backend -----------------------------------------------------------------------


@pytest.fixture(params=["file-sync", "file-async", "redis-sync", "redis-cluster-sync"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Opens the store on one root with the driver under test, closing the one opened before."""
    opened: list[Any] = []

    def open_() -> Any:
        if opened:
            opened.pop().close()
        opened.append(DRIVERS[request.param](tmp_path / "store"))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()


def _view(store: Any, key: str) -> list[tuple[int, Any, bool, bool]]:
    return [(v.version, v.value, v.deleted, v.current) for v in store.history(NS, key)]


def test_history_reads_the_same_after_a_reopen_and_after_compaction_trims_to_the_policy(
    opener: Callable[[], Any],
) -> None:
    keep = 4
    store = opener()
    store.declare(NamespaceSpec(NS, history=Keep(versions=keep)))
    probes: list[tuple[float, Any]] = []
    for i in range(1, 13):
        store.write(NS, "k", {"n": i})
        time.sleep(0.002)
        probes.append((time.time(), {"n": i}))
        time.sleep(0.002)
    store.delete(NS, "k")
    time.sleep(0.002)
    probes.append((time.time(), None))
    time.sleep(0.002)
    for i in range(13, 16):
        store.write(NS, "k", {"n": i})
    store.write(NS, "gone", "x")
    store.write(NS, "gone", "y")
    store.delete(NS, "gone")

    view = _view(store, "k")
    # The current version and the 4 before it: 14, 13, the deletion, 12.
    assert [(v, val, d) for v, val, d, _ in view] == [
        (16, {"n": 15}, False), (15, {"n": 14}, False), (14, {"n": 13}, False), (13, None, True), (12, {"n": 12}, False),
    ]  # fmt: skip
    gone = _view(store, "gone")
    assert [(v, val, d) for v, val, d, _ in gone] == [(3, None, True), (2, "y", False), (1, "x", False)]
    as_of = [store.read(NS, "k", as_of=t) for t, _ in probes[-2:]]
    assert as_of == [probe for _, probe in probes[-2:]]
    assert [r.key for r in store.query(NS, as_of=probes[-2][0])] == ["k"]
    assert store.query(NS, as_of=probes[-1][0]) == []

    store = opener()  # a reopen
    assert _view(store, "k") == view and _view(store, "gone") == gone
    assert [store.read(NS, "k", as_of=t) for t, _ in probes[-2:]] == as_of

    store.compact()
    assert _view(store, "k") == view and _view(store, "gone") == gone
    assert [store.read(NS, "k", as_of=t) for t, _ in probes[-2:]] == as_of
    assert store.check() == []
    store = opener()
    assert _view(store, "k") == view and _view(store, "gone") == gone
    store.write(NS, "gone", "z")  # after its deletion, not before
    assert [v.version for v in store.history(NS, "gone")] == [4, 3, 2, 1]


def test_compaction_leaves_the_records_the_policy_keeps_and_no_more(tmp_path: Path) -> None:
    root = tmp_path / "root"
    keep = 3
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS, history=Keep(versions=keep))]) as mm:
        for i in range(40):
            mm.write(NS, "k", f"version-{i:04d}-c0ffee")
        assert len(mm.backend.keys(PREFIX + NS)) - 1 <= ring_size(Keep(versions=keep))  # type: ignore[operator]
        mm.compact()
        # One slot per version kept, and the base recording since when the key's history is cut.
        assert len([k for k, _, _ in mm.backend.keys(PREFIX + NS) if k != SINCE_KEY]) == keep + 1
        held = [p.read_bytes() for p in (root / "warm").rglob("*.log")]
        assert not any(f"version-{i:04d}-c0ffee".encode() in data for i in range(36) for data in held)
        assert [v.value for v in mm.history(NS, "k")] == [f"version-{i:04d}-c0ffee" for i in (39, 38, 37, 36)]
        assert mm.check() == []


# -- stores written with one history record per key ----------------------------------------


def _old_store(root: Path) -> dict[str, list[list[Any]]]:
    """A store as written before slots: per key, one ``_h.<ns>`` record of its
    kept versions (``{"cut", "v"}``), the since record without a layout; made
    through the backend directly. Returns the versions written per key."""
    t0 = 1_700_000_000_000_000
    fb = FileBackend(root, durability="flush")
    try:
        fb.declare(NS, NamespaceSpec(NS, history=Keep(versions=5)).to_dict())
        hidden = PREFIX + NS
        fb.put(hidden, SINCE_KEY, orjson.dumps({"since": t0}), t0)
        # "k": versions 1-3 kept, version 4 current.
        kept = [[v, t0, t0 + v * 1000, 0, {"n": v}] for v in (1, 2, 3)]
        fb.put(hidden, "k", orjson.dumps({"cut": 0, "v": kept}), t0 + 3500)
        fb.put(NS, "k", orjson.dumps({"n": 4}), t0 + 4000, min_version=4, created_us=t0)
        # "gone": versions 1-2, then deleted (version 3); no live record.
        gone = [[1, t0, t0 + 1000, 0, "a"], [2, t0, t0 + 2000, 0, "b"], [3, t0, t0 + 3000, 1, None]]
        fb.put(hidden, "gone", orjson.dumps({"cut": 0, "v": gone}), t0 + 3000)
        # "cut": version 7 current, 5 and 6 kept, older dropped before t0 + 5000.
        cut = [[5, t0, t0 + 5000, 0, "e"], [6, t0, t0 + 6000, 0, "f"]]
        fb.put(hidden, "cut", orjson.dumps({"cut": t0 + 5000, "v": cut}), t0 + 7000)
        fb.put(NS, "cut", orjson.dumps("g"), t0 + 7000, min_version=7, created_us=t0)
    finally:
        fb.close()
    return {"k": kept, "gone": gone, "cut": cut}


def test_a_store_written_with_one_history_record_per_key_reads_the_same(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _old_store(root)
    t0 = 1_700_000_000.0
    with MemoryManager(root, durability="flush") as mm:
        assert [(v.version, v.value) for v in mm.history(NS, "k")] == [(4, {"n": 4}), (3, {"n": 3}), (2, {"n": 2}),
                                                                       (1, {"n": 1})]  # fmt: skip
        assert [(v.version, v.value, v.deleted) for v in mm.history(NS, "gone")] == [
            (3, None, True), (2, "b", False), (1, "a", False)]  # fmt: skip
        assert mm.read(NS, "k", as_of=t0 + 0.0025) == {"n": 2}
        assert mm.read(NS, "gone", as_of=t0 + 0.0015) == "a" and mm.read(NS, "gone", as_of=t0 + 0.0035) is None
        assert mm.read(NS, "cut", as_of=t0 + 0.0055) == "e"
        with pytest.raises(Exception, match="not kept"):
            mm.read(NS, "cut", as_of=t0 + 0.0045)
        assert {r.key: r.value for r in mm.query(NS, as_of=t0 + 0.0065)} == {"k": {"n": 4}, "cut": "f"}
        mm.export(tmp_path / "old.jsonl")

        # New versions go on top of the old record; a deleted key comes back after its deletion.
        mm.write(NS, "k", {"n": 5})
        mm.write(NS, "k", {"n": 6})
        assert [v.version for v in mm.history(NS, "k")] == [6, 5, 4, 3, 2, 1]
        mm.write(NS, "gone", "c")
        assert [(v.version, v.value) for v in mm.history(NS, "gone")] == [(4, "c"), (3, None), (2, "b"), (1, "a")]
        mm.delete(NS, "k")
        assert [v.version for v in mm.history(NS, "k")] == [7, 6, 5, 4, 3, 2]  # 5 kept, then the deletion
        mm.compact()
        assert [v.version for v in mm.history(NS, "k")] == [7, 6, 5, 4, 3, 2]
        assert [v.version for v in mm.history(NS, "gone")] == [4, 3, 2, 1]
        assert mm.check() == []
        mm.forget(NS, "gone")
        assert mm.history(NS, "gone") == []
        assert not any(b'"b"' in p.read_bytes() for p in (root / "warm" / (PREFIX + NS)).glob("*.log"))

    # The export of the old store, imported into a new one, reads the same.
    with MemoryManager(tmp_path / "new", durability="flush") as mm:
        mm.import_(tmp_path / "old.jsonl")
        assert [(v.version, v.value) for v in mm.history(NS, "k")] == [(4, {"n": 4}), (3, {"n": 3}), (2, {"n": 2}),
                                                                       (1, {"n": 1})]  # fmt: skip
        assert [v.version for v in mm.history(NS, "gone")] == [3, 2, 1]
        assert mm.read(NS, "cut", as_of=t0 + 0.0055) == "e"
        mm.write(NS, "gone", "c")
        assert [v.version for v in mm.history(NS, "gone")] == [4, 3, 2, 1]


# -- a kill during an overwrite -------------------------------------------------------------


def test_a_kill_during_an_overwrite_loses_no_acknowledged_version(tmp_path: Path) -> None:
    from tests.helpers.history_writer import SPEC

    root = tmp_path / "root"
    rng = random.Random(35)
    done: list[list[Any]] = []  # every acknowledged write of every round, in order
    for seed in range(6):
        writer = KilledWriter("history_writer", root, seed)
        assert writer.ready.wait(30), "the writer did not start"
        time.sleep(rng.uniform(0.2, 0.8))
        acked, pending = writer.kill()
        assert acked, "the writer acknowledged nothing before the kill"
        done.extend(acked)
        with MemoryManager(root, namespaces=[SPEC]) as mm:
            for key in {k for k, _ in done}:
                # Oldest first: every acknowledged value (None: a deletion), the
                # one in flight at the kill possibly after them.
                want = [v for k, v in done if k == key]
                # Deleting a deleted (or absent) key keeps no version.
                want = [v for i, v in enumerate(want) if not (v is None and (i == 0 or want[i - 1] is None))]
                got = [None if v.deleted else v.value for v in reversed(mm.history(SPEC.name, key))]
                if pending is not None and pending[0] == key and len(got) == len(want) + 1:
                    assert got[-1] == pending[1]
                    got.pop()
                    done.append(pending)
                assert got == want, key
            assert mm.check() == []


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "history_one_record_per_key"


def test_a_store_made_before_slots_opens_with_the_same_history(tmp_path: Path) -> None:
    """``tests/fixtures/history_one_record_per_key``: the warm logs and
    declarations of a store written by the code before slots (``old.facts``,
    ``Keep(versions=4)``: "k" written 7 times, "gone" twice then deleted,
    "back" written, deleted and written twice, "once" written once)."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(FIXTURE, root)
    for path in [root, *root.rglob("*")]:  # the modes the store gave them (git keeps none)
        path.chmod(0o700 if path.is_dir() else 0o600)
    ns = "old.facts"
    expected = {
        "k": [(7, {"n": 6}, False), (6, {"n": 5}, False), (5, {"n": 4}, False), (4, {"n": 3}, False),
              (3, {"n": 2}, False)],
        "gone": [(3, None, True), (2, "b", False), (1, "a", False)],
        "back": [(4, 3, False), (3, 2, False), (2, None, True), (1, 1, False)],
        "once": [(1, "only", False)],
    }  # fmt: skip
    with MemoryManager(root, durability="flush") as mm:
        for key, want in expected.items():
            hist = mm.history(ns, key)
            assert [(v.version, v.value, v.deleted) for v in hist] == want, key
            assert [mm.read(ns, key, as_of=v.updated_at) for v in hist] == [v for _, v, _ in want], key
        mm.write(ns, "k", {"n": 7})
        mm.write(ns, "gone", "c")
        mm.delete(ns, "back")
        assert [v.version for v in mm.history(ns, "k")] == [8, 7, 6, 5, 4]
        assert [v.version for v in mm.history(ns, "gone")] == [4, 3, 2, 1]
        assert [(v.version, v.deleted) for v in mm.history(ns, "back")] == [(5, True), (4, False), (3, False),
                                                                            (2, True), (1, False)]  # fmt: skip
        views = {key: [(v.version, v.value, v.deleted) for v in mm.history(ns, key)] for key in expected}
        mm.compact()
        assert {key: [(v.version, v.value, v.deleted) for v in mm.history(ns, key)] for key in expected} == views
        assert mm.check() == []
        mm.export(tmp_path / "x.jsonl")
    with MemoryManager(tmp_path / "other", durability="flush") as mm:
        mm.import_(tmp_path / "x.jsonl")
        assert {key: [(v.version, v.value, v.deleted) for v in mm.history(ns, key)] for key in expected} == views


def test_a_session_copy_moved_on_a_grant_continues_the_chain(tmp_path: Path) -> None:
    """A gated namespace's session copies take versions the store never saw;
    the one moved to the store on a grant links to the version before them."""
    with MemoryManager(tmp_path / "root", durability="flush") as mm:
        ns = "learning.patterns"  # consent "preferences", 20 versions kept
        mm.consent.grant("preferences")
        mm.write(ns, "p", {"v": 1})
        mm.write(ns, "p", {"v": 2})
        mm.consent.revoke("preferences")
        mm.write(ns, "p", {"v": 3})  # session copies, versions 3 and 4
        mm.write(ns, "p", {"v": 4})
        mm.consent.grant("preferences")  # version 4 moves to the store
        mm.write(ns, "p", {"v": 5})
        assert [(v.version, v.value) for v in mm.history(ns, "p")] == [(5, {"v": 5}), (4, {"v": 4}), (2, {"v": 2}),
                                                                       (1, {"v": 1})]  # fmt: skip
        mm.compact()
        assert [v.version for v in mm.history(ns, "p")] == [5, 4, 2, 1]
