"""recall() and remember(), their behaviour on real files.

Recall searches an FTS5 index kept under ``<root>/index``; these tests check
what it finds (stemmed words, across namespaces), what it must never serve
(deleted, superseded, archived without asking, unconsented text elsewhere
than this process), its arguments, its span, other processes' writes, and
the index files' permissions.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from hrm_memory import (
    AccessDenied,
    DuplicateMemory,
    InvalidArgument,
    InvalidFilter,
    MemoryManager,
    NamespaceSpec,
    StorageError,
    TrivialMemory,
)
from hrm_memory.recall.search import Recall
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.helpers.canary import files_holding

NOTES = NamespaceSpec("t.notes", index=("text",), ttl=60.0)


def keys(hits: list[Any]) -> set[tuple[str, str]]:
    return {(h.namespace, h.key) for h in hits}


def run_child(code: str, root: Path) -> Any:
    """Run ``code`` in a fresh interpreter (another process on ``root``); its
    last stdout line is JSON."""
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


CHILD_RECALL = """
import json, sys
from hrm_memory import MemoryManager
with MemoryManager(sys.argv[1]) as mm:
    print(json.dumps(sorted([h.namespace, h.key] for h in mm.recall(QUERY, k=50))))
"""


# -- finding ------------------------------------------------------------------


def test_finds_by_stemmed_words_across_namespaces(mm: MemoryManager) -> None:
    mm.write("shared.people", "alice", {"note": "Alice walked her dogs along the river"})
    mm.write("focus.notes", "n1", "We were walking to the station in the rain")
    mm.write("learning.generalizations", "g1", {"text": "People who walk daily sleep better"})
    mm.write("reasoning.strategies", "s1", {"text": "Timeboxing the inbox works well"})
    mm.write("focus.slow", "x", {"text": "walking here is not indexed"})  # no index=
    hits = mm.recall("walks", k=10)
    assert keys(hits) == {("shared.people", "alice"), ("focus.notes", "n1"), ("learning.generalizations", "g1")}
    assert all(h.record.value == mm.read(h.namespace, h.key) for h in hits)
    assert all(0.0 <= h.confidence <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert keys(mm.recall("timeboxed")) == {("reasoning.strategies", "s1")}
    assert mm.recall("the and of") == [] or all(h.namespace != "focus.slow" for h in mm.recall("the and of"))
    assert mm.recall("xylophone") == []
    assert keys(mm.recall("walking", namespaces=["shared.*", "focus.notes"])) == {
        ("shared.people", "alice"), ("focus.notes", "n1")}


def test_a_query_is_never_read_as_fts_syntax(mm: MemoryManager) -> None:
    mm.write("focus.notes", "n", "NEAR the OR gate, quoted \"text\" and col:umn stars*")
    for q in ['"', "NEAR(", "OR AND NOT", "col:umn", "stars*", "a'b", "(((", "^x", "-", ""]:
        mm.recall(q)  # no syntax error, whatever the input
    assert keys(mm.recall("gate OR")) == {("focus.notes", "n")}


# -- scope ----------------------------------------------------------------------


def test_a_scope_recalls_only_what_it_may_read(mm: MemoryManager) -> None:
    term = "zqscope4417"
    mm.write("focus.notes", "f", f"focus note {term}")
    mm.write("shared.people", "p", {"note": f"a person {term}"})
    mm.write("learning.generalizations", "r", {"text": f"a generalization {term}"})
    mm.write("altitude.patterns", "a", {"text": f"a pattern {term}"})
    assert len(mm.recall(term)) == 4
    focus = mm.scope("focus")
    assert keys(focus.recall(term)) == {("focus.notes", "f"), ("shared.people", "p")}
    assert keys(focus.recall(term, namespaces="*")) == {("focus.notes", "f"), ("shared.people", "p")}
    with pytest.raises(AccessDenied):
        focus.recall(term, namespaces="learning.generalizations")
    with pytest.raises(AccessDenied):
        focus.recall(term, namespaces="altitude.*")
    # a list mixing a readable and an unreadable exact namespace is refused too
    with pytest.raises(AccessDenied):
        focus.recall(term, namespaces=["focus.notes", "reasoning.strategies"])


def test_routing_never_hides_an_exact_match_when_fewer_than_k_hits(mm: MemoryManager) -> None:
    term = "zqroute3301"
    mm.write("focus.notes", "fact", f"a note {term}")  # semantic: routed for a factual query
    mm.write("reasoning.strategies", "how", {"text": f"a strategy {term}"})  # procedural
    assert keys(mm.recall(term, k=10)) == {("focus.notes", "fact"), ("reasoning.strategies", "how")}


# -- consent ----------------------------------------------------------------------


def test_gated_text_is_found_in_this_process_only_and_never_on_disk(root: Path) -> None:
    term = "zqgated8123"
    with MemoryManager(root) as mm:
        mm.write("focus.conversation", "c1", {"said": f"the user mentioned {term} twice"})
        mm.write("altitude.patterns", "p1", {"text": "an ungated pattern zqopen5521"})
        assert keys(mm.recall(term)) == {("focus.conversation", "c1")}
        assert mm.get_record("focus.conversation", "c1").persisted is False  # type: ignore[union-attr]
        other = run_child(f"QUERY = {term!r}\n" + CHILD_RECALL, root)
        assert other == []
        assert run_child("QUERY = 'zqopen5521'\n" + CHILD_RECALL, root) == [["altitude.patterns", "p1"]]
        assert (root / "index" / "recall.db").exists()
        assert files_holding(root, term) == []
        mm.update("focus.conversation", "c1", lambda v: {**v, "more": f"{term} again"})
        assert keys(mm.recall(term)) == {("focus.conversation", "c1")}
        assert files_holding(root, term) == []
    with MemoryManager(root) as mm:  # the session copy ended with its process
        assert mm.recall(term) == []


# -- never served -------------------------------------------------------------------


def test_deleted_updated_and_superseded_records_are_never_served(root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm, MemoryManager(root, durability="flush") as other:
        mm.write("focus.notes", "a", "apricot orchard zqold1")
        mm.write("focus.notes", "b", "banana plantation zqold2")
        mm.write("focus.notes", "c", "cherry blossom zqold3")
        assert {h.key for h in mm.recall("orchard plantation blossom")} == {"a", "b", "c"}
        # updated here
        mm.update("focus.notes", "a", lambda v: "apricot jam zqnew1")
        assert mm.recall("zqold1") == []
        assert [(h.key, h.record.value) for h in mm.recall("zqnew1")] == [("a", "apricot jam zqnew1")]
        # deleted here
        assert mm.delete("focus.notes", "b")
        assert mm.recall("zqold2") == [] and mm.recall("plantation") == []
        # superseded by another manager (its change reaches us through the log)
        other.write("focus.notes", "c", "cherry pie zqnew3")
        assert mm.recall("zqold3") == []
        assert [h.record.value for h in mm.recall("zqnew3")] == ["cherry pie zqnew3"]
        other.delete("focus.notes", "c")
        assert mm.recall("zqnew3") == [] and other.recall("zqnew3") == []
        # a re-written key is served at its new version only
        mm.write("focus.notes", "b", "banana bread zqnew2")
        (hit,) = mm.recall("banana")
        assert hit.record.value == "banana bread zqnew2" and hit.record.version == mm.get_record("focus.notes", "b").version  # type: ignore[union-attr]


def test_hot_tier_and_stale_index_rows_are_checked_against_the_store(root: Path) -> None:
    specs = [NamespaceSpec("t.hot", tier="hot", index=("$",)), NOTES]
    with MemoryManager(root, namespaces=specs, durability="flush") as mm:
        mm.write("t.hot", "h", "a hot value zqhot77")
        assert keys(mm.recall("zqhot77")) == {("t.hot", "h")}
        mm.delete("t.hot", "h")
        assert mm.recall("zqhot77") == []
        assert files_holding(root, "zqhot77") == []  # hot text never reaches the index file
        mm.write("t.notes", "n", {"text": "first words zqfirst"})
        mm.recall("zqfirst")
        # the index row is stale behind the store's back: never served
        (index,) = {c.index for c in mm._pipeline.components if hasattr(c, "index")}
        mm.write("t.notes", "n", {"text": "second words zqsecond"})
        index._dirty.clear()  # the fault: the write's note is lost; only the log remains
        assert mm.recall("zqfirst") == []
        assert [h.record.value for h in mm.recall("zqsecond")] == [{"text": "second words zqsecond"}]


# -- archive --------------------------------------------------------------------------


def test_archived_records_need_include_cold_or_the_cascade(root: Path) -> None:
    with MemoryManager(root, namespaces=[NOTES], durability="flush") as mm:
        mm.write("t.notes", "old", {"text": "the lighthouse keeper logbook"})
        moved = mm.archive(now=time.time() + 3600)
        assert moved == {"t.notes": 1}
        mm.write("t.notes", "new", {"text": "the lighthouse keeper logbook again"})
        live = mm.recall("lighthouse keeper logbook", explain=True)
        assert keys(live) == {("t.notes", "new")}
        assert all(stage["cold"] is False for stage in live[0].why["path"])  # type: ignore[index]
        both = mm.recall("lighthouse keeper logbook", include_cold=True)
        assert keys(both) == {("t.notes", "new"), ("t.notes", "old")}
        cold = {h.key: h.record for h in both}["old"]
        assert cold.tier == "cold" and cold.value == mm.read("t.notes", "old")
        # nothing live answers: the cascade reaches the cold tier, and says so
        mm.write("t.notes", "other", {"text": "unrelated gardening tips"})
        mm.archive(now=time.time() + 3600)
        hits = mm.recall("lighthouse", explain=True)
        assert keys(hits) == {("t.notes", "new"), ("t.notes", "old")}
        assert all(h.record.tier == "cold" for h in hits)
        path = hits[0].why["path"]  # type: ignore[index]
        assert path[-1]["stage"] == "cold" and path[-1]["cold"] is True
        assert all(not s["cold"] for s in path[:-1]) and path[-1]["hits"] == 2
        # deleted while archived: gone from recall too
        mm.delete("t.notes", "old")
        assert keys(mm.recall("lighthouse", include_cold=True)) == {("t.notes", "new")}


# -- arguments ------------------------------------------------------------------------


def test_kinds_since_where_prefix_and_k(root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm:
        for i in range(15):
            mm.write("shared.memories", f"fact-{i:02}", {"text": f"zqberry fact number {i}", "kind": "semantic", "n": i})
        mm.write("shared.memories", "todo-1", {"text": "buy zqberry jam", "kind": "prospective", "n": 100})
        mm.write("reasoning.strategies", "plan-1", {"text": "zqberry picking method"})  # kind procedural (the spec's)
        every = ("semantic", "prospective", "procedural")
        assert len(mm.recall("zqberry", kinds=every, k=50)) == 17
        assert len(mm.recall("zqberry", k=3)) == 3
        assert keys(mm.recall("zqberry", kinds="prospective")) == {("shared.memories", "todo-1")}
        assert keys(mm.recall("zqberry", kinds=["procedural"])) == {("reasoning.strategies", "plan-1")}
        assert len(mm.recall("zqberry", kinds=("semantic", "prospective"), k=50)) == 16
        assert keys(mm.recall("zqberry", kinds=every, where={"n": {"$gte": 13}}, k=50)) == {
            ("shared.memories", "fact-13"), ("shared.memories", "fact-14"), ("shared.memories", "todo-1")}
        assert {h.key for h in mm.recall("zqberry", prefix="fact-1", k=50)} == {f"fact-{i}" for i in range(10, 15)}
        assert mm.recall("zqberry", since=time.time() + 60) == []
        assert len(mm.recall("zqberry", kinds=every, since=datetime.now(UTC) - timedelta(minutes=5), k=50)) == 17
        mark = time.time()
        time.sleep(0.01)
        mm.write("shared.memories", "fact-late", {"text": "a late zqberry", "kind": "semantic"})
        assert {h.key for h in mm.recall("zqberry", since=mark, k=50)} == {"fact-late"}

        bad: list[dict[str, Any]] = [
            {"k": 0}, {"k": 1001}, {"k": -1}, {"k": "3"}, {"k": True}, {"k": 2.0}, {"k": None},
            {"kinds": "bogus"}, {"kinds": ["semantic", "nope"]}, {"kinds": 3}, {"kinds": [3]},
            {"since": datetime(2020, 1, 1)}, {"since": "yesterday"}, {"since": float("nan")}, {"since": True},
            {"prefix": 3}, {"prefix": b"fact"},
        ]
        for kwargs in bad:
            with pytest.raises(InvalidArgument):
                mm.recall("zqberry", **kwargs)
        with pytest.raises(InvalidArgument):
            mm.recall(b"zqberry")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            mm.recall(None)  # type: ignore[arg-type]
        with pytest.raises(InvalidFilter):
            mm.recall("zqberry", where={"n": {"$regex": "x"}})
        with pytest.raises(InvalidArgument):
            mm.recall("zqberry", namespaces=3)  # type: ignore[arg-type]


# -- remember -------------------------------------------------------------------------


def test_remember_refuses_trivial_content_with_the_reason(mm: MemoryManager) -> None:
    for content, reason in [("", "no words"), ("   ", "no words"), ("ok thanks", "pleasantry"),
                            ("the of and", "substance"), ("hi dog", "three words")]:
        with pytest.raises(TrivialMemory) as info:
            mm.remember(content, kind="semantic")
        assert reason in info.value.reason  # type: ignore[attr-defined]
        assert reason in str(info.value)
    assert mm.query("shared.memories") == []
    with pytest.raises(InvalidArgument):
        mm.remember("the user prefers green tea in the morning", kind="gossip")
    with pytest.raises(InvalidArgument):
        mm.remember("the user prefers green tea in the morning", kind="semantic", importance=2)
    with pytest.raises(InvalidArgument):
        mm.remember("the user prefers green tea in the morning", kind="semantic", namespace="focus.slow")


def test_remember_merges_near_duplicate_facts(mm: MemoryManager) -> None:
    first = mm.remember("The user prefers green tea in the morning", kind="semantic", tags=["drinks"], importance=0.4)
    assert first.action == "created" and first.namespace == "shared.memories"
    again = mm.remember("the user prefers green tea in the mornings!", kind="semantic", tags=["habits"], importance=0.8)
    assert again.action == "merged" and again.key == first.key and again.similarity >= 0.75
    (rec,) = mm.query("shared.memories")
    assert rec.value["mentions"] == 2 and rec.value["importance"] == 0.8
    assert rec.value["tags"] == ["drinks", "habits"]
    assert rec.value["text"] == "the user prefers green tea in the mornings!"
    different = mm.remember("The user dislikes loud music while working", kind="semantic")
    assert different.action == "created" and different.key != first.key
    (hit,) = mm.recall("green tea")
    assert hit.key == first.key and hit.record.value["mentions"] == 2
    # the same words as another kind are a different memory
    proc = mm.remember("The user prefers green tea in the morning", kind="procedural")
    assert proc.action == "created" and proc.key != first.key


def test_remember_refuses_a_duplicate_intention(mm: MemoryManager) -> None:
    made = mm.remember("Call the dentist about the crown on Friday", kind="prospective")
    with pytest.raises(DuplicateMemory) as info:
        mm.remember("call the dentist about the crown on friday.", kind="prospective")
    assert info.value.key == made.key  # type: ignore[attr-defined]
    assert len(mm.query("shared.memories")) == 1


def test_remember_merges_an_episode_retold_within_a_day(mm: MemoryManager) -> None:
    first = mm.remember("Met Sam at the climbing gym and talked about the trip", kind="episodic")
    again = mm.remember("met Sam at the climbing gym, talked about the trip", kind="episodic")
    assert again.action == "merged" and again.key == first.key
    assert mm.read("shared.memories", first.key)["mentions"] == 2


def test_remember_an_old_episode_again_is_a_new_event(root: Path) -> None:
    from hrm_memory.recall import memories

    with MemoryManager(root, durability="flush") as mm:
        first = mm.remember("Met Sam at the climbing gym and talked about the trip", kind="episodic",
                            key="episodic-old")
        real = memories.now_us
        memories.now_us = lambda: real() + 2 * memories.DAY_US  # type: ignore[assignment]
        try:
            again = mm.remember("met Sam at the climbing gym, talked about the trip", kind="episodic")
        finally:
            memories.now_us = real  # type: ignore[assignment]
        assert again.action == "created" and again.key != first.key


def test_a_scope_remembers_in_its_own_namespace(mm: MemoryManager) -> None:
    focus = mm.scope("focus")
    made = focus.remember("The user's focus block starts at nine", kind="procedural")
    assert made.namespace == "focus.memories"
    with pytest.raises(AccessDenied):
        focus.remember("The user's focus block starts at nine", kind="procedural", namespace="reasoning.memories")
    assert keys(focus.recall("focus block")) == {("focus.memories", made.key)}


# -- span -------------------------------------------------------------------------------


@pytest.fixture(params=["deferred", "api"])
def traced(request: pytest.FixtureRequest, root: Path) -> Iterator[tuple[MemoryManager, TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(root, tracer_provider=provider, durability="flush",
                       deferred_spans=request.param == "deferred") as mm:
        yield mm, provider, exporter
    provider.shutdown()


def test_one_recall_span_without_the_query_or_values(traced: Any) -> None:
    mm, provider, exporter = traced
    secret = "zqsecretword991"
    mm.write("focus.notes", "n1", f"note about {secret} and the harbour")
    mm.remember(f"The harbour master knows {secret}", kind="semantic")
    provider.force_flush()
    exporter.clear()
    hits = mm.recall(f"who knows {secret} harbour", k=5, where={"x": secret}, explain=True)
    assert hits == []  # the where filter drops both
    hits = mm.recall(f"{secret} harbour", k=5)
    provider.force_flush()
    found = list(exporter.get_finished_spans())
    assert [s.attributes["db.operation.name"] for s in found] == ["recall", "recall"]
    attrs = dict(found[1].attributes)
    assert attrs["db.operation.name"] == "recall"
    assert attrs["db.response.returned_rows"] == len(hits) == 2
    assert attrs["hrm.memory.query_terms"] == 2
    assert attrs["hrm.memory.query_type"] == "factual"
    assert attrs["hrm.memory.namespaces"] >= 10
    assert attrs["hrm.memory.stages"] >= 1
    assert 0.0 < attrs["hrm.memory.confidence"] <= 1.0
    assert dict(found[0].attributes)["db.response.returned_rows"] == 0
    text = orjson.dumps([{"a": dict(s.attributes), "e": [dict(e.attributes or {}) for e in s.events],
                          "s": s.status.description, "n": s.name} for s in found], default=str).decode()
    assert secret not in text and "harbour" not in text
    exporter.clear()
    with pytest.raises(InvalidArgument):
        mm.recall(secret, k=0)
    provider.force_flush()
    (failed,) = exporter.get_finished_spans()
    assert failed.attributes["db.operation.name"] == "recall" and failed.attributes["error.type"] == "InvalidArgument"
    assert secret not in orjson.dumps(dict(failed.attributes), default=str).decode()
    assert secret not in (failed.status.description or "")


# -- other processes --------------------------------------------------------------------


def test_a_write_in_another_process_is_found_by_the_next_recall(root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.notes", "mine", "my own zqcross note")
        assert keys(mm.recall("zqcross")) == {("focus.notes", "mine")}  # index built, cursor kept
        run_child(
            "import json, sys\nfrom hrm_memory import MemoryManager, NamespaceSpec\n"
            "with MemoryManager(sys.argv[1], durability='flush') as mm:\n"
            "    mm.write('focus.notes', 'theirs', 'their zqcross note')\n"
            "    mm.update('focus.notes', 'mine', lambda v: 'my own note, rewritten elsewhere')\n"
            "    mm.declare(NamespaceSpec('t.notes', index=('text',), ttl=60.0, kind='semantic'))\n"
            "    mm.write('t.notes', 'x', {'text': 'a zqcross in a new namespace'})\n"
            "    print(json.dumps(None))\n",
            root,
        )
        assert keys(mm.recall("zqcross")) == {("focus.notes", "theirs"), ("t.notes", "x")}
        assert keys(mm.recall("rewritten")) == {("focus.notes", "mine")}
        # and the other process, starting cold, finds ours
        assert run_child("QUERY = 'zqcross'\n" + CHILD_RECALL, root) == [["focus.notes", "theirs"], ["t.notes", "x"]]


def test_a_namespace_declared_elsewhere_is_caught_up_after_an_exact_recall(root: Path) -> None:
    """Events of a namespace this process has not heard of yet are not skipped
    for good when a recall names known namespaces only."""
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.notes", "mine", "a zqknown note")
        assert keys(mm.recall("zqknown", namespaces="focus.notes")) == {("focus.notes", "mine")}
        run_child(
            "import json, sys\nfrom hrm_memory import MemoryManager, NamespaceSpec\n"
            "with MemoryManager(sys.argv[1], durability='flush') as mm:\n"
            "    mm.declare(NamespaceSpec('t.late', index=('text',)))\n"
            "    mm.write('t.late', 'x', {'text': 'a zqlate note'})\n"
            "    print(json.dumps(None))\n",
            root,
        )
        assert mm.recall("zqknown", namespaces="focus.notes") != []  # the log is read here
        assert keys(mm.recall("zqlate")) == {("t.late", "x")}


def test_a_lost_index_is_rebuilt_and_an_expired_cursor_means_a_rebuild(root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.notes", "a", "a zqrebuild note")
        assert len(mm.recall("zqrebuild")) == 1
    for name in ("recall.db", "recall.db-wal", "recall.db-shm"):
        (root / "index" / name).unlink(missing_ok=True)
    with MemoryManager(root, durability="flush") as mm:
        assert keys(mm.recall("zqrebuild")) == {("focus.notes", "a")}
        # a cursor the log no longer reaches: a full rebuild, not an empty index
        index = next(c for c in mm._pipeline.components if isinstance(c, Recall)).index.disk
        index.apply([], [], {"cursor": "1:0"})  # type: ignore[union-attr]
        mm.delete("focus.notes", "a")
        mm.write("focus.notes", "b", "b zqrebuild note")
        assert keys(mm.recall("zqrebuild")) == {("focus.notes", "b")}


# -- the index files --------------------------------------------------------------------


def test_index_files_are_private(root: Path) -> None:
    old = os.umask(0o022)
    try:
        with MemoryManager(root, durability="flush") as mm:
            mm.write("focus.notes", "n", "zqperm text")
            assert mm.recall("zqperm")
            directory = root / "index"
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
            files = [p for p in directory.iterdir() if p.name.startswith("recall.db")]
            assert root / "index" / "recall.db" in files
            for p in files:
                assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    finally:
        os.umask(old)


def test_a_link_planted_at_the_index_is_refused(root: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.notes", "n", "zqlink text")
    (root / "index").symlink_to(elsewhere, target_is_directory=True)
    with MemoryManager(root, durability="flush") as mm:
        with pytest.raises(StorageError):
            mm.recall("zqlink")
        with pytest.raises(StorageError):
            mm.remember("the user keeps a zqlink diary", kind="semantic")
    assert list(elsewhere.iterdir()) == []
    assert (root / "index").is_symlink()


def test_a_link_planted_at_the_index_file_is_refused(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    target.write_bytes(b"")
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.notes", "n", "zqlink text")
    (root / "index").mkdir(mode=0o700, exist_ok=True)
    for name in ("recall.db", "recall.db-wal"):
        link = root / "index" / name
        for p in (root / "index").iterdir():
            p.unlink()
        link.symlink_to(target)
        with MemoryManager(root, durability="flush") as mm, pytest.raises(StorageError):
            mm.recall("zqlink")
        assert target.read_bytes() == b""


def test_a_revoke_with_purge_keeps_this_sessions_copies_findable(root: Path) -> None:
    """Found by the stateful test: the purge emptied the in-memory index too,
    though the session-only copies it held stay readable."""
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.conversation", "c1", {"said": "a zqsession note"})
        assert keys(mm.recall("zqsession")) == {("focus.conversation", "c1")}
        mm.consent.revoke("conversation", purge=True)
        assert mm.read("focus.conversation", "c1") == {"said": "a zqsession note"}
        assert keys(mm.recall("zqsession")) == {("focus.conversation", "c1")}


@pytest.mark.xfail(reason="a commit that lost its change-log entry while its writer lives on (the log's "
                   "I/O failed; counted in gaps) is not seen by recall until the index is rebuilt; a writer that "
                   "died is caught up (tests/recall/test_recall_prune.py)")
def test_a_commit_without_its_log_entry_is_found_by_a_long_lived_process(root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm, MemoryManager(root, durability="flush") as writer:
        mm.write("focus.notes", "a", "a zqlogless note")
        assert len(mm.recall("zqlogless")) == 1  # reconciled; from now on the log is all it reads
        pipe = writer._pipeline
        data, _ = pipe._encode(pipe.spec("focus.notes"), "b", "b zqlogless note")
        pipe.backend.put("focus.notes", "b", data, time.time_ns() // 1000)  # committed; killed before the log line
        found = keys(mm.recall("zqlogless"))
        with MemoryManager(root, durability="flush") as fresh:  # a new process reconciles the shared file
            assert keys(fresh.recall("zqlogless")) == {("focus.notes", "a"), ("focus.notes", "b")}
        assert keys(mm.recall("zqlogless")) == {("focus.notes", "a"), ("focus.notes", "b")}
        assert found == {("focus.notes", "a"), ("focus.notes", "b")}


def test_a_damaged_index_is_set_aside_and_rebuilt(root: Path) -> None:
    """A damaged index does not fail every recall: the damaged file goes to
    quarantine/, kept, and the recall that met it rebuilds the index. More in
    tests/recall/test_recall_index_damage.py."""
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.notes", "a", "a zqdamage note")
        assert mm.recall("zqdamage")
    index = root / "index"
    data = bytearray((index / "recall.db").read_bytes())
    data[100:4000] = b"\xff" * 3900
    (index / "recall.db").write_bytes(bytes(data))
    for name in ("recall.db-wal", "recall.db-shm"):
        (index / name).unlink(missing_ok=True)
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.notes", "b", "b zqdamage note")  # the write path never reads the index
        assert keys(mm.recall("zqdamage")) == {("focus.notes", "a"), ("focus.notes", "b")}
        assert [f.kind for f in mm.check()] == ["corrupt-index"]
    assert [p.read_bytes() for p in (root / "quarantine").glob("index__recall.db.*")] == [bytes(data)]
    with MemoryManager(root, durability="flush") as mm:
        assert keys(mm.recall("zqdamage")) == {("focus.notes", "a"), ("focus.notes", "b")}
