"""Recall leaves out of a query the words found in most documents (their
bm25 weight is near zero, scoring their matches was most of a query's time),
and still finds what the rarer words point to."""

from __future__ import annotations

from pathlib import Path

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.storage.textindex import DF_FLOOR


def test_common_words_are_left_out_and_rare_ones_still_find(tmp_path: Path) -> None:
    n = DF_FLOOR + 500
    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        mm.declare(NamespaceSpec("t.notes", index=("text",)))
        for i in range(n):
            mm.write("t.notes", f"n{i}", {"text": f"walking note {i} zq{i}x"})
        hits = mm.recall("walked zq1234x", namespaces="t.notes", k=3)
        assert hits[0].key == "n1234"
        index = mm._pipeline.disk_index
        assert index is not None
        assert index.selective(["walked", "zq1234x"]) == ["zq1234x"]  # "walk" is in every document
        assert index.selective(["walked", "notes"]) == []  # all in every document: nothing to rank by
        assert index.selective(["zq7x"]) == ["zq7x"]  # a rare word alone is kept
        assert index.selective(["walked"]) == []  # a word in every document ranks nothing
        assert mm.recall("walking", namespaces="t.notes") == []
