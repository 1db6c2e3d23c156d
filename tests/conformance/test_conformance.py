"""Behaviour every backend and both twins (sync, async) share; see conftest.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from hrm_memory import (
    AccessDenied,
    ArchiveOp,
    DeclareOp,
    DeleteOp,
    Event,
    GetOp,
    InvalidFilter,
    InvalidKey,
    InvalidSpec,
    InvalidValue,
    NamespaceConflict,
    NamespaceInUse,
    NamespaceSpec,
    PutOp,
    QueryOp,
    UndeclaredNamespace,
    UpdateOp,
)

NS = "altitude.patterns"
VALUES = [0, -1, 2**63 - 1, 1.5, "", "text", "~tilde", True, False, None, [], {}, [1, "a", None], {"a": {"b": [1.0, 2]}}]


def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_value_round_trips_exactly(store: Any, value: Any) -> None:
    store.write(NS, "k", value)
    got = store.read(NS, "k")
    assert got == value and type(got) is type(value)
    rec = store.get_record(NS, "k")
    assert rec.value == value and rec.version == 1 and rec.persisted and rec.tier == "warm"


def test_missing_key(store: Any) -> None:
    assert store.read(NS, "nope") is None
    assert store.read(NS, "nope", default={"d": 1}) == {"d": 1}
    assert store.get_record(NS, "nope") is None
    assert store.delete(NS, "nope") is False


def test_versions_and_times(store: Any) -> None:
    store.write(NS, "k", 1)
    first = store.get_record(NS, "k")
    store.write(NS, "k", 2)
    second = store.get_record(NS, "k")
    assert (first.version, second.version) == (1, 2)
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    assert store.delete(NS, "k") is True
    assert store.read(NS, "k", default="gone") == "gone"
    store.write(NS, "k", 3)
    assert store.get_record(NS, "k").version > second.version  # versions never go back


def test_update_is_read_modify_write(store: Any) -> None:
    for _ in range(5):
        store.update("focus.slow", "n", lambda v: v + 1, 0)
    assert store.read("focus.slow", "n") == 5

    def boom(v: Any) -> Any:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.update("focus.slow", "n", boom)
    assert store.get_record("focus.slow", "n").version == 5


def test_query_globs_order_limit(store: Any) -> None:
    for key in ["b", "a", "c", "ab"]:
        store.write(NS, key, {"k": key})
    store.write("altitude.coaching", "a", 1)
    assert [r.key for r in store.query(NS)] == ["a", "ab", "b", "c"]
    assert [r.key for r in store.query(NS, "a*")] == ["a", "ab"]
    assert [(r.namespace, r.key) for r in store.query("altitude.*", "a")] == [("altitude.coaching", "a"), (NS, "a")]
    assert len(store.query("altitude.*", limit=2)) == 2


def test_where_operators(store: Any) -> None:
    for i, prio in enumerate([1, 2, 3, 3.0, 4.5, "3", True]):
        store.write("focus.slow", f"t{i}", {"prio": prio, "meta": {"tag": "x" if i % 2 else "y"}})
    keys = lambda where: [r.key for r in store.query("focus.slow", where=where)]  # noqa: E731
    assert keys({"prio": 3}) == ["t2", "t3"]  # 3 == 3.0, never "3" or True
    assert keys({"prio": 3.0}) == ["t2", "t3"]
    assert keys({"prio": {"$gt": 2}}) == ["t2", "t3", "t4"]
    assert keys({"prio": {"$gte": 3, "$lt": 4}}) == ["t2", "t3"]
    assert keys({"prio": {"$ne": 3}}) == ["t0", "t1", "t4", "t5", "t6"]
    assert keys({"prio": {"$in": [1, "3"]}}) == ["t0", "t5"]
    assert keys({"meta.tag": "x", "prio": {"$lte": 3}}) == ["t1", "t3"]
    for bad in ({"prio": {"$regex": "."}}, {"prio": {"$gt": [1]}}, {"prio": {"$in": 3}}, {"": 1}):
        with pytest.raises(InvalidFilter):
            store.query("focus.slow", where=bad)


def test_codes_read_as_written_and_compact_on_request(store: Any) -> None:
    person = {"relationship": "family", "note": "~starts with a tilde"}
    store.write("shared.people", "ann", person)
    assert store.read("shared.people", "ann") == person
    coded = store.read("shared.people", "ann", compact=True)
    assert coded != person and coded["r"] == "fam" and coded["note"] == "~~starts with a tilde"
    assert store.expand("shared.people", coded) == person
    (rec,) = store.query("shared.people", where={"relationship": "family"})
    assert rec.value == person
    (rec,) = store.query("shared.people", where={"r": "fam"}, compact=True)
    assert rec.value == coded


def test_mistakes_raise_typed_errors(store: Any) -> None:
    with pytest.raises(UndeclaredNamespace):
        store.query("altitude.pattern")  # a typo
    with pytest.raises(UndeclaredNamespace):
        store.query("nope.*")
    with pytest.raises(UndeclaredNamespace):
        store.subscribe("nope.*", lambda e: None)
    with pytest.raises(UndeclaredNamespace):
        store.scope("planner")
    with pytest.raises(InvalidKey):
        store.write(NS, "", 1)
    with pytest.raises(InvalidValue):
        store.write(NS, "k", float("nan"))
    assert store.read(NS, "k") is None


def test_scope(store: Any) -> None:
    alt = store.scope("altitude")
    alt.write(NS, "mine", 1)
    assert alt.read(NS, "mine") == 1
    store.write("shared.people", "p", {"relationship": "family"})
    assert alt.read("shared.people", "p") == {"relationship": "family"}
    for call in (
        lambda: alt.write("focus.slow", "x", 1),
        lambda: alt.read("focus.slow", "x"),
        lambda: alt.write("shared.people", "p", 1),
        lambda: alt.query("focus.*"),
        lambda: alt.batch([ArchiveOp()]),  # an admin op smuggled in a batch meets the same check
        lambda: alt.batch([DeclareOp(NamespaceSpec("altitude.extra"))]),
    ):
        with pytest.raises(AccessDenied):
            call()
    assert {s.name.split(".")[0] for s in alt.namespaces()} == {"altitude", "shared"}


def test_batch_runs_ops_in_order(store: Any) -> None:
    results = store.batch(
        [
            PutOp(NS, "a", 1),
            UpdateOp(NS, "a", lambda v: v + 1),
            GetOp(NS, "a"),
            QueryOp(NS),
            DeleteOp(NS, "a"),
            GetOp(NS, "a", "gone"),
        ]
    )
    assert results[1:3] == [2, 2] and [r.key for r in results[3]] == ["a"] and results[4:] == [True, "gone"]
    with pytest.raises(UndeclaredNamespace):
        store.batch([PutOp(NS, "b", 1), PutOp("nope.nope", "c", 1), PutOp(NS, "d", 1)])
    assert store.read(NS, "b") == 1 and store.read(NS, "d") is None  # stops at the failing op


def test_subscribe_in_commit_order(store: Any) -> None:
    got: list[Event] = []
    sub = store.subscribe("altitude.*", got.append, remote=False)
    for i in range(5):
        store.write(NS, "k", i)
    store.delete(NS, "k")
    assert eventually(lambda: len(got) == 6)
    assert [(e.op, e.version) for e in got] == [("write", v) for v in range(1, 6)] + [("delete", 6)]
    sub.cancel()


def test_declare_and_undeclare(store: Any) -> None:
    spec = store.declare(NamespaceSpec("planner.drafts", ttl=3600))
    assert store.declare(NamespaceSpec("planner.drafts", ttl=3600)) == spec  # the same: a no-op
    with pytest.raises(NamespaceConflict) as info:
        store.declare(NamespaceSpec("planner.drafts", ttl=60))
    assert info.value.fields == ["ttl"]
    for bad in ({"ttl": "5"}, {"schema": 5}, {"codec": ["l"]}, {"tier": "lukewarm"}, {"max_keys": 0}):
        with pytest.raises(InvalidSpec):
            store.declare("planner.bad", **bad)
    with pytest.raises(UndeclaredNamespace):
        store.read("planner.bad", "k")  # nothing half-registered
    store.write("planner.drafts", "d", {"x": 1})
    with pytest.raises(NamespaceInUse):
        store.undeclare("planner.drafts")
    assert store.undeclare("planner.drafts", purge=True)["warm"] == 1
    with pytest.raises(UndeclaredNamespace):
        store.read("planner.drafts", "d")
    store.declare(NamespaceSpec("planner.drafts", ttl=60))  # a fresh declaration, no old data
    assert store.read("planner.drafts", "d") is None


def test_consent_gates_persistence(store: Any) -> None:
    ns = "focus.conversation"
    store.write(ns, "turn", "hello")
    assert store.get_record(ns, "turn").persisted is False
    result = store.consent.grant("conversation")
    assert result["persisted"] == {ns: 1}
    assert store.get_record(ns, "turn").persisted is True
    store.consent.revoke("conversation", purge=True)
    assert store.read(ns, "turn") is None


def test_archive_and_cold_reads(store: Any) -> None:
    store.write("focus.gates", "g", {"gate": "framing"})
    moved = store.archive(now=time.time() + 400 * 86400)
    assert moved == {"focus.gates": 1}
    assert store.get_record("focus.gates", "g").tier == "cold"
    assert store.read("focus.gates", "g") == {"gate": "framing"}
    assert store.query("focus.gates") == []
    assert [r.key for r in store.query("focus.gates", include_cold=True)] == ["g"]


def test_check_is_clean_after_use(store: Any) -> None:
    for i in range(20):
        store.write(NS, f"k{i}", {"i": i})
        store.update("focus.slow", "n", lambda v: (v or 0) + 1)
    store.delete(NS, "k3")
    store.compact()
    assert store.check() == []
    assert store.stats()["namespaces"][NS]["keys"] == 19


def test_second_handle_sees_writes(open_store: Callable[[], Any]) -> None:
    a, b = open_store(), open_store()
    a.write(NS, "shared", {"v": 1})
    assert b.read(NS, "shared") == {"v": 1}
    got: list[Event] = []
    sub = b.subscribe(NS, got.append)
    a.write(NS, "shared", {"v": 2})
    assert eventually(lambda: [e.version for e in got] == [2])
    sub.cancel()


# -- erasure: forget (one key) and purge (a namespace) ------------------------------------


def _named(events: list[Event], namespace: str, key: str | None = None) -> list[Event]:
    return [e for e in events if e.namespace == namespace and (key is None or e.key == key)]


def test_forget_erases_every_version_and_nothing_else(store: Any) -> None:
    ns = "shared.people"  # keeps history
    cursor = store.cursor()
    store.write(ns, "ann", {"relationship": "family", "note": "first"})
    store.write(ns, "ann", {"relationship": "friend", "note": "second"})
    store.write(ns, "bob", {"relationship": "work"})
    store.write(ns, "bob", {"relationship": "friend"})
    assert len(store.history(ns, "ann")) == 2
    counts = store.forget(ns, "ann")
    assert counts["warm"] == 1 and counts["history"] == 1 and counts["events"] >= 2
    assert store.read(ns, "ann") is None and store.get_record(ns, "ann") is None
    assert store.history(ns, "ann") == []
    assert [r.key for r in store.query(ns, include_cold=True)] == ["bob"]
    assert [v.value for v in store.history(ns, "bob")] == [{"relationship": "friend"}, {"relationship": "work"}]
    events, _ = store.events_since(cursor)
    assert _named(events, ns, "ann") == [] and [e.version for e in _named(events, ns, "bob")] == [1, 2]
    store.write(ns, "ann", {"relationship": "family"})  # the key can be used again, from version 1
    assert store.get_record(ns, "ann").version == 1
    assert [v.value for v in store.history(ns, "ann")] == [{"relationship": "family"}]
    assert store.check() == []


def test_forget_reaches_archived_and_deleted_keys(store: Any) -> None:
    store.write("focus.gates", "old", {"gate": "framing"})
    store.write("focus.gates", "gone", {"gate": "x"})
    store.write("focus.gates", "keep", {"gate": "y"})
    store.archive(now=time.time() + 400 * 86400)
    store.delete("focus.gates", "gone")
    assert store.get_record("focus.gates", "old").tier == "cold"
    counts = store.forget("focus.gates", "old")
    assert counts["warm"] == 1 and counts["cold"] == 1
    store.forget("focus.gates", "gone")
    assert store.read("focus.gates", "old") is None
    assert [r.key for r in store.query("focus.gates", include_cold=True)] == ["keep"]
    store.write("focus.gates", "gone", 1)  # no tombstone left: versions start again
    assert store.get_record("focus.gates", "gone").version == 1
    assert store.read("focus.gates", "keep") == {"gate": "y"}


def test_forget_a_key_never_there_changes_nothing(store: Any) -> None:
    store.write(NS, "a", 1)
    counts = store.forget(NS, "never")
    assert not any(n for place, n in counts.items() if place != "rewrite")
    assert store.read(NS, "a") == 1 and store.get_record(NS, "a").version == 1


def test_forget_checks_like_a_write(store: Any) -> None:
    with pytest.raises(UndeclaredNamespace):
        store.forget("nope.nope", "k")
    with pytest.raises(InvalidKey):
        store.forget(NS, "")
    store.write("focus.slow", "x", 1)
    with pytest.raises(AccessDenied):
        store.scope("altitude").forget("focus.slow", "x")
    assert store.read("focus.slow", "x") == 1
    alt = store.scope("altitude")
    alt.write(NS, "mine", 1)
    alt.forget(NS, "mine")
    assert store.read(NS, "mine") is None


def test_forget_is_seen_by_a_second_handle(open_store: Callable[[], Any]) -> None:
    a, b = open_store(), open_store()
    cursor = b.cursor()
    a.write(NS, "secret", {"v": 1})
    a.write(NS, "other", {"v": 2})
    assert b.read(NS, "secret") == {"v": 1}
    a.forget(NS, "secret")
    assert b.read(NS, "secret") is None and b.read(NS, "other") == {"v": 2}
    events, _ = b.events_since(cursor)
    assert [e.key for e in events if e.namespace == NS] == ["other"]


def test_purge_on_revoke_removes_the_namespace_and_its_history(store: Any) -> None:
    ns = "learning.patterns"  # gated by "preferences", keeps history
    store.consent.grant("preferences")
    cursor = store.cursor()
    store.write(ns, "p", {"pattern": "one"})
    store.write(ns, "p", {"pattern": "two"})
    store.write("learning.feedback", "f", {"ok": True})  # gated by the same category
    store.write(NS, "untouched", 1)
    assert store.get_record(ns, "p").persisted and len(store.history(ns, "p")) == 2
    result = store.consent.revoke("preferences", purge=True)
    assert result["granted"] is False
    assert result["purged"][ns]["warm"] == 1 and result["purged"]["learning.feedback"]["warm"] == 1
    assert store.read(ns, "p") is None and store.history(ns, "p") == []
    assert store.read("learning.feedback", "f") is None
    assert store.read(NS, "untouched") == 1
    events, _ = store.events_since(cursor)
    spaces = {e.namespace for e in events}
    assert NS in spaces and not spaces & {ns, "learning.feedback", "_h." + ns}  # the purged ones' entries are gone
    store.consent.grant("preferences")
    store.write(ns, "p", {"pattern": "three"})
    assert store.get_record(ns, "p").version == 1  # no tombstone left: versions start again
    assert [v.value for v in store.history(ns, "p")] == [{"pattern": "three"}]
    assert store.check() == []


def test_purge_reaches_the_archive(store: Any) -> None:
    store.declare(NamespaceSpec("planner.old", ttl=60))
    store.write("planner.old", "a", {"x": 1})
    store.write("planner.old", "b", {"x": 2})
    store.archive(now=time.time() + 3600)
    assert store.get_record("planner.old", "a").tier == "cold"
    counts = store.undeclare("planner.old", purge=True)
    assert counts["warm"] == 2 and counts["cold"] >= 1
    store.declare(NamespaceSpec("planner.old", ttl=60))
    assert store.query("planner.old", include_cold=True) == []
    assert store.read("planner.old", "a") is None
    assert "planner.old" not in store.stats()["namespaces"] or store.stats()["namespaces"]["planner.old"]["keys"] == 0


def test_recall_forgets_with_the_store(store: Any) -> None:
    store.write("shared.people", "zed", {"note": "plays the theremin on tuesdays"})
    store.write("shared.people", "amy", {"note": "plays the cello"})
    assert [h.key for h in store.recall("theremin", namespaces="shared.people")] == ["zed"]
    store.forget("shared.people", "zed")
    assert store.recall("theremin", namespaces="shared.people") == []
    store.consent.grant("preferences")
    store.write("learning.patterns", "p", {"pattern": "hums a xylophone tune"})
    assert [h.key for h in store.recall("xylophone", namespaces="learning.patterns")] == ["p"]
    store.consent.revoke("preferences", purge=True)
    assert store.recall("xylophone", namespaces="learning.patterns") == []


def test_versions_never_go_back_in_a_namespace_without_history(store: Any) -> None:
    store.write("focus.slow", "k", 1)
    store.write("focus.slow", "k", 2)
    assert store.delete("focus.slow", "k") is True  # the deletion is version 3
    store.write("focus.slow", "k", 3)
    assert store.get_record("focus.slow", "k").version == 4
