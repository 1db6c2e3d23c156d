"""The document frequencies (and the record count) a recall index remembers
between queries stay exact through its own writes, deletes, forgets and
purges, and through other processes' writes: a small write moves them by
what it changed, anything else makes them counted again. Compared, after
every change, with an index opened afresh on the same file (which counts
everything from FTS5): bm25's idf weights must be the same."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.recall.search import Recall
from hrm_memory.recall.textindex import KEEP_COUNTS_UP_TO, TextIndex

#: Words of the texts, a few of them stemmed alike ("walks", "walking") and
#: one not ASCII (its writes make the counts be read again).
VOCAB = ["walks", "walking", "quokka", "river", "stone", "maple", "lynx", "ember", "drift", "café"]
ASKED = ["walk", "quokka", "river", "stone", "maple", "lynx", "ember", "drift", "notes", "café", "k1"]
SPEC = NamespaceSpec("t.notes", index=("text",))


def _own_index(mm: MemoryManager) -> TextIndex:
    index = next(c for c in mm._pipeline.components if isinstance(c, Recall)).index.disk
    assert isinstance(index, TextIndex)
    return index


def _fresh_weights(root: Path) -> dict[str, float]:
    fresh = TextIndex(root / "index")
    try:
        return fresh.weights(ASKED)
    finally:
        fresh.close()


text_of = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6).map(" ".join)
OPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 11), text_of),
    st.tuples(st.just("delete"), st.integers(0, 11), st.just("")),
    st.tuples(st.just("forget"), st.integers(0, 11), st.just("")),
    st.tuples(st.just("many"), st.integers(0, 3), text_of),  # more records than a small write
), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None)
@given(OPS)
def test_remembered_counts_stay_those_of_the_index_through_every_change(tmp_path_factory: object, ops: list[tuple[str, int, str]]) -> None:
    root = Path(tmp_path_factory.mktemp("counts"))  # type: ignore[attr-defined]
    with MemoryManager(root, durability="flush", namespaces=[SPEC]) as mm:
        for i in range(6):
            mm.write("t.notes", f"k{i}", {"text": f"{VOCAB[i]} {VOCAB[i + 1]} river"})
        mm.recall("river", namespaces="t.notes")
        own = _own_index(mm)
        assert own.weights(ASKED) == _fresh_weights(root)  # every asked word's count now remembered
        for op, n, text in ops:
            if op == "write":
                mm.write("t.notes", f"k{n}", {"text": text})
            elif op == "delete":
                mm.delete("t.notes", f"k{n}")
            elif op == "forget":
                if mm.read("t.notes", f"k{n}") is not None:
                    mm.forget("t.notes", f"k{n}")
            else:
                for j in range(KEEP_COUNTS_UP_TO + 1 + n):
                    mm.write("t.notes", f"b{n}-{j}", {"text": text})
            mm.recall("stone", namespaces="t.notes")  # the index catches up with the change
            assert own.weights(ASKED) == _fresh_weights(root), op


def test_the_counts_follow_a_small_write_without_being_read_again(tmp_path: Path) -> None:
    """A small write moves the counts: the word written once more weighs
    less at once, as a fresh index says; and a word of a record replaced
    (its text gone) weighs more."""
    with MemoryManager(tmp_path, durability="flush", namespaces=[SPEC]) as mm:
        for i in range(20):
            mm.write("t.notes", f"k{i}", {"text": "river" if i % 2 else "stone maple"})
        mm.recall("river", namespaces="t.notes")
        own = _own_index(mm)
        before = own.weights(["river", "stone"])
        mm.write("t.notes", "k0", {"text": "river lynx"})  # 'stone' leaves k0, 'river' comes
        mm.recall("lynx", namespaces="t.notes")
        after = own.weights(["river", "stone"])
        assert after["river"] < before["river"] and after["stone"] > before["stone"]
        assert own.weights(ASKED) == _fresh_weights(tmp_path)


CHILD_WRITES = """
import sys
from hrm_memory import MemoryManager, NamespaceSpec
with MemoryManager(sys.argv[1], durability="flush", namespaces=[NamespaceSpec("t.notes", index=("text",))]) as mm:
    for i in range(30):
        mm.write("t.notes", f"c{i}", {"text": "quokka ember"})
    mm.recall("quokka", namespaces="t.notes")  # this process indexes them
"""


def test_another_processs_writes_make_the_counts_be_read_again(tmp_path: Path) -> None:
    with MemoryManager(tmp_path, durability="flush", namespaces=[SPEC]) as mm:
        for i in range(10):
            mm.write("t.notes", f"k{i}", {"text": "river stone"})
        mm.recall("river", namespaces="t.notes")
        own = _own_index(mm)
        before = own.weights(ASKED)
        subprocess.run([sys.executable, "-c", CHILD_WRITES, str(tmp_path)], check=True)
        after = own.weights(ASKED)  # no recall here: the index file changed under this connection
        assert after != before and after == _fresh_weights(tmp_path)
