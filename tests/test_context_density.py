"""Issue 23: context density and a fill that strands no tokens.

- Property: whenever an entry is left out, no entry left out would have fit
  in the budget that remains: adding any one of them (its line or its share
  of a line, its section's header if the section was empty, its footer
  recounted) makes a text whose fresh o200k count is over the budget.
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory import MemoryManager
from hrm_memory.context.fill import NEAR_DUPLICATE, Entry, _item, _order, _Sec, fill
from hrm_memory.core import tokens

NOW = 1_768_600_000.0
LEGACY = Path(os.environ.get("HRM_LEGACY_DATA", Path(__file__).resolve().parents[2] / "shared" / "legacy" / "data"))
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


def _new_user(root: Path) -> MemoryManager:
    mm = MemoryManager(root, durability="flush")
    mm.write("shared.north_stars", "v1", {"north_stars": ["Ship the reading app", "Run a half marathon"]})
    mm.write("shared.people", "ana", {"name": "Ana", "relationship": "sister", "note": "visiting in March"})
    mm.write("shared.people", "raj", {"name": "Raj", "role": "manager", "note": "weekly one-to-one on Mondays"})
    mm.write("altitude.patterns", "p1", {"text": "works best in the early morning"})
    return mm


def test_the_new_user_sees_what_fits_at_every_budget(tmp_path: Path) -> None:
    """Issue 23's report: ``--budget 60`` printed nothing and ``--budget
    150`` left out a person that fit. Every budget renders every entry that
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
    """Must-show 1 of issue 23, with the benchmark's own fact checker."""
    from benchmarks.bench_context_legacy import NOW as LEGACY_NOW
    from benchmarks.bench_context_legacy import facts_of, kept
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
