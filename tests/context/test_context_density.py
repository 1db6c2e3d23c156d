"""Context density and a fill that strands no tokens.

- Property: whenever an entry is left out, no entry left out would have fit
  in the budget that remains: adding any one of them (its line or its share
  of a line, its section's header if the section was empty, its footer
  recounted) makes a text whose fresh o200k count is over the budget.
- Shares: a section whose whole pool needs no more than its weight's part
  of the budget is shown whole (no entry of a bigger section takes its room);
  a section of low weight whose entries are larger than its share waits for
  what the sections above it leave.
- Order: an entry that joins a run is sized by what it adds (``" " + text``),
  not by the line it would make alone.
- The new user's store (2 goals, 2 people, 1 pattern): every budget from the
  smallest entry up renders what fits, and the whole store at its own size.
- On the migrated legacy data (when present): the fact counts of
  ``benchmarks.bench_context_legacy`` at v1's and v2's sizes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from hrm_memory import MemoryManager
from hrm_memory.context.fill import NEAR_DUPLICATE, Entry, _item, _order, _Sec, fill
from hrm_memory.core import tokens
from tests.helpers.legacy import DATA

NOW = 1_768_600_000.0
LEGACY = DATA
PLAN = [("now", "Now", 8.0), ("goals", "Goals and commitments", 8.0), ("people", "People", 4.0),
        ("patterns", "Patterns and preferences", 2.0), ("history", "Recent history", 1.0), ("legend", "Codes", 0.0)]

words = st.sampled_from("plan patent family gaurav bella sunday market cheer timeboxing q1_planning".split())
entry_text = (st.lists(words, min_size=1, max_size=30).map(" ".join)
              | st.lists(words, min_size=1, max_size=3).map("_".join)
              | st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=60))


def _text_with(chosen: dict[str, list[int]], pools: dict[str, list[Entry]], skipped: dict[str, int]) -> str:
    """The text the fill lays out for these chosen entries (``_Sec.lines``)."""
    out: list[str] = []
    for name, title, _ in PLAN:
        if name not in pools:
            continue
        s = _Sec(name, title, 1.0, 0, pools[name])
        s.chosen = sorted(chosen.get(name, []))
        s.skipped = list(range(skipped.get(name, 0)))
        out.extend(s.lines())
    return "".join(line + "\n" for line in out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(st.tuples(st.sampled_from([p[0] for p in PLAN[:5]]), entry_text, st.integers(0, 3)),
                      max_size=40),
       budget=st.integers(min_value=0, max_value=600))
# Failed on 7d59e19 in a fresh-clone CI run (seed 3128307801): the last entry
# left out of Goals would have replaced its "+1 more" footer and saved 2 tokens.
@example(items=[("now", "0A", 0), ("now", "0000", 0), ("goals", "0B", 1), ("goals", "patent", 0),
                ("now", "plan plan plan plan plan plan timeboxing q1_planning", 0), ("now", "plan patent", 0),
                ("goals", "plan family", 0), ("goals", "0", 0), ("people", "\U00010000", 0), ("goals", "plan", 0),
                ("patterns", "gaurav", 0), ("history", "plan plan", 0)],
         budget=67)
def test_no_entry_left_out_would_have_fit(items: list[tuple[str, str, int]], budget: int) -> None:
    entries = [Entry(section, text, (i,), None, (section, field)) for i, (section, text, field) in enumerate(items)]
    text, used, figures, omitted, _, shown = fill(PLAN, entries, {}, budget)
    assert used == tokens.count(text) <= budget
    # The pools as the fill orders them, and which of each are shown.
    pools: dict[str, list[Entry]] = {}
    for e in sorted(entries, key=_order):
        pools.setdefault(e.section, []).append(e)
    chosen = {name: [i for i, e in enumerate(pool) if any(e is x for x in shown)] for name, pool in pools.items()}
    assert _text_with(chosen, pools, {f.name: f.omitted for f in figures}) == text
    left = {f.name: f.omitted for f in figures}
    assert omitted == sum(left.values())
    # An entry not shown is left out or a near-duplicate of one shown; try every one left out.
    shown_sigs = [_item(e).sig for e in shown]

    def near(sig: frozenset[str]) -> bool:
        return any(len(sig & o) >= NEAR_DUPLICATE * len(sig | o) for o in shown_sigs)

    for name, pool in pools.items():
        for i, e in enumerate(pool):
            if i in chosen[name] or not _item(e).text or near(_item(e).sig):
                continue
            more = dict(chosen)
            more[name] = [*chosen[name], i]
            after = dict(left)
            after[name] = max(left.get(name, 0) - 1, 0)
            with_it = _text_with(more, pools, after)
            assert tokens.count(with_it) > budget, (name, e.text, budget, used)


vocabulary = st.sampled_from(("plan patent family gaurav bella sunday market cheer timeboxing q1_planning review "
                              "budget launch session design sprint metrics customer retro hiring roadmap pricing demo "
                              "onboarding migration incident dashboard").split())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(items=st.lists(st.tuples(st.sampled_from([p[0] for p in PLAN[:5]]),
                                st.lists(vocabulary, min_size=1, max_size=12, unique=True), st.integers(0, 2)),
                      min_size=1, max_size=30),
       budget=st.integers(min_value=0, max_value=400))
@example(items=[("goals", ["plan"], 0), ("now", ["plan", "patent"], 0), ("now", ["gaurav"], 0),
                ("goals", ["plan", "patent"], 0), ("people", ["plan", "patent"], 0)], budget=38)  # the old fill failed
def test_a_section_that_needs_less_than_its_part_is_shown_whole(items: list[tuple[str, list[str], int]],
                                                                  budget: int) -> None:
    """Each entry is tagged with a word of its own and no two are near-duplicates,
    so a section's need is the count of its pool laid out alone; one needing
    no more than its weight's part of the budget leaves nothing out,
    whatever the other sections hold (the old turn-taking fill let a bigger
    section's long entry take that room first)."""
    entries = [Entry(section, " ".join([*ws, f"tag{i}x"]) if len(ws) > 1 else f"{ws[0]}_{i}", (i,), None,
                     (section, field)) for i, (section, ws, field) in enumerate(items)]
    sigs = [_item(e).sig for e in entries]
    assume(not any(len(a & b) >= NEAR_DUPLICATE * len(a | b) for j, a in enumerate(sigs) for b in sigs[:j]))
    _, used, figures, _, _, _ = fill(PLAN, entries, {}, budget)
    assert used <= budget
    weights = {name: weight for name, _, weight in PLAN}
    present = sorted({e.section for e in entries})
    total = sum(weights[name] for name in present)
    omitted = {f.name: f.omitted for f in figures}
    for name in present:
        alone = [e for e in entries if e.section == name]
        need = fill([p for p in PLAN if p[0] == name], alone, {}, 1_000_000)[1]
        if need <= budget * weights[name] / total:
            assert omitted.get(name, 0) == 0, (name, need, budget, figures)


def test_a_paragraph_of_low_weight_waits_for_what_the_sections_above_leave() -> None:
    """History (weight 1 of 9 here) holds one paragraph larger than its share;
    now (weight 8) holds more short entries than the budget: the short
    entries take the budget, the paragraph is left out (the old fill gave the
    paragraph the first turn and cut entries of now)."""
    plan = [("now", "Now", 8.0), ("history", "Recent history", 1.0)]
    paragraph = " ".join(["the review of the quarter went well and the launch moved to march"] * 3)
    now = [Entry("now", f"task {i} is due on day {i}", (i,)) for i in range(40)]
    entries = [*now, Entry("history", paragraph, (0,))]
    text, used, figures, omitted, _, shown = fill(plan, entries, {}, 120)
    assert used <= 120
    assert "## Recent history" not in text and paragraph not in text
    assert text == fill([plan[0]], now, {}, 120)[0]  # now has the whole budget
    history = next(f for f in figures if f.name == "history")
    assert (history.shown, history.omitted, history.tokens) == (0, 1, 0)  # no header, no footer: counted here
    # and once now is whole, the paragraph gets what is left
    whole_now = fill([plan[0]], now, {}, 100_000)[1]
    text, used, _, _, _, _ = fill(plan, entries, {}, whole_now + 60)
    assert paragraph in text and used <= whole_now + 60


def test_an_entry_joining_a_run_is_sized_by_what_it_adds() -> None:
    """Codes costing 4 tokens on a line of their own but 3 joined to a run
    come before 5-token phrases ranked above them: at a budget that holds
    the run but not everything, the run is whole (7 entries) where the old
    order showed the 3 phrases and 2 codes."""
    plan = [("patterns", "Patterns and preferences", 2.0)]
    phrases = ["Status check on Sunday", "Plans the week ahead", "Calls mom on Sundays"]
    codes = ["calendar_desync", "fast_context_switch", "schedule_underest", "multi_horizon", "struct_prefer",
             "exit_criteria", "buffer_planning"]
    if [tokens.count(c + "\n") for c in codes] != [4] * 7 or [tokens.count(" " + c) for c in codes] != [3] * 7:
        pytest.skip("needs the exact o200k counter")
    entries = ([Entry("patterns", p, (i,)) for i, p in enumerate(phrases)]
               + [Entry("patterns", c, (3 + i,), None, ("rec", "codes")) for i, c in enumerate(codes)])
    assert [_order(e)[0] for e in entries] == [3, 3, 3] + [2] * 7
    budget = tokens.count("## Patterns and preferences\n" + " ".join(codes) + "\n+3 more\n")
    text, used, figures, omitted, _, shown = fill(plan, entries, {}, budget)
    assert used == budget == tokens.count(text)
    assert " ".join(codes) in text and len(shown) == 7 and omitted == 3


def _new_user(root: Path) -> MemoryManager:
    mm = MemoryManager(root, durability="flush")
    mm.write("shared.north_stars", "v1", {"north_stars": ["Ship the reading app", "Run a half marathon"]})
    mm.write("shared.people", "ana", {"name": "Ana", "relationship": "sister", "note": "visiting in March"})
    mm.write("shared.people", "raj", {"name": "Raj", "role": "manager", "note": "weekly one-to-one on Mondays"})
    mm.write("altitude.patterns", "p1", {"text": "works best in the early morning"})
    return mm


def test_the_new_user_sees_what_fits_at_every_budget(tmp_path: Path) -> None:
    """A new user's small store: ``--budget 60`` prints entries and ``--budget
    150`` leaves out no person that fits. Every budget renders every entry that
    fits in what remains, and the whole store once the budget holds it."""
    mm = _new_user(tmp_path / "s")
    try:
        whole = mm.context("altitude", budget=100_000, now=NOW)
        assert whole.omitted == 0 and whole.tokens < 100
        for budget in range(0, whole.tokens + 40):
            ctx = mm.context("altitude", budget=budget, now=NOW)
            assert ctx.tokens == tokens.count(ctx.text) <= budget
            if budget >= whole.tokens:
                assert ctx.text == whole.text and ctx.omitted == 0
            if budget >= 20:
                assert ctx.tokens > 0  # the smallest entry and its header always fit in 20
        sixty = mm.context("altitude", budget=60, now=NOW)
        assert sixty.omitted == 0 and sixty.text == whole.text  # the old fill showed 1 of 5 entries here
        assert "Raj(manager): weekly one-to-one on Mondays" in whole.text
    finally:
        mm.close()


@pytest.mark.skipif(not LEGACY.is_dir(), reason="needs the legacy data (../shared/legacy/data or HRM_LEGACY_DATA)")
def test_legacy_facts_at_v1_and_v2_sizes() -> None:
    """On the legacy data, context() at the v1 and v2 prompts' sizes keeps their facts
    (the fact checker benchmarks/bench_context_legacy.py uses)."""
    from tests.helpers.legacy_facts import NOW as LEGACY_NOW
    from tests.helpers.legacy_facts import facts_of, kept
    from hrm_memory.migration import engine

    with tempfile.TemporaryDirectory() as tmp, MemoryManager(Path(tmp) / "s", durability="flush") as mm:
        engine.apply(mm, LEGACY)
        v1, v2 = facts_of(mm)
        assert (len(v1), len(v2)) == (35, 44)
        at_v1 = mm.context("altitude", budget=546, now=LEGACY_NOW)
        at_v2 = mm.context("altitude", budget=800, now=LEGACY_NOW)
        assert len(kept(v1 + v2, at_v1.text)) >= 42
        assert len(kept(v1 + v2, at_v2.text)) >= 44
        assert at_v1.tokens <= 546 and at_v2.tokens <= 800
