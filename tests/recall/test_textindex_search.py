"""``TextIndex.search`` ranks by text first and filters the best rows after;
whatever the filter keeps (a namespace among many, the live tiers, kinds, a
time, a key prefix), it must return what ranking with the filter joined in
returns."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory.recall.search import Doc
from hrm_memory.recall.textindex import TextIndex

WORDS = ["apple", "river", "stone", "cloud", "ember", "maple", "orbit", "quartz"]
NAMESPACES = ["a.notes", "b.notes", "c.memories"]


def docs() -> st.SearchStrategy[list[Doc]]:
    doc = st.builds(
        lambda ns, words, tier, kind, updated: (ns, " ".join(words), tier, kind, updated),
        st.sampled_from(NAMESPACES),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
        st.sampled_from(["warm", "warm", "cold", "hot"]),
        st.sampled_from([None, "semantic", "episodic"]),
        st.integers(1, 50),
    )
    return st.lists(doc, min_size=1, max_size=120).map(
        lambda rows: [Doc(ns, f"k{i:03d}", 1, u, u, tier, kind, 0.5, body, ns) for i, (ns, body, tier, kind, u) in enumerate(rows)]
    )


#: A search's arguments: stored passages, the words, and the filter.
SEARCHES = dict(
    rows=docs(),
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3, unique=True),
    namespaces=st.lists(st.sampled_from(NAMESPACES), min_size=1, max_size=3, unique=True),
    cold=st.booleans(),
    limit=st.integers(1, 12),
    kinds=st.none() | st.lists(st.sampled_from(["semantic", "episodic"]), min_size=1, unique=True),
    since=st.none() | st.integers(1, 50),
    prefix=st.sampled_from([None, "", "k0", "k01"]),
)


def reference(index: TextIndex, match: str, namespaces: list[str], *, cold: bool, limit: int,
              kinds: list[str] | None, since_us: int | None, prefix: str | None) -> list[tuple[str, str]]:
    """The rows passing the filter, ranked with it joined in (ties by id)."""
    db = index._conn()
    rows = TextIndex._filtered(db, match, namespaces, cold, 10**6, kinds, since_us, prefix)
    rows.sort(key=lambda r: (r.score, r.id))
    return [(r.ns, r.key) for r in rows[:limit]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**SEARCHES)
def test_search_returns_what_the_joined_ranking_returns(rows: list[Doc], words: list[str], namespaces: list[str],
                                                       cold: bool, limit: int, kinds: list[str] | None,
                                                       since: int | None, prefix: str | None) -> None:
    index = TextIndex(None)
    try:
        index.apply(rows, [])
        match = " OR ".join(f'"{w}"' for w in words)
        got = index.search(match, namespaces, cold=cold, limit=limit, kinds=kinds, since_us=since, prefix=prefix)
        want = reference(index, match, namespaces, cold=cold, limit=limit, kinds=kinds, since_us=since, prefix=prefix)
        assert [(r.ns, r.key) for r in got] == want
        by_key = {d.key: d for d in rows}
        assert all(r.body == by_key[r.key].body for r in got)
        bare = index.search(match, namespaces, cold=cold, limit=limit, kinds=kinds, since_us=since, prefix=prefix,
                            text=False)
        assert [(r.ns, r.key, r.body) for r in bare] == [(r.ns, r.key, "") for r in got]
    finally:
        index.close()


def test_a_namespace_of_few_rows_among_many_is_found_through_the_joined_search(tmp_path: Path) -> None:
    """The rows of a small namespace rank below thousands of better matches in
    a big one: the first two tries find none of them, and the joined search
    must still return them, in order."""
    index = TextIndex(tmp_path)
    try:
        big = [Doc("big.ns", f"b{i:05d}", 1, 1, 1, "warm", None, 0.5, "ember ember ember", "big") for i in range(3000)]
        small = [Doc("small.ns", f"s{i}", 1, 1, 1, "warm", None, 0.5, "ember " + "filler " * (5 + i), "small")
                 for i in range(5)]
        index.apply(big + small, [])
        got = index.search('"ember"', ["small.ns"], cold=False, limit=3)
        assert [r.key for r in got] == ["s0", "s1", "s2"]  # shorter text ranks higher
        assert all(r.body.startswith("ember filler") for r in got)
    finally:
        index.close()


def test_search_reads_one_snapshot(tmp_path: Path) -> None:
    """The ranking and the look-ups run in one read transaction: rows a
    concurrent writer commits between them are not half seen."""
    index = TextIndex(tmp_path)
    try:
        index.apply([Doc("a.notes", "k1", 1, 1, 1, "warm", None, 0.5, "quartz", "a")], [])
        assert [r.key for r in index.search('"quartz"', ["a.notes"], cold=False, limit=5)] == ["k1"]
        other = sqlite3.connect(str(tmp_path / "recall.db"))
        other.execute("DELETE FROM docs")
        other.commit()
        other.close()
        assert index.search('"quartz"', ["a.notes"], cold=False, limit=5) == []  # no row left: nothing served
    finally:
        index.close()


def test_the_older_time_index_is_dropped_on_open(tmp_path: Path) -> None:
    """docs_newest covers what docs_recent served (namespace, then time):
    an index file made before it loses the redundant one when opened."""
    index = TextIndex(tmp_path)
    index.apply([Doc("a.notes", "k1", 1, 1, 1, "warm", None, 0.5, "quartz", "a")], [])
    index.close()
    db = sqlite3.connect(str(tmp_path / "recall.db"))
    db.execute("CREATE INDEX docs_recent ON docs(ns, updated_us)")
    db.commit()
    db.close()
    index = TextIndex(tmp_path)
    try:
        assert [r.key for r in index.search('"quartz"', ["a.notes"], cold=False, limit=5, since_us=1)] == ["k1"]
        names = {n for (n,) in index._conn().execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "docs_recent" not in names and "docs_newest" in names
    finally:
        index.close()


def fill_reference(index: TextIndex, words: list[str], namespaces: list[str], *, cold: bool, limit: int,
                   kinds: list[str] | None, since_us: int | None, prefix: str | None) -> list[tuple[str, str]]:
    """The rows passing the filter whose text or context holds some of
    ``words``, by the idf of the words each holds, the newest first among equals."""
    import math

    db = index._conn()
    n = db.execute("SELECT count(*) FROM docs").fetchone()[0]
    score: dict[int, float] = {}
    for w in dict.fromkeys(words):
        stem = index._stems(db, [w]).get(w, "")  # the tokenizer's stem, as the vocabulary holds it
        got = db.execute("SELECT doc FROM temp.vocab WHERE term=?", (stem,)).fetchone()
        if not got:
            continue
        idf = math.log(1 + (n - got[0] + 0.5) / (got[0] + 0.5))
        for (doc,) in db.execute("SELECT rowid >> 10 FROM fts WHERE fts MATCH ?", (f'{{body ctx}} : "{w}"',)):
            score[doc] = score.get(doc, 0.0) - idf
    rows = []
    for doc, s in score.items():
        ns, key, tier, kind, updated = db.execute("SELECT ns, key, tier, kind, updated_us FROM docs WHERE id=?",
                                                  (doc,)).fetchone()
        if (ns in namespaces and (cold or tier != "cold") and (kinds is None or kind in kinds)
                and (since_us is None or updated >= since_us) and (not prefix or key.startswith(prefix))):
            rows.append((s, -doc, ns, key))
    return [(ns, key) for _, _, ns, key in sorted(rows)[:limit]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**SEARCHES)
def test_fill_within_a_budget_holding_every_posting_returns_the_reference(
        rows: list[Doc], words: list[str], namespaces: list[str], cold: bool, limit: int,
        kinds: list[str] | None, since: int | None, prefix: str | None) -> None:
    """With a budget over every posting of the words, the filling is every
    passage holding some of them in its text or context (never only in the
    near column), by the idf of those it holds, the newest first among
    equals, the filter applied."""
    index = TextIndex(None)
    try:
        index.apply(rows, [])
        got = index.fill(words, namespaces, cold=cold, limit=limit, budget=10_000, kinds=kinds, since_us=since,
                         prefix=prefix)
        want = fill_reference(index, words, namespaces, cold=cold, limit=limit, kinds=kinds, since_us=since,
                              prefix=prefix)
        assert got is not None and [(r.ns, r.key) for r in got] == want
        assert all(r.score < 0 for r in got)
    finally:
        index.close()


def test_fill_looks_at_the_newest_budget_passages_and_defers_when_the_filter_keeps_too_few() -> None:
    """A word in more passages than the budget is looked at in its newest
    ``budget`` passages only; when the filter passes fewer than asked of
    those while more exist, the filling is left to the ranked search (None)."""
    index = TextIndex(None)
    try:
        old = [Doc("old.ns", f"o{i:02d}", 1, i, i, "warm", None, 0.5, f"ember note {i}", "old") for i in range(5)]
        new = [Doc("new.ns", f"n{i:02d}", 1, 10 + i, 10 + i, "warm", None, 0.5, f"ember entry {i}", "new")
               for i in range(30)]
        index.apply(old, [])
        index.apply(new, [])  # indexed after: the newest passages
        got = index.fill(["ember"], ["new.ns", "old.ns"], cold=False, limit=4, budget=10)
        assert got is not None and [r.key for r in got] == ["n29", "n28", "n27", "n26"]
        assert index.fill(["ember"], ["old.ns"], cold=False, limit=4, budget=10) is None
        assert [r.key for r in index.fill(["ember"], ["old.ns"], cold=False, limit=4, budget=100) or []] == [
            "o04", "o03", "o02", "o01"]
        assert index.fill(["absent"], ["new.ns"], cold=False, limit=4, budget=10) == []
    finally:
        index.close()
