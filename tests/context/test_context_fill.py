"""What the fill keeps between renders does not change what it renders.

- Token counts summed over lines equal a count of the joined text (the split
  pattern's line-break argument in :mod:`hrm_memory.context.fill`), for any
  line contents, whitespace, newlines and slashes included.
- The near-duplicate pairs found once per stem set are exactly the pairs a
  direct Jaccard comparison finds.
- A render right after a write equals a render of the same store by a fresh
  manager (nothing cached), byte for byte.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrm_memory import MemoryManager
from hrm_memory.core import tokens
from hrm_memory.recall.index import RecallIndex
from hrm_memory.context.fill import NEAR_DUPLICATE, _appears, _joinable, _Neighbours, _splits_at_lines, _text_tokens

NOW = 1_768_600_000.0

# Line bodies with what could make a piece run across a line break: spaces,
# tabs, newlines, "\r", "/", punctuation, digits, letters of several scripts.
bodies = st.text(alphabet=st.sampled_from(list(" \t\n\r/.,-#…:;!?'\"0123456789aZéßж中😀_") + ["\u2028", "\xa0"]),
                 max_size=40) | st.text(max_size=40)
lines = st.lists(st.tuples(st.sampled_from(["## ", "- ", "… ", "+", "", "a", "1", "/", " "]), bodies).map("".join),
                 min_size=1, max_size=12)


@pytest.fixture(autouse=True)
def _exact() -> None:
    if not (tokens.get_counter().exact and _splits_at_lines()):
        pytest.skip("needs the exact o200k counter")


@settings(max_examples=400, deadline=None)
@given(lines=lines)
def test_line_counts_add_up_to_the_text_count(lines: list[str]) -> None:
    assert _text_tokens(lines) == tokens.count("".join(line + "\n" for line in lines))


def test_a_line_that_could_join_the_one_before_is_counted_whole() -> None:
    lines = ["- a.", "/ b"]  # "/" may join the piece that holds the newline: counted, not summed
    assert sum(tokens.count(line + "\n") for line in lines) != tokens.count("- a.\n/ b\n")
    assert _text_tokens(lines) == tokens.count("- a.\n/ b\n")


@settings(max_examples=400, deadline=None)
@given(words=st.lists(st.text(alphabet=st.sampled_from(list("abzéж中12_:$.,()-")), min_size=1, max_size=12),
                      min_size=1, max_size=8))
def test_word_like_entries_joined_by_a_space_cost_what_the_fill_adds_up(words: list[str]) -> None:
    """The fill prices an entry that shares a line as ``count(" " + text)``:
    exact for the entries it lets share one (:func:`_joinable`)."""
    run = [w for w in words if _joinable(w)]
    if not run:
        return
    assert tokens.count(" ".join(run) + "\n") == tokens.count(run[0] + "\n") + sum(
        tokens.count(" " + w) for w in run[1:])


@settings(max_examples=500, deadline=None)
@given(code=st.text(alphabet="ab-_ .\né1", min_size=1, max_size=4), text=st.text(alphabet="ab-_ .\né1", max_size=16))
def test_a_code_appears_where_the_look_behind_pattern_finds_it(code: str, text: str) -> None:
    assert _appears(code, text) == bool(re.search(rf"(?<![\w]){re.escape(code)}(?![\w])", text))


def _jaccard_near(a: frozenset[str], b: frozenset[str]) -> bool:
    inter = len(a & b)
    return inter >= NEAR_DUPLICATE * (len(a) + len(b) - inter)


@settings(max_examples=200, deadline=None)
@given(sigs=st.lists(st.frozensets(st.sampled_from("abcdefghijkl"), max_size=10), max_size=40))
def test_neighbours_are_exactly_the_near_pairs(sigs: list[frozenset[str]]) -> None:
    graph = _Neighbours()
    for s in sigs:
        graph.of(s)
    distinct = set(sigs)
    for s in distinct:
        expected = {o for o in distinct if o != s and s and o and _jaccard_near(s, o)}
        assert set(graph.of(s)) == expected


def test_a_render_after_a_write_equals_a_fresh_render(tmp_path: Path) -> None:
    root = tmp_path / "store"
    mm = MemoryManager(root, durability="flush")
    try:
        for i in range(60):
            mm.write("altitude.patterns", f"p{i}", {"text": f"pattern {i} about the weekly plan and family time"})
            mm.write("shared.people", f"person{i}", {"name": f"Person {i}", "role": "friend", "notes": f"met {i}"})
        for budget in (120, 600, 2000):
            mm.context("altitude", budget=budget, now=NOW)
        for step in range(6):
            mm.write("altitude.patterns", f"p{55 + step % 3}", {"text": f"rewritten {step} with new words entirely"})
            if step == 3:
                mm.delete("altitude.patterns", "p59")
            for budget in (120, 600, 2000):
                ctx = mm.context("altitude", budget=budget, now=NOW)
                fresh = MemoryManager(root, durability="flush")
                try:
                    assert fresh.context("altitude", budget=budget, now=NOW) == ctx
                finally:
                    fresh.close()
                assert ctx.tokens == tokens.count(ctx.text) <= budget
                assert "pattern 59 " not in ctx.text or step < 3
    finally:
        mm.close()


def test_a_record_the_index_still_lists_is_checked_against_the_store_before_it_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records confirmed by an earlier render are taken on the index's word
    only until their lines are shown: a deleted or superseded one that the
    index has not caught up with is never rendered."""
    mm = MemoryManager(tmp_path / "store", durability="flush")
    try:
        for i in range(8):
            mm.write("altitude.patterns", f"p{i}", {"text": f"habit {i} keeps the {i}th promise"})
        before = mm.context("altitude", budget=2000, now=NOW)
        assert "habit 3 " in before.text and "habit 5 " in before.text
        monkeypatch.setattr(RecallIndex, "sync", lambda self: None)  # the index falls behind
        mm.delete("altitude.patterns", "p3")
        mm.write("altitude.patterns", "p5", {"text": "a different wording entirely"})
        after = mm.context("altitude", budget=1999, now=NOW)  # another budget: not the kept render
        assert "habit 3 " not in after.text and "habit 5 " not in after.text
        assert "habit 4 " in after.text
        assert after.tokens == tokens.count(after.text) <= 1999
    finally:
        mm.close()
