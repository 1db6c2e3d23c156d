"""hrm_memory.integrations.langgraph.MemoryStore: the mapping, filters, order, TTL, search, the example.

LangGraph's own store suites run against the store in test_langgraph_suite.py;
these are the promises of docs/langgraph.md that those suites do not pin down.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.store.base", reason="langgraph-checkpoint is not installed (pip install -e '.[test]')")

from langgraph.store.base import (  # noqa: E402
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from hrm_memory import InvalidFilter, InvalidValue, MemoryManager  # noqa: E402
from hrm_memory.integrations import langgraph_codec as codec  # noqa: E402
from hrm_memory.integrations.langgraph import MemoryStore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(root=str(tmp_path / "store"), durability="flush") as s:
        yield s


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedder: letter counts, 26 dimensions."""
    out = []
    for text in texts:
        vec = [0.0] * 26
        for ch in text.lower():
            if "a" <= ch <= "z":
                vec[ord(ch) - 97] += 1.0
        out.append(vec)
    return out


# -- the mapping ----------------------------------------------------------------------

labels = st.text(min_size=1, max_size=40).filter(lambda s: "." not in s and "\x00" not in s)


@settings(max_examples=300, deadline=None)
@given(ns=st.lists(labels, min_size=1, max_size=6).map(tuple), key=st.text(max_size=60))
def test_every_label_langgraph_accepts_round_trips_through_the_key(ns: tuple[str, ...], key: str) -> None:
    hk = codec.hrm_key(ns, key)
    assert hk.isprintable() and len(hk.encode("utf-8")) <= 1024
    assert codec.parse_key(hk) == (ns, key)
    assert hk.startswith(codec.prefix_of(ns))
    for cut in range(len(ns)):
        assert hk.startswith(codec.prefix_of(ns[:cut]))


@settings(max_examples=200, deadline=None)
@given(a=st.lists(labels, min_size=1, max_size=4).map(tuple), b=st.lists(labels, min_size=1, max_size=4).map(tuple))
def test_a_prefix_reaches_only_its_own_namespaces(a: tuple[str, ...], b: tuple[str, ...]) -> None:
    # (a) prefixes b's keys exactly when a is a leading run of b's labels
    assert codec.hrm_key(b, "k").startswith(codec.prefix_of(a)) == (b[: len(a)] == a)


def test_odd_labels_and_keys_round_trip_through_the_store(store: MemoryStore) -> None:
    odd = [
        (("a", "b/c", "%2F", "*?[]"), "k/1"),
        (("tab\there", "new\nline", "\u2028", "\ud800"), ""),
        (("emoji \U0001f600", "ünï"), "x" * 3000),  # an over-long key: hashed, still exact
        (("langgraph-ish", "a_%"), "%u0041"),
    ]
    for i, (ns, key) in enumerate(odd):
        store.put(ns, key, {"i": i})  # (a value holds JSON only: no lone surrogate there)
    for i, (ns, key) in enumerate(odd):
        item = store.get(ns, key)
        assert item is not None and item.namespace == ns and item.key == key and item.value == {"i": i}
        assert [(i.namespace, i.key) for i in store.search(ns)] == [(ns, key)]
    assert sorted(store.list_namespaces(limit=100)) == sorted(ns for ns, _ in odd)
    long_ns = tuple("label%d" % i + "y" * 200 for i in range(8))  # over 1024 bytes of labels
    store.put(long_ns, "k", {"v": 1})
    assert store.get(long_ns, "k") is not None
    assert [i.key for i in store.search(long_ns[:6])] == ["k"]
    assert store.list_namespaces(prefix=long_ns[:7]) == [long_ns]


def test_a_long_prefix_still_reaches_only_its_namespace(store: MemoryStore) -> None:
    a, b = ("a" * 950,), ("a" * 950 + "b",)  # their escaped prefixes share the kept 944 bytes
    store.put(a, "k", {"v": 1})
    store.put(b, "k", {"v": 2})
    assert [i.namespace for i in store.search(a)] == [a]
    assert store.list_namespaces(prefix=a) == [a]


@pytest.mark.parametrize(
    "namespace", [(), ("foo.bar",), ("foo", ""), ("foo\x00",), (123,)], ids=["empty", "dot", "blank", "nul", "int"]
)
def test_batch_refuses_what_langgraph_refuses(store: MemoryStore, namespace: tuple[Any, ...]) -> None:
    store.put(("ok",), "k", {"v": 1})
    ops: list[Any] = [GetOp(namespace, "k"), PutOp(namespace, "k", {"v": 2}), PutOp(namespace, "k", None)]
    if namespace:
        ops += [SearchOp(namespace), ListNamespacesOp((MatchCondition("prefix", namespace),))]
    for op in ops:
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(("ok",), "k", {"v": 3}), op])  # nothing of the batch applies
    item = store.get(("ok",), "k")
    assert item is not None and item.value == {"v": 1}
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "x"), "k", {"v": 1})  # the public put refuses the reserved root


