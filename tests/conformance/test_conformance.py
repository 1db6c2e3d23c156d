"""Behaviour every backend and both twins (sync, async) must show; see conftest.py."""

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
