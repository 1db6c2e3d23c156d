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


def reference(index: TextIndex, match: str, namespaces: list[str], *, cold: bool, limit: int,
              kinds: list[str] | None, since_us: int | None, prefix: str | None) -> list[tuple[str, str]]:
    """The rows passing the filter, ranked with it joined in (ties by id)."""
    db = index._conn()
    rows = TextIndex._filtered(db, match, namespaces, cold, 10**6, kinds, since_us, prefix)
    rows.sort(key=lambda r: (r.score, r.id))
    return [(r.ns, r.key) for r in rows[:limit]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=docs(),
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3, unique=True),
    namespaces=st.lists(st.sampled_from(NAMESPACES), min_size=1, max_size=3, unique=True),
    cold=st.booleans(),
    limit=st.integers(1, 12),
    kinds=st.none() | st.lists(st.sampled_from(["semantic", "episodic"]), min_size=1, unique=True),
    since=st.none() | st.integers(1, 50),
    prefix=st.sampled_from([None, "", "k0", "k01"]),
)
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
