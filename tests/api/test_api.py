"""The public API contract of MemoryManager (DESIGN.md, "Public API")."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hrm_memory import (
    AccessDenied,
    InvalidArgument,
    InvalidNamespace,
    MemoryManager,
    MemoryStoreError,
    NamespaceSpec,
    Record,
    StoreClosed,
    UndeclaredNamespace,
)


def test_write_read_default(mm: MemoryManager) -> None:
    trace_id = mm.write("altitude.patterns", "timeboxing", {"s": 0.8})
    assert isinstance(trace_id, str) and len(trace_id) == 32 and int(trace_id, 16) >= 0
    assert mm.read("altitude.patterns", "timeboxing") == {"s": 0.8}
    assert mm.read("altitude.patterns", "nope") is None
    assert mm.read("altitude.patterns", "nope", default={}) == {}


def test_none_is_a_value_not_absence(mm: MemoryManager) -> None:
    mm.write("altitude.patterns", "k", None)
    assert mm.read("altitude.patterns", "k", default="absent") is None
    assert mm.get_record("altitude.patterns", "k") is not None


def test_record_metadata(mm: MemoryManager) -> None:
    before = time.time()
    mm.write("altitude.patterns", "k", 1)
    first = mm.get_record("altitude.patterns", "k")
    mm.write("altitude.patterns", "k", 2)
    rec = mm.get_record("altitude.patterns", "k")
    assert isinstance(rec, Record)
    assert (rec.namespace, rec.key, rec.value, rec.version, rec.tier) == ("altitude.patterns", "k", 2, 2, "warm")
    assert first is not None and rec.created_at == first.created_at
    assert rec.updated_at >= rec.created_at
    assert before - 1 <= rec.created_at.timestamp() <= time.time() + 1
    assert rec.persisted


def test_versions_continue_across_delete(mm: MemoryManager) -> None:
    for ns in ("altitude.patterns", "focus.fast"):
        mm.write(ns, "k", "a")
        assert mm.delete(ns, "k") is True
        assert mm.delete(ns, "k") is False
        mm.write(ns, "k", "b")
        rec = mm.get_record(ns, "k")
        assert rec is not None and rec.version == 3, ns


def test_query_globs_where_limit_order(mm: MemoryManager) -> None:
    mm.write("focus.lanes", "b", {"status": "open", "n": 1})
    mm.write("focus.lanes", "a", {"status": "open", "n": 2})
    mm.write("focus.lanes", "c", {"status": "closed", "n": 3})
    mm.write("focus.gates", "a", {"status": "open", "meta": {"owner": "me"}})
    mm.write("altitude.patterns", "a", {"status": "open"})
    recs = mm.query("focus.*", "*")
    assert [(r.namespace, r.key) for r in recs] == [
        ("focus.gates", "a"),
        ("focus.lanes", "a"),
        ("focus.lanes", "b"),
        ("focus.lanes", "c"),
    ]
    assert [r.key for r in mm.query("focus.lanes", where={"status": "open"})] == ["a", "b"]
    assert [r.namespace for r in mm.query("*", "a", where={"meta.owner": "me"})] == ["focus.gates"]
    assert len(mm.query("focus.*", "*", where={"status": "open"}, limit=2)) == 2
    assert mm.query("focus.*", limit=0) == []
    assert [r.key for r in mm.query("focus.lanes", "[ab]")] == ["a", "b"]
    # where compares types too: 1 is not True, 1 is not 1.0
    assert mm.query("focus.lanes", where={"n": True}) == []
    with pytest.raises(InvalidArgument):
        mm.query("focus.*", limit=-1)


def test_update_is_atomic_across_threads(mm: MemoryManager) -> None:
    def work() -> None:
        for _ in range(200):
            mm.update("focus.slow", "counter", lambda v: (v or 0) + 1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mm.read("focus.slow", "counter") == 800
    rec = mm.get_record("focus.slow", "counter")
    assert rec is not None and rec.version == 800


def test_update_fn_error_stores_nothing(mm: MemoryManager) -> None:
    mm.write("focus.slow", "k", 1)

    def boom(v: object) -> object:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        mm.update("focus.slow", "k", boom)
    rec = mm.get_record("focus.slow", "k")
    assert rec is not None and (rec.value, rec.version) == (1, 1)


def test_update_default(mm: MemoryManager) -> None:
    assert mm.update("focus.slow", "list", lambda v: v + ["x"], default=[]) == ["x"]
    assert mm.update("focus.slow", "list", lambda v: v + ["y"], default=[]) == ["x", "y"]


def test_returned_values_are_copies(mm: MemoryManager) -> None:
    value = {"a": [1, 2]}
    mm.write("focus.fast", "k", value)
    value["a"].append(3)
    got = mm.read("focus.fast", "k")
    assert got == {"a": [1, 2]}
    got["a"].append(4)
    assert mm.read("focus.fast", "k") == {"a": [1, 2]}


def test_undeclared_and_malformed_namespaces(mm: MemoryManager) -> None:
    with pytest.raises(UndeclaredNamespace) as info:
        mm.write("nobody.home", "k", 1)
    assert isinstance(info.value, ValueError) and info.value.namespace == "nobody.home"
    with pytest.raises(InvalidNamespace):
        mm.read("Not A Namespace", "k")


def test_runtime_declaration_persists(root: Path) -> None:
    with MemoryManager(root) as mm:
        spec = mm.declare("planner.drafts", ttl=3600.0, description="drafts")
        assert spec in mm.namespaces()
        mm.write("planner.drafts", "d1", {"text": "x"})
        assert mm.declare(NamespaceSpec("planner.drafts", ttl=3600.0, description="drafts")) == spec
        with pytest.raises(InvalidNamespace):
            mm.declare("planner.drafts", ttl=7200.0)
    with MemoryManager(root) as mm:
        assert mm.read("planner.drafts", "d1") == {"text": "x"}
        assert "planner.drafts" in {s.name for s in mm.namespaces()}


def test_declared_by_another_manager_is_seen(root: Path) -> None:
    with MemoryManager(root) as a, MemoryManager(root) as b:
        a.declare("planner.drafts")
        a.write("planner.drafts", "k", 1)
        assert b.read("planner.drafts", "k") == 1


def test_seed_namespaces(mm: MemoryManager) -> None:
    specs = {s.name: s for s in mm.namespaces()}
    for hrm, names in {
        "altitude": ["session", "history", "patterns", "coaching"],
        "focus": ["fast", "slow", "lanes", "consent", "gates"],
        "reasoning": ["strategies", "escalations", "routing"],
        "learning": ["patterns", "feedback", "generalizations"],
        "shared": ["north_stars", "priorities", "people"],
    }.items():
        for name in names:
            assert f"{hrm}.{name}" in specs
    assert specs["altitude.session"].tier == "hot" and specs["focus.fast"].tier == "hot"
    assert specs["altitude.history"].max_keys == 20


def test_scope_access_control(mm: MemoryManager) -> None:
    mm.write("shared.people", "gaurav", {"r": "wk"})
    mm.write("focus.lanes", "l1", 1)
    alt = mm.scope("altitude")
    alt.write("altitude.patterns", "p", 1)
    assert alt.read("altitude.patterns", "p") == 1
    assert alt.read("shared.people", "gaurav") == {"r": "wk"}
    assert alt.update("altitude.patterns", "p", lambda v: v + 1) == 2
    for call in (
        lambda: alt.write("focus.lanes", "x", 1),
        lambda: alt.write("shared.people", "x", 1),
        lambda: alt.read("focus.lanes", "l1"),
        lambda: alt.delete("focus.lanes", "l1"),
        lambda: alt.query("focus.*"),
        lambda: alt.update("shared.people", "gaurav", lambda v: v),
    ):
        with pytest.raises(AccessDenied) as info:
            call()
        assert isinstance(info.value, PermissionError) and isinstance(info.value, MemoryStoreError)
    assert {r.namespace for r in alt.query("*")} == {"altitude.patterns", "shared.people"}
    assert all(s.name.startswith(("altitude.", "shared.")) for s in alt.namespaces())
    assert mm.read("focus.lanes", "l1") == 1


def test_closed_manager_refuses(root: Path) -> None:
    mm = MemoryManager(root)
    mm.close()
    mm.close()  # idempotent
    for call in (
        lambda: mm.read("altitude.patterns", "k"),
        lambda: mm.write("altitude.patterns", "k", 1),
        lambda: mm.query("*"),
        lambda: mm.check(),
    ):
        with pytest.raises(StoreClosed):
            call()


def test_bad_arguments(root: Path) -> None:
    with pytest.raises(InvalidArgument):
        MemoryManager(root, durability="sometimes")


def test_hot_data_is_per_session(root: Path) -> None:
    with MemoryManager(root) as mm:
        mm.write("focus.fast", "turn", 3)
        rec = mm.get_record("focus.fast", "turn")
        assert rec is not None and rec.tier == "hot" and not rec.persisted
    assert not list((root / "warm").glob("focus.fast*")) if (root / "warm").exists() else True
    with MemoryManager(root) as mm:
        assert mm.read("focus.fast", "turn") is None


def test_archive_moves_aged_records_and_reads_find_them(mm: MemoryManager) -> None:
    mm.write("focus.gates", "old", {"g": 1})
    mm.write("focus.slow", "no-ttl", {"g": 2})
    assert mm.archive() == {}  # nothing is old yet
    moved = mm.archive(now=time.time() + 31 * 86400)
    assert moved == {"focus.gates": 1}
    rec = mm.get_record("focus.gates", "old")
    assert rec is not None and rec.tier == "cold" and rec.value == {"g": 1}
    assert mm.read("focus.gates", "old") == {"g": 1}
    assert mm.query("focus.gates") == []
    assert [(r.key, r.tier) for r in mm.query("focus.gates", include_cold=True)] == [("old", "cold")]
    assert mm.read("focus.slow", "no-ttl") == {"g": 2}
    # A new write brings the key back to warm, with the next version.
    mm.write("focus.gates", "old", {"g": 3})
    rec = mm.get_record("focus.gates", "old")
    assert rec is not None and (rec.tier, rec.version, rec.value) == ("warm", 2, {"g": 3})
    assert [r.value for r in mm.query("focus.gates", include_cold=True)] == [{"g": 3}]
    assert mm.check() == []


def test_archive_leaves_warm_compacted(root: Path) -> None:
    """archive() of many records leaves warm/ compacted: what stays is one
    small archive marker per key, and compact() finds nothing to reclaim."""
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


def test_cap_moves_oldest_to_cold(mm: MemoryManager) -> None:
    mm.consent.grant("conversation")  # altitude.history is gated by it
    for i in range(25):
        mm.write("altitude.history", f"s{i:02d}", {"i": i})
    warm = mm.query("altitude.history")
    assert [r.key for r in warm] == [f"s{i:02d}" for i in range(5, 25)]
    everything = mm.query("altitude.history", include_cold=True)
    assert sorted(r.key for r in everything) == [f"s{i:02d}" for i in range(25)]
    assert mm.read("altitude.history", "s00") == {"i": 0}


def test_hot_cap_drops_oldest(root: Path) -> None:
    with MemoryManager(root, namespaces=[NamespaceSpec("t.hot", tier="hot", max_keys=3)]) as mm:
        for i in range(5):
            mm.write("t.hot", f"k{i}", i)
        assert [r.key for r in mm.query("t.hot")] == ["k2", "k3", "k4"]


def test_hot_cap_holds_under_concurrent_writers_of_new_keys(root: Path) -> None:
    """A hot namespace is counted before its cap is enforced (the lock is
    taken only when over): with threads writing new keys at once,
    the namespace never ends above its cap, and what stays is the newest."""
    import threading

    with MemoryManager(root, namespaces=[NamespaceSpec("t.hot", tier="hot", max_keys=50)]) as mm:
        start = threading.Barrier(4)

        def writer(t: int) -> None:
            start.wait()
            for i in range(300):
                mm.write("t.hot", f"t{t}-{i:03d}", i)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        kept = [r.key for r in mm.query("t.hot")]
        assert len(kept) == 50
        for t in range(4):  # the oldest went first: what stays of each writer is its newest keys
            mine = sorted(int(k.split("-")[1]) for k in kept if k.startswith(f"t{t}-"))
            assert mine == list(range(300 - len(mine), 300))
        mm.write("t.hot", "one-more", 1)
        assert len(mm.query("t.hot")) == 50 and mm.read("t.hot", "one-more") == 1


def test_write_in_another_process_is_visible_despite_cache(root: Path) -> None:
    with MemoryManager(root) as mm:
        mm.write("altitude.patterns", "k", "mine")
        assert mm.read("altitude.patterns", "k") == "mine"  # now cached
        code = (
            "from hrm_memory import MemoryManager\n"
            f"with MemoryManager({str(root)!r}) as mm: mm.write('altitude.patterns', 'k', 'theirs')\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True)
        assert mm.read("altitude.patterns", "k") == "theirs"
        rec = mm.get_record("altitude.patterns", "k")
        assert rec is not None and rec.version == 2


def test_compaction_keeps_every_current_record(root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm:
        for round_ in range(5):
            for i in range(100):
                mm.write("reasoning.strategies", f"k{i}", {"round": round_, "pad": "x" * 100})
        for i in range(0, 100, 3):
            mm.delete("reasoning.strategies", f"k{i}")
        # compact() counts the bucket logs' bytes (a compaction also writes
        # each bucket's persisted index, a cache: bucket_index.py), its kept
        # history's ("_h.<namespace>") included.
        logs = (root / "warm").glob("*reasoning.strategies/*.log")
        size_before = sum(p.stat().st_size for p in logs)
        reclaimed = mm.compact()
        logs = (root / "warm").glob("*reasoning.strategies/*.log")
        size_after = sum(p.stat().st_size for p in logs)
        assert reclaimed > 0 and size_after == size_before - reclaimed
        expected = {f"k{i}": {"round": 4, "pad": "x" * 100} for i in range(100) if i % 3}
        assert {r.key: r.value for r in mm.query("reasoning.strategies")} == expected
        assert mm.get_record("reasoning.strategies", "k1").version == 5  # type: ignore[union-attr]
    with MemoryManager(root) as mm:
        assert {r.key: r.value for r in mm.query("reasoning.strategies")} == expected
        mm.write("reasoning.strategies", "k0", 1)
        assert mm.get_record("reasoning.strategies", "k0").version == 7  # type: ignore[union-attr]
        assert mm.check() == []


def test_open_reads_no_data(root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm:
        for i in range(300):
            mm.write("reasoning.strategies", f"k{i}", i)
    mm = MemoryManager(root)
    try:
        assert mm.backend.warm.files.buckets == {}  # nothing indexed until first use
        assert mm.read("reasoning.strategies", "k7") == 7
        assert len(mm.backend.warm.files.buckets) == 1
    finally:
        mm.close()
