"""A record holding every word of the question is found, however common its
words: what bounds a search's cost (words left out past a share of the
documents, the posting budget, a window of the newest passages) never drops
it in favour of records holding fewer of them.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.recall import text as rt
from hrm_memory.recall import textindex

NS = "t.notes"
COMMON = ["amber", "birch", "cobalt", "dune"]
FILLER = [f"w{i:04d}x" for i in range(400)]


def _store(root: Path, n: int, seed: int, targets: dict[int, list[str]]) -> MemoryManager:
    """``n`` notes, each holding two or three of the COMMON words (never all
    of a target's set) among filler words; the notes at ``targets`` hold
    their set of COMMON words and nothing else that is common."""
    rng = random.Random(seed)
    mm = MemoryManager(root, durability="flush")
    mm.declare(NamespaceSpec(NS, index=("text",)))
    sets = [frozenset(t) for t in targets.values()]
    for i in range(n):
        if i in targets:
            words = list(targets[i]) + rng.sample(FILLER, 4)
        else:
            while True:
                common = rng.sample(COMMON, rng.choice((1, 2, 2, 3)))
                if not any(s <= set(common) for s in sets):
                    break
            words = common * rng.choice((1, 2)) + rng.sample(FILLER, 3)  # some hold a word twice: bm25 likes them
        rng.shuffle(words)
        mm.write(NS, f"n{i:05d}", {"text": " ".join(words)})
    return mm


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_record_holding_every_word_is_in_the_top_k(tmp_path: Path, seed: int) -> None:
    n = 3000
    targets = {7: ["amber", "birch", "cobalt"], n // 2: ["birch", "cobalt", "dune"], n - 3: ["amber", "cobalt", "dune"]}
    with _store(tmp_path / "root", n, seed, targets) as mm:
        for at, words in targets.items():
            question = " ".join(words)
            hits = mm.recall(question, namespaces=NS, k=5, explain=True)
            assert hits and hits[0].key == f"n{at:05d}", (question, [h.key for h in hits])
            # each word is too common to be ranked on its own here: the budget left words out
            assert len(mm.recall(words[0], namespaces=NS, k=50)) == 50


def test_every_word_found_past_the_posting_budget_and_in_any_order(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With a budget smaller than any word's postings (a window of the
    newest passages for the word left), the oldest record holding all the
    words still comes first; so does it for the words in another order and
    with stopwords around them."""
    monkeypatch.setattr(textindex, "POSTINGS", 50)
    n = 1200
    with _store(tmp_path / "root", n, 9, {0: ["amber", "birch", "dune"]}) as mm:
        for question in ("amber birch dune", "dune amber birch", "the dune and the amber of birch"):
            hits = mm.recall(question, namespaces=NS, k=3)
            assert hits and hits[0].key == "n00000", (question, [h.key for h in hits])


def test_coverage_of_the_rarer_words_ranks_above_the_commoner(tmp_path: Path) -> None:
    """No record holds every word: those holding the rarer ones come before
    those holding only the commonest."""
    with MemoryManager(tmp_path / "root") as mm:
        mm.declare(NamespaceSpec(NS, index=("text",)))
        for i in range(400):
            mm.write(NS, f"c{i:04d}", {"text": f"amber {FILLER[i % 50]} note"})
        mm.write(NS, "rare", {"text": "zircon quartz note"})
        hits = mm.recall("amber zircon quartz", namespaces=NS, k=3)
        assert hits[0].key == "rare"


def test_the_filling_after_exact_matches_is_ranked_within_a_smaller_budget(tmp_path: Path) -> None:
    """The words kept for the ranked search fit ``budget`` postings, the
    rarest first and always; a single word in more passages is ranked in a
    window of that many of its newest (what recall uses to fill the hits
    after the passages holding every word). Failed before: neither took a
    budget, the filling cost as much as a search finding no exact match."""
    with _store(tmp_path / "root", 3000, 4, {}) as mm:
        mm.recall("amber", namespaces=NS, k=1)  # indexes the store
    index = textindex.TextIndex(tmp_path / "root" / "index")
    try:
        rare = [FILLER[0], FILLER[1]]  # each in a few dozen notes
        assert index.selective(rare, 5_000) == rare
        assert len(index.selective(rare, 1)) == 1  # the rarest, however small the budget
        assert index.window(["amber"], 200) == 200
        assert index.window(["amber"]) is None  # its passages are within POSTINGS: all ranked
        assert index.window([FILLER[0]], 200) is None
    finally:
        index.close()


def test_a_bulk_catch_up_leaves_one_segment_and_few_changes_do_not_merge(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Indexing a whole store (in many transactions) ends with the full-text
    segments merged into one, so a query word is looked up once, not in each
    segment; a later recall after a few writes merges nothing. Failed before:
    the build left a segment per level of FTS5's automatic merging."""
    import sqlite3

    from hrm_memory.recall import index as recall_index

    monkeypatch.setattr(recall_index, "INDEX_BATCH", 20)  # many transactions, as a large store's build
    monkeypatch.setattr(textindex, "MERGE_AFTER", 100)
    root = tmp_path / "root"
    with _store(root, 600, 5, {}) as mm:
        pass

    def segments() -> int:
        db = sqlite3.connect(root / "index" / "recall.db")
        try:
            return int(db.execute("SELECT count(DISTINCT segid) FROM fts_idx").fetchone()[0])
        finally:
            db.close()

    with MemoryManager(root, durability="flush") as mm:
        mm.declare(NamespaceSpec(NS, index=("text",)))
        assert len(mm.recall("amber birch", namespaces=NS, k=5)) == 5
    assert segments() == 1
    with MemoryManager(root, durability="flush") as mm:
        mm.declare(NamespaceSpec(NS, index=("text",)))
        for i in range(3):
            mm.write(NS, f"late{i}", {"text": f"amber late {i}"})
        assert mm.recall("amber late", namespaces=NS, k=3)[0].key.startswith("late")
    assert segments() == 2  # the new rows' own segment, left to FTS5's merging


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdeilnorsuyz0123456789", min_size=1, max_size=12))
def test_a_light_stem_keeps_its_words_first_three_letters(word: str) -> None:
    """What exact scoring and coverage rely on to stem only the words of a
    text that can match a query word: a word's light stem starts with its
    first three letters (the suffix endings and the "ies" -> "y" case are in
    the alphabet)."""
    assert rt.light_stem(word)[:3] == word[:3]


def test_exact_scores_count_a_word_in_every_form(tmp_path: Path) -> None:
    """bm25 of an exact match counts the query word in each of its forms
    (the text's other words, and its key's, are skipped unstemmed): the
    passage saying the word four times ranks above a shorter one saying it once."""
    with MemoryManager(tmp_path / "root", durability="flush") as mm:
        mm.declare(NamespaceSpec(NS, index=("text",)))
        mm.write(NS, "once", {"text": "walking to the harbour with the dog"})
        mm.write(NS, "often", {"text": "walking walked walks walk to the harbour with the dog"})
        hits = mm.recall("walking harbour dog", namespaces=NS, k=2)
        assert [h.key for h in hits] == ["often", "once"]