def test_values_must_be_json_objects(store: MemoryStore) -> None:
    with pytest.raises(InvalidValue):
        store.batch([PutOp(("a",), "k", [1, 2])])  # type: ignore[arg-type]
    with pytest.raises(InvalidValue):
        store.put(("a",), "k", {"x": math.nan})
    assert store.get(("a",), "k") is None


def test_items_persist_and_keep_their_creation_time(tmp_path: Path) -> None:
    with MemoryStore(root=str(tmp_path / "s"), durability="flush") as s:
        s.put(("u", "1"), "prefs", {"theme": "dark"})
        first = s.get(("u", "1"), "prefs")
        time.sleep(0.01)
        s.put(("u", "1"), "prefs", {"theme": "light"})
    with MemoryStore(root=str(tmp_path / "s"), durability="flush") as s:
        item = s.get(("u", "1"), "prefs")
        assert item is not None and first is not None
        assert item.value == {"theme": "light"}
        assert item.created_at == first.created_at and item.updated_at > first.updated_at


def test_a_store_on_a_given_manager_leaves_it_open(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        with MemoryStore(mm, namespace="langgraph.other") as s:
            s.put(("a",), "k", {"v": 1})
        assert not mm.closed
        assert [r.key for r in mm.query("langgraph.other")] == ["a//k"]


# -- filters and order ----------------------------------------------------------------


def test_filters_compare_numbers_as_numbers_and_reach_dotted_paths(store: MemoryStore) -> None:
    store.put(("d",), "a", {"n": 9, "s": "9", "meta": {"prio": 2, "tag": "x"}, "flag": True})
    store.put(("d",), "b", {"n": 10, "s": "10", "meta": {"prio": 1}, "flag": 1})
    store.put(("d",), "c", {"n": 10.0, "meta": {"prio": 3, "tag": "y"}})

    def keys(**kw: Any) -> list[str]:
        return [i.key for i in store.search(("d",), **kw)]

    assert keys(filter={"n": {"$gt": 9}}) == ["b", "c"]  # 10 > 9 as numbers ("10" < "9" as text)
    assert keys(filter={"n": 10}) == ["b", "c"]  # 10 == 10.0
    assert keys(filter={"s": {"$gt": "10"}}) == ["a"]  # strings compare as strings
    assert keys(filter={"s": {"$gt": 5}}) == []  # never across types
    assert keys(filter={"flag": True}) == ["a"]  # True is not 1
    assert keys(filter={"meta.prio": {"$gte": 2}}) == ["a", "c"]  # a dotted key is a path
    assert keys(filter={"meta": {"tag": "x"}}) == ["a"]  # a nested object matches field by field
    assert keys(filter={"meta.tag": {"$ne": "x"}}) == ["b", "c"]  # $ne matches a missing field
    assert keys(filter={"n": {"$gte": 9, "$lt": 10}}) == ["a"]
    with pytest.raises(InvalidFilter):
        store.search(("d",), filter={"n": {"$regex": "1"}})
    with pytest.raises(InvalidFilter):
        store.search(("d",), filter={"meta.prio": 1, "meta": {"prio": 1}})


def test_default_order_is_namespace_then_key_and_pages_are_stable(store: MemoryStore) -> None:
    for ns in [("b",), ("a", "z"), ("a",), ("a-b",)]:
        for key in ["k2", "k10", "k1"]:
            store.put(ns, key, {"v": key})
    full = [(i.namespace, i.key) for i in store.search((), limit=100)]
    assert full == sorted(full)
    store.put(("a",), "k1", {"v": "touched"})  # an update does not move an item
    pages = [(i.namespace, i.key) for off in range(0, 12, 5) for i in store.search((), limit=5, offset=off)]
    assert pages == full


def test_list_namespaces_prefix_suffix_wildcards_depth(store: MemoryStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "c", "f"), ("b", "a", "f"), ("users", "1")]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("a",), max_depth=2) == [("a", "b"), ("a", "c")]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "c", "f")]


# -- TTL ------------------------------------------------------------------------------


