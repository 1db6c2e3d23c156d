"""Recall leaves out of a query the words found in most documents (their
bm25 weight is near zero, scoring their matches was most of a query's time),
and still finds what the rarer words point to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.recall.search import Recall
from hrm_memory.recall import textindex
from hrm_memory.recall.textindex import DF_CAP, DF_FLOOR


def test_common_words_are_left_out_and_rare_ones_still_find(tmp_path: Path) -> None:
    n = DF_CAP + 500  # past the size below which even a word in every document is ranked
    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        mm.declare(NamespaceSpec("t.notes", index=("text",)))
        for i in range(n):
            mm.write("t.notes", f"n{i}", {"text": f"walking note {i} zq{i}x"})
        rare = n - 7  # a word in one record
        hits = mm.recall(f"walked zq{rare}x", namespaces="t.notes", k=3)
        assert hits[0].key == f"n{rare}"
        index = next(c for c in mm._pipeline.components if isinstance(c, Recall)).index.disk
        assert index is not None
        assert index.selective(["walked", f"zq{rare}x"]) == [f"zq{rare}x"]  # "walk" is in every document
        assert index.selective(["walked", "notes"]) == []  # all in every document: nothing to rank by
        assert index.selective(["zq7x"]) == ["zq7x"]  # a rare word alone is kept
        assert index.selective(["walked"]) == []  # a word in every document ranks nothing
        # nothing to rank by, yet every record holds the question's one word:
        # the newest of them, found without ranking the word's postings
        newest = {f"n{i}" for i in range(n - textindex.EXACT_CAP, n)}
        assert len(hits := mm.recall("walking", namespaces="t.notes", k=3)) == 3
        assert {h.key for h in hits} <= newest


CHILD_COMMITS_THEN_DIES = """
import os, signal, sys, time
from hrm_memory import MemoryManager
mm = MemoryManager(sys.argv[1], durability="flush")
mm.write("focus.notes", "a", "a zqdead note")  # logged
pipe = mm._pipeline.core
data, _ = pipe.encode(pipe.spec("focus.notes"), "b", "b zqdead note")
pipe.backend.put("focus.notes", "b", data, time.time_ns() // 1000)  # committed, then killed before its log entry
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_writer_killed_between_commit_and_log_is_caught_up_through_a_recover_entry(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = tmp_path / "s"
    with MemoryManager(root, durability="flush") as long_lived:
        long_lived.write("focus.notes", "z", "z zqdead note")
        assert {h.key for h in long_lived.recall("zqdead")} == {"z"}
        before = long_lived.cursor()
        child = subprocess.run([sys.executable, "-c", CHILD_COMMITS_THEN_DIES, str(root)], capture_output=True)
        assert child.returncode == -9, child.stderr
        with MemoryManager(root, durability="flush") as fresh:  # its open finds the dead writer's note
            assert {h.key for h in fresh.recall("zqdead")} == {"a", "b", "z"}
        events, _ = long_lived.events_since(before)  # the recover entry is for derived data only
        assert [(e.op, e.key) for e in events] == [("write", "a")]
        assert {h.key for h in long_lived.recall("zqdead")} == {"a", "b", "z"}


def test_word_frequencies_follow_every_change_to_the_index(tmp_path: Path) -> None:
    """The pruning's document frequencies are remembered between queries,
    yet a word that becomes common, here or through another process's
    manager, is left out from the next query on, and one that becomes rare
    again is searched again."""
    from hrm_memory.recall.textindex import TextIndex

    spec = NamespaceSpec("notes.text", index=("text",))
    with MemoryManager(tmp_path, durability="flush", namespaces=[spec]) as mm:
        n = DF_FLOOR * 2
        for i in range(n):
            mm.write("notes.text", f"k{i:05d}", {"text": f"filler entry number {i}"})
        mm.recall("warm", namespaces="notes.text")
        index = TextIndex(tmp_path / "index")
        try:
            assert index.selective(["quokka", "entry"]) == ["quokka"]  # 'entry' is in every document
            assert index.selective(["quokka", "filler"]) == ["quokka"]
            assert index.selective(["quokka", "zebra"]) == ["quokka", "zebra"]
            # 'zebra' becomes common through the other manager: this index sees it at once.
            for i in range(DF_FLOOR + 1):
                mm.write("notes.text", f"k{i:05d}", {"text": f"zebra entry {i}"})
            mm.recall("warm", namespaces="notes.text")
            assert index.selective(["quokka", "zebra"]) == ["quokka"]
            # and rare again
            for i in range(DF_FLOOR + 1):
                mm.delete("notes.text", f"k{i:05d}")
            mm.recall("warm", namespaces="notes.text")
            assert index.selective(["quokka", "zebra"]) == ["quokka", "zebra"]
        finally:
            index.close()
    # Changes made by this very index's connection clear what it remembered too.
    own = TextIndex(None)
    try:
        from hrm_memory.recall.search import Doc

        docs = [Doc("a.b", f"k{i}", 1, 1, 1, "warm", None, 0.5, "moth", "") for i in range(DF_FLOOR * 3)]
        own.apply(docs, [])
        assert own.selective(["moth", "lynx"]) == ["lynx"]
        own.apply([], [("a.b", f"k{i}") for i in range(DF_FLOOR * 3)])
        own.apply([Doc("a.b", "x", 1, 1, 1, "warm", None, 0.5, "lynx", "")], [])
        assert own.selective(["moth", "lynx"]) == ["moth", "lynx"]
    finally:
        own.close()


def test_a_store_grown_by_another_connection_is_pruned_from_the_next_query_on(tmp_path: Path) -> None:
    """How many records the index holds (what a word's share is taken of)
    is remembered between queries too: an index read while it was small
    (every word kept) prunes a word made common by another connection's
    writes at its next query, and by its own writes too."""
    from hrm_memory.recall.search import Doc
    from hrm_memory.recall.textindex import TextIndex

    spec = NamespaceSpec("notes.text", index=("text",))
    with MemoryManager(tmp_path, durability="flush", namespaces=[spec]) as mm:
        for i in range(DF_FLOOR // 2):
            mm.write("notes.text", f"k{i:05d}", {"text": f"zebra entry {i}"})
        mm.recall("warm", namespaces="notes.text")
        index = TextIndex(tmp_path / "index")
        try:
            assert index.selective(["quokka", "zebra"]) == ["quokka", "zebra"]  # small: every word kept
            for i in range(DF_FLOOR // 2, DF_FLOOR * 3):
                mm.write("notes.text", f"k{i:05d}", {"text": f"zebra entry {i}"})
            mm.recall("warm", namespaces="notes.text")
            assert index.selective(["quokka", "zebra"]) == ["quokka"]  # 'zebra' is now in every document
        finally:
            index.close()
    own = TextIndex(None)
    try:
        own.apply([Doc("a.b", f"k{i}", 1, 1, 1, "warm", None, 0.5, "moth", "") for i in range(DF_FLOOR // 2)], [])
        assert own.selective(["moth", "lynx"]) == ["moth", "lynx"]
        own.apply([Doc("a.b", f"m{i}", 1, 1, 1, "warm", None, 0.5, "moth", "") for i in range(DF_FLOOR * 3)], [])
        assert own.selective(["moth", "lynx"]) == ["lynx"]
    finally:
        own.close()


def test_a_change_that_never_reached_the_log_is_found_by_the_reconcile(tmp_path: Path) -> None:
    """The reconcile compares each key's update time in the store with the
    index's (it is what catches up a dead writer's commit, and every
    process's first recall without a change log). The file backend's key
    list gave the creation time where the update time belongs, so a record
    rewritten after it was indexed, created and indexed at the same
    instant, looked current: the old text stayed searchable, the new never.
    Seen once as a flake of test_recall_after_sigkill_between_steps."""
    spec = NamespaceSpec("notes.text", index=("text",))
    with MemoryManager(tmp_path, durability="flush", namespaces=[spec], signal_log=False) as first:
        first.write("notes.text", "k", {"text": "alpha river"})
        assert [h.key for h in first.recall("alpha", namespaces="notes.text")] == ["k"]
    with MemoryManager(tmp_path, durability="flush", namespaces=[spec], signal_log=False) as second:
        second.update("notes.text", "k", lambda v: {"text": "beta quokka"})
        rec = second.get_record("notes.text", "k")
        assert rec is not None and rec.version == 2
    with MemoryManager(tmp_path, durability="flush", namespaces=[spec], signal_log=False) as third:
        backend = third._pipeline.core.backend
        st = backend.get("notes.text", "k")
        assert st is not None and st.updated_us > st.created_us
        assert backend.keys("notes.text") == [("k", st.created_us, st.updated_us)]
        assert [h.key for h in third.recall("quokka", namespaces="notes.text")] == ["k"]
        assert third.recall("alpha", namespaces="notes.text") == []


def _index_of(words_per_doc: list[str]) -> Any:
    from hrm_memory.recall.index import Doc
    from hrm_memory.recall.textindex import TextIndex

    index = TextIndex(None)
    index.apply([Doc("a.b", f"k{i:05d}", 1, i + 1, i + 1, "warm", None, 0.5, text, "") for i, text in
                 enumerate(words_per_doc)], [])
    return index


def test_a_query_ranks_within_a_posting_budget_its_rarest_words_first(monkeypatch: Any) -> None:
    """Ranking costs about a microsecond a matching passage: past POSTINGS
    (the passage counts of a query's words, summed) the commonest words left
    go too, the rarest always stays, the words keep their order."""
    from hrm_memory.recall import textindex

    texts = []
    for i in range(1000):
        words = [f"filler{i}"]
        words += ["alpha"] if i < 150 else []
        words += ["beta"] if 200 <= i < 300 else []
        words += ["gamma"] if 400 <= i < 420 else []
        words += ["delta"] if 500 <= i < 505 else []
        texts.append(" ".join(words))
    index = _index_of(texts)
    try:
        query = ["alpha", "beta", "gamma", "delta"]
        assert index.selective(query) == query  # 275 passages: within the default budget
        monkeypatch.setattr(textindex, "POSTINGS", 130)
        assert index.selective(query) == ["beta", "gamma", "delta"]  # 5 + 20 + 100 fit, 150 more does not
        monkeypatch.setattr(textindex, "POSTINGS", 24)
        assert index.selective(query) == ["delta"]
        monkeypatch.setattr(textindex, "POSTINGS", 1)
        assert index.selective(query) == ["delta"]  # the rarest stays, whatever the budget
        assert index.window(["delta"]) == 1
        assert index.window(["gamma", "delta"]) is None
    finally:
        index.close()


def test_a_query_left_with_one_common_word_ranks_its_newest_passages(monkeypatch: Any) -> None:
    """A query whose every word is common keeps the rarest; when even that
    one is in more passages than POSTINGS, the newest POSTINGS of them are
    ranked (the cost stays bounded at any size), not the best of all: here
    the oldest ones say it most often, yet only newer ones come back."""
    from hrm_memory.recall import textindex

    texts = [("omega " * (4 if i < 100 else 1) + f"filler{i}") if i % 2 == 0 else f"filler{i}" for i in range(1000)]
    index = _index_of(texts)  # "omega" in 500 of 1,000 records: common, but not in half of them
    try:
        assert index.selective(["omega"]) == ["omega"]
        assert index.window(["omega"]) is None  # 500 passages: within the default budget
        everything = index.search('"omega"', ["a.b"], cold=False, limit=10)
        assert all(int(r.key[1:]) < 100 for r in everything)  # ranked over all: the oldest say it most
        monkeypatch.setattr(textindex, "POSTINGS", 60)
        window = index.window(["omega"])
        assert window == 60
        newest = index.search('"omega"', ["a.b"], cold=False, limit=10, newest=window)
        assert len(newest) == 10
        # the 60 newest records holding it are the even ones from 880 on
        assert all(int(r.key[1:]) >= 880 and int(r.key[1:]) % 2 == 0 for r in newest), [r.key for r in newest]
        # A filter that passes too few of the window's passages: ranked over all
        # of them (the slow path of any filter that keeps few), so an old
        # record is still found.
        old = index.search('"omega"', ["a.b"], cold=False, limit=10, newest=window, prefix="k001")
        assert {r.key for r in old} >= {"k00100", "k00102", "k00104"}
        assert all(r.key.startswith("k001") for r in old)
    finally:
        index.close()