def test_expired_items_are_never_returned_between_sweeps(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [time.time()]
    monkeypatch.setattr(time, "time", lambda: now[0])
    store.put(("t",), "short", {"v": 1}, ttl=1)  # minutes
    store.put(("t",), "long", {"v": 2}, ttl=10)
    store.put(("t",), "never", {"v": 3})
    now[0] += 120
    assert store.get(("t",), "short") is None
    assert [i.key for i in store.search(("t",))] == ["long", "never"]
    store.put(("gone",), "k", {"v": 1}, ttl=1)
    now[0] += 120
    assert ("gone",) not in store.list_namespaces()
    assert store.sweep_ttl() == 2
    assert store.sweep_ttl() == 0


def test_refresh_on_read_pushes_expiry_without_moving_updated_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [time.time()]
    monkeypatch.setattr(time, "time", lambda: now[0])
    with MemoryStore(root=str(tmp_path / "s"), durability="flush", ttl={"default_ttl": 1, "refresh_on_read": True}) as s:
        s.put(("t",), "k", {"v": 1})
        before = s.get(("t",), "k", refresh_ttl=False)
        now[0] += 50
        s.get(("t",), "k")  # refreshed: expires 60 s from now
        now[0] += 50
        item = s.get(("t",), "k", refresh_ttl=False)
        assert item is not None and before is not None and item.updated_at == before.updated_at
        now[0] += 20
        assert s.get(("t",), "k") is None


def test_the_sweeper_thread_sweeps_and_stops(tmp_path: Path) -> None:
    with MemoryStore(root=str(tmp_path / "s"), durability="flush", ttl={"sweep_interval_minutes": 0.002}) as s:
        s.put(("t",), "k", {"v": 1}, ttl=0.001)
        done = s.start_ttl_sweeper()
        deadline = time.time() + 5
        while s.manager.query(s.namespace) and time.time() < deadline:
            time.sleep(0.05)
        assert s.manager.query(s.namespace) == []
        assert s.stop_ttl_sweeper(timeout=5)
        assert done.done()


# -- search ---------------------------------------------------------------------------


def test_query_without_an_embedder_goes_through_recall(store: MemoryStore) -> None:
    if not hasattr(store.manager, "recall"):
        pytest.skip("this manager has no recall")
    store.put(("docs", "u1"), "a", {"text": "the quarterly budget review"})
    store.put(("docs", "u1"), "b", {"text": "a recipe for lemon cake"})
    store.put(("docs", "u2"), "c", {"text": "budget spreadsheet for travel"})
    hits = store.search(("docs", "u1"), query="budget")
    assert [h.key for h in hits] == ["a"]
    assert hits[0].score is not None and hits[0].score > 0
    both = store.search(("docs",), query="budget", filter={"text": {"$ne": "x"}})
    assert {h.key for h in both} == {"a", "c"}


def test_query_with_an_embedder_ranks_by_cosine_of_the_best_field(tmp_path: Path) -> None:
    index = {"dims": 26, "embed": embed, "fields": ["title", "tags[*]"]}
    with MemoryStore(root=str(tmp_path / "s"), durability="flush", index=index) as s:  # type: ignore[arg-type]
        s.put(("n",), "zebra", {"title": "zzz", "tags": ["qqq", "abc"]})
        s.put(("n",), "apple", {"title": "aaa", "body": "zzz"})
        s.put(("n",), "plain", {"title": "zzz"}, index=False)
        hits = s.search(("n",), query="abc")
        assert [h.key for h in hits] == ["zebra", "apple", "plain"]
        assert hits[0].score == pytest.approx(1.0) and hits[2].score is None
        assert s.search(("n",), query="zzz")[0].key == "zebra"  # body is not an indexed field

        async def run() -> list[str]:
            await s.aput(("n",), "async", {"title": "abcabc"})
            return [h.key for h in await s.asearch(("n",), query="abc", limit=2)]

        assert asyncio.run(run()) in (["async", "zebra"], ["zebra", "async"])


def test_query_mode_recall_hands_the_embedder_to_recall(tmp_path: Path) -> None:
    if not hasattr(MemoryManager, "recall"):
        pytest.skip("this manager has no recall")
    index = {"dims": 26, "embed": embed, "fields": ["text"]}
    with MemoryStore(root=str(tmp_path / "s"), durability="flush", index=index, query_mode="recall") as s:  # type: ignore[arg-type]
        s.put(("docs",), "a", {"text": "the quarterly budget review"})
        s.put(("docs",), "b", {"text": "a recipe for lemon cake"})
        assert "e" not in s.manager.get_record(s.namespace, "docs//a").value  # type: ignore[union-attr]
        hits = s.search(("docs",), query="budget review")
        assert hits and hits[0].key == "a" and hits[0].score is not None
    with pytest.raises(ValueError):
        MemoryStore(root=str(tmp_path / "t"), query_mode="fuzzy")


def test_abatch_runs_the_same_ops(store: MemoryStore) -> None:
    async def run() -> list[Any]:
        return await store.abatch(
            [PutOp(("a",), "k", {"v": 1}), GetOp(("a",), "k"), SearchOp(("a",)), ListNamespacesOp()]
        )

    put, got, found, listed = asyncio.run(run())
    assert put is None and got.value == {"v": 1} and [i.key for i in found] == ["k"] and listed == [("a",)]


# -- packaging and the example ---------------------------------------------------------


def test_importing_hrm_memory_does_not_import_langgraph() -> None:
    code = "import sys, hrm_memory; sys.exit(any(m == 'langgraph' or m.startswith('langgraph.') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_example_graph_reads_and_writes_memory_through_the_store(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.graph", reason="the example needs langgraph (pip install -e '.[test]')")
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "langgraph_memory.py"), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "run 1" in proc.stdout and "run 2" in proc.stdout
    assert "remembered: likes tea" in proc.stdout.split("run 2", 1)[1]
